//! A cell's timeline, derived from the lease TTL: warm-up, then per injection a gap and a fault
//! window, then a cool-down; and how a strategy's store stretches it.
//!
//! Limit: the same timeline for every fault; a fault that takes seconds per injection gets fewer
//! injections, not a different timeline (`Fault::injections`).

use std::time::Duration;

use super::strategy::Strategy;
use super::{Fault, VerifyArgs};

/// The shortest lease of a `partition` cell ([`Timing::for_fault`]).
pub(crate) const PARTITION_TTL: Duration = Duration::from_secs(2);

/// Timings of one cell, derived from the lease TTL. Every cell runs the same timeline: warm-up,
/// then per injection a gap and a fault window, then a cool-down.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) ttl: Duration,
    pub(crate) warmup: Duration,
    pub(crate) gap: Duration,
    /// How long a fault lasts (and how far a clock jumps): three lease TTLs, so the target's lock
    /// has surely expired and another worker has had time to take it and write.
    pub(crate) hold: Duration,
    pub(crate) cooldown: Duration,
    /// Injections per cell, and for the faults that take seconds each (a Sentinel or Cluster
    /// failover waits for a failure to be detected and a replica elected).
    pub(crate) injections: u32,
    pub(crate) slow_injections: u32,
    /// How long to wait for some worker to reach a write inside its critical section.
    pub(crate) target_wait: Duration,
    /// A lock wait longer than this is a stall. Far above any wait the faults cause by design
    /// (a fault window plus a TTL plus a waiter's jitter, about 1 s at the default TTL).
    pub(crate) stall_after: Duration,
}

impl Timing {
    pub(crate) fn new(args: &VerifyArgs) -> Self {
        Self {
            injections: args.injections.unwrap_or(if args.quick { 1 } else { 5 }),
            slow_injections: args.injections.unwrap_or(if args.quick { 1 } else { 2 }),
            ..Self::with_ttl(Duration::from_millis(args.ttl_ms))
        }
    }

    /// The timeline of a lease TTL `ttl` (one injection per cell until set).
    fn with_ttl(ttl: Duration) -> Self {
        Self {
            ttl,
            warmup: Duration::from_millis(200).max(ttl),
            gap: Duration::from_millis(100).max(ttl / 2),
            hold: ttl * 3,
            cooldown: Duration::from_millis(200).max(ttl),
            injections: 1,
            slow_injections: 1,
            target_wait: Duration::from_secs(2).max(ttl * 10),
            stall_after: Duration::from_secs(5).max(ttl * 25),
        }
    }

    /// The timings of a cell of `fault` and `strategy`. A `partition` cell's leases are longer
    /// (at least [`PARTITION_TTL`], and at least its store's shortest lease): its target's slow
    /// shutdown is a share of the longest shutdown the lease allows, which a 200 ms lease leaves at
    /// 17 ms, far shorter than a waiter takes to notice an expiry (from tens to hundreds of
    /// milliseconds), so the old stop rule's overlap could not show; and on etcd a lease asked
    /// shorter than the store keeps would have its holder stop long before anyone could take over,
    /// whatever the rule. Its window is two such leases (the holder's deadline, its shutdown and a
    /// takeover fit in it), after a short warm-up. Then [`for_strategy`](Self::for_strategy).
    pub(crate) fn for_fault(self, fault: Fault, strategy: Strategy) -> Self {
        if fault != Fault::Partition {
            return self.for_strategy(strategy);
        }
        let min_lease = strategy
            .run_wide_store()
            .and_then(|s| s.min_lease())
            .unwrap_or_default();
        let ttl = (self.ttl * 3).max(PARTITION_TTL).max(min_lease);
        Self {
            injections: self.injections,
            slow_injections: self.slow_injections,
            warmup: Duration::from_millis(500),
            gap: Duration::from_millis(500),
            hold: ttl * 2,
            cooldown: ttl / 2,
            ..Self::with_ttl(ttl)
        }
        .for_strategy(strategy)
    }

    /// The timings of a cell of `strategy`. The strategies on a run-wide store
    /// (`store::RUN_WIDE`) get as many injections as the slow failovers (2 in a full run), which
    /// keeps the full matrix inside half an hour. On a store whose shortest lease outlasts the TTL
    /// (etcd's, `Store::min_lease`) a fault window must also outlast that lease, not only the TTL the
    /// workers ask for, or the lease would still stand in the store when the window ends and no
    /// fault could show.
    pub(crate) fn for_strategy(self, strategy: Strategy) -> Self {
        let Some(store) = strategy.run_wide_store() else {
            return self;
        };
        let fewer = Self {
            injections: self.slow_injections,
            ..self
        };
        let Some(min_lease) = store.min_lease() else {
            return fewer;
        };
        // A waiter may wait out a whole fault window and then the store's own expiry of the lost
        // holder's lease (and its place in the queue of waiters), twice over for a member kill
        // that also costs an election. A lease as long as that minimum has its window already.
        let hold = if self.ttl >= min_lease {
            self.hold
        } else {
            min_lease + self.hold
        };
        Self {
            hold,
            target_wait: self.target_wait.max(hold * 2),
            stall_after: self.stall_after.max((hold + min_lease) * 2),
            ..fewer
        }
    }

    /// Injections in a cell whose fault takes seconds each (`slow`) or not.
    pub(crate) fn injections(&self, slow: bool) -> u32 {
        if slow {
            self.slow_injections
        } else {
            self.injections
        }
    }
}
