//! The database handle shared by the SQL guards ([`crate::fence`], [`crate::idempotency`],
//! [`crate::inbox`], [`crate::state`]) and the migrations leasehold ships.
