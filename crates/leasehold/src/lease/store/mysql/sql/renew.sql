-- renew: reset the TTL of a lease that still holds our token and has not expired.
-- ? ttl in µs, ? prefix, ? name, ? token. One row matched: renewed.
UPDATE leasehold_leases
SET expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE prefix = ? AND name = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)
