-- force_release: the operator's override. Deletes the lock whoever holds it and advances the fence
-- (same rule as acquire), so the evicted holder's renewals fail and its fenced writes are refused.
-- KEYS[1] lock, KEYS[2] fence, KEYS[3] wake, KEYS[4] waiting marker
-- ARGV[1] how long an unclaimed wake-up lingers, in milliseconds
-- Returns {evicted (0/1), fence}.
local evicted = redis.call('DEL', KEYS[1])
local now = redis.call('TIME')
local now_us = tonumber(now[1]) * 1000000 + tonumber(now[2])
local stored = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local fence = stored + 1
if now_us > fence then
  fence = now_us
end
redis.call('SET', KEYS[2], string.format('%d', fence))
-- Wake one waiter, if acquire.lua recently told someone "busy".
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('LPUSH', KEYS[3], '1')
  redis.call('LTRIM', KEYS[3], 0, 0)
  redis.call('PEXPIRE', KEYS[3], ARGV[1])
end
return {evicted, fence}
