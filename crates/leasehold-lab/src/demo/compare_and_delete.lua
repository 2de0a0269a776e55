-- Scene 3's release: delete the lock only if it still holds the caller's token.
-- KEYS[1] lock key; ARGV[1] the caller's token. Returns 1 if deleted, 0 if the lock is not ours.
if redis.call("GET", KEYS[1]) == ARGV[1] then
    return redis.call("DEL", KEYS[1])
else
    return 0
end
