-- The baseline's release: delete the lock only if it still holds our token.
-- KEYS[1] lock key; ARGV[1] our token. Returns 1 when deleted, 0 when it was not ours any more.
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
else
    return 0
end
