-- locked_row: the name's row as it stands under our lock, by the database clock.
-- ? prefix, ? name.
-- One row: token, fence, live (held and not expired), remaining µs, the server clock in µs since 1970
-- (the floor of the next fence).
SELECT token,
       fence,
       token IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AS live,
       CAST(TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at) AS SIGNED) AS remaining_us,
       CAST(UNIX_TIMESTAMP(NOW(6)) * 1000000 AS SIGNED) AS now_us
FROM leasehold_leases
WHERE prefix = ? AND name = ?
FOR UPDATE
