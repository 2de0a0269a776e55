-- The floor's release: hand the lock to the first queued token and wake it, or free the lock when
-- nobody waits. No compare: the floor trusts its callers to release only what they hold.
-- KEYS[1] lock, KEYS[2] queue; ARGV[1] the wake lists' common prefix. Returns 1 handed on, 0 freed.
local next = redis.call("LPOP", KEYS[2])
if next then
    redis.call("SET", KEYS[1], next)
    redis.call("LPUSH", ARGV[1] .. next, "1")
    return 1
end
redis.call("DEL", KEYS[1])
return 0
