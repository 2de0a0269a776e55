-- abandon: the caller gave up on an acquire (cancelled, timed out, refused by the replica policy).
-- Leaves the queue, remembers the token as given up (an acquire or refresh with it that reaches
-- Redis later, on another connection, then does nothing: the record's `g` flag sends an acquire that
-- finds the lock free to look, and a hand-over skips a given-up head), and if the lock was taken or
-- handed to the token meanwhile (or a semaphore's permit), releases it and hands it on.
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] how long the token is remembered ms, ARGV[3] released marker ms, ARGV[4]
-- how long a waiter counts as live after joining the queue ms, ARGV[5] fence retention ms, ARGV[6]
-- the first TTL the caller asked for ms (its entry in the queue names it)
-- Returns 1 when it released a lock or permit the token held, else 0. Run twice, the second run finds
-- nothing left to do.
clock_exact()
local token = ARGV[1]
local remember_ms = tonumber(ARGV[2])
local window = tonumber(ARGV[4])
local retention_ms = tonumber(ARGV[5])
withdraw(token, ARGV[6])
redis.call('DEL', wake_key(token))
redis.call('ZADD', gone_key, now_ms() + remember_ms, token)
redis.call('ZREMRANGEBYSCORE', gone_key, '-inf', string.format('(%d', now_ms()))
redis.call('PEXPIRE', gone_key, remember_ms)
local r, existed = read_record()
if not flagged(r, 'g') then
  set_flag(r, 'g', true)
  write_record(r, (not existed) and retention_ms or nil)
end
keep(fence_key, remember_ms)
local held = redis.call('GET', lock_key)
if held == token or held == token .. ':q' then
  if hand_lock(r, window) then
    r.released = token
    write_record(r, retention_ms)
  else
    redis.call('DEL', lock_key)
    redis.call('SET', released_key, token, 'PX', ARGV[3])
    settle_queue_flag(r)
    write_record(r, nil)
  end
  return 1
end
-- A semaphore's permit taken or handed to the token meanwhile.
if redis.call('ZREM', holders_key, token) == 1 then
  redis.call('HDEL', held_key, token)
  redis.call('SET', released_permit_key(token), '1', 'PX', ARGV[3])
  fill_permits(token, window, retention_ms)
  return 1
end
return 0
