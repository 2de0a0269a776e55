-- acquire: take the lock if it is free and nobody is queued before the caller; else say how long it
-- stays busy and, when the caller waits, put it in the queue (or refresh its place there).
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] block ms: 0 when the caller does not wait, else the length of
-- the BLPOP of the caller's wake list that follows this script in the same pipeline, ARGV[4] the
-- first TTL the caller wants if a release hands it the lock ms, ARGV[5] slack added to a waiter's deadline ms, ARGV[6] how long
-- an unclaimed wake-up lingers ms, ARGV[7] life of the queue keys ms, ARGV[8] fence retention ms
-- Returns {1, fence, ttl ms the lock has now, server µs} taken; {0, pttl, server µs} busy (pttl -1:
-- held without expiry, 0: free but the queue goes first); {2} the caller gave up on this token
-- before this arrived (nothing done); {3, permits} the name is in use as a semaphore of that many
-- permits (nothing done).
--
-- No barging: while the queue is not empty a free lock goes to its first live waiter, here, and the
-- caller (unless that is the caller) is busy. Run twice (a retry after a reconnect) it must not see
-- its own lock as busy: the same token finds the lock it took, or was handed, and gets it back.
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local block = tonumber(ARGV[3])
local linger_ms = tonumber(ARGV[6])
local retention_ms = tonumber(ARGV[8])

-- Taken: when a BLPOP follows, it must return at once, so it finds the grant on the wake list.
local function taken(fence, ttl_now)
  if block > 0 then
    notify(token, fence, ttl_now, linger_ms)
  end
  return {1, fence, ttl_now, now_us()}
end

-- false when free (Redis turns a nil reply into false).
local holder = redis.call('GET', lock_key)
if holder == token then
  local fence = redis.call('GET', fence_key)
  if not fence then
    -- Only when the retention is shorter than the time since this lease was taken.
    return redis.error_reply('LEASEHOLD the fence of this lease outlived its retention; acquire again')
  end
  return taken(tonumber(fence), redis.call('PTTL', lock_key))
end
-- One command on the uncontended path tells whether anyone is queued, anything was given up, or the
-- name is (or was) a semaphore.
local queue_first = false
if redis.call('EXISTS', queue_key, gone_key, permits_key) > 0 then
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
