-- Fenced write to a value kept in Redis: refuse a writer whose fence is older than the one stored.
-- KEYS[1] = data key, KEYS[2] = fence key (same hash tag, so one Cluster slot)
-- ARGV[1] = presented fence (decimal, no leading zeros), ARGV[2] = 'set' or 'hset',
-- ARGV[3..] = the value ('set') or field, value, field, value ... ('hset')
-- Returns {1, presented} when written, {0, current} when refused.

-- Compare decimal strings exactly: Lua numbers are doubles and lose precision above 2^53.
local function older(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end

local presented = ARGV[1]
local current = redis.call('GET', KEYS[2])
if current and older(presented, current) then
  return {0, current}
end
redis.call('SET', KEYS[2], presented)
if ARGV[2] == 'set' then
  redis.call('SET', KEYS[1], ARGV[3])
else
  redis.call('HSET', KEYS[1], unpack(ARGV, 3))
end
return {1, presented}
