-- A note the holder of a lease wrote beside it (an election's leader record): at most 1 KiB, kept in
-- the name's row, so it lasts while the row does (held, or idle within the retention).
-- The column is added only where it is missing, so that a migration cut short before it was
-- recorded runs again whole. MariaDB says so itself (`ADD COLUMN IF NOT EXISTS`); MySQL has no such
-- clause, so there a look at information_schema picks the statement. MariaDB never reads
-- information_schema.COLUMNS here: MariaDB 10.11 was seen to crash in it while many databases
-- migrated at once.
SET @leasehold_ddl = IF(VERSION() LIKE '%MariaDB%',
    'ALTER TABLE leasehold_leases ADD COLUMN IF NOT EXISTS note VARBINARY(1024) NULL',
    'SELECT IF(COUNT(*) = 0, ''ALTER TABLE leasehold_leases ADD COLUMN note VARBINARY(1024) NULL'', ''DO 0'') INTO @leasehold_ddl FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ''leasehold_leases'' AND COLUMN_NAME = ''note''');
PREPARE leasehold_stmt FROM @leasehold_ddl;
EXECUTE leasehold_stmt;
DEALLOCATE PREPARE leasehold_stmt;
-- MariaDB: the ALTER again, which finds the column and does nothing. MySQL: the statement the look
-- above chose.
PREPARE leasehold_stmt FROM @leasehold_ddl;
EXECUTE leasehold_stmt;
DEALLOCATE PREPARE leasehold_stmt;
