-- acquire, first part: the arguments, the lock's holder and, unless the caller holds it, whether the
-- name is in use by a queue, a given-up token or a semaphore. The common case (the lock free, none of
-- those, the caller not about to block) is answered here, before lib.lua's functions are built; every
-- other case goes on in acquire.lua with what was read here, so no command is sent twice.
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] ttl ms, ARGV[3] block ms: 0 when the caller does not wait, else the length of
-- the BLPOP of the caller's wake list that follows this script in the same pipeline, ARGV[4] the
-- first TTL the caller wants if a release hands it the lock ms, ARGV[5] slack added to a waiter's
-- deadline ms, ARGV[6] how long an unclaimed wake-up lingers ms, ARGV[7] life of the queue keys ms,
-- ARGV[8] fence retention ms
-- Returns {1, fence, ttl ms the lock has now, server µs} taken; {0, pttl, server µs} busy (pttl -1:
-- held without expiry, 0: free but the queue goes first); {2} the caller gave up on this token
-- before this arrived (nothing done); {3, permits} the name is in use as a semaphore of that many
-- permits (nothing done).
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local block = tonumber(ARGV[3])
local linger_ms = tonumber(ARGV[6])
local retention_ms = tonumber(ARGV[8])

-- false when free (Redis turns a nil reply into false).
local holder = redis.call('GET', lock_key)
-- One command tells whether anyone is queued, anything was given up, or the name is (or was) a
-- semaphore. Not asked when the caller holds the lock (a retry finds its own lease, queue or not).
local in_use = false
if holder ~= token then
  in_use = redis.call('EXISTS', queue_key, gone_key, permits_key) > 0
end
if not holder and not in_use and block == 0 then
  local stored = redis.call('GET', fence_key)
  -- A fence that is not a number is lib.lua's to refuse (acquire.lua reads it again, then stops).
  if not stored or string.match(stored, '^%d+$') then
    -- lib.lua's next_fence, written out: the fence key outlives at least this TTL, so that a retry
    -- finds the fence.
    local fence = fence_after(stored and tonumber(stored) or 0, nil, true)
    redis.call('SET', fence_key, string.format('%d', fence), 'PX', math.max(retention_ms, ttl))
    redis.call('SET', lock_key, token, 'PX', ttl)
    return {1, fence, ttl, now_us()}
  end
end
