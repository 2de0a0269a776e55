-- sem_release: give back a permit if the caller still holds it, then hand it to the first live waiter.
-- KEYS[1] lock (the name's lock key)
-- ARGV as release_fast.lua's (the clock's estimate unused: a semaphore goes by the server's clock)
-- Returns 1 when the permit was ours and is given back (or this is a retry of a release that did
-- that), 0 when it was not ours any more (expired, or evicted).
clock_exact()
local token = ARGV[1]
local until_ms = redis.call('ZSCORE', holders_key, token)
if not until_ms or tonumber(until_ms) <= now_ms() then
  if redis.call('EXISTS', released_permit_key(token)) == 1 then
    return 1
  end
  return 0
end
redis.call('ZREM', holders_key, token)
redis.call('HDEL', held_key, token)
local remember_ms, window, retention_ms = unpack_numbers(ARGV[2], 3, 5)
redis.call('SET', released_permit_key(token), '1', 'PX', remember_ms)
fill_permits(token, window, retention_ms)
return 1
