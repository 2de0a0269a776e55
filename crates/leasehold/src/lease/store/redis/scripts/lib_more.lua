-- lib_more.lua: the rest of lib.lua, for the scripts off the lock's hot path: the semaphore's
-- bookkeeping, the server's clock in milliseconds for its expiries, the abandon's withdrawal and the
-- operator's check for keys leasehold did not write. scripts/mod.rs joins it in after lib.lua. The
-- acquire includes it only inside a function that it calls when the record says the name may be in
-- use as a semaphore, so that its functions are built then alone.

local forced_key = base .. 'forced'
-- A semaphore (more than one permit): its number of permits, its holders (token -> expiry, server
-- ms) and their fences (token -> fence).
local permits_key = base .. 'permits'
local holders_key = base .. 'holders'
local held_key = base .. 'held'
-- A note its holder wrote beside the lock (note.lua, which names it on its own).
local note_key = base .. 'note'

-- A released permit, remembered for a retried release (several permits are released concurrently,
-- so one "last released" key would not do).
local function released_permit_key(token)
  return base .. 'released:' .. token
end

-- The server's clock (`now_us`) and the fence rule (`fence_after`) are fence.lua's, joined in before
-- this file. Expiries the scripts keep themselves (a semaphore's permits, given-up tokens) go by the
-- server's clock.
local function now_ms()
  return math.floor(now_us() / 1000)
end

-- A script without a fast part goes by the server's clock throughout.
local function clock_exact()
  hi = now_us()
  lo, exact = hi, 1
end

-- A counter key (a semaphore's permits): nil when absent, its number when it holds one, else the
-- script stops (never read as 0 and overwritten).
local function stored_number(key)
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  if not string.match(v, '^%d+$') then
    foreign_string(key, v, 'a number')
  end
  return tonumber(v)
end

-- The first key of the name that is not of the type (or, for the record and the permits, the format)
-- leasehold keeps there, and what it holds; nil when every key is leasehold's or absent. One TYPE per
-- key: for the operator's paths (forced release, status), never on the acquire path, where Redis's
-- own WRONGTYPE stops a script before it writes.
local function foreign_key()
  local expected = {
    {lock_key, 'string'}, {fence_key, 'string'}, {queue_key, 'zset'}, {gone_key, 'zset'},
    {released_key, 'string'}, {forced_key, 'string'}, {permits_key, 'string'},
    {holders_key, 'zset'}, {held_key, 'hash'}, {note_key, 'string'},
  }
  for _, e in ipairs(expected) do
    local t = redis.call('TYPE', e[1])['ok']
    if t ~= 'none' and t ~= e[2] then
      return e[1], 'a ' .. t .. ', where leasehold keeps a ' .. e[2]
    end
  end
  local record = redis.call('GET', fence_key)
  if record and not parse_record(record) then
    return fence_key, 'the string `' .. string.sub(record, 1, 40) .. '`, where leasehold keeps a fence record'
  end
  local permits = redis.call('GET', permits_key)
  if permits and not string.match(permits, '^%d+$') then
    return permits_key, 'the string `' .. string.sub(permits, 1, 40) .. '`, where leasehold keeps a number'
  end
  return nil
end

local function withdraw(token, first)
  redis.call('ZREM', queue_key, token .. ',' .. first)
  redis.call('DEL', alive_key(token))
end

-- Semaphores. A holder's permit lasts until its expiry in holders_key (renewal moves it); the keys
-- live at least as long as their longest holder. Drops the holders whose permit expired (they stopped
-- renewing) and returns how many are live.
local function prune_holders()
  local now = now_ms()
  local expired = redis.call('ZRANGEBYSCORE', holders_key, '-inf', now)
  if #expired > 0 then
    for _, token in ipairs(expired) do
      redis.call('HDEL', held_key, token)
    end
    redis.call('ZREMRANGEBYSCORE', holders_key, '-inf', now)
  end
  return redis.call('ZCARD', holders_key)
end

local function add_holder(token, fence, ttl_ms)
  redis.call('ZADD', holders_key, now_ms() + ttl_ms, token)
  redis.call('HSET', held_key, token, string.format('%d', fence))
  keep(holders_key, ttl_ms)
  keep(held_key, ttl_ms)
  keep(permits_key, ttl_ms)
end

-- A permit's fence, minted into the record, which says the name is in use as a semaphore.
local function permit_fence(retention_ms)
  local r = read_record()
  mint(r)
  r.holder = ''
  set_flag(r, 's', true)
  write_record(r, retention_ms)
  return r.fence
end

-- The hand-over of one permit to the first live waiter, as hand_lock does for a lock.
local function hand_permit(window, retention_ms)
  local head, first = pop_live(window)
  if not head then
    return nil
  end
  local fence = permit_fence(retention_ms)
  add_holder(head, fence, first)
  notify(head, fence, first)
  return head, fence, first
end

-- Hands every free permit to the queue, in order. Returns the permits still free and whether
-- `token` got one (with its fence and first TTL).
local function fill_permits(token, window, retention_ms)
  local n = stored_number(permits_key) or 0
  local free = n - prune_holders()
  local mine
  while free > 0 and redis.call('EXISTS', queue_key) == 1 do
    local head, fence, first = hand_permit(window, retention_ms)
    if not head then
      break
    end
    if head == token then
      mine = {fence, first}
    end
    free = free - 1
  end
  return free, mine
end

-- The permits a semaphore is in use with (live holders or waiters), or nil when the name is not in
-- use as one (a stale count is then dropped, so that the name may be used as a lock or with another
-- number of permits).
local function semaphore_in_use()
  local stored = stored_number(permits_key)
  if not stored then
    return nil
  end
  if prune_holders() > 0 or redis.call('EXISTS', queue_key) == 1 then
    return stored
  end
  redis.call('DEL', permits_key, holders_key, held_key)
  return nil
end
