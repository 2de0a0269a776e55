//! The headings `--help` groups options under.

/// `--help`'s heading for the store's options.
pub(crate) const STORE: &str = "Store";
/// `--help`'s heading for the lease's options.
pub(crate) const LEASE: &str = "Lease";
/// `--help`'s heading for `run --once-per`'s options.
pub(crate) const JOB: &str = "Scheduled job (--once-per)";
/// `--help`'s heading for metrics and health endpoints.
pub(crate) const MONITORING: &str = "Monitoring";
