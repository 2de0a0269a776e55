-- inspect: the state of each asked name, by the database clock; a name without a row is free and
-- has no known fence.
-- $1 prefix, $2 names.
-- One row per asked name: name, held, remaining_ms (when held), fence (when known).
WITH now AS MATERIALIZED (SELECT clock_timestamp() AS t)
SELECT asked.name,
       COALESCE(l.token IS NOT NULL AND l.expires_at > now.t, false) AS held,
       CASE WHEN l.token IS NOT NULL AND l.expires_at > now.t
            THEN CEIL(EXTRACT(EPOCH FROM l.expires_at - now.t) * 1000)::BIGINT END AS remaining_ms,
       l.fence
FROM now, unnest($2::text[]) WITH ORDINALITY AS asked(name, i)
LEFT JOIN leasehold_leases AS l ON l.prefix = $1 AND l.name = asked.name
ORDER BY asked.i
