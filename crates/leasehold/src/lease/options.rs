//! Per-lease settings, validated once by [`LeaseOptionsBuilder::build`].
//!
//! Promise: options that build are consistent (renewal before expiry, drift below the TTL, and so on).
//! Limit: whether the store agrees (the same permits for everyone using a name) is known only when it
//! is asked.

use std::time::Duration;

use crate::error::{Error, Result};

/// How long before the holder's deadline its work must be gone ([`crate::Lease::stop_by`]): the
/// time for a stop order to reach the work and for the kernel to end a process killed at the last
/// instant, with room for a busy machine's scheduling delay. Part of the options' arithmetic (the
/// shortest TTL, the drift allowance), so it lives here, below the state that counts with it.
pub(crate) const STOP_ALLOWANCE: Duration = Duration::from_millis(100);

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

    /// How long before the store may hand the name on the holder's work must be gone: the drift
    /// allowance plus a fixed allowance (100 ms) for the stop order to reach the work and for a
    /// busy machine's scheduling delay. [`Lease::stop_by`](crate::Lease::stop_by) is the store's
    /// earliest hand-over by the holder's estimate less this.
    pub fn stop_margin(&self) -> Duration {
        self.drift + STOP_ALLOWANCE
    }

    /// The longest shutdown (time from "stop now" to the work being gone, a `--grace`) that fits
    /// inside the lease: shorter than the TTL less one renewal period and the
    /// [`stop_margin`](Self::stop_margin), so that a healthy lease, renewed on time, is never told
    /// to stop, and a lease whose renewals fail is told early enough for the work to end before the
    /// store may hand the name on. Zero when nothing fits (a very short TTL): the work is then
    /// killed at [`Lease::stop_by`](crate::Lease::stop_by) without a grace.
    pub fn longest_shutdown(&self) -> Duration {
        let renew = self.renew_every.unwrap_or(Duration::ZERO);
        // Less the allowance once more: the renewal that moves the deadline is given that long to
        // answer before a stop is ordered.
        self.ttl
            .saturating_sub(renew)
            .saturating_sub(self.stop_margin())
            .saturating_sub(STOP_ALLOWANCE)
            .saturating_sub(Duration::from_millis(1))
    }

    /// A shutdown that fits the lease by default: a third of the TTL, at most 10 s and at most
    /// [`longest_shutdown`](Self::longest_shutdown).
    pub fn default_shutdown(&self) -> Duration {
        (self.ttl / 3)
            .min(Duration::from_secs(10))
            .min(self.longest_shutdown())
    }

    /// Checks that work taking up to `shutdown` to stop can be stopped before the store may hand
    /// the name on (see [`longest_shutdown`](Self::longest_shutdown)).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming the shutdown, the TTL, the renewal period and the margin, and the
    /// shortest TTL (with the default renewal period and drift) that would fit it.
    pub fn check_shutdown(&self, shutdown: Duration) -> Result<()> {
        let longest = self.longest_shutdown();
        if shutdown <= longest {
            return Ok(());
        }
        // ttl - ttl/3 - (ttl/100 + 2 ms + the allowance twice) > shutdown + 1 ms.
        let fixed = STOP_ALLOWANCE * 2 + Duration::from_millis(3);
        let shortest_ttl = (shutdown + fixed).as_secs_f64() / (1.0 - 1.0 / 3.0 - 0.01);
        Err(Error::invalid(
            "grace",
            format!(
                "{} does not fit inside a {} lease renewed every {}: the work must be gone \
                 before the store may hand the name on, so grace + margin ({}: drift and a \
                 stop allowance) must stay under ttl - renewal period - 100ms; use a grace of at most {}, \
                 or a ttl of at least {}",
                show(shutdown),
                show(self.ttl),
                show(self.renew_every.unwrap_or(Duration::ZERO)),
                show(self.stop_margin()),
                show(Duration::from_millis(longest.as_millis() as u64)),
                show(Duration::from_millis((shortest_ttl * 1000.0).ceil() as u64 + 1))
            ),
        ))
    }
}

/// A duration as a person writes it: `300ms`, `1.5s`, `2m`, `3h`, `184d`.
pub(crate) fn show(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(86_400_000) {
        format!("{}d", ms / 86_400_000)
    } else if ms.is_multiple_of(3_600_000) {
        format!("{}h", ms / 3_600_000)
    } else if ms.is_multiple_of(60_000) {
        format!("{}m", ms / 60_000)
    } else {
        format!("{}s", d.as_secs_f64())
    }
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
                    "{} is out of range; use between {} and {}",
                    show(ttl),
                    show(LeaseOptions::MIN_TTL),
                    show(LeaseOptions::MAX_TTL)
                ),
            ));
        }
        let drift = self.drift.unwrap_or(ttl / 100 + Duration::from_millis(2));
        if drift >= ttl {
            return Err(Error::invalid(
                "drift",
                format!(
                    "{} is not shorter than the ttl ({})",
                    show(drift),
                    show(ttl)
                ),
            ));
        }
        let renew_every = self.renew_every.unwrap_or(Some(ttl / 3));
        if let Some(every) = renew_every {
            if every.is_zero() || every >= ttl - drift {
                return Err(Error::invalid(
                    "renew interval",
                    format!(
                        "{} must be above zero and shorter than ttl - drift ({}), or the lease lapses between renewals",
                        show(every),
                        show(ttl - drift)
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
                    "{} is out of range; use between {} and the ttl ({})",
                    show(first),
                    show(MIN_HANDOFF_TTL),
                    show(ttl)
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
    fn a_shutdown_fits_inside_the_lease_or_is_refused_with_the_numbers() {
        let ms = Duration::from_millis;
        let o = LeaseOptions::with_ttl(Duration::from_secs(30)).unwrap();
        assert_eq!(o.stop_margin(), ms(402));
        assert_eq!(o.default_shutdown(), Duration::from_secs(10));
        assert!(o.check_shutdown(Duration::from_secs(10)).is_ok());
        assert!(o.check_shutdown(o.longest_shutdown()).is_ok());
        assert!(o.check_shutdown(o.longest_shutdown() + ms(1)).is_err());
        let three = LeaseOptions::with_ttl(Duration::from_secs(3)).unwrap();
        assert_eq!(three.default_shutdown(), Duration::from_secs(1));
        let Err(Error::Invalid { what, why }) = three.check_shutdown(Duration::from_secs(3)) else {
            panic!("a 3 s grace cannot fit a 3 s lease");
        };
        assert_eq!(what, "grace");
        assert!(
            why.contains("3s") && why.contains("1s") && why.contains("132ms"),
            "{why}"
        );
        assert!(
            !why.contains(" ms"),
            "durations as a person writes them: {why}"
        );
        // The shortest TTL it names does fit.
        let fix: f64 = why
            .rsplit("at least ")
            .next()
            .unwrap()
            .trim_end_matches('s')
            .parse()
            .unwrap();
        let fitted = LeaseOptions::with_ttl(ms((fix * 1000.0).round() as u64)).unwrap();
        assert!(
            fitted.check_shutdown(Duration::from_secs(3)).is_ok(),
            "{why}"
        );
        // A TTL too short for any grace: the work is killed at its stop instant.
        let tiny = LeaseOptions::with_ttl(ms(300)).unwrap();
        assert_eq!(tiny.default_shutdown(), Duration::ZERO);
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
