-- released: whether the last release of the name was ours (this call's, or an earlier try's whose
-- answer was lost). ? prefix, ? name. One row or none: the released token.
SELECT released_token FROM leasehold_leases WHERE prefix = ? AND name = ?
