-- The floor's acquire: take the lock when it is free and leave the grant on our own wake list (the
-- BLPOP pipelined behind this script then returns at once), else join the FIFO queue. The lock is
-- never free while the queue holds a token (the release hands it on), so no barging check is needed.
-- KEYS[1] lock, KEYS[2] queue, KEYS[3] our wake list; ARGV[1] our token. Returns 1 taken, 0 queued.
if redis.call("SET", KEYS[1], ARGV[1], "NX") then
    redis.call("LPUSH", KEYS[3], "1")
    return 1
end
redis.call("RPUSH", KEYS[2], ARGV[1])
return 0
