-- force_release (Redlock, one master): the operator's override on this master. Deletes the lock
-- whoever holds it and records a fence candidate by the same rule as acquire.lua.
-- KEYS[1] lock, KEYS[2] fence, KEYS[3] wake, KEYS[4] waiting marker
-- ARGV[1] how long an unclaimed wake-up lingers, in milliseconds, ARGV[2] the client's fence
-- proposal, ARGV[3] '1' to floor the fence at this server's clock, ARGV[4] the fence key's retention
-- in milliseconds (never shortened)
-- Returns {evicted (0/1), fence candidate}.
local evicted = redis.call('DEL', KEYS[1])
local stored = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local fence = fence_after(stored, tonumber(ARGV[2]) or 0, ARGV[3] == '1')
local keep = tonumber(ARGV[4])
local left = redis.call('PTTL', KEYS[2])
if left > keep then
  keep = left
end
redis.call('SET', KEYS[2], string.format('%d', fence), 'PX', keep)
if redis.call('EXISTS', KEYS[4]) == 1 then
  redis.call('LPUSH', KEYS[3], '1')
  redis.call('LTRIM', KEYS[3], 0, 0)
  redis.call('PEXPIRE', KEYS[3], ARGV[1])
end
return {evicted, string.format('%d', fence)}
