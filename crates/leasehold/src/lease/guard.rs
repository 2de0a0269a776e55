//! The held lease and the signal that tells its holder the lease is gone.
//!
//! Promise: the [`LostSignal`] fires no later than the holder's own deadline (measured from before
//! the acquire or the last successful renewal was sent, minus drift), even if Redis hangs.
//! Limit: it cannot stop code that is already running; a process paused past its deadline learns of
//! the loss only when it runs again. Fence the resource for correctness.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::error::{Error, LostReason, Phase, Result};
use crate::fence::Fence;
use crate::lease::client::LeaseClient;
use crate::lease::{metrics, scripts, LeaseKeys, LeaseOptions};

/// A held lease. Renewed in the background while alive; [`release`](Self::release) it explicitly.
/// Dropping it without release hands the release to a background task (Drop does no I/O in place).
#[must_use = "a lease is released when dropped; hold it for the critical section"]
#[derive(Debug)]
pub struct Lease {
    /// What the watchdog shares with this guard: token, deadline, signal.
    state: Arc<LeaseState>,
    /// The client that took it: its connection serves renew/release, its watchdog renews.
    client: LeaseClient,
    /// Set once release reached Redis, so Drop does not hand a second release to the background.
    done: bool,
}

/// Fires once when the lease stops being safe to act on. Clone it into the task doing the work and
/// `select!` on [`fired`](Self::fired).
#[derive(Debug, Clone)]
pub struct LostSignal {
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

    /// Completes when the lease is lost, with the reason. Cancel safe.
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

/// The part of a held lease the watchdog shares. Kept small (one of these per held lease): the key
/// names are built from the one hash-tag string when a request is sent, the token is inline, and
/// the options are shared between leases taken with equal options.
#[derive(Debug)]
pub(crate) struct LeaseState {
    /// Watchdog registry key, unique per client.
    pub(crate) id: u64,
    /// The hash tag `{<prefix>:<name>}`; every key name is this plus a suffix.
    tag: Box<str>,
    /// Where the name starts in `tag`.
    name_at: usize,
    /// The full key names, built only if [`Lease::keys`] is asked for.
    keys: OnceLock<Box<LeaseKeys>>,
    /// 128 random bits as 32 hex digits; the lock key's value while we hold it.
    token: [u8; 32],
    pub(crate) fence: Fence,
    pub(crate) opts: Arc<LeaseOptions>,
    /// When the acquire was sent: hold time is measured from here.
    pub(crate) acquired_at: Instant,
    /// `acquired_at + max_hold`, when capped.
    pub(crate) max_hold_at: Option<Instant>,
    /// The holder's own deadline: (instant the last successful acquire/renew was sent) + ttl - drift.
    deadline: Mutex<Instant>,
    pub(crate) signal: LostSignal,
    /// Released (or handed to a background release): the watchdog stops watching it.
    pub(crate) released: AtomicBool,
    /// Hold time recorded (on release or loss, whichever first).
    finished: AtomicBool,
}

impl LeaseState {
    /// `keys` are the keys of `name`; `token` is 32 hex digits.
    pub(crate) fn new(
        id: u64,
        name: &str,
        keys: &LeaseKeys,
        token: &str,
        fence: Fence,
        opts: Arc<LeaseOptions>,
        sent_at: Instant,
    ) -> Self {
        let deadline = sent_at + opts.ttl - opts.drift;
        let max_hold_at = opts.max_hold.map(|m| sent_at + m);
        let tag = keys.lock.strip_suffix(":lock").unwrap_or(&keys.lock);
        let name_at = tag.len().saturating_sub(name.len() + 1);
        let mut tok = [b'0'; 32];
        let n = token.len().min(32);
        tok[32 - n..].copy_from_slice(&token.as_bytes()[..n]);
        LeaseState {
            id,
            tag: tag.into(),
            name_at,
            keys: OnceLock::new(),
            token: tok,
            fence,
            opts,
            acquired_at: sent_at,
            max_hold_at,
            deadline: Mutex::new(deadline),
            signal: LostSignal::new(),
            released: AtomicBool::new(false),
            finished: AtomicBool::new(false),
        }
    }

    /// The lease name.
    pub(crate) fn name(&self) -> &str {
        let end = self.tag.len().saturating_sub(1);
        self.tag.get(self.name_at..end).unwrap_or("")
    }

    /// The random token stored in the lock key.
    pub(crate) fn token(&self) -> &str {
        std::str::from_utf8(&self.token).unwrap_or("")
    }

    /// The lock key's name, built now.
    pub(crate) fn lock_key(&self) -> String {
        format!("{}:lock", self.tag)
    }

