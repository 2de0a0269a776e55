-- confirm (Redlock, one master): record the fence the client chose, only while this master still
-- holds the client's lock.
-- KEYS[1] lock, KEYS[2] fence
-- ARGV[1] token, ARGV[2] the fence (the maximum of the candidates a majority of masters answered),
-- ARGV[3] the fence key's retention in milliseconds (never shortened)
-- Returns 1 when the lock held our token and the fence key is now at least ARGV[2], 0 when the lock
-- is not ours (expired, restarted empty, force-released, taken by someone else): nothing written.
--
-- The condition is what keeps a late or delayed confirm from counting: a confirm that arrives after
-- this master handed the lock to someone else writes nothing, and the client cannot count it.
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local stored = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
local fence = tonumber(ARGV[2])
if fence > stored then
  local keep = tonumber(ARGV[3])
  local left = redis.call('PTTL', KEYS[2])
  if left > keep then
    keep = left
  end
  redis.call('SET', KEYS[2], ARGV[2], 'PX', keep)
end
return 1
