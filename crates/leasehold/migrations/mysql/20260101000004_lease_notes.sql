-- A note the holder of a lease wrote beside it (an election's leader record): at most 1 KiB, kept in
-- the name's row, so it lasts while the row does (held, or idle within the retention).
-- MySQL has no `ADD COLUMN IF NOT EXISTS` (MariaDB has): the column is added only where it is
-- missing, so that a migration cut short before it was recorded runs again whole.
SET @leasehold_ddl = (
    SELECT IF(COUNT(*) = 0,
              'ALTER TABLE leasehold_leases ADD COLUMN note VARBINARY(1024) NULL',
              'DO 0')
    FROM information_schema.COLUMNS
    WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'leasehold_leases' AND COLUMN_NAME = 'note'
);
PREPARE leasehold_stmt FROM @leasehold_ddl;
EXECUTE leasehold_stmt;
DEALLOCATE PREPARE leasehold_stmt;
