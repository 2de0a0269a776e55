-- take: the name's row (locked by this transaction) becomes ours with the fence minted for us.
-- ? token, ? fence, ? ttl in µs, ? prefix, ? name.
UPDATE leasehold_leases
SET token = ?, fence = ?, expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND, released_token = NULL
WHERE prefix = ? AND name = ?
