//! What a held lease is, shared between its guard ([`Lease`](crate::Lease)) and the watchdog: name,
//! token, fence, the holder's own deadline, the lost signal, the health watch.
//!
//! Promise: the deadline counts from an instant no later than the moment the store started the TTL
//! (the acquire's send time, or what the store said for a hand-off), minus the drift allowance; once
//! the store's clock rate is known ([`ClockRate`]), the TTL is counted at that rate (a store clock
//! twice as fast as ours halves the local deadline). Only a renewal sent later than the one that set
//! the deadline moves it, so a late reply never moves it back; once lost, a lease stays lost with its
//! first reason. The health is suspect while the last renewal failed or the store's clock runs
//! faster than the drift allowance covers. Limit: it is the holder's clock; a process paused past
//! the deadline learns of the loss only when it runs again, and before the first reply that carried
//! the store's time nothing is known of the rate.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, LostReason};
use crate::fence::Fence;
use crate::lease::clock::ClockRate;
use crate::lease::metrics;
use crate::lease::options::{LeaseOptions, STOP_ALLOWANCE};
use crate::lease::signal::{HealthSender, HealthWatch, LeaseHealth, LostSignal, SuspectReason};
use crate::lease::store::{Grant, Held};

/// One held lease. Kept small (one per held lease): the token is inline and the options are shared
/// between leases taken with equal options.
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// Watchdog registry key, unique per client.
    pub(crate) id: u64,
    /// The lease name.
    name: Box<str>,
    /// 128 random bits as 32 hex digits; what the store holds while we hold the lease.
    token: [u8; 32],
    /// The fencing token of this holding.
    pub(crate) fence: Fence,
    /// The options it was taken with.
    pub(crate) opts: Arc<LeaseOptions>,
    /// When the store started the lease (by our clock, conservatively): hold time counts from here.
    pub(crate) acquired_at: Instant,
    /// When the first renewal is due (earlier than `renew_every` when the store granted a shorter
    /// first TTL, as a hand-off does).
    pub(crate) first_renewal: Option<Instant>,
    /// `acquired_at + max_hold`, when capped.
    pub(crate) max_hold_at: Option<Instant>,
    /// The holder's own deadline: (instant the last successful acquire/renew was sent) + ttl - drift,
    /// counted at the store's clock rate once known; with the send instant that set it.
    deadline: Mutex<(Instant, Instant)>,
    /// Fired when the lease is lost.
    pub(crate) signal: LostSignal,
    /// Held, suspect or lost, for whoever watches.
    health: HealthSender,
    /// The last renewal failed (no answer, or a refusal).
    failing: AtomicBool,
    /// How much faster the store's clock runs than ours, beyond the allowance (0: not beyond).
    clock_fast_ppm: AtomicU32,
    /// Counted in the suspect-leases gauge now.
    in_gauge: AtomicBool,
    /// Released (or handed to a background release): the watchdog stops watching it.
    pub(crate) released: AtomicBool,
    /// Hold time recorded (on release or loss, whichever first).
    finished: AtomicBool,
}

/// The `tracing` target of the events a holder meets (suspect, lost, held again, force-released):
/// a program that says these in its own words (the `leasehold` command does) turns this target
/// off so that each event is one line.
pub const HOLDER_EVENTS: &str = "leasehold::holder";

/// The drift allowance over a first TTL shorter than the options' (a hand-over grants one): clock
/// rates differ in proportion to the time measured, so the allowance shrinks with it, never below
/// 2 ms (the fixed part of the default) nor above the configured drift.
fn first_drift(granted: Duration, opts: &LeaseOptions) -> Duration {
    if granted >= opts.ttl || opts.ttl.is_zero() {
        return opts.drift;
    }
    let scaled = opts
        .drift
        .mul_f64(granted.as_secs_f64() / opts.ttl.as_secs_f64());
    scaled.max(Duration::from_millis(2)).min(opts.drift)
}

impl LeaseState {
    /// `token` is 32 hex digits.
    pub(crate) fn new(
        id: u64,
        name: &str,
        token: &str,
        grant: &Grant,
        opts: Arc<LeaseOptions>,
    ) -> Self {
        let deadline = grant.since + grant.ttl.saturating_sub(first_drift(grant.ttl, &opts));
        let max_hold_at = opts.max_hold.map(|m| grant.since + m);
        let first_renewal = opts
            .renew_every
            .map(|every| grant.since + every.min(grant.ttl / 3));
        let mut tok = [b'0'; 32];
        let n = token.len().min(32);
        tok[32 - n..].copy_from_slice(&token.as_bytes()[..n]);
        LeaseState {
            id,
            name: name.into(),
            token: tok,
            fence: grant.fence,
            opts,
            acquired_at: grant.since,
            first_renewal,
            max_hold_at,
            deadline: Mutex::new((deadline, grant.since)),
            signal: LostSignal::new(),
            health: HealthSender::new(),
            failing: AtomicBool::new(false),
            clock_fast_ppm: AtomicU32::new(0),
            in_gauge: AtomicBool::new(false),
            released: AtomicBool::new(false),
            finished: AtomicBool::new(false),
        }
    }

