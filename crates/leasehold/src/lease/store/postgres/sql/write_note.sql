-- write_note: put a holder's note in its lease's row, only while the row holds its token and has
-- not expired. $1 prefix, $2 name, $3 token, $4 the note.
-- One row (the name) when written, none when not ours. Run twice, it writes the same note twice.
UPDATE leasehold_leases SET note = $4
WHERE prefix = $1 AND name = $2 AND token = $3 AND expires_at > clock_timestamp()
RETURNING name
