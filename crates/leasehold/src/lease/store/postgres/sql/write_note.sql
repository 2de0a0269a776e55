-- write_note: put a holder's note in its lease's row, only while the row holds its token and has
-- not expired, and tell the name's observers on the change channel (in the same transaction: they
-- hear of it once it is committed). $1 prefix, $2 name, $3 token, $4 the note, $5 the change channel.
-- One row (the name) when written, none when not ours. Run twice, it writes the same note twice (and
-- notifies twice: a notice only makes an observer read again).
WITH written AS (
    UPDATE leasehold_leases SET note = $4
    WHERE prefix = $1 AND name = $2 AND token = $3 AND expires_at > clock_timestamp()
    RETURNING name
),
changed AS (
    SELECT pg_notify($5, $1 || chr(31) || $2) FROM written
)
-- The count reads `changed`, which a query runs only when something reads it.
SELECT written.name FROM written WHERE (SELECT count(*) FROM changed) >= 0
