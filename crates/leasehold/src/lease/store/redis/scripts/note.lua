-- note: write a small value beside a held lock (an election's leader record, a scheduled run's
-- record), only while the lock holds the writer's token (bare, or marked `:q` for the waiters queued
-- behind it).
-- KEYS[1] lock
-- ARGV[1] token, ARGV[2] the note, ARGV[3] how long the note is kept, in milliseconds (the retention)
-- Returns 1 when the lock held our token and the note was written, 0 when it was not ours (nothing
-- written); a written note is published on the name's change channel `{prefix:name}:changed`
-- (changes.rs), for observers to read it. Run twice, it writes the same note twice and publishes
-- twice: the effect of once (a notice only makes an observer read again). A user whose ACL refuses
-- the channel has the note written all the same (`pcall`); its observers read on their timer. A lock key of another type
-- (a semaphore's, or a key leasehold did not write) fails with WRONGTYPE, which the client names.
-- The note key `{prefix:name}:note` shares the lock's hash tag; keys.rs names it too.
local held = redis.call('GET', KEYS[1])
if held ~= ARGV[1] and held ~= ARGV[1] .. ':q' then
  return 0
end
local base = string.sub(KEYS[1], 1, -5)
redis.call('SET', base .. 'note', ARGV[2], 'PX', ARGV[3])
redis.pcall('PUBLISH', base .. 'changed', 'note')
return 1
