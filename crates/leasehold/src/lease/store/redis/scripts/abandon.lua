-- abandon: the caller gave up on an acquire (cancelled, timed out, refused by the replica policy).
-- Leaves the queue, remembers the token as given up (an acquire or refresh with it that reaches
-- Redis later, on another connection, then does nothing), and if the lock was taken or handed to the
-- token meanwhile (or a semaphore's permit), releases it and hands it on.
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] how long the token is remembered ms, ARGV[3] released marker ms, ARGV[4]
-- how long an unclaimed wake-up lingers ms, ARGV[5] fence retention ms
-- Returns 1 when it released a lock or permit the token held, else 0. Run twice, the second run finds nothing
-- left to do.
local token = ARGV[1]
local remember_ms = tonumber(ARGV[2])
withdraw(token)
redis.call('DEL', wake_key(token))
redis.call('ZADD', gone_key, now_ms() + remember_ms, token)
redis.call('ZREMRANGEBYSCORE', gone_key, '-inf', string.format('(%d', now_ms()))
redis.call('PEXPIRE', gone_key, remember_ms)
if redis.call('GET', lock_key) == token then
  redis.call('DEL', lock_key)
  redis.call('SET', released_key, token, 'PX', ARGV[3])
  if redis.call('EXISTS', queue_key) == 1 then
    hand_lock(tonumber(ARGV[4]), tonumber(ARGV[5]))
  end
  return 1
end
-- A semaphore's permit taken or handed to the token meanwhile.
if redis.call('ZREM', holders_key, token) == 1 then
  redis.call('HDEL', held_key, token)
  redis.call('SET', released_permit_key(token), '1', 'PX', ARGV[3])
  fill_permits(token, tonumber(ARGV[4]), tonumber(ARGV[5]))
  return 1
end
return 0
