-- release: compare-and-free. The row stays, free, with its fence and the released token (so that a
-- retried release says "released") until it has been idle for the retention. An expired lease whose
-- token is still ours is freed too, but not recorded as released: its holder ran past its lease.
-- MySQL assigns left to right, each assignment seeing the ones before: `released_token` reads the
-- old token and expiry, `expires_at` the old expiry.
-- ? prefix, ? name, ? token.
UPDATE leasehold_leases
SET released_token = IF(expires_at > UTC_TIMESTAMP(6), token, NULL),
    token = NULL,
    expires_at = LEAST(expires_at, UTC_TIMESTAMP(6))
WHERE prefix = ? AND name = ? AND token = ?
