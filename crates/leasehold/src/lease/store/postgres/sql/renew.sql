-- renew: reset the TTL of every lease of the batch that still holds its token and has not expired.
-- $1 prefix, $2 names, $3 tokens, $4 ttls in milliseconds (arrays of one length).
-- One row per renewed lease: its name and token.
--
-- The commit waits for the disk even where `synchronous_commit` is off: a renewal lost in a crash
-- would leave the database expiring the lease before the holder's deadline, which counts from it.
WITH now AS MATERIALIZED (
    SELECT clock_timestamp() AS t,
           CASE WHEN current_setting('synchronous_commit') = 'off'
                THEN set_config('synchronous_commit', 'local', true) END AS durable_commit
)
UPDATE leasehold_leases AS l
SET expires_at = now.t + asked.ttl_ms * interval '1 millisecond'
FROM unnest($2::text[], $3::text[], $4::bigint[]) AS asked(name, token, ttl_ms), now
WHERE l.prefix = $1 AND l.name = asked.name AND l.token = asked.token AND l.expires_at > now.t
RETURNING l.name, l.token
