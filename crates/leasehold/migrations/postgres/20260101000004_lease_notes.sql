-- A note the holder of a lease wrote beside it (an election's leader record): at most 1 KiB, kept in
-- the name's row, so it lasts while the row does (held, or idle within the retention).
ALTER TABLE leasehold_leases ADD COLUMN IF NOT EXISTS note BYTEA;
