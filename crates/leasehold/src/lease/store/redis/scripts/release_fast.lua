-- release, first part: compare-and-delete. The lock key is renamed to the released marker, which so
-- remembers the token for what was left of the lease's TTL: a retried release (a client retrying
-- after a reconnect) that finds the marker says "released" again. A retry that arrives after that
-- TTL would have run out finds no marker and says "not ours": a false alarm of a lost lease, never
-- a false "released". With nobody queued (the lock holds the bare token) the release ends here,
-- before lib.lua's functions are built: two commands. Else release.lua hands the lock on.
-- KEYS[1] lock (KEYS[2] the never-existing key, on a Redis Cluster)
-- ARGV[1] token, ARGV[2] what only the second part reads, packed: "<the server clock's estimate µs,
-- no earlier than it (0: none, TIME is read if it is needed)>,<the same, no later than it>,<how long a
-- released permit is remembered ms (sem_release.lua's; a lock's marker lives as long as its lease
-- would have)>,<how long a waiter counts as live after joining the queue ms>,<fence retention ms>

-- Returns 1 when the lock held our token and was released (or this is a retry of a release that did
-- that), 0 when it was not ours (left untouched).
local token = ARGV[1]
local held = redis.call('GET', lock_key)
if held == token then
  -- RENAME keeps the lock's TTL: one command for the delete and the marker.
  redis.call('RENAME', lock_key, base .. 'released')
  return 1
end
if held ~= token .. ':q' then
  if redis.call('GET', base .. 'released') == token then
    return 1
  end
  -- A hand-over keeps the released token in the record instead.
  local record = redis.pcall('GET', base .. 'fence')
  if type(record) == 'string' and string.match(record, '^%d+:%a*:[^:]*:([^:]*)$') == token then
    return 1
  end
  return 0
end
hi, lo = string.match(ARGV[2], '^(%d+),(%d+),')
hi, lo = tonumber(hi), tonumber(lo)
if hi <= 0 then
  local t = redis.call('TIME')
  hi = tonumber(t[1]) * 1000000 + tonumber(t[2])
  lo, exact = hi, 1
end
