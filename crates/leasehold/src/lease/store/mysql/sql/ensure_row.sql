-- ensure_row: the name's row exists (a free one is inserted) and this transaction holds its lock
-- until commit, so that what follows reads and writes it alone. Every call on a name that changes
-- its holder or its fence begins with this.
-- ? prefix, ? name.
INSERT INTO leasehold_leases (prefix, name, token, fence, expires_at)
VALUES (?, ?, NULL, 0, UTC_TIMESTAMP(6))
ON DUPLICATE KEY UPDATE fence = fence
