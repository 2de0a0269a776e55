-- acquire: take the lock if free, mint a fence that never goes backwards.
-- KEYS[1] lock, KEYS[2] fence, KEYS[3] wake, KEYS[4] waiting marker
-- ARGV[1] token, ARGV[2] ttl in milliseconds, ARGV[3] how long the caller may block on the wake list
-- when busy, in milliseconds (0: it will not wait), ARGV[4] slack added to the marker's lifetime
-- Returns {1, fence, waiting} when taken (waiting 1: the marker is alive and now covers this hold),
-- {0, pttl} when busy (pttl -1: held without expiry).
--
-- The waiting marker tells release that someone may be blocked on the wake list, so an uncontended
-- release pushes nothing. It is set by the same script that answers "busy", before the caller blocks,
-- so a release that runs between this reply and the caller's BLPOP still finds it and pushes. It is
-- never shortened, and it is not cleared by release (other contenders may still be blocked): it
-- expires after the longest block it announced, plus slack.
-- Run twice (a client retrying after a reconnect), it must not see its own lock as busy: the same
-- token finds the lock it took and gets the same lease and fence back.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  local again = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  return {1, again, redis.call('EXISTS', KEYS[4])}
end
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
  local wait = tonumber(ARGV[3])
  if wait > 0 then
    -- The caller blocks for the holder's remaining TTL plus at most 250 ms of jitter, never past
    -- its own wait bound.
    local block = wait
    if pttl >= 0 and pttl + 250 < wait then
      block = pttl + 250
    end
    local px = block + tonumber(ARGV[4])
    if redis.call('PTTL', KEYS[4]) < px then
      redis.call('SET', KEYS[4], '1', 'PX', px)
    end
  end
  return {0, pttl}
end
-- fence = max(stored + 1, server time in microseconds): strictly above the stored value, and above
-- every fence issued before Redis lost the key (restart, failover), as long as the server clock does
-- not step back by more than the time the loss took. Microseconds since 1970 (~2^51) are exact in a
-- Lua double; string.format('%d') keeps them out of exponent notation.
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local stored = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local fence = stored + 1
if now_us > fence then
  fence = now_us
end
redis.call('SET', KEYS[2], string.format('%d', fence))
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local waiting = 0
local marker = redis.call('PTTL', KEYS[4])
if marker ~= -2 then
  -- Contenders are about: a wake-up left by an earlier release is stale now that the lock is taken
  -- again, and the marker must outlive this hold so that its release wakes the next one.
  redis.call('DEL', KEYS[3])
  local px = tonumber(ARGV[2]) + tonumber(ARGV[4])
  if marker >= 0 and marker < px then
    redis.call('PEXPIRE', KEYS[4], px)
  end
  waiting = 1
end
return {1, fence, waiting}
