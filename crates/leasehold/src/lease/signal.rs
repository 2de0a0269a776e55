//! The signals that tell a holder about its lease: [`LostSignal`] when it is gone, [`HealthWatch`]
//! when it is at risk before that ([`LeaseHealth::Suspect`]).
//!
//! Promise: the lost signal fires once, with the first reason, and every clone and child token sees
//! it; the health watch moves between held and suspect as renewals fail and succeed, and ends at lost
//! with the lost signal's reason. Limit: neither can stop code that is already running; the holder
//! must look (`select!` on [`LostSignal::fired`] or [`HealthWatch::at_risk`]) and stop.

use std::fmt;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::error::LostReason;

/// Fires once when the lease stops being safe to act on. Clone it into the task doing the work and
/// `select!` on [`fired`](Self::fired).
#[derive(Debug, Clone)]
pub struct LostSignal {
    /// What waiters block on; cancelled once, after `reason` is set.
    token: CancellationToken,
    /// Set before `token` is cancelled, so a woken `fired()` always finds it.
    reason: Arc<OnceLock<LostReason>>,
}

impl LostSignal {
    pub(crate) fn new() -> Self {
        LostSignal {
            token: CancellationToken::new(),
            reason: Arc::new(OnceLock::new()),
        }
    }

    /// Fires with `reason` unless it already fired; `true` if this call fired it.
    pub(crate) fn fire(&self, reason: LostReason) -> bool {
        if self.reason.set(reason).is_ok() {
            self.token.cancel();
            true
        } else {
            false
        }
    }

    /// Completes when the lease is lost, with the reason.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses nothing; call it again to keep waiting.
    pub async fn fired(&self) -> LostReason {
        self.token.cancelled().await;
        self.reason
            .get()
            .copied()
            .unwrap_or(LostReason::DeadlinePassed)
    }

    /// Whether the lease has been lost.
    pub fn is_fired(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The reason, once fired.
    pub fn reason(&self) -> Option<LostReason> {
        self.reason.get().copied()
    }

    /// A child cancellation token that is cancelled when the lease is lost, for code that already
    /// speaks `tokio_util`.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.token.child_token()
    }
}

/// Why [`Lease::stopping`](crate::Lease::stopping) says the work must stop now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Stop {
    /// Renewals have not moved the deadline in time: a shutdown that starts now ends by `stop_by`,
    /// before the store may hand the name on.
    Due {
        /// The instant the work must be gone by ([`Lease::stop_by`](crate::Lease::stop_by)).
        stop_by: tokio::time::Instant,
    },
    /// The lease is lost already (the lost signal's reason): stop at once.
    Lost(LostReason),
}

impl fmt::Display for Stop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Stop::Due { stop_by } => {
                let left = stop_by.saturating_duration_since(tokio::time::Instant::now());
                write!(
                    f,
                    "renewals have not kept the lease alive; the store may hand it on in {} ms",
                    left.as_millis() + crate::lease::options::STOP_ALLOWANCE.as_millis()
                )
            }
            Stop::Lost(reason) => write!(f, "lost: {reason}"),
        }
    }
}

/// Why a held lease is at risk although its deadline has not passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SuspectReason {
    /// The last renewal did not reach the store or got no answer in time (the store is down,
    /// paused, or the network is); the watchdog keeps retrying until the holder's deadline.
    RenewalFailing,
    /// The store's clock advances faster than this process's by more than the drift allowance
    /// (`per_million`: by how much, in parts per million): this holder's own clock runs slow, or
    /// the store's fast. The deadline is already counted at the measured rate; a faster store clock
    /// means the store's TTL runs out sooner than this process's clock says.
    StoreClockFast {
        /// How much faster, in parts per million (1,000,000: twice as fast).
        per_million: u32,
    },
}

impl fmt::Display for SuspectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SuspectReason::RenewalFailing => f.write_str(
                "renewals are failing (the store does not answer); retrying until the deadline",
            ),
            SuspectReason::StoreClockFast { per_million } => write!(
                f,
                "the store's clock runs {:.1}% faster than this process's, beyond the drift allowance; the deadline is counted at the store's rate",
                f64::from(*per_million) / 1e4
            ),
        }
    }
}

impl SuspectReason {
    /// A short label (`renewal_failing`, `store_clock_fast`), as the metrics carry it.
    pub fn label(&self) -> &'static str {
        match self {
            SuspectReason::RenewalFailing => "renewal_failing",
            SuspectReason::StoreClockFast { .. } => "store_clock_fast",
        }
    }
}

/// How a held lease stands: held, at risk, or lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseHealth {
    /// Renewed on time, on a store whose clock keeps pace with ours.
    Held,
    /// Still ours by the holder's deadline, but at risk: act accordingly (finish, checkpoint, or
    /// stop). It becomes [`Held`](Self::Held) again when a renewal succeeds and the clocks agree.
    Suspect {
        /// Why.
        reason: SuspectReason,
    },
    /// Lost, for good: the same reason as the [`LostSignal`]'s.
    Lost {
        /// Why.
        reason: LostReason,
    },
}

impl LeaseHealth {
    /// Whether it is [`LeaseHealth::Held`].
    pub fn is_held(&self) -> bool {
        matches!(self, LeaseHealth::Held)
    }

    /// Whether it is [`LeaseHealth::Suspect`].
    pub fn is_suspect(&self) -> bool {
        matches!(self, LeaseHealth::Suspect { .. })
    }

    /// Whether it is [`LeaseHealth::Lost`].
    pub fn is_lost(&self) -> bool {
        matches!(self, LeaseHealth::Lost { .. })
    }
}

