//! The lease's metrics, recorded through the `metrics` facade (install any recorder, e.g. the
//! Prometheus exporter). Names are prefixed `leasehold_`; labels never carry the lease name, so the
//! number of series stays fixed however many names are used.
//!
//! [`describe`] gives every metric its help text and puts each counter at 0 for every label value it
//! can take; [`WAIT_BUCKETS`] and [`HOLD_BUCKETS`] are the histogram buckets an exporter should use.
//!
//! Promise: every acquire, renewal, loss and release is counted or timed under a fixed set of names,
//! whichever store is used.
//! Limit: without an installed recorder nothing is kept.

use std::time::Duration;

use crate::error::LostReason;

/// Histogram, seconds: time from calling acquire to its outcome (`outcome` label).
pub const ACQUIRE_WAIT_SECONDS: &str = "leasehold_acquire_wait_seconds";
/// Histogram, seconds: time a lease was held, from before its acquire was sent to its release or loss.
pub const HOLD_SECONDS: &str = "leasehold_hold_seconds";
/// Counter: acquisitions by `outcome` (`acquired`, `busy`, `timeout`, `error`, `not_replicated`).
pub const ACQUISITIONS_TOTAL: &str = "leasehold_acquisitions_total";
/// Counter: acquire attempts that found the lease held by someone else.
pub const CONTENTION_TOTAL: &str = "leasehold_contention_total";
/// Counter: renewals by `outcome` (`renewed`, `not_ours`, `error`).
pub const RENEWALS_TOTAL: &str = "leasehold_renewals_total";
/// Counter: lost leases by `reason` (`deadline_passed`, `not_ours`, `max_hold_reached`, `evicted`).
pub const LOST_TOTAL: &str = "leasehold_lost_total";
/// Counter: leases that became suspect (at risk before their deadline), by `reason`
/// (`renewal_failing`, `store_clock_fast`): one per change of reason, not per renewal.
pub const SUSPECT_TOTAL: &str = "leasehold_suspect_total";
/// Gauge: held leases that are suspect now.
pub const SUSPECT_LEASES: &str = "leasehold_suspect_leases";
/// Counter: releases by `outcome` (`released`, `already_gone`, `error`) and `mode`.
pub const RELEASES_TOTAL: &str = "leasehold_releases_total";
/// Counter: `WAIT` after acquire that got fewer replica acknowledgements than asked for, by `policy`.
pub const REPLICA_SHORTFALL_TOTAL: &str = "leasehold_replica_shortfall_total";

/// Counter: Redlock acquisitions that reached a majority of masters, by how their fence was settled
/// (`how`: `agreed`, a majority recorded it in the acquire itself; `confirmed`, written back in a
/// second round trip; `failed`, the write-back did not reach a majority and the attempt was undone).
pub const REDLOCK_FENCE_TOTAL: &str = "leasehold_redlock_fence_total";

/// Counter: keys the Redis data nodes evicted under memory pressure (`evicted_keys` growth between
/// two looks of the store, every few seconds). Above 0 on a Redis that holds leases: lease keys may
/// be among them.
pub const REDIS_EVICTED_KEYS_TOTAL: &str = "leasehold_redis_evicted_keys_total";

/// Counter: elections won and resignations (label `outcome`: `elected`, `resigned`).
pub const ELECTIONS_TOTAL: &str = "leasehold_elections_total";

/// Bucket bounds, in seconds, for [`ACQUIRE_WAIT_SECONDS`]. An acquire that finds the name free
/// takes one round trip (under 1 ms to 25 ms, LAN to another region), one handed over from a queue
/// about one more, and one that waits for a holder takes as long as the holder's work (seconds to an
/// hour): the low buckets tell a slow store from a fast one, the high ones how long work queues.
pub const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    300.0, 900.0, 3600.0,
];

/// Bucket bounds, in seconds, for [`HOLD_SECONDS`] (and a scheduled job's duration): from a
/// command that runs for a moment to a nightly job of hours, roughly one bucket per step a person
/// would name (a second, ten, a minute, five, ...), up to a day.
pub const HOLD_BUCKETS: &[f64] = &[
    0.01, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0, 7200.0,
    14400.0, 43200.0, 86400.0,
];

/// Every value each counter's label can take, for [`describe`] to put at 0.
const COUNTER_LABELS: &[(&str, &str, &[&str])] = &[
    (
        ACQUISITIONS_TOTAL,
        "outcome",
        &["acquired", "busy", "timeout", "not_replicated", "error"],
    ),
    (RENEWALS_TOTAL, "outcome", &["renewed", "not_ours", "error"]),
    (
        LOST_TOTAL,
        "reason",
        &["deadline_passed", "not_ours", "max_hold_reached", "evicted"],
    ),
    (
        SUSPECT_TOTAL,
        "reason",
        &["renewal_failing", "store_clock_fast"],
    ),
    (ELECTIONS_TOTAL, "outcome", &["elected", "resigned"]),
];

