-- sweep: delete rows that nobody holds and that have been idle (released, or expired unrenewed) for
-- longer than the retention, at most a batch at a time; rows another statement has locked are left
-- for the next sweep. Deleting a row loses nothing a later holder needs: its fence comes from the
-- sequence, drawn under the name's advisory lock.
-- A delete lost in a crash is swept again: the commit does not wait for the disk.
-- $1 retention in milliseconds, $2 batch size.
WITH now AS MATERIALIZED (
    SELECT clock_timestamp() AS t, set_config('synchronous_commit', 'off', true) AS async_commit
),
idle AS (
    SELECT l.prefix, l.name FROM leasehold_leases AS l, now
    WHERE l.expires_at < now.t - $1 * interval '1 millisecond'
    LIMIT $2
    FOR UPDATE OF l SKIP LOCKED
)
DELETE FROM leasehold_leases AS l USING idle
WHERE l.prefix = idle.prefix AND l.name = idle.name
