-- lib.lua: the waiter queue, the hand-over, the foreign-key checks and the semaphore's bookkeeping,
-- written once for every lease script but renew (scripts/mod.rs joins it in at compile time, after
-- fence.lua, names.lua and the script's fast part, if it has one).

local function wake_key(token)
  return base .. 'wake:' .. token
end

-- A released permit, remembered for a retried release (several permits are released concurrently,
-- so one "last released" key would not do).
local function released_permit_key(token)
  return base .. 'released:' .. token
end

-- The server's clock (`now_us`) and the fence rule (`fence_after`) are fence.lua's, joined in before
-- this file.
local function now_ms()
  return math.floor(now_us() / 1000)
end

-- Lengthens a key's life to at least `ms`, never shortens it.
local function keep(key, ms)
  if redis.call('PTTL', key) < ms then
    redis.call('PEXPIRE', key, ms)
  end
end

-- A key under the name that holds something leasehold did not write there: the script stops before
-- writing anything, with an error the client reads (errors.rs) as the key and what it holds.
local function refuse_foreign(key, found)
  return error({err = 'LEASEHOLD-FOREIGN ' .. key .. '|' .. found})
end

-- A counter key (the fence, a semaphore's permits): nil when absent, its number when it holds one,
-- else the script stops (a fence that is not a number is never read as 0 and overwritten).
local function stored_number(key)
  local v = redis.call('GET', key)
  if not v then
    return nil
  end
  if not string.match(v, '^%d+$') then
    refuse_foreign(key, 'the string `' .. string.sub(v, 1, 40) .. '`, where leasehold keeps a number')
  end
  return tonumber(v)
end

-- The first key of the name that is not of the type (or, for the counters, the format) leasehold
-- keeps there, and what it holds; nil when every key is leasehold's or absent. One TYPE per key: for
-- the operator's paths (forced release, status), never on the acquire path, where Redis's own
-- WRONGTYPE stops a script before it writes.
local function foreign_key()
  local expected = {
    {lock_key, 'string'}, {fence_key, 'string'}, {queue_key, 'zset'}, {waiters_key, 'hash'},
    {gone_key, 'zset'}, {released_key, 'string'}, {forced_key, 'string'},
    {permits_key, 'string'}, {holders_key, 'zset'}, {held_key, 'hash'}, {note_key, 'string'},
  }
  for _, e in ipairs(expected) do
    local t = redis.call('TYPE', e[1])['ok']
    if t ~= 'none' and t ~= e[2] then
      return e[1], 'a ' .. t .. ', where leasehold keeps a ' .. e[2]
    end
  end
  for _, key in ipairs({fence_key, permits_key}) do
    local v = redis.call('GET', key)
    if v and not string.match(v, '^%d+$') then
      return key, 'the string `' .. string.sub(v, 1, 40) .. '`, where leasehold keeps a number'
    end
  end
  return nil
end

-- The next holder's fence by fence.lua's rule, floored at the server clock, stored for the
-- retention. `%d` keeps the number out of exponent notation.
local function next_fence(retention_ms)
  local fence = fence_after(stored_number(fence_key) or 0, nil, true)
  redis.call('SET', fence_key, string.format('%d', fence), 'PX', retention_ms)
  return fence
end

-- The queue: queue_key orders waiting tokens by arrival (server time in microseconds; `NX` keeps the
-- place of a waiter that refreshes), waiters_key holds "<deadline ms>,<first ttl ms>" per token: when
-- the waiter stops refreshing, and the TTL it wants its lock to start with if handed over. Both keys
-- are written together and expire together, `life_ms` after the last write.
local function enqueue(token, deadline_ms, first_ttl_ms, life_ms)
  redis.call('ZADD', queue_key, 'NX', now_us(), token)
  redis.call('HSET', waiters_key, token, string.format('%d,%d', deadline_ms, first_ttl_ms))
  redis.call('PEXPIRE', queue_key, life_ms)
  redis.call('PEXPIRE', waiters_key, life_ms)
end

local function withdraw(token)
  redis.call('ZREM', queue_key, token)
  redis.call('HDEL', waiters_key, token)
end

-- Takes waiters off the head of the queue until one whose deadline has not passed comes up: its
-- token and first TTL, or nil. The ones dropped stopped refreshing their place (they died, or gave up
-- without withdrawing). At most 256 are dropped per call so that a script stays short; the queue
-- then is not empty, and the next contact goes on.
local function pop_live()
  for _ = 1, 256 do
    local popped = redis.call('ZPOPMIN', queue_key)
    local head = popped[1]
    if not head then
      return nil
    end
    local entry = redis.call('HGET', waiters_key, head)
    redis.call('HDEL', waiters_key, head)
    if entry then
      local deadline, ttl = string.match(entry, '^(%d+),(%d+)$')
      if deadline and tonumber(deadline) >= now_ms() then
        return head, tonumber(ttl)
      end
    end
  end
  return nil
end

-- Tells a waiter it holds the lease now: "<fence>,<server time µs>,<ttl ms>" on its own wake list,
-- which its BLPOP pops. Unclaimed (the waiter died) it expires after `linger_ms`.
local function notify(token, fence, ttl_ms, linger_ms)
  local wake = wake_key(token)
  redis.call('LPUSH', wake, string.format('%d,%d,%d', fence, now_us(), ttl_ms))
  redis.call('PEXPIRE', wake, linger_ms)
end

-- The hand-over, for a free lock: the first live waiter gets it, with the short first TTL it asked
-- for (its watchdog extends it at once; a waiter that died meanwhile leaves the lock free again after
-- that, not after a whole TTL), and a fence minted by the usual rule. Returns the new holder's token,
-- its fence and first TTL, or nil when nobody live is queued.
local function hand_lock(linger_ms, retention_ms)
  local head, first = pop_live()
  if not head then
    return nil
  end
  local fence = next_fence(retention_ms)
  redis.call('SET', lock_key, head, 'PX', first)
  notify(head, fence, first, linger_ms)
  return head, fence, first
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

-- The hand-over of one permit to the first live waiter, as hand_lock does for a lock.
local function hand_permit(linger_ms, retention_ms)
  local head, first = pop_live()
  if not head then
    return nil
  end
  local fence = next_fence(retention_ms)
  add_holder(head, fence, first)
  notify(head, fence, first, linger_ms)
  return head, fence, first
end

-- Hands every free permit to the queue, in order. Returns the permits still free and whether
-- `token` got one (with its fence and first TTL).
local function fill_permits(token, linger_ms, retention_ms)
  local n = stored_number(permits_key) or 0
  local free = n - prune_holders()
  local mine
  while free > 0 and redis.call('EXISTS', queue_key) == 1 do
    local head, fence, first = hand_permit(linger_ms, retention_ms)
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
