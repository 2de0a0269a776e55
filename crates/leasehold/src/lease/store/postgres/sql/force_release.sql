-- force_release: the operator's override. Frees the name whoever holds it and draws a new fence
-- (under the name's advisory lock, as acquire does), so the evicted holder's renewals fail and
-- fenced resources refuse its later writes; notifies waiters.
-- $1 prefix, $2 name, $3 the notification channel, $4 the change channel (observers of the name
-- hear of every forced release there).
-- One row: evicted (someone held it), fence (the new one).
--
-- Whether someone held it is read from the row the update locked: the new expires_at is exactly
-- `now` when the lease was alive and strictly earlier otherwise (a free row keeps its earlier time).
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t),
serial AS MATERIALIZED (
    SELECT pg_advisory_xact_lock(hashtext($1), hashtext($2)),
           CASE WHEN current_setting('synchronous_commit') = 'off'
                THEN set_config('synchronous_commit', 'local', true) END
),
forced AS (
    INSERT INTO leasehold_leases AS l (prefix, name, token, fence, expires_at)
    SELECT $1, $2, NULL, nextval('leasehold_lease_fence'), now.t - interval '1 microsecond'
    FROM now, serial
    ON CONFLICT (prefix, name) DO UPDATE SET
        token = NULL,
        released_token = NULL,
        fence = excluded.fence,
        expires_at = CASE WHEN l.token IS NOT NULL AND l.expires_at > (SELECT t FROM now)
                          THEN (SELECT t FROM now)
                          ELSE LEAST(l.expires_at, (SELECT t FROM now) - interval '1 microsecond') END
    RETURNING l.expires_at = (SELECT t FROM now) AS evicted, l.fence,
              COALESCE(l.waiting_until > (SELECT t FROM now), false) AS waiting
),
notified AS (
    SELECT pg_notify($3, $1 || chr(31) || $2) FROM forced WHERE forced.waiting
),
changed AS (
    SELECT pg_notify($4, $1 || chr(31) || $2) FROM forced
)
SELECT forced.evicted, forced.fence, (SELECT count(*) FROM notified) AS notified,
       (SELECT count(*) FROM changed) AS changed FROM forced
