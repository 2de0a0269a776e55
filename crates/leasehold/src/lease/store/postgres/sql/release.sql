-- release: compare-and-free every lease of the batch, and notify the waiters of those that have any.
-- $1 prefix, $2 names, $3 tokens (arrays of one length), $4 the notification channel, $5 the change
-- channel (observers of a name whose row carries a note, an election's, hear its release there).
-- One row per asked lease: name, token, released (it held our token and had not expired, or this is
-- a retry of a release that did that).
--
-- The row stays, free, with its fence (a later acquire must draw a larger one anyway; the row only
-- remembers it for status) until it has been idle for the retention. An expired lease whose token
-- is still ours is freed too, but reported as not released: the holder ran past its lease.
-- The notification goes out when this statement commits, after the row is free.
--
-- The commit does not wait for the disk (`synchronous_commit` off for this transaction): a release
-- lost in a crash only brings the lease back until its expiry, which is safe, and it is made
-- durable by the next acquire's commit anyway (the log is written in order). Acquire and renew
-- wait: a lost acquire could hand its fence out again, a lost renewal would make the database
-- expire the lease before its holder's deadline.
WITH now AS MATERIALIZED (
    SELECT clock_timestamp() AS t, set_config('synchronous_commit', 'off', true) AS async_commit
),
asked AS (SELECT * FROM unnest($2::text[], $3::text[]) AS asked(name, token)),
freed AS (
    UPDATE leasehold_leases AS l SET
        token = NULL,
        released_token = CASE WHEN l.expires_at > now.t THEN l.token END,
        expires_at = LEAST(l.expires_at, now.t)
    FROM asked, now
    WHERE l.prefix = $1 AND l.name = asked.name AND l.token = asked.token
    RETURNING l.name, l.released_token IS NOT NULL AS live, COALESCE(l.waiting_until > now.t, false) AS waiting,
              l.note IS NOT NULL AS noted
),
notified AS (
    SELECT pg_notify($4, $1 || chr(31) || freed.name) FROM freed WHERE freed.waiting
    UNION ALL
    SELECT pg_notify($5, $1 || chr(31) || freed.name) FROM freed WHERE freed.noted
)
SELECT asked.name, asked.token,
       COALESCE(freed.live, false)
       OR EXISTS (SELECT 1 FROM leasehold_leases AS l
                  WHERE l.prefix = $1 AND l.name = asked.name AND l.released_token = asked.token) AS released,
       (SELECT count(*) FROM notified) AS notified
FROM asked LEFT JOIN freed ON freed.name = asked.name
