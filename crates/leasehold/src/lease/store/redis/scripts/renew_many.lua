-- renew many: renew.lua's compare-and-pexpire for each lock of a batch, in one call (on a Redis
-- Cluster every key of a batch is in one slot). One script call per batch instead of one per lease:
-- the renewal of many leases held by one process costs Redis two commands a lease, not three.
-- KEYS[i] lock i
-- ARGV[1] 1 to read the server's clock (after the writes), ARGV[2i] token i, ARGV[2i+1] ttl ms i
-- Returns {flags} or, with the clock, {flags, seconds, microseconds}: flags has one character a lock,
-- '1' it held our token (bare, or marked `:q` for the waiters queued behind it) and its TTL was reset,
-- '0' it was not ours (left untouched), 'x' its key holds something that is not a string (left
-- untouched: the caller renews that one alone, with renew.lua, to hear the error it gets). Run twice,
-- it resets each TTL twice and reads the clock twice: the same effect as once.
local flags = {}
for i, key in ipairs(KEYS) do
  local token = ARGV[2 * i]
  local held = redis.pcall('GET', key)
  if type(held) == 'table' and held.err then
    flags[i] = 'x'
  elseif held == token or held == token .. ':q' then
    redis.call('PEXPIRE', key, ARGV[2 * i + 1])
    flags[i] = '1'
  else
    flags[i] = '0'
  end
end
flags = table.concat(flags)
if ARGV[1] ~= '1' then
  return {flags}
end
local t = redis.call('TIME')
return {flags, tonumber(t[1]), tonumber(t[2])}
