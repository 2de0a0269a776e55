-- renew (Redlock, one master): compare-and-pexpire.
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] ttl in milliseconds
-- Returns 1 when the lock held our token and its TTL was reset, 0 when it was not ours (left
-- untouched). A lock that expired here is not taken again: renewal extends, it never re-acquires.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
