-- sem_renew: extend a permit to `ttl` from now if the caller still holds it.
-- KEYS[1] lock (the name's lock key)
-- ARGV[1] token, ARGV[2] ttl ms
-- Returns {1, seconds, microseconds} (the server's time, as renew.lua) when it was ours and was
-- extended, 0 when not (left untouched).
clock_exact()
local token = ARGV[1]
local ttl = tonumber(ARGV[2])
local until_ms = redis.call('ZSCORE', holders_key, token)
if not until_ms or tonumber(until_ms) <= now_ms() then
  return 0
end
redis.call('ZADD', holders_key, 'XX', now_ms() + ttl, token)
keep(holders_key, ttl)
keep(held_key, ttl)
keep(permits_key, ttl)
local us = now_us()
return {1, math.floor(us / 1000000), us % 1000000}
