-- lib.lua: the record, the waiter queue, the hand-over, the foreign-key checks and the semaphore's
-- bookkeeping, written once for every lease script but renew (scripts/mod.rs joins it in at compile
-- time, after fence.lua, names.lua and the script's fast part, if it has one).

fence_key = fence_key or base .. 'fence'
local queue_key = base .. 'queue'
local gone_key = base .. 'gone'
local released_key = base .. 'released'
local forced_key = base .. 'forced'
-- A semaphore (more than one permit): its number of permits, its holders (token -> expiry, server
-- ms) and their fences (token -> fence).
local permits_key = base .. 'permits'
local holders_key = base .. 'holders'
local held_key = base .. 'held'
-- A note its holder wrote beside the lock (note.lua, which names it on its own).
local note_key = base .. 'note'

local function wake_key(token)
  return base .. 'wake:' .. token
end

-- A waiter that refreshed its place: there while it is live (one block and the slack).
local function alive_key(token)
  return base .. 'alive:' .. token
end

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

-- The numbers `from` to `to` of a packed argument ("12,34,56": the fields the fast parts do not
-- read ride in one argument).
local function unpack_numbers(packed, from, to)
  local fields = {}
  for n in string.gmatch(packed, '%d+') do
    fields[#fields + 1] = tonumber(n)
  end
  return unpack(fields, from, to)
end

-- Lengthens a key's life to at least `ms`, never shortens it.
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- A key under the name that holds something leasehold did not write there: the script stops, with an
-- error the client reads (errors.rs) as the key and what it holds.
local function refuse_foreign(key, found)
  return error({err = 'LEASEHOLD-FOREIGN ' .. key .. '|' .. found})
end

local function foreign_string(key, v, what)
  return refuse_foreign(key, 'the string `' .. string.sub(v, 1, 40) .. '`, where leasehold keeps ' .. what)
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

-- The record (names.lua): a table, or nil when `v` is not one.
local function parse_record(v)
  local fence, flags, holder, released = string.match(v, '^(%d+):([gqs]*):([^:]*):([^:]*)$')
  if not fence then
    fence, flags, holder, released = string.match(v, '^(%d+)$'), '', '', ''
  end
  if not fence then
    return nil
  end
  return {fence = tonumber(fence), flags = flags, holder = holder, released = released}
end

local function record_text(r)
  return string.format('%d:%s:%s:%s', r.fence, r.flags, r.holder, r.released)
end

-- The name's record, and whether it exists (an empty one, fence 0, when not).
local function read_record()
  local v = redis.call('GET', fence_key)
  if not v then
    return {fence = 0, flags = '', holder = '', released = ''}, false
  end
  local r = parse_record(v)
  if not r then
    foreign_string(fence_key, v, 'a fence record')
  end
  return r, true
end

-- Writes the record for `ms`, or (nil) keeping the life it has.
local function write_record(r, ms)
  if ms then
    redis.call('SET', fence_key, record_text(r), 'PX', ms)
  else
    redis.call('SET', fence_key, record_text(r), 'KEEPTTL')
  end
end

local function flagged(r, flag)
  return string.find(r.flags, flag, 1, true) ~= nil
end

local function set_flag(r, flag, on)
  local without = string.gsub(r.flags, flag, '')
  r.flags = on and (without .. flag) or without
end

-- The next fence by fence.lua's rule: above the record's, and at least the clock (`hi`), so that it
-- is above every fence issued before the record was lost (a restart or failover, or the retention
-- passed). Kept in `r` for the caller to write.
local function mint(r)
  r.fence = fence_after(r.fence, hi, false)
  return r.fence
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

-- The queue: queue_key orders "<token>,<first ttl ms>" (the TTL the waiter wants its lock to start
-- with if handed over) by arrival, µs (`NX` keeps the place of a waiter that refreshes). A waiter is
-- live for `window` ms after it joined (its first block and the slack), and after that while its
-- alive key lasts, which each later step writes for one block and the slack. Returns whether this was
-- the waiter's first step.
local function enqueue(token, first, block, slack, life)
  local added = redis.call('ZADD', queue_key, 'NX', hi, token .. ',' .. first)
  redis.call('PEXPIRE', queue_key, life)
  if added == 0 then
    redis.call('SET', alive_key(token), '1', 'PX', block + slack)
    -- The record carries the queue's flag: it must last as long as the queue.
    keep(fence_key, life)
  end
  return added == 1
end

local function withdraw(token, first)
  redis.call('ZREM', queue_key, token .. ',' .. first)
  redis.call('DEL', alive_key(token))
end

-- Takes waiters off the head of the queue until a live one comes up: its token and first TTL, or nil.
-- The ones dropped stopped refreshing their place (they died, or gave up without withdrawing). At
-- most 256 are dropped per call so that a script stays short; the queue then is not empty, and the
-- next contact goes on.
local function pop_live(window)
  for _ = 1, 256 do
    local popped = redis.call('ZPOPMIN', queue_key)
    if not popped[1] then
      return nil
    end
    local token, first = string.match(popped[1], '^([^,]+),(%d+)$')
    if token and (hi <= tonumber(popped[2]) + window * 1000 or redis.call('DEL', alive_key(token)) == 1) then
      return token, tonumber(first)
    end
  end
  return nil
end

-- Tells a waiter it holds the lease now: "<fence>,<server time µs, no later than the hand-over>,<ttl
-- ms>" on its own wake list, which its BLPOP pops. The list lives as long as the lock's first TTL: a
-- waiter that comes back later finds neither, so a grant it never took up cannot be mistaken for a
-- new one.
local function notify(token, fence, ttl_ms)
  local wake = wake_key(token)
  redis.call('LPUSH', wake, string.format('%d,%d,%d', fence, lo, ttl_ms))
  redis.call('PEXPIRE', wake, ttl_ms)
end

-- Drops the queue's flag from `r` when the queue is empty.
local function settle_queue_flag(r)
  if flagged(r, 'q') and redis.call('EXISTS', queue_key) == 0 then
    set_flag(r, 'q', false)
  end
end

-- The hand-over, for a lock that is free or ours to give: the first live waiter that did not give up
-- gets it, with the short first TTL it asked for (its watchdog extends it at once; a waiter that died
-- meanwhile leaves the lock free again after that, not after a whole TTL), and a fence minted by the
-- usual rule into `r` (the caller writes it). The lock is marked for the waiters still queued, if
-- any. Returns the new holder's token, its fence and first TTL, or nil when nobody live is queued.
-- (release.lua hands over on its own, in fewer commands.)
local function hand_lock(r, window)
  while true do
    local head, first = pop_live(window)
    if not head then
      return nil
    end
    if not (flagged(r, 'g') and redis.call('ZSCORE', gone_key, head)) then
      mint(r)
      r.holder = head
      settle_queue_flag(r)
      redis.call('SET', lock_key, flagged(r, 'q') and (head .. ':q') or head, 'PX', first)
      notify(head, r.fence, first)
      return head, r.fence, first
    end
  end
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
