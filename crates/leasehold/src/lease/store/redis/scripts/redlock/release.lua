-- release (Redlock, one master): compare-and-delete, then wake one waiter if one may be blocked here.
-- KEYS[1] lock, KEYS[2] wake, KEYS[3] waiting marker, KEYS[4] released marker
-- ARGV[1] token, ARGV[2] how long an unclaimed wake-up lingers, in milliseconds, ARGV[3] how long
-- the released marker remembers the token, in milliseconds
-- Returns 1 when the lock held our token and was deleted (or this is a retry of a release that did
-- that), 0 when it was not ours (left untouched). Also the undo of a failed attempt.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  if redis.call('GET', KEYS[4]) == ARGV[1] then
    return 1
  end
  return 0
end
redis.call('DEL', KEYS[1])
redis.call('SET', KEYS[4], ARGV[1], 'PX', ARGV[3])
if redis.call('EXISTS', KEYS[3]) == 1 then
  -- One element at most: a release wakes one contender, not a herd.
  redis.call('LPUSH', KEYS[2], '1')
  redis.call('LTRIM', KEYS[2], 0, 0)
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return 1
