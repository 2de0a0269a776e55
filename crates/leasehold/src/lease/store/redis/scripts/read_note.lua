-- read_note: the note beside a lock (note.lua), whoever wrote it; read-only.
-- KEYS[1] lock
-- Returns the note, or nil when none is kept. A note key of another type fails with WRONGTYPE.
return redis.call('GET', string.sub(KEYS[1], 1, -5) .. 'note')
