//! What a held lease is, shared between its guard ([`Lease`](crate::Lease)) and the watchdog: name,
//! token, fence, the holder's own deadline, the lost signal.
//!
//! Promise: the deadline counts from an instant no later than the moment the store started the TTL
//! (the acquire's send time, or what the store said for a hand-off), minus the drift allowance, and
//! never moves back; once lost, a lease stays lost with its first reason. Limit: it is the holder's
//! clock; a process paused past the deadline learns of the loss only when it runs again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, LostReason};
use crate::fence::Fence;
use crate::lease::metrics;
use crate::lease::options::LeaseOptions;
use crate::lease::signal::LostSignal;
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
    /// The holder's own deadline: (instant the last successful acquire/renew was sent) + ttl - drift.
    deadline: Mutex<Instant>,
    /// Fired when the lease is lost.
    pub(crate) signal: LostSignal,
    /// Released (or handed to a background release): the watchdog stops watching it.
    pub(crate) released: AtomicBool,
    /// Hold time recorded (on release or loss, whichever first).
    finished: AtomicBool,
}

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
            deadline: Mutex::new(deadline),
            signal: LostSignal::new(),
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
        *self.deadline.lock().expect("deadline lock")
    }

    /// Moves the deadline to `sent_at + ttl - drift` after a successful renewal sent at `sent_at`
    /// (never backwards: renewals may complete out of order).
    pub(crate) fn extend(&self, sent_at: Instant) {
        let candidate = sent_at + self.opts.ttl - self.opts.drift;
        let mut d = self.deadline.lock().expect("deadline lock");
        if candidate > *d {
            *d = candidate;
        }
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
            tracing::warn!(lease = %self.name(), fence = %self.fence, %reason, "lease lost");
            self.finish();
        }
    }

    /// Records the hold time once.
    pub(crate) fn finish(&self) {
        if !self.finished.swap(true, Ordering::AcqRel) {
            metrics::hold_time(self.acquired_at.elapsed());
        }
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
        st.extend(t0 + ms(500));
        assert_eq!(st.effective_deadline(), t0 + ms(1_450));
        // A renewal that completes late but was sent earlier never moves it back.
        st.extend(t0 + ms(100));
        assert_eq!(st.effective_deadline(), t0 + ms(1_450));
        assert_eq!(st.check_time(t0 + ms(1_449)), None);
        assert_eq!(
            st.check_time(t0 + ms(1_450)),
            Some(LostReason::DeadlinePassed)
        );
        // Lost stays lost, with the first reason, whatever happens next.
        st.extend(t0 + ms(2_000));
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
        st.extend(t0 + ms(900));
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
        st.extend(t0 + ms(600));
        assert_eq!(st.effective_deadline(), t0 + ms(30_500));
    }
}
