-- acquire: take the lease if it is free (or already ours), else say how long it stays busy.
-- $1 prefix, $2 name, $3 token, $4 ttl in milliseconds, $5 how long the caller may wait for a
-- notification when busy, in milliseconds (0: it will not wait), $6 slack added to the waiting marker.
-- One row: taken, fence, waiting (a release of this hold will notify), remaining_ms (the holder's
-- remaining time by the database clock; NULL when unknown). No row: busy, remaining unknown.
--
-- `now` is read once, so every comparison below sees the same instant of the database clock; it is
-- read before any lock is waited for, so after a wait it is early, which can only make a holder look
-- alive a little longer, never expired too soon.
--
-- The fence: the name's advisory lock (transaction-scoped) is taken before `nextval` is called, and
-- released when the new fence has been committed; so a fence is drawn after every earlier fence of
-- the name was stored, and is larger than all of them, even when the row was deleted in between.
-- A busy attempt also draws a value, which is thrown away: fences have gaps.
--
-- Run twice with the same token (a retry after a lost reply), it finds its own lease and returns the
-- same fence, resetting the TTL from now.
--
-- A commit that is not flushed could be lost in a crash together with the sequence's advance, and
-- the fence be issued again: where `synchronous_commit` is off, this transaction turns it to `local`.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
serial AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2)),
           CASE WHEN current_setting('synchronous_commit') = 'off'
                THEN set_config('synchronous_commit', 'local', true) END
),
attempt AS (
    INSERT INTO leasehold_leases AS l (prefix, name, token, fence, expires_at)
    SELECT $1, $2, $3, nextval('leasehold_lease_fence'), now.t + $4 * interval '1 millisecond'
    FROM now, serial
    ON CONFLICT (prefix, name) DO UPDATE SET
        -- Taken when free, expired, or ours: the new token, fence and expiry. Otherwise only the
        -- waiting marker changes (when the WHERE below lets the update through at all).
        token = CASE WHEN l.token IS NULL OR l.expires_at <= (SELECT t FROM now) OR l.token = excluded.token
                     THEN excluded.token ELSE l.token END,
        fence = CASE WHEN l.token = excluded.token THEN l.fence
                     WHEN l.token IS NULL OR l.expires_at <= (SELECT t FROM now) THEN excluded.fence
                     ELSE l.fence END,
        expires_at = CASE WHEN l.token IS NULL OR l.expires_at <= (SELECT t FROM now) OR l.token = excluded.token
                          THEN excluded.expires_at ELSE l.expires_at END,
        waiting_until = CASE
            -- Taken while contenders wait: the marker must outlive this hold, so that its release
            -- notifies them.
            WHEN l.token IS NULL OR l.expires_at <= (SELECT t FROM now) OR l.token = excluded.token THEN
                CASE WHEN l.waiting_until > (SELECT t FROM now)
                     THEN GREATEST(l.waiting_until, excluded.expires_at + $6 * interval '1 millisecond')
                     ELSE l.waiting_until END
            -- Busy: the caller waits for the holder's remaining time plus at most 250 ms of jitter,
            -- never past its own bound; the marker covers that, plus slack.
            ELSE GREATEST(l.waiting_until,
                          (SELECT t FROM now)
                          + LEAST($5 * interval '1 millisecond',
                                  l.expires_at - (SELECT t FROM now) + interval '250 milliseconds')
                          + $6 * interval '1 millisecond')
            END
    -- Busy and the caller will not wait, or the marker already covers its wait: no write at all.
    WHERE l.token IS NULL OR l.expires_at <= (SELECT t FROM now) OR l.token = excluded.token
       OR ($5 > 0 AND COALESCE(l.waiting_until, '-infinity') < (SELECT t FROM now)
                          + LEAST($5 * interval '1 millisecond',
                                  l.expires_at - (SELECT t FROM now) + interval '250 milliseconds'))
    RETURNING l.token = $3 AS taken, l.fence, COALESCE(l.waiting_until > (SELECT t FROM now), false) AS waiting,
              l.expires_at
)
SELECT attempt.taken, attempt.fence, attempt.waiting,
       CEIL(EXTRACT(EPOCH FROM attempt.expires_at - now.t) * 1000)::BIGINT AS remaining_ms
FROM attempt, now
UNION ALL
-- Busy without a write: the holder's row as this statement's snapshot saw it (it may have been
-- taken since; then its time left is unknown).
SELECT false, l.fence, false,
       CASE WHEN l.expires_at > now.t THEN CEIL(EXTRACT(EPOCH FROM l.expires_at - now.t) * 1000)::BIGINT END
FROM leasehold_leases AS l, now
WHERE l.prefix = $1 AND l.name = $2 AND NOT EXISTS (SELECT 1 FROM attempt)
