-- release_live: the common release, in one statement: free a lease that still holds our token and
-- has not expired, remembering the token (so that a retried release says "released"). One row
-- matched: released. Otherwise `release.sql` and `released.sql` tell an expired lease of ours from a
-- retry. ? prefix, ? name, ? token.
UPDATE leasehold_leases
SET released_token = token, token = NULL, expires_at = UTC_TIMESTAMP(6)
WHERE prefix = ? AND name = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)
