-- note: write a small value beside a held lock (an election's leader record, a scheduled run's
-- record), only while the lock holds the writer's token (bare, or marked `:q` for the waiters queued
-- behind it).
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] the note, ARGV[3] how long the note is kept, in milliseconds (the retention)
-- Returns 1 when the lock held our token and the note was written, 0 when it was not ours (nothing
-- written). Run twice, it writes the same note twice: the effect of once. A lock key of another type
-- (a semaphore's, or a key leasehold did not write) fails with WRONGTYPE, which the client names.
-- The note key `{prefix:name}:note` shares the lock's hash tag; keys.rs names it too.
local held = redis.call('GET', KEYS[1])
if held ~= ARGV[1] and held ~= ARGV[1] .. ':q' then
  return 0
end
redis.call('SET', string.sub(KEYS[1], 1, -5) .. 'note', ARGV[2], 'PX', ARGV[3])
return 1
