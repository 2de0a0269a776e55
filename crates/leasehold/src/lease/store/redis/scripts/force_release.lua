-- force_release: the operator's override. Evicts the holder (of a lock, or one or every holder of a
-- semaphore) and advances the fence (same rule as acquire), so the evicted holder's renewals fail
-- and its fenced writes are refused; then hands what it freed to the first live waiters.
-- KEYS[1] lock
-- ARGV[1] this request's id, ARGV[2] how long its result is remembered ms, ARGV[3] how long a waiter
-- counts as live after joining the queue ms, ARGV[4] fence retention ms, ARGV[5] the token to evict
-- ('': every holder)
-- Returns {evicted (0/1), fence}. Run twice (the same id), it returns the first result and does not
-- evict the waiter the first run handed the lock to.
-- Nothing leasehold did not write is deleted: a key of another type or format stops it first.
clock_exact()
local foreign, found = foreign_key()
if foreign then
  return refuse_foreign(foreign, found)
end
local op = ARGV[1]
local window = tonumber(ARGV[3])
local retention_ms = tonumber(ARGV[4])
local last = redis.call('GET', forced_key)
if last then
  local id, evicted, fence = string.match(last, '^(%w+),(%d),(%d+)$')
  if id == op then
    return {tonumber(evicted), tonumber(fence)}
  end
end
local target = ARGV[5]
local evicted = 0
local held = redis.call('GET', lock_key)
if held then
  -- A grant the evicted holder has not taken up yet goes with its lock.
  local holder_token = string.match(held, '^(.*):q$') or held
  if target == '' or holder_token == target then
    redis.call('DEL', wake_key(holder_token))
  end
end
if target == '' then
  -- Everyone: the lock's holder, or every holder of a semaphore.
  evicted = redis.call('DEL', lock_key)
  if prune_holders() > 0 then
    evicted = 1
  end
  redis.call('DEL', holders_key, held_key)
elseif held and (held == target or held == target .. ':q') then
  evicted = redis.call('DEL', lock_key)
elseif redis.call('ZREM', holders_key, target) == 1 then
  redis.call('HDEL', held_key, target)
  evicted = 1
end
local r = read_record()
local fence = mint(r)
r.holder = ''
if redis.call('EXISTS', queue_key) == 1 then
  if redis.call('EXISTS', permits_key) == 1 then
    write_record(r, retention_ms)
    fill_permits('', window, retention_ms)
    r = read_record()
  elseif redis.call('EXISTS', lock_key) == 0 then
    hand_lock(r, window)
  end
end
settle_queue_flag(r)
write_record(r, retention_ms)
redis.call('SET', forced_key, string.format('%s,%d,%d', op, evicted, fence), 'PX', ARGV[2])
return {evicted, fence}
