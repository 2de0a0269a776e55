-- sem_acquire: take one of a semaphore's permits if one is free and nobody is queued before the
-- caller; else say how long until the first holder's permit runs out and, when the caller waits, put
-- it in the queue (or refresh its place). The same queue and hand-over as a lock.
-- KEYS[1] lock (the name's lock key: the semaphore's keys share its hash tag)
-- ARGV as acquire_fast.lua's (the clock's estimate unused: a semaphore goes by the server's clock),
-- then ARGV[6] permits
-- Returns as acquire.lua: {1, fence, ttl ms, server µs, 1} taken; {0, ms until the first permit runs
-- out, server µs, 1} busy; {2} given up; {3, permits} the name is in use with another number of
-- permits (1: as a lock, by leasehold or another SET NX PX client).
clock_exact()
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local block = unpack_numbers(ARGV[5], 1, 1)
local first, slack, window, life_ms, retention_ms = unpack_numbers(ARGV[5], 3, 7)
local permits = tonumber(ARGV[6])

local function taken(fence, ttl_now)
  if block > 0 then
    notify(token, fence, ttl_now)
  end
  return {1, fence, ttl_now, hi, exact}
end

-- Run twice (a retry after a reconnect), or handed a permit since: ours already.
local until_ms = redis.call('ZSCORE', holders_key, token)
if until_ms and tonumber(until_ms) > now_ms() then
  return taken(tonumber(redis.call('HGET', held_key, token) or '0') or 0, tonumber(until_ms) - now_ms())
end
if redis.call('ZSCORE', gone_key, token) then
  return {2}
end
if redis.call('EXISTS', lock_key) == 1 then
  -- In use as a lock, unless the key is not a lock at all (one TYPE, only on this path).
  local t = redis.call('TYPE', lock_key)['ok']
  if t ~= 'string' then
    return refuse_foreign(lock_key, 'a ' .. t .. ', where leasehold keeps a string')
  end
  return {3, 1}
end
local stored = stored_number(permits_key) or 0
local live = prune_holders()
local queued = redis.call('EXISTS', queue_key) == 1
if stored ~= permits then
  if stored > 0 and (live > 0 or queued) then
    return {3, stored}
  end
  if stored == 0 and queued then
    -- Waiters without a count are waiting for the name as a lock (if the queue is a queue).
    local t = redis.call('TYPE', queue_key)['ok']
    if t ~= 'zset' then
      return refuse_foreign(queue_key, 'a ' .. t .. ', where leasehold keeps a zset')
    end
    return {3, 1}
  end
  redis.call('SET', permits_key, permits, 'PX', life_ms)
end
keep(permits_key, life_ms)
-- Free permits go to the queue first.
local free, mine = fill_permits(token, window, retention_ms)
if mine then
  return {1, mine[1], mine[2], hi, exact}
end
if free > 0 and redis.call('EXISTS', queue_key) == 0 then
  local fence = permit_fence(retention_ms)
  add_holder(token, fence, ttl)
  return taken(fence, ttl)
end
local head = redis.call('ZRANGE', holders_key, 0, 0, 'WITHSCORES')
local remaining = 0
if head[2] then
  remaining = tonumber(head[2]) - now_ms()
end
if block > 0 then
  -- Waiters of a semaphore send an acquire that finds the lock free down the slow path, as a lock's do.
  local r, existed = read_record()
  if not flagged(r, 'q') or not flagged(r, 's') then
    set_flag(r, 'q', true)
    set_flag(r, 's', true)
    write_record(r, (not existed) and math.max(retention_ms, life_ms) or nil)
  end
  enqueue(token, first, block, slack, life_ms)
end
return {0, remaining, hi, exact}
