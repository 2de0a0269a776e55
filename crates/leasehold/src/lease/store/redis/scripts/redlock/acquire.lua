-- acquire (Redlock, one master): take this master's lock if free and record a fence candidate.
-- KEYS[1] lock, KEYS[2] fence, KEYS[3] wake, KEYS[4] waiting marker
-- ARGV[1] token, ARGV[2] ttl in milliseconds, ARGV[3] how long the caller may block on this master's
-- wake list when busy, in milliseconds (0: it will not wait here), ARGV[4] slack added to the marker's
-- lifetime, ARGV[5] the client's fence proposal, ARGV[6] '1' to floor the fence at this server's
-- clock ('0' only in the tests that show why the floor is there), ARGV[7] the fence key's retention
-- in milliseconds (never shortened; the clock floor keeps fences increasing after it lapses)
-- Returns {1, fence, waiting} when taken (fence: what this master now records, set in the same atomic
-- step that took the lock), {0, pttl, holder} when busy (holder: the first 8 hex digits of the holder's
-- token, so the client can tell one holder with a majority from a split vote).
--
-- The candidate is max(stored + 1, proposal, server time in microseconds): strictly above what this
-- master recorded for any earlier holder, and written while the lock is ours. The client grants the
-- lease only when a majority of masters recorded the fence it hands out while it held their locks
-- (here, or by confirm.lua); that is what makes the fence monotonic across different majorities.
-- Run twice (a retry after a reconnect), it finds its own lock and answers the same fence again.
local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
  local again = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  return {1, string.format('%d', again), redis.call('EXISTS', KEYS[4])}
end
if held then
  local pttl = redis.call('PTTL', KEYS[1])
  local wait = tonumber(ARGV[3])
  if wait > 0 then
    -- Announce a waiter, as the single-server acquire does: a release that runs before the caller's
    -- BLPOP still finds the marker and pushes a wake-up. Never shortened.
    local block = wait
    if pttl >= 0 and pttl + 250 < wait then
      block = pttl + 250
    end
    local px = block + tonumber(ARGV[4])
    if redis.call('PTTL', KEYS[4]) < px then
      redis.call('SET', KEYS[4], '1', 'PX', px)
    end
  end
  return {0, pttl, string.sub(held, 1, 8)}
end
-- The rule is fence.lua's, shared with the single-server scripts.
local stored = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local fence = fence_after(stored, tonumber(ARGV[5]) or 0, ARGV[6] == '1')
local keep = tonumber(ARGV[7])
if keep < tonumber(ARGV[2]) then
  keep = tonumber(ARGV[2])
end
local left = redis.call('PTTL', KEYS[2])
if left > keep then
  keep = left
end
redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', keep)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local waiting = 0
local marker = redis.call('PTTL', KEYS[4])
if marker ~= -2 then
  -- Contenders are about: a wake-up left by an earlier release is stale now, and the marker must
  -- outlive this hold so that its release wakes the next one.
  redis.call('DEL', KEYS[3])
  local px = tonumber(ARGV[2]) + tonumber(ARGV[4])
  if marker >= 0 and marker < px then
    redis.call('PEXPIRE', KEYS[4], px)
  end
  waiting = 1
end
return {1, string.format('%d', fence), waiting}
