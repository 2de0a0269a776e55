-- list: every name under the prefix, with its state; the caller keeps the names its glob matches
-- (one matcher for every store, in the client). $1 prefix. One row per name, as inspect.sql.
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT l.name,
       l.token IS NOT NULL AND l.expires_at > now.t AS held,
       CASE WHEN l.token IS NOT NULL AND l.expires_at > now.t
            THEN CEIL(EXTRACT(EPOCH FROM l.expires_at - now.t) * 1000)::BIGINT END AS remaining_ms,
       l.fence
FROM leasehold_leases AS l, now
WHERE l.prefix = $1
ORDER BY l.name
