-- force: the operator's override, on the row locked by this transaction (ensure_row, locked_row):
-- free it and store the fence minted for the eviction, so the evicted holder's renewals fail and
-- fenced resources refuse its later writes. ? fence, ? prefix, ? name.
UPDATE leasehold_leases
SET token = NULL, released_token = NULL, fence = ?, expires_at = LEAST(expires_at, UTC_TIMESTAMP(6))
WHERE prefix = ? AND name = ?
