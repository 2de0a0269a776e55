-- raise (Redlock, one master): the write-back of a forced release. Raises the fence key to at least
-- the forced release's fence; no lock to check, because the forced release holds none.
-- KEYS[1] fence
-- ARGV[1] the fence, ARGV[2] the fence key's retention in milliseconds (never shortened)
-- Returns 1. Running it late or twice only raises a fence that never goes down.
local stored = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if tonumber(ARGV[1]) > stored then
  local keep = tonumber(ARGV[2])
  local left = redis.call('PTTL', KEYS[1])
  if left > keep then
    keep = left
  end
  redis.call('SET', KEYS[1], ARGV[1], 'PX', keep)
end
return 1
