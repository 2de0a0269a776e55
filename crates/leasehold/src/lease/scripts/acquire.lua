-- acquire: take the lock if free, mint a fence that never goes backwards.
-- KEYS[1] lock, KEYS[2] fence, KEYS[3] wake
-- ARGV[1] token, ARGV[2] ttl in milliseconds
-- Returns {1, fence} when taken, {0, pttl} when busy (pttl -1: held without expiry).
local pttl = redis.call('PTTL', KEYS[1])
if pttl ~= -2 then
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
-- A wake-up left by an earlier release is stale now that the lock is taken again.
redis.call('DEL', KEYS[3])
return {1, fence}
