-- inspect / list: the state of the rows under a prefix, by the database clock.
-- ? prefix; the caller appends the name condition. One row per name: name, held, remaining_ms (when
-- held), fence. The name is converted because the driver reads a `_bin` column as bytes.
SELECT CONVERT(name USING utf8mb4) AS name,
       token IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AS held,
       CASE WHEN token IS NOT NULL AND expires_at > UTC_TIMESTAMP(6)
            THEN CAST(CEIL(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) / 1000) AS SIGNED)
       END AS remaining_ms,
       fence
FROM leasehold_leases
WHERE prefix = ?
