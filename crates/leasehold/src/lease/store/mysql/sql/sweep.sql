-- sweep: delete rows nobody holds that have been idle (released, or expired unrenewed) for longer
-- than the retention, a batch at a time. Deleting a row loses nothing a later holder needs: the next
-- fence is floored by the server clock in µs, above every fence issued before.
-- ? retention in µs, ? batch size.
DELETE FROM leasehold_leases
WHERE expires_at < UTC_TIMESTAMP(6) - INTERVAL ? MICROSECOND
LIMIT ?