impl fmt::Display for LeaseHealth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseHealth::Held => f.write_str("held"),
            LeaseHealth::Suspect { reason } => write!(f, "suspect: {reason}"),
            LeaseHealth::Lost { reason } => write!(f, "lost: {reason}"),
        }
    }
}

/// A watch on a lease's [`LeaseHealth`]. Clone it into the task doing the work and `select!` on
/// [`at_risk`](Self::at_risk) or [`changed`](Self::changed). Once the lease is released nothing
/// changes any more: the futures stay pending, as the lost signal's does.
#[derive(Debug, Clone)]
pub struct HealthWatch {
    rx: watch::Receiver<LeaseHealth>,
}

impl HealthWatch {
    /// How the lease stands now.
    pub fn current(&self) -> LeaseHealth {
        *self.rx.borrow()
    }

    /// Completes at the next change of health that this watch has not seen yet, with the new value.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a change that happens meanwhile is seen by the next call.
    pub async fn changed(&mut self) -> LeaseHealth {
        if self.rx.changed().await.is_err() {
            // Released: nothing will change any more.
            std::future::pending::<()>().await;
        }
        *self.rx.borrow_and_update()
    }

    /// Completes as soon as the lease is not [`LeaseHealth::Held`] (at once if it already is not),
    /// with the health then.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn at_risk(&mut self) -> LeaseHealth {
        loop {
            let now = *self.rx.borrow_and_update();
            if !now.is_held() {
                return now;
            }
            self.changed().await;
        }
    }

    /// The underlying `tokio` receiver, for code that already speaks `tokio::sync::watch`.
    pub fn receiver(&self) -> watch::Receiver<LeaseHealth> {
        self.rx.clone()
    }
}

/// The sending side, kept by the lease's shared state. The channel is made when the first watch is
/// asked for: most holders never ask, and a `tokio` watch channel is a few hundred bytes per lease
/// (S3 in docs/benchmarks.md counts them); until then the health is a value beside it.
#[derive(Debug)]
pub(crate) struct HealthSender {
    /// The health now, and the channel once someone watches (seeded with the health then).
    inner: std::sync::Mutex<(LeaseHealth, Option<watch::Sender<LeaseHealth>>)>,
}

impl HealthSender {
    pub(crate) fn new() -> Self {
        HealthSender {
            inner: std::sync::Mutex::new((LeaseHealth::Held, None)),
        }
    }

    fn inner(
        &self,
    ) -> std::sync::MutexGuard<'_, (LeaseHealth, Option<watch::Sender<LeaseHealth>>)> {
        // A panic while it was held cannot leave a half-written health: go on with it.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new watch on it.
    pub(crate) fn watch(&self) -> HealthWatch {
        let mut inner = self.inner();
        let now = inner.0;
        let tx = inner.1.get_or_insert_with(|| watch::Sender::new(now));
        HealthWatch { rx: tx.subscribe() }
    }

    /// The health now.
    pub(crate) fn current(&self) -> LeaseHealth {
        self.inner().0
    }

    /// Sets `to` unless the lease is lost already (lost is final); the previous health when it
    /// changed.
    pub(crate) fn set(&self, to: LeaseHealth) -> Option<LeaseHealth> {
        let mut inner = self.inner();
        let before = inner.0;
        if before.is_lost() || before == to {
            return None;
        }
        inner.0 = to;
        if let Some(tx) = &inner.1 {
            tx.send_replace(to);
        }
        Some(before)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn health_moves_between_held_and_suspect_and_stops_at_lost() {
        let tx = HealthSender::new();
        let mut w = tx.watch();
        assert_eq!(w.current(), LeaseHealth::Held);
        let waiter = tokio::spawn({
            let mut w = w.clone();
            async move { w.at_risk().await }
        });
        let suspect = LeaseHealth::Suspect {
            reason: SuspectReason::RenewalFailing,
        };
        assert_eq!(tx.set(suspect), Some(LeaseHealth::Held));
        assert_eq!(tx.set(suspect), None, "no change, no news");
        assert_eq!(waiter.await.unwrap(), suspect);
        assert_eq!(w.changed().await, suspect);
        assert_eq!(tx.set(LeaseHealth::Held), Some(suspect));
        let lost = LeaseHealth::Lost {
            reason: LostReason::DeadlinePassed,
        };
        assert_eq!(tx.set(lost), Some(LeaseHealth::Held));
        assert_eq!(tx.set(LeaseHealth::Held), None, "lost is final");
        assert_eq!(w.at_risk().await, lost);
        assert!(lost.to_string().starts_with("lost: "), "{lost}");
    }

    #[tokio::test]
    async fn a_watch_asked_for_late_starts_from_the_health_then() {
        let tx = HealthSender::new();
        let suspect = LeaseHealth::Suspect {
            reason: SuspectReason::RenewalFailing,
        };
        assert_eq!(tx.set(suspect), Some(LeaseHealth::Held), "no watch yet");
        assert_eq!(tx.current(), suspect);
        let mut w = tx.watch();
        assert_eq!(w.current(), suspect);
        assert_eq!(
            w.at_risk().await,
            suspect,
            "at once: it already is not held"
        );
        assert_eq!(tx.set(LeaseHealth::Held), Some(suspect));
        assert_eq!(w.changed().await, LeaseHealth::Held);
    }

    #[tokio::test]
    async fn the_signal_fires_once_with_its_first_reason() {
        let s = LostSignal::new();
        let child = s.cancellation_token();
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.fired().await }
        });
        assert!(!s.is_fired() && s.reason().is_none());
        assert!(s.fire(LostReason::NotOurs));
        assert!(!s.fire(LostReason::DeadlinePassed));
        assert_eq!(waiter.await.unwrap(), LostReason::NotOurs);
        assert!(child.is_cancelled());
        assert_eq!(s.reason(), Some(LostReason::NotOurs));
    }
}
