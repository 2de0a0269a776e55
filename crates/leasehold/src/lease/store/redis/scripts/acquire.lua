-- acquire, second part (after acquire_fast.lua and lib.lua): the caller's own lease found again, the
-- queue, the semaphore, the hand-over of a lock found free with waiters, and joining the queue.
--
-- No barging: while the queue is not empty a free lock goes to its first live waiter, here, and the
-- caller (unless that is the caller) is busy. Run twice (a retry after a reconnect) it must not see
-- its own lock as busy: the same token finds the lock it took, or was handed, and gets it back.

-- Taken: when a BLPOP follows, it must return at once, so it finds the grant on the wake list.
local function taken(fence, ttl_now)
  if block > 0 then
    notify(token, fence, ttl_now, linger_ms)
  end
  return {1, fence, ttl_now, now_us()}
end

if holder == token then
  local fence = redis.call('GET', fence_key)
  if not fence then
    -- Only when the retention is shorter than the time since this lease was taken.
    return redis.error_reply('LEASEHOLD the fence of this lease outlived its retention; acquire again')
  end
  return taken(tonumber(fence), redis.call('PTTL', lock_key))
end
local queue_first = false
if in_use then
  if redis.call('ZSCORE', gone_key, token) then
    return {2}
  end
  local permits = semaphore_in_use()
  if permits then
    return {3, permits}
  end
  if not holder then
    local head, fence, first = hand_lock(linger_ms, retention_ms)
    if head == token then
      -- hand_lock already put the grant on our wake list.
      return {1, fence, first, now_us()}
    end
    if head then
      holder = head
    elseif redis.call('EXISTS', queue_key) == 1 then
      -- Nobody live at the head within this script's budget; the queue still goes first.
      queue_first = true
    end
  end
end
if not holder and not queue_first then
  -- The fence key outlives at least this first TTL, so that a retry finds the fence.
  local fence = next_fence(math.max(retention_ms, ttl))
  redis.call('SET', lock_key, token, 'PX', ttl)
  return taken(fence, ttl)
end
local pttl = 0
if holder then
  pttl = redis.call('PTTL', lock_key)
end
if block > 0 then
  -- A grant left on the wake list by a hand-over this token never took up is stale: the lock is not
  -- ours. Clear it, so that the BLPOP that follows returns only a grant made after this point.
  redis.call('DEL', wake_key(token))
  enqueue(token, now_ms() + block + tonumber(ARGV[5]), tonumber(ARGV[4]), tonumber(ARGV[7]))
end
return {0, pttl, now_us()}
