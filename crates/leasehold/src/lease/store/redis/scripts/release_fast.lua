-- release, first part: compare-and-delete. The lock key is renamed to the released marker, which so
-- remembers the token for what was left of the lease's TTL: a retried release (a client retrying
-- after a reconnect) that finds the marker says "released" again. A retry that arrives after that
-- TTL would have run out finds no marker and says "not ours": a false alarm of a lost lease, never
-- a false "released". With nobody queued the release
-- ends here, before lib.lua's functions are built; else release.lua hands the lock on.
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] how long a released permit is remembered ms (sem_release.lua's; a lock's
-- marker lives as long as its lease would have), ARGV[3] how long an unclaimed wake-up lingers ms,
-- ARGV[4] fence retention ms
-- Returns 1 when the lock held our token and was released (or this is a retry of a release that did
-- that), 0 when it was not ours (left untouched).
local token = ARGV[1]
if redis.call('GET', lock_key) ~= token then
  if redis.call('GET', released_key) == token then
    return 1
  end
  return 0
end
-- RENAME keeps the lock's TTL: one command for the delete and the marker.
redis.call('RENAME', lock_key, released_key)
if redis.call('EXISTS', queue_key) == 0 then
  return 1
end
