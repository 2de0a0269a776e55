-- read_note: the note in a name's row, whoever wrote it. $1 prefix, $2 name.
-- One row (the note, possibly NULL) while the row exists, none after it was swept.
SELECT note FROM leasehold_leases WHERE prefix = $1 AND name = $2
