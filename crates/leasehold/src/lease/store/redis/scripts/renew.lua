-- renew: compare-and-pexpire.
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] ttl in milliseconds, ARGV[3] 1 to read the server's clock (the client asks
-- it of one renewal per pipeline: one reading teaches it as much as a thousand)
-- Returns 1 when the lock held our token (bare, or marked `:q` for the waiters queued behind it) and
-- its TTL was reset, {1, seconds, microseconds} instead when the clock was asked for (the server's
-- TIME, read after the TTL was reset), 0 when it was not ours (left untouched). TIME comes after the
-- write, which every Redis allows in a script; run twice, it resets the TTL twice and reads the clock
-- twice: the same effect as once.
local held = redis.call('GET', KEYS[1])
if held ~= ARGV[1] and held ~= ARGV[1] .. ':q' then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[3] ~= '1' then
  return 1
end
local t = redis.call('TIME')
return {1, tonumber(t[1]), tonumber(t[2])}
