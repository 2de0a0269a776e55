//! Per-lease settings, validated once by [`LeaseOptionsBuilder::build`].
//!
//! Promise: options that build are consistent (renewal before expiry, drift below the TTL, and so on).
//! Limit: whether the store agrees (the same permits for everyone using a name) is known only when it
//! is asked.

use std::time::Duration;

use crate::error::{Error, Result};

/// What to do when `WAIT` after acquire gets fewer replica acknowledgements than asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaPolicy {
    /// Release the lease and fail with [`Error::NotReplicated`]: a failover right now could hand the
    /// lease to someone else, so do not start.
    FailClosed,
    /// Keep the lease and go on (logged and counted): prefer availability.
    FailOpen,
}

/// The default first TTL of a lease handed over while waiting.
const DEFAULT_HANDOFF_TTL: Duration = Duration::from_secs(1);
/// The shortest hand-over TTL accepted: the new holder must renew within a third of it.
const MIN_HANDOFF_TTL: Duration = Duration::from_millis(50);

/// Settings for one acquisition. Cheap to clone; build with [`LeaseOptions::builder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseOptions {
    /// Lease length on the Redis server; also the base of the holder's own deadline.
    pub(crate) ttl: Duration,
    /// How often the watchdog renews; must be shorter than `ttl - drift` or the lease lapses between
    /// renewals.
    pub(crate) renew_every: Option<Duration>,
    /// Safety margin subtracted from the holder's deadline for clock rate differences and the reply's
    /// travel time.
    pub(crate) drift: Duration,
    /// Hard cap on the critical section: renewal stops and the lost signal fires when reached.
    pub(crate) max_hold: Option<Duration>,
    /// `WAIT numreplicas timeout` after acquire, and what to do when it falls short.
    pub(crate) replicas: Option<(u32, Duration, ReplicaPolicy)>,
    /// The TTL a lease starts with when a release hands it over to this waiter (at most `ttl`).
    pub(crate) handoff_ttl: Duration,
    /// 1: a lock (one holder). More: one permit of a semaphore that many holders may hold at once.
    pub(crate) permits: u32,
}

impl Default for LeaseOptions {
    fn default() -> Self {
        LeaseOptions::builder()
            .build()
            .expect("the default options are valid")
    }
}

impl LeaseOptions {
    /// Longest TTL accepted (a day); a lease longer than that is a configuration mistake.
    pub const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
    /// Shortest TTL accepted.
    pub const MIN_TTL: Duration = Duration::from_millis(10);

    /// Starts a builder with the defaults: TTL 30 s, renew every TTL/3, drift 1% of TTL + 2 ms, no
    /// maximum hold, no replica wait, a first TTL of 1 s after a hand-over.
    pub fn builder() -> LeaseOptionsBuilder {
        LeaseOptionsBuilder::default()
    }

    /// Shorthand for `builder().ttl(ttl).build()`.
    pub fn with_ttl(ttl: Duration) -> Result<Self> {
        Self::builder().ttl(ttl).build()
    }

    /// The lease length.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// The watchdog's renewal period, or `None` when renewal is off.
    pub fn renew_every(&self) -> Option<Duration> {
        self.renew_every
    }

    /// The drift allowance subtracted from the holder's deadline.
    pub fn drift(&self) -> Duration {
        self.drift
    }

    /// The maximum hold time, if any.
    pub fn max_hold(&self) -> Option<Duration> {
        self.max_hold
    }

    /// The replica wait, if any: `(numreplicas, timeout, policy)`.
    pub fn replicas(&self) -> Option<(u32, Duration, ReplicaPolicy)> {
        self.replicas
    }

    /// The TTL a lease starts with when a release hands it to this caller while it waits.
    pub fn handoff_ttl(&self) -> Duration {
        self.handoff_ttl
    }

    /// How many holders the name admits at once: 1 for a lock, more for a semaphore.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// Most permits a semaphore may have.
    pub const MAX_PERMITS: u32 = 1_000;
}

/// Builder for [`LeaseOptions`]; every check happens in [`build`](Self::build).
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct LeaseOptionsBuilder {
    ttl: Option<Duration>,
    renew_every: Option<Option<Duration>>,
    drift: Option<Duration>,
    max_hold: Option<Duration>,
    replicas: Option<(u32, Duration, ReplicaPolicy)>,
    handoff_ttl: Option<Duration>,
    permits: Option<u32>,
}