/// Describes every metric of leases and elections to the installed recorder (a Prometheus
/// exporter's `# HELP` lines) and registers each counter at 0, with every value of its label, so
/// that a scrape shows it before the first event: `increase()` and `rate()` need a series that
/// exists before it grows, and an alert on a lost lease must see it go from 0 to 1. Call it once,
/// after installing the recorder.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
    describe_histogram!(
        ACQUIRE_WAIT_SECONDS,
        Unit::Seconds,
        "Time from calling acquire to its outcome, by outcome."
    );
    describe_histogram!(
        HOLD_SECONDS,
        Unit::Seconds,
        "Time a lease was held, from before its acquire was sent to its release or loss."
    );
    describe_counter!(
        ACQUISITIONS_TOTAL,
        "Acquire attempts, by outcome (acquired, busy, timeout, not_replicated, error)."
    );
    describe_counter!(
        CONTENTION_TOTAL,
        "Acquire attempts that found the lease held by someone else."
    );
    describe_counter!(
        RENEWALS_TOTAL,
        "Renewals, by outcome (renewed, not_ours, error)."
    );
    describe_counter!(
        LOST_TOTAL,
        "Leases lost while held, by reason (deadline_passed, not_ours, max_hold_reached, evicted)."
    );
    describe_counter!(
        SUSPECT_TOTAL,
        "Leases that became suspect (at risk before their deadline), by reason."
    );
    describe_gauge!(SUSPECT_LEASES, "Held leases that are suspect now.");
    describe_counter!(
        RELEASES_TOTAL,
        "Releases, by outcome (released, already_gone, error) and mode (explicit, dropped)."
    );
    describe_counter!(
        REPLICA_SHORTFALL_TOTAL,
        "Acquires whose WAIT got fewer replica acknowledgements than asked for, by policy."
    );
    describe_counter!(
        REDLOCK_FENCE_TOTAL,
        "Redlock acquisitions that reached a majority, by how their fence was settled."
    );
    describe_counter!(
        REDIS_EVICTED_KEYS_TOTAL,
        "Keys the Redis data nodes evicted under memory pressure."
    );
    describe_counter!(
        ELECTIONS_TOTAL,
        "Elections won and resignations, by outcome (elected, resigned)."
    );
    metrics::counter!(CONTENTION_TOTAL).increment(0);
    metrics::gauge!(SUSPECT_LEASES).increment(0.0);
    for (name, label, values) in COUNTER_LABELS {
        for value in *values {
            metrics::counter!(*name, *label => *value).increment(0);
        }
    }
    for outcome in ["released", "already_gone", "error"] {
        for mode in ["explicit", "dropped"] {
            metrics::counter!(RELEASES_TOTAL, "outcome" => outcome, "mode" => mode).increment(0);
        }
    }
}

pub(crate) fn election(outcome: &'static str) {
    metrics::counter!(ELECTIONS_TOTAL, "outcome" => outcome).increment(1);
}

#[cfg(feature = "redis")]
pub(crate) fn evicted_keys(n: u64) {
    metrics::counter!(REDIS_EVICTED_KEYS_TOTAL).increment(n);
}

pub(crate) fn acquired(outcome: &'static str, waited: Duration) {
    // The common outcome's keys are made at compile time (no allocation on every acquire).
    if outcome == "acquired" {
        metrics::counter!(ACQUISITIONS_TOTAL, "outcome" => "acquired").increment(1);
        metrics::histogram!(ACQUIRE_WAIT_SECONDS, "outcome" => "acquired")
            .record(waited.as_secs_f64());
    } else {
        metrics::counter!(ACQUISITIONS_TOTAL, "outcome" => outcome).increment(1);
        metrics::histogram!(ACQUIRE_WAIT_SECONDS, "outcome" => outcome)
            .record(waited.as_secs_f64());
    }
}

pub(crate) fn contention() {
    metrics::counter!(CONTENTION_TOTAL).increment(1);
}

pub(crate) fn renewal(outcome: &'static str) {
    metrics::counter!(RENEWALS_TOTAL, "outcome" => outcome).increment(1);
}

pub(crate) fn renewals(outcome: &'static str, n: u64) {
    if n > 0 {
        metrics::counter!(RENEWALS_TOTAL, "outcome" => outcome).increment(n);
    }
}

pub(crate) fn release(outcome: &'static str) {
    // As in `acquired`: the common outcome's key is made at compile time.
    if outcome == "released" {
        metrics::counter!(RELEASES_TOTAL, "outcome" => "released", "mode" => "explicit")
            .increment(1);
    } else {
        metrics::counter!(RELEASES_TOTAL, "outcome" => outcome, "mode" => "explicit").increment(1);
    }
}

pub(crate) fn background_release(outcome: &'static str) {
    metrics::counter!(RELEASES_TOTAL, "outcome" => outcome, "mode" => "dropped").increment(1);
}

pub(crate) fn lost(reason: LostReason) {
    let reason = match reason {
        LostReason::DeadlinePassed => "deadline_passed",
        LostReason::NotOurs => "not_ours",
        LostReason::MaxHoldReached => "max_hold_reached",
        LostReason::Evicted => "evicted",
    };
    metrics::counter!(LOST_TOTAL, "reason" => reason).increment(1);
}

pub(crate) fn suspect(reason: crate::lease::signal::SuspectReason) {
    metrics::counter!(SUSPECT_TOTAL, "reason" => reason.label()).increment(1);
}

pub(crate) fn suspect_leases(delta: f64) {
    metrics::gauge!(SUSPECT_LEASES).increment(delta);
}

pub(crate) fn hold_time(held: Duration) {
    metrics::histogram!(HOLD_SECONDS).record(held.as_secs_f64());
}

#[cfg(feature = "redis")]
pub(crate) fn replica_shortfall(policy: &'static str) {
    metrics::counter!(REPLICA_SHORTFALL_TOTAL, "policy" => policy).increment(1);
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) fn redlock_confirm(how: &'static str) {
    metrics::counter!(REDLOCK_FENCE_TOTAL, "how" => how).increment(1);
}
