-- probe: what the store checks once at connect. The tables exist (`migrate()` ran), the fence
-- sequence hands out values in order (no per-session cache), and whether commits may be lost in a
-- crash (`fsync` off).
SELECT to_regclass('leasehold_leases') IS NOT NULL AS has_table,
       (SELECT s.seqcache FROM pg_sequence AS s
        WHERE s.seqrelid = to_regclass('leasehold_lease_fence')) AS seq_cache,
       current_setting('fsync') AS fsync
