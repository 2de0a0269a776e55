-- release: compare-and-delete, then hand the lock to the first live waiter, if any.
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] how long the released marker remembers the token ms, ARGV[3] how long an
-- unclaimed wake-up lingers ms, ARGV[4] fence retention ms
-- Returns 1 when the lock held our token and was released (or this is a retry of a release that did
-- that), 0 when it was not ours (left untouched).
local token = ARGV[1]
if redis.call('GET', lock_key) ~= token then
  -- Run twice (a client retrying after a reconnect), a release that succeeded must say so again.
  if redis.call('GET', released_key) == token then
    return 1
  end
  return 0
end
redis.call('DEL', lock_key)
redis.call('SET', released_key, token, 'PX', ARGV[2])
if redis.call('EXISTS', queue_key) == 1 then
  hand_lock(tonumber(ARGV[3]), tonumber(ARGV[4]))
end
return 1
