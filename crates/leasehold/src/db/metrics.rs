//! Metrics of the resource-side guards, recorded through the `metrics` facade (install any recorder,
//! e.g. the Prometheus exporter). Names are prefixed `leasehold_`; labels never carry resource names or
//! keys, so the number of series stays fixed.
//!
//! Promise: every fence check, idempotency claim and inbox delivery is counted by its outcome under
//! a fixed set of names and labels.
//! Limit: without an installed recorder nothing is kept.

/// Counter: fence checks by `backend` (`postgres`, `sqlite`, `redis`) and `outcome` (`accepted`,
/// `stale`). A steady trickle of `stale` means leases are being lost while work is in flight.
pub const FENCE_CHECKS_TOTAL: &str = "leasehold_fence_checks_total";
/// Counter: idempotency key claims by `outcome` (`fresh`, `replayed`, `in_progress`, `reused`,
/// `taken_over`).
pub const IDEMPOTENCY_TOTAL: &str = "leasehold_idempotency_total";
/// Counter: inbox records by `outcome` (`first`, `duplicate`).
pub const INBOX_TOTAL: &str = "leasehold_inbox_total";

#[cfg(any(feature = "redis", feature = "sql"))]
pub(crate) fn fence_check(backend: &'static str, accepted: bool) {
    let outcome = if accepted { "accepted" } else { "stale" };
    metrics::counter!(FENCE_CHECKS_TOTAL, "backend" => backend, "outcome" => outcome).increment(1);
}

#[cfg(feature = "sql")]
pub(crate) fn idempotency(outcome: &'static str) {
    metrics::counter!(IDEMPOTENCY_TOTAL, "outcome" => outcome).increment(1);
}

#[cfg(feature = "sql")]
pub(crate) fn inbox(duplicate: bool) {
    let outcome = if duplicate { "duplicate" } else { "first" };
    metrics::counter!(INBOX_TOTAL, "outcome" => outcome).increment(1);
}
