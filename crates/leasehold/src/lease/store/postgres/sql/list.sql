-- list: every name under the prefix whose name matches the regular expression, with its state.
-- $1 prefix, $2 an anchored regular expression (translated from the caller's glob).
-- One row per name, as inspect.sql.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT l.name,
       l.token IS NOT NULL AND l.expires_at > now.t AS held,
       CASE WHEN l.token IS NOT NULL AND l.expires_at > now.t
            THEN CEIL(EXTRACT(EPOCH FROM l.expires_at - now.t) * 1000)::BIGINT END AS remaining_ms,
       l.fence
FROM leasehold_leases AS l, now
WHERE l.prefix = $1 AND l.name ~ $2
ORDER BY l.name
