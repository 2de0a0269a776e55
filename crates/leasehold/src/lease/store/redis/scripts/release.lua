-- release: compare-and-delete, then wake one waiter if someone may be waiting.
-- KEYS[1] lock, KEYS[2] wake, KEYS[3] waiting marker (set by acquire.lua when it answered "busy"),
-- KEYS[4] released marker
-- ARGV[1] token, ARGV[2] how long an unclaimed wake-up lingers, in milliseconds, ARGV[3] how long the
-- released marker remembers the token, in milliseconds
-- Returns 1 when the lock held our token and was deleted (or this is a retry of a release that did
-- that), 0 when it was not ours (left untouched).
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  -- Run twice (a client retrying after a reconnect), a release that succeeded must say so again.
  if redis.call('GET', KEYS[4]) == ARGV[1] then
    return 1
  end
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[3])
-- No marker: nobody was told "busy" recently, so nobody is blocked on the wake list.
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- One element at most: a release wakes one contender, not a herd.
  redis.call('LPUSH', KEYS[2], '1')
  redis.call('LTRIM', KEYS[2], 0, 0)
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
