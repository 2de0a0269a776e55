-- write_note: put a holder's note in its lease's row, only while the row holds its token and has
-- not expired. ? the note, ? prefix, ? name, ? token. One row matched (the connection counts matched
-- rows, not changed ones, so writing the same note again counts too): written.
UPDATE leasehold_leases SET note = ?
WHERE prefix = ? AND name = ? AND token = ? AND expires_at > UTC_TIMESTAMP(6)
