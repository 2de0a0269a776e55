-- lib.lua: the record, the waiter queue and the hand-over of a lock, written once for every lease
-- script but renew and the notes (scripts/mod.rs joins it in at compile time, after names.lua, the
-- script's fast part, if it has one, and fence.lua). What only the scripts off the lock's hot path
-- use (the semaphore's bookkeeping, the operator's checks, the abandon's extras) is lib_more.lua's:
-- each function here is a closure Redis builds on every call of a script that includes it, and the
-- release that hands a lock over builds no more than it needs (half of what it built with both).

fence_key = fence_key or base .. 'fence'
local queue_key = base .. 'queue'
local gone_key = base .. 'gone'
local released_key = base .. 'released'

local function wake_key(token)
  return base .. 'wake:' .. token
end

-- A waiter that refreshed its place: there while it is live (one block and the slack).
local function alive_key(token)
  return base .. 'alive:' .. token
end

-- The numbers `from` to `to` of a packed argument ("12,34,56": the fields the fast parts do not
-- read ride in one argument). Only those are parsed: Lua's tonumber is a strtod in Redis, the
-- costliest step of a hand-over after the interpreter's own.
local function unpack_numbers(packed, from, to)
  local fields, i = {}, 0
  for n in string.gmatch(packed, '%d+') do
    i = i + 1
    if i >= from then
      fields[i - from + 1] = tonumber(n)
      if i == to then
        break
      end
    end
  end
  return unpack(fields, 1, to - from + 1)
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
