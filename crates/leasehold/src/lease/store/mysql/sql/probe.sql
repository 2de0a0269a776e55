-- probe: what the store checks once at connect: the table exists (`migrate` ran), whether commits
-- reach the disk (`innodb_flush_log_at_trx_commit` 1), and the server's version.
SELECT (SELECT COUNT(*) FROM information_schema.tables
        WHERE table_schema = DATABASE() AND table_name = 'leasehold_leases') AS has_table,
       CAST(@@innodb_flush_log_at_trx_commit AS SIGNED) AS flush_at_commit,
       VERSION() AS version