    /// All key names, built on first use and kept.
    pub(crate) fn keys(&self) -> &LeaseKeys {
        self.keys.get_or_init(|| {
            Box::new(LeaseKeys {
                lock: format!("{}:lock", self.tag),
                fence: format!("{}:fence", self.tag),
                wake: format!("{}:wake", self.tag),
                waiting: format!("{}:waiting", self.tag),
            })
        })
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

    fn lost_error(&self, reason: LostReason) -> Error {
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
}

impl Lease {
    pub(crate) fn new(state: Arc<LeaseState>, client: LeaseClient) -> Self {
        Lease {
            state,
            client,
            done: false,
        }
    }

    /// The lease name.
    pub fn name(&self) -> &str {
        self.state.name()
    }

    /// The fencing token to present to resources.
    pub fn fence(&self) -> Fence {
        self.state.fence
    }

    /// The random token stored in the lock key.
    pub fn token(&self) -> &str {
        self.state.token()
    }

    /// The Redis keys of this lease.
    pub fn keys(&self) -> &LeaseKeys {
        self.state.keys()
    }

    /// The options it was taken with.
    pub fn options(&self) -> &LeaseOptions {
        &self.state.opts
    }

    /// The lost-lease signal.
    pub fn lost(&self) -> LostSignal {
        self.state.signal.clone()
    }

    /// Whether the lease has been lost (shorthand for `lost().is_fired()`).
    pub fn is_lost(&self) -> bool {
        self.state.signal.is_fired()
    }

    /// Safe time left by the holder's own deadline (zero once lost). Also bounded by the maximum hold
    /// time.
    pub fn remaining(&self) -> Duration {
        self.state.remaining()
    }

    /// How long it has been held, measured from before the acquire was sent.
    pub fn held_for(&self) -> Duration {
        self.state.acquired_at.elapsed()
    }

    /// Renews now (the watchdog does this on its own). [`crate::Error::LeaseLost`] when it is no longer
    /// ours: already lost by the client's deadline or max hold, or Redis no longer holds our token.
    /// Cancel safe (a renewal that was sent and not awaited only extends our own lease).
    #[tracing::instrument(level = "debug", skip(self), fields(lease = %self.state.name(), fence = %self.state.fence))]
    pub async fn renew(&self) -> Result<()> {
        let st = &self.state;
        let sent_at = Instant::now();
        if let Some(reason) = st.check_time(sent_at) {
            return Err(st.lost_error(reason));
        }
        let mut con = self.client.shared();
        let reply = self
            .client
            .bounded(
                Phase::Renew,
                scripts::renew(&mut con, &st.lock_key(), st.token(), st.opts.ttl),
            )
            .await;
        match reply {
            Ok(true) => {
                metrics::renewal("renewed");
                st.extend(sent_at);
                match st.signal.reason() {
                    Some(reason) => Err(st.lost_error(reason)),
                    None => Ok(()),
                }
            }
            Ok(false) => {
                metrics::renewal("not_ours");
                st.fire(LostReason::NotOurs);
                Err(st.lost_error(st.signal.reason().unwrap_or(LostReason::NotOurs)))
            }
            Err(e) => {
                metrics::renewal("error");
                Err(e)
            }
        }
    }

    /// Releases: deletes the lock only if it still holds our token, then wakes one waiter.
    /// [`crate::Error::LeaseLost`] when it was already gone (expired, or force-released), and also when
    /// the lost signal had fired before (deadline or max hold passed) even if Redis still had the key
    /// and it was deleted now: the critical section was not covered the whole time.
    /// Cancel safe: if cancelled before Redis answered, the release is handed to the background.
    #[tracing::instrument(level = "debug", skip(self), fields(lease = %self.state.name(), fence = %self.state.fence))]
    pub async fn release(mut self) -> Result<()> {
        let st = self.state.clone();
        st.released.store(true, Ordering::Release);
        self.client.forget(st.id);
        let mut con = self.client.shared();
        let reply = self
            .client
            .bounded(
                Phase::Release,
                scripts::release(&mut con, st.keys(), st.token()),
            )
            .await;
        match reply {
            Ok(ours) => {
                self.mark_done();
                st.finish();
                if ours {
                    metrics::release("released");
                    match st.signal.reason() {
                        Some(reason) => Err(st.lost_error(reason)),
                        None => Ok(()),
                    }
                } else {
                    metrics::release("already_gone");
                    st.fire(LostReason::NotOurs);
                    Err(st.lost_error(st.signal.reason().unwrap_or(LostReason::NotOurs)))
                }
            }
            Err(e) => {
                metrics::release("error");
                // Drop hands a retry to the background.
                Err(e)
            }
        }
    }
}

impl Lease {
    /// Release reached Redis: Drop must not hand another one to the background.
    fn mark_done(&mut self) {
        self.done = true;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.done {
            self.state.released.store(true, Ordering::Release);
            self.client.release_in_background(self.state.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(opts: LeaseOptions, sent_at: Instant) -> LeaseState {
        LeaseState::new(
            1,
            "t",
            &LeaseKeys::new("leasehold", "t").unwrap(),
            &"0".repeat(32),
            Fence::new(7),
            Arc::new(opts),
            sent_at,
        )
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
        let st = state(o, t0);
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
        let st = state(o, t0);
        st.extend(t0 + ms(900));
        assert_eq!(st.effective_deadline(), t0 + ms(1_200));
        assert_eq!(
            st.check_time(t0 + ms(1_200)),
            Some(LostReason::MaxHoldReached)
        );
        assert_eq!(st.signal.reason(), Some(LostReason::MaxHoldReached));
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

    #[test]
    fn leases_and_clients_can_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Lease>();
        send_sync::<LostSignal>();
        send_sync::<LeaseClient>();
    }
}