impl LeaseOptionsBuilder {
    /// Lease length (default 30 s). Between 10 ms and 24 h.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    /// Renewal period (default TTL/3). Must be shorter than `ttl - drift`.
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(Some(every));
        self
    }

    /// Turns the watchdog off: the lease lives for one TTL unless [`crate::Lease::renew`] is called.
    pub fn no_renewal(mut self) -> Self {
        self.renew_every = Some(None);
        self
    }

    /// Drift allowance (default 1% of TTL + 2 ms). Must be shorter than the TTL.
    pub fn drift(mut self, drift: Duration) -> Self {
        self.drift = Some(drift);
        self
    }

    /// Maximum hold time: a hard cap on the critical section, after which renewal stops and the lost
    /// signal fires.
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// After acquiring, run `WAIT numreplicas timeout` and apply `policy` when fewer replicas
    /// acknowledged. Narrows the failover window; never closes it.
    pub fn wait_for_replicas(
        mut self,
        numreplicas: u32,
        timeout: Duration,
        policy: ReplicaPolicy,
    ) -> Self {
        self.replicas = Some((numreplicas, timeout, policy));
        self
    }

    /// The TTL a lease starts with when a store hands it to this caller while it waits (default 1 s,
    /// or the TTL if shorter). The holder's watchdog extends it to the full TTL right away (it renews
    /// at a third of it); if this waiter died between its last word to the store and the hand-over,
    /// the lease is free again after this, not after a whole TTL. Between 50 ms and the TTL: shorter
    /// leaves a live holder too little time for its first renewal.
    pub fn handoff_ttl(mut self, first_ttl: Duration) -> Self {
        self.handoff_ttl = Some(first_ttl);
        self
    }

    /// Makes the name a semaphore: up to `permits` holders at once (default 1, a lock). Each
    /// acquire takes one permit, a lease of its own with its token, TTL, renewal, lost signal and
    /// fence; waiters queue in arrival order as for a lock, and a released permit goes to the first.
    /// Everyone using a name must ask for the same number of permits while it is in use (an acquire
    /// that asks for another is refused with [`Error::PermitsInUse`]). Between 1 and
    /// [`LeaseOptions::MAX_PERMITS`].
    ///
    /// The fences of a semaphore's permits come from the name's one counter: they order the
    /// acquisitions, but a resource fenced with them admits only the latest holder, which is
    /// exclusion, not a semaphore. Fence per resource instead (one name per resource).
    pub fn permits(mut self, permits: u32) -> Self {
        self.permits = Some(permits);
        self
    }

    /// Validates and builds. Refuses a TTL out of range, a drift not shorter than the TTL, a renewal
    /// period of zero or not shorter than `ttl - drift`, a zero maximum hold, a replica wait for zero
    /// replicas or with a zero timeout, a hand-over TTL under 50 ms or over the TTL, and permits
    /// outside 1..=[`LeaseOptions::MAX_PERMITS`], each with a message that names the value and the
    /// fix.
    pub fn build(self) -> Result<LeaseOptions> {
        let (ttl, drift, renew_every) = self.timing()?;
        self.check_limits()?;
        let handoff_ttl = self.checked_handoff_ttl(ttl)?;
        let permits = self.checked_permits()?;
        Ok(LeaseOptions {
            ttl,
            renew_every,
            drift,
            max_hold: self.max_hold,
            replicas: self.replicas,
            handoff_ttl,
            permits,
        })
    }

    /// The TTL, the drift allowance and the renewal period, each checked against the others.
    fn timing(&self) -> Result<(Duration, Duration, Option<Duration>)> {
        let ttl = self.ttl.unwrap_or(Duration::from_secs(30));
        if ttl < LeaseOptions::MIN_TTL || ttl > LeaseOptions::MAX_TTL {
            return Err(Error::invalid(
                "ttl",
                format!(
                    "{} ms is out of range; use between {} ms and {} s",
                    ttl.as_millis(),
                    LeaseOptions::MIN_TTL.as_millis(),
                    LeaseOptions::MAX_TTL.as_secs()
                ),
            ));
        }
        let drift = self.drift.unwrap_or(ttl / 100 + Duration::from_millis(2));
        if drift >= ttl {
            return Err(Error::invalid(
                "drift",
                format!(
                    "{} ms is not shorter than the ttl ({} ms)",
                    drift.as_millis(),
                    ttl.as_millis()
                ),
            ));
        }
        let renew_every = self.renew_every.unwrap_or(Some(ttl / 3));
        if let Some(every) = renew_every {
            if every.is_zero() || every >= ttl - drift {
                return Err(Error::invalid(
                    "renew interval",
                    format!(
                        "{} ms must be above zero and shorter than ttl - drift ({} ms), or the lease lapses between renewals",
                        every.as_millis(),
                        (ttl - drift).as_millis()
                    ),
                ));
            }
        }
        Ok((ttl, drift, renew_every))
    }

    /// The maximum hold and the replica wait, when given.
    fn check_limits(&self) -> Result<()> {
        if let Some(max) = self.max_hold {
            if max.is_zero() {
                return Err(Error::invalid(
                    "max hold",
                    "0 would lose the lease at once; leave it unset for no cap",
                ));
            }
        }
        if let Some((n, timeout, _)) = self.replicas {
            if n == 0 || timeout.is_zero() {
                return Err(Error::invalid(
                    "replica wait",
                    "numreplicas and timeout must both be above zero (WAIT with timeout 0 blocks forever)",
                ));
            }
        }
        Ok(())
    }

    /// The first hold of a handed-over lease: the default (capped at `ttl`), or the one given.
    fn checked_handoff_ttl(&self, ttl: Duration) -> Result<Duration> {
        match self.handoff_ttl {
            None => Ok(DEFAULT_HANDOFF_TTL.min(ttl)),
            Some(first) if first < MIN_HANDOFF_TTL || first > ttl => Err(Error::invalid(
                "handoff ttl",
                format!(
                    "{} ms is out of range; use between {} ms and the ttl ({} ms)",
                    first.as_millis(),
                    MIN_HANDOFF_TTL.as_millis(),
                    ttl.as_millis()
                ),
            )),
            Some(first) => Ok(first),
        }
    }

    /// The number of permits: 1 (a lock) unless given.
    fn checked_permits(&self) -> Result<u32> {
        let permits = self.permits.unwrap_or(1);
        if permits == 0 || permits > LeaseOptions::MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!(
                    "{permits} is out of range; use between 1 (a lock) and {} (a semaphore)",
                    LeaseOptions::MAX_PERMITS
                ),
            ));
        }
        Ok(permits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        let o = LeaseOptions::default();
        assert_eq!(o.ttl(), Duration::from_secs(30));
        assert_eq!(o.renew_every(), Some(Duration::from_secs(10)));
        assert_eq!(o.handoff_ttl(), Duration::from_secs(1));
        assert_eq!(o.permits(), 1);
        let short = LeaseOptions::with_ttl(Duration::from_millis(300)).unwrap();
        assert_eq!(short.handoff_ttl(), short.ttl());
    }

    #[test]
    fn bad_settings_are_refused_at_build_time() {
        let ms = Duration::from_millis;
        let cases = [
            LeaseOptions::builder().ttl(Duration::ZERO),
            LeaseOptions::builder().ttl(Duration::from_secs(10 * 24 * 3600)),
            LeaseOptions::builder().ttl(ms(1000)).renew_every(ms(1000)),
            LeaseOptions::builder()
                .ttl(ms(1000))
                .renew_every(Duration::ZERO),
            LeaseOptions::builder().ttl(ms(1000)).drift(ms(1000)),
            LeaseOptions::builder().max_hold(Duration::ZERO),
            LeaseOptions::builder().wait_for_replicas(0, ms(10), ReplicaPolicy::FailClosed),
            LeaseOptions::builder().handoff_ttl(ms(10)),
            LeaseOptions::builder().ttl(ms(500)).handoff_ttl(ms(600)),
            LeaseOptions::builder().permits(0),
            LeaseOptions::builder().permits(LeaseOptions::MAX_PERMITS + 1),
            LeaseOptions::builder().permits(u32::MAX),
        ];
        for b in cases {
            let dbg = format!("{b:?}");
            assert!(matches!(b.build(), Err(Error::Invalid { .. })), "{dbg}");
        }
    }
}