    /// The lease name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// The random token the store holds.
    pub(crate) fn token(&self) -> &str {
        std::str::from_utf8(&self.token).unwrap_or("")
    }

    /// What the store needs to renew or release it.
    pub(crate) fn held(&self) -> Held<'_> {
        Held {
            name: self.name(),
            token: self.token(),
            opts: &self.opts,
        }
    }

    /// The deadline by validity alone (not by max hold).
    pub(crate) fn validity_deadline(&self) -> Instant {
        self.deadline.lock().expect("deadline lock").0
    }

    /// When the renewal that should move the deadline next is overdue: due (the first renewal,
    /// or a renewal period after the send of the last one the store accepted) plus
    /// [`STOP_ALLOWANCE`] for its answer; `None` without renewal.
    pub(crate) fn renewal_overdue_at(&self) -> Option<Instant> {
        let every = self.opts.renew_every?;
        let last_sent = self.deadline.lock().expect("deadline lock").1;
        let due = match self.first_renewal {
            Some(first) if last_sent == self.acquired_at => first,
            _ => last_sent + every,
        };
        Some(due + STOP_ALLOWANCE)
    }

    /// Whether the last renewal failed (no answer in time, or refused).
    pub(crate) fn renewals_failing(&self) -> bool {
        self.failing.load(Ordering::Acquire)
    }

    /// The instant by which everything done under the lease must have stopped: the validity
    /// deadline less [`STOP_ALLOWANCE`].
    pub(crate) fn stop_by(&self) -> Instant {
        let d = self.validity_deadline();
        d.checked_sub(STOP_ALLOWANCE).unwrap_or(d)
    }

    /// Moves the deadline to `sent_at + ttl - drift`, counted at the store's clock rate `rate` when
    /// known, after a successful renewal sent at `sent_at`. A renewal sent before the one that set
    /// the deadline changes nothing (renewals may complete out of order); a later one sets it even
    /// when that is earlier (the rate says the store's TTL runs out sooner). Clears "renewal
    /// failing" and takes the clock's verdict.
    pub(crate) fn extend(&self, sent_at: Instant, rate: Option<ClockRate>) {
        let valid = self.opts.ttl - self.opts.drift;
        let candidate = sent_at + rate.map_or(valid, |r| r.scale_down(valid));
        {
            let mut d = self.deadline.lock().expect("deadline lock");
            if sent_at >= d.1 {
                *d = (candidate, sent_at);
            }
        }
        self.failing.store(false, Ordering::Release);
        self.judge_clock(rate);
        self.refresh();
    }

    /// Counts the first deadline at the store's clock rate, when the client knew it already at the
    /// acquire.
    pub(crate) fn learned(&self, rate: Option<ClockRate>) {
        let Some(r) = rate else { return };
        {
            let mut d = self.deadline.lock().expect("deadline lock");
            let since = self.acquired_at;
            let first = d.0.saturating_duration_since(since);
            if d.1 == since {
                d.0 = since + r.scale_down(first);
            }
        }
        self.judge_clock(rate);
        self.refresh();
    }

    /// A renewal failed (no answer in time, or refused): suspect until one succeeds.
    pub(crate) fn renewal_failed(&self) {
        self.failing.store(true, Ordering::Release);
        self.refresh();
    }

    /// Whether the store's clock runs faster than the drift allowance covers.
    fn judge_clock(&self, rate: Option<ClockRate>) {
        let Some(r) = rate else { return };
        let ppm = r.fast_per_million();
        let allowed = if self.opts.ttl.is_zero() {
            0.0
        } else {
            self.opts.drift.as_secs_f64() / self.opts.ttl.as_secs_f64() * 1e6
        };
        let beyond = if f64::from(ppm) > allowed { ppm } else { 0 };
        self.clock_fast_ppm.store(beyond, Ordering::Release);
    }

    /// The renewal period counted at the store's clock rate: a store clock twice as fast needs
    /// renewals twice as often (by our clock) to keep the same margin.
    pub(crate) fn renew_period(&self, every: Duration, rate: Option<ClockRate>) -> Duration {
        rate.map_or(every, |r| r.scale_down(every))
    }

    /// Recomputes the health from the lost signal, the last renewal and the clock; sends a change.
    fn refresh(&self) {
        let to = if let Some(reason) = self.signal.reason() {
            LeaseHealth::Lost { reason }
        } else if self.failing.load(Ordering::Acquire) {
            LeaseHealth::Suspect {
                reason: SuspectReason::RenewalFailing,
            }
        } else {
            match self.clock_fast_ppm.load(Ordering::Acquire) {
                0 => LeaseHealth::Held,
                per_million => LeaseHealth::Suspect {
                    reason: SuspectReason::StoreClockFast { per_million },
                },
            }
        };
        let Some(before) = self.health.set(to) else {
            return;
        };
        if let LeaseHealth::Suspect { reason } = to {
            let same_kind =
                matches!(before, LeaseHealth::Suspect { reason: r } if r.label() == reason.label());
            if !same_kind {
                metrics::suspect(reason);
                tracing::warn!(target: HOLDER_EVENTS, lease = %self.name(), fence = %self.fence, %reason, "lease suspect");
            }
            if !self.in_gauge.swap(true, Ordering::AcqRel) {
                metrics::suspect_leases(1.0);
            }
        } else {
            if before.is_suspect() && to.is_held() {
                tracing::info!(target: HOLDER_EVENTS, lease = %self.name(), fence = %self.fence, "lease held again");
            }
            self.leave_gauge();
        }
    }

    fn leave_gauge(&self) {
        if self.in_gauge.swap(false, Ordering::AcqRel) {
            metrics::suspect_leases(-1.0);
        }
    }

    /// A watch on the health.
    pub(crate) fn health(&self) -> HealthWatch {
        self.health.watch()
    }

    /// The health now.
    pub(crate) fn health_now(&self) -> LeaseHealth {
        self.health.current()
    }

    /// The earlier of the validity deadline and the max-hold instant.
    pub(crate) fn effective_deadline(&self) -> Instant {
        let d = self.validity_deadline();
        match self.max_hold_at {
            Some(m) if m < d => m,
            _ => d,
        }
    }

    /// Fires the lost signal (once), counting and logging it.
    pub(crate) fn fire(&self, reason: LostReason) {
        if self.signal.fire(reason) {
            metrics::lost(reason);
            tracing::warn!(target: HOLDER_EVENTS, lease = %self.name(), fence = %self.fence, %reason, "lease lost");
            self.refresh();
            self.finish();
        }
    }

    /// Records the hold time once.
    pub(crate) fn finish(&self) {
        if !self.finished.swap(true, Ordering::AcqRel) {
            metrics::hold_time(self.acquired_at.elapsed());
        }
        self.leave_gauge();
    }

    /// Safe time left; zero once lost.
    pub(crate) fn remaining(&self) -> Duration {
        if self.signal.is_fired() {
            return Duration::ZERO;
        }
        self.effective_deadline()
            .saturating_duration_since(Instant::now())
    }

    /// The error for a lease lost for `reason`.
    pub(crate) fn lost_error(&self, reason: LostReason) -> Error {
        Error::LeaseLost {
            name: self.name().to_owned(),
            reason,
        }
    }

    /// Fires DeadlinePassed or MaxHoldReached if due now; returns the reason when lost.
    pub(crate) fn check_time(&self, now: Instant) -> Option<LostReason> {
        if let Some(r) = self.signal.reason() {
            return Some(r);
        }
        if self.max_hold_at.is_some_and(|m| m <= now) {
            self.fire(LostReason::MaxHoldReached);
        } else if self.validity_deadline() <= now {
            self.fire(LostReason::DeadlinePassed);
        }
        self.signal.reason()
    }

    /// Whether the watchdog should stop looking at it (released, or lost).
    pub(crate) fn is_done(&self) -> bool {
        self.released.load(Ordering::Acquire) || self.signal.is_fired()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A lease state as a store would grant it: fence 7, TTL from `opts`, since `since`.
    pub(crate) fn state(id: u64, opts: LeaseOptions, since: Instant) -> LeaseState {
        let grant = Grant {
            fence: Fence::new(7),
            since,
            ttl: opts.ttl,
            wakes_next: false,
        };
        LeaseState::new(id, "t", &"0".repeat(32), &grant, Arc::new(opts))
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_deadline_counts_from_before_the_request_and_subtracts_drift() {
        let t0 = Instant::now();
        let o = LeaseOptions::builder()
            .ttl(ms(1_000))
            .drift(ms(50))
            .build()
            .unwrap();
        let st = state(1, o, t0);
        assert_eq!(st.effective_deadline(), t0 + ms(950));
        assert_eq!(st.check_time(t0 + ms(949)), None);
        // A renewal sent at +500 moves the deadline to +1450, measured from its sending.
        st.extend(t0 + ms(500), None);
        assert_eq!(st.effective_deadline(), t0 + ms(1_450));
        // A renewal that completes late but was sent earlier never moves it back.
        st.extend(t0 + ms(100), None);
        assert_eq!(st.effective_deadline(), t0 + ms(1_450));
        assert_eq!(st.check_time(t0 + ms(1_449)), None);
        assert_eq!(
            st.check_time(t0 + ms(1_450)),
            Some(LostReason::DeadlinePassed)
        );
        // Lost stays lost, with the first reason, whatever happens next.
        st.extend(t0 + ms(2_000), None);
        assert_eq!(st.check_time(t0), Some(LostReason::DeadlinePassed));
        assert!(st.signal.is_fired());
        assert_eq!(st.remaining(), Duration::ZERO);
    }

    #[test]
    fn max_hold_caps_the_deadline_and_wins_over_renewals() {
        let t0 = Instant::now();
        let o = LeaseOptions::builder()
            .ttl(ms(1_000))
            .max_hold(ms(1_200))
            .build()
            .unwrap();
        let st = state(1, o, t0);
        st.extend(t0 + ms(900), None);
        assert_eq!(st.effective_deadline(), t0 + ms(1_200));
        assert_eq!(
            st.check_time(t0 + ms(1_200)),
            Some(LostReason::MaxHoldReached)
        );
        assert_eq!(st.signal.reason(), Some(LostReason::MaxHoldReached));
    }

    #[test]
    fn a_short_first_ttl_moves_the_first_deadline_and_renewal_forward() {
        let t0 = Instant::now();
        let o = LeaseOptions::builder()
            .ttl(ms(30_000))
            .drift(ms(100))
            .build()
            .unwrap();
        let grant = Grant {
            fence: Fence::new(1),
            since: t0,
            ttl: ms(2_000),
            wakes_next: false,
        };
        let st = LeaseState::new(1, "t", "ab", &grant, Arc::new(o));
        // The drift over the 2 s first TTL: 100 ms x 2/30.
        assert_eq!(
            st.effective_deadline(),
            t0 + ms(2_000) - Duration::from_nanos(6_666_667)
        );
        assert_eq!(st.first_renewal, Some(t0 + ms(2_000) / 3));
        assert_eq!(st.token().len(), 32);
        st.extend(t0 + ms(600), None);
        assert_eq!(st.effective_deadline(), t0 + ms(30_500));
    }

    #[test]
    fn a_fast_store_clock_shortens_the_deadline_and_makes_the_lease_suspect() {
        let t0 = Instant::now();
        let o = LeaseOptions::builder()
            .ttl(ms(3_000))
            .drift(ms(30))
            .build()
            .unwrap();
        let st = state(1, o, t0);
        let health = st.health();
        assert_eq!(health.current(), LeaseHealth::Held);
        // The store's clock runs twice as fast as ours: its 3 s TTL is 1.5 s of ours.
        let twice = ClockRate {
            mid: 2.0,
            high: 2.0,
        };
        st.extend(t0 + ms(1_000), Some(twice));
        assert_eq!(st.effective_deadline(), t0 + ms(1_000) + ms(2_970) / 2);
        assert_eq!(
            health.current(),
            LeaseHealth::Suspect {
                reason: SuspectReason::StoreClockFast {
                    per_million: 1_000_000
                }
            }
        );
        // A late reply to an earlier renewal changes nothing.
        st.extend(t0 + ms(900), None);
        assert_eq!(st.effective_deadline(), t0 + ms(1_000) + ms(2_970) / 2);
        // Within the allowance (1% here): held again, and the deadline barely moves.
        let close = ClockRate {
            mid: 1.005,
            high: 1.006,
        };
        st.extend(t0 + ms(2_000), Some(close));
        assert_eq!(health.current(), LeaseHealth::Held);
        assert!(st.effective_deadline() < t0 + ms(2_000) + ms(2_970));
        assert!(st.effective_deadline() > t0 + ms(2_000) + ms(2_900));
        // A failing renewal is suspect until one succeeds; the loss ends it.
        st.renewal_failed();
        assert_eq!(
            health.current(),
            LeaseHealth::Suspect {
                reason: SuspectReason::RenewalFailing
            }
        );
        assert_eq!(
            st.check_time(t0 + ms(5_000)),
            Some(LostReason::DeadlinePassed)
        );
        assert_eq!(
            health.current(),
            LeaseHealth::Lost {
                reason: LostReason::DeadlinePassed
            }
        );
    }

    #[test]
    fn a_rate_known_at_the_acquire_counts_the_first_deadline() {
        let t0 = Instant::now();
        let o = LeaseOptions::builder()
            .ttl(ms(1_000))
            .drift(ms(10))
            .build()
            .unwrap();
        let st = state(1, o, t0);
        st.learned(Some(ClockRate {
            mid: 2.0,
            high: 2.0,
        }));
        assert_eq!(st.effective_deadline(), t0 + ms(495));
        assert!(st.health_now().is_suspect());
    }
}
