-- release, first part: compare-and-delete. The lock key is renamed to the released marker, which so
-- remembers the token for what was left of the lease's TTL: a retried release (a client retrying
-- after a reconnect) that finds the marker says "released" again. A retry that arrives after that
-- TTL would have run out finds no marker and says "not ours": a false alarm of a lost lease, never
-- a false "released". With nobody queued (the lock holds the bare token) the release ends here,
-- before lib.lua's functions are built: two commands. Else the lock is handed on: below in the common
-- case, in release.lua otherwise.
-- KEYS[1] lock (KEYS[2] the never-existing key, on a Redis Cluster)
-- ARGV[1] token, ARGV[2] what only a hand-over reads, packed: "<the server clock's estimate µs, no
-- earlier than it (0: none, TIME is read if it is needed)>,<the same, no later than it>,<how long a
-- released permit is remembered ms (sem_release.lua's; a lock's marker lives as long as its lease
-- would have)>,<how long a waiter counts as live after joining the queue ms>,<fence retention
-- ms>,<the earliest join time, µs, of a waiter still live by it: the first field less the window>"

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
-- The common hand-over, still before lib.lua's functions are built: the queue's head, live by its
-- join time (or by its alive key), gets the lock when the record is the plain one a holder with
-- waiters has (`<fence>:q:<holder>:<released>`, its fence below the clock's estimate). Numbers stay
-- digit strings here (no tonumber: a strtod in Redis). Anything else (a record with other flags or a
-- fence that outran the estimate, a dead head) goes on in release.lua, with what was done here: a
-- head popped and its record written (`pending`), or a dead head dropped as pop_live drops one.
local hi_s, lo_s, window_s, retention_s, live_from =
  string.match(ARGV[2], '^(%d+),(%d+),%d+,(%d+),(%d+),(%d+)$')
if hi_s == '0' then
  -- No estimate (a holder that was handed the lock and has not read the clock for a while): the
  -- server's, read once here and given back in the reply (`released` in release.lua) so that the
  -- caller has an estimate again.
  local t = redis.call('TIME')
  hi = tonumber(t[1]) * 1000000 + tonumber(t[2])
  lo, exact = hi, 1
  hi_s = string.format('%d', hi)
  lo_s = hi_s
  live_from = string.format('%d', hi - tonumber(window_s) * 1000)
end
local pending
if hi_s then
  local popped = redis.call('ZPOPMIN', base .. 'queue')
  local head, first = nil, nil
  if popped[1] then
    head, first = string.match(popped[1], '^([^,]+),(%d+)$')
  end
  local score = popped[2]
  local function below(a, b)
    return #a < #b or (#a == #b and a < b)
  end
  if head and ((string.find(score, '^%d+$') and not below(score, live_from))
      or redis.call('DEL', base .. 'alive:' .. head) == 1) then
    local old = redis.call('SET', base .. 'fence', hi_s .. ':q:' .. head .. ':' .. token,
      'PX', retention_s, 'GET')
    local fence = old and string.match(old, '^(%d+):q:[^:]*:[^:]*$')
    if not old or (fence and below(fence, hi_s)) then
      redis.call('SET', lock_key, head .. ':q', 'PX', first)
      local wake = base .. 'wake:' .. head
      redis.call('LPUSH', wake, hi_s .. ',' .. lo_s .. ',' .. first)
      redis.call('PEXPIRE', wake, first)
      if exact == 1 then
        return {1, math.floor(hi / 1000000), hi % 1000000}
      end
      return 1
    end
    pending = {head = head, first = tonumber(first), old = old}
  end
end
if exact == 0 then
  hi, lo = tonumber(hi_s), tonumber(lo_s)
  if not hi or hi <= 0 then
    local t = redis.call('TIME')
    hi = tonumber(t[1]) * 1000000 + tonumber(t[2])
    lo, exact = hi, 1
  end
end
