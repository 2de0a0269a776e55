//! The held lease.
//!
//! Promise: while it lives, the client's watchdog renews it; its [`LostSignal`] fires no later than
//! the holder's own deadline (measured from before the acquire or the last successful renewal was
//! sent, minus drift), even if the store hangs; dropping it releases it in the background (Drop does
//! no I/O in place). Limit: it cannot stop code that is already running; a process paused past its
//! deadline learns of the loss only when it runs again. Fence the resource for correctness.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{LostReason, Result};
use crate::fence::Fence;
use crate::lease::options::LeaseOptions;
use crate::lease::signal::{HealthWatch, LeaseHealth, LostSignal};
use crate::lease::state::LeaseState;
use crate::lease::store;
use crate::lease::watchdog::Keeper;
use crate::lease::{metrics, StoreKind};

/// A held lease. Renewed in the background while alive; [`release`](Self::release) it explicitly.
/// Dropping it without release hands the release to a background task (Drop does no I/O in place).
///
/// # Examples
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> leasehold::Result<()> {
/// use std::time::Duration;
/// use leasehold::{LeaseClient, LeaseOptions};
///
/// # async fn write_report(_fence: leasehold::Fence) {}
/// let client = LeaseClient::connect("redis://127.0.0.1:6379/").await?;
/// let opts = LeaseOptions::with_ttl(Duration::from_secs(5))?;
/// let lease = client.acquire("doc-lease", &opts, Duration::from_secs(5)).await?;
/// let lost = lease.lost();
/// tokio::select! {
///     // The fence goes to the resource, which refuses this holder once it is superseded.
///     () = write_report(lease.fence()) => lease.release().await?,
///     reason = lost.fired() => eprintln!("stopped: {reason}"),
/// }
/// # Ok(()) }
/// ```
#[must_use = "a lease is released when dropped; hold it for the critical section"]
#[derive(Debug)]
pub struct Lease {
    /// What the watchdog shares with this guard: token, deadline, signal.
    state: Arc<LeaseState>,
    /// The store and the watchdog's channel: all a held lease needs of its client.
    keeper: Keeper,
    /// Set once release reached the store, so Drop does not hand a second release to the background.
    done: bool,
}

impl Lease {
    pub(crate) fn new(state: Arc<LeaseState>, keeper: Keeper) -> Self {
        keeper.watch(state.clone());
        Lease {
            state,
            keeper,
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

    /// The random token the store holds for this holder (128 bits as 32 hex digits).
    pub fn token(&self) -> &str {
        self.state.token()
    }

    /// Which kind of store holds it.
    pub fn store_kind(&self) -> StoreKind {
        self.keeper.store().kind()
    }

    /// The options it was taken with.
    pub fn options(&self) -> &LeaseOptions {
        &self.state.opts
    }

    /// The lost-lease signal.
    pub fn lost(&self) -> LostSignal {
        self.state.signal.clone()
    }

    /// A watch on how the lease stands: [`LeaseHealth::Held`], [`LeaseHealth::Suspect`] (at risk
    /// before its deadline: renewals failing, or the store's clock running faster than ours beyond
    /// the drift allowance) or [`LeaseHealth::Lost`] (with the lost signal's reason).
    ///
    /// Which stores can tell what: every store reports renewals failing; a Redis server reached by
    /// `redis://` or `rediss://` also reports its clock's rate, learned from the server time its
    /// acquire and renewal replies carry, and counts the deadline at that rate.
    pub fn health(&self) -> HealthWatch {
        self.state.health()
    }

    /// How the lease stands now (shorthand for `health().current()`).
    pub fn health_now(&self) -> LeaseHealth {
        self.state.health_now()
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

    /// The instant by which everything done under the lease must have stopped, by this process's
    /// clock: the earliest moment the store may hand the name on, as this holder estimates it
    /// conservatively (from before the last renewal the store accepted was sent, plus the TTL,
    /// counted at the store's clock rate where known), less the
    /// [`stop_margin`](LeaseOptions::stop_margin). Each successful renewal moves it on. Work that
    /// takes `shutdown` to stop must start stopping at `stop_by() - shutdown` at the latest:
    /// [`stopping`](Self::stopping) says when. A process paused past it learns nothing until it
    /// runs again; only a fence covers that.
    pub fn stop_by(&self) -> Instant {
        self.state.stop_by()
    }

    /// Completes when work that takes up to `shutdown` to stop must start stopping so as to be
    /// gone by [`stop_by`](Self::stop_by): at `stop_by() - shutdown` unless a renewal moved the
    /// deadline on meanwhile (when the deadline is that close only because the store's clock runs
    /// faster than ours, not before the next renewal is overdue or failing, and then with less
    /// than `shutdown` left), or at once when the lease is lost
    /// ([`Stop::Lost`](crate::Stop::Lost)). A healthy lease renewed on time never completes it
    /// when `shutdown` fits ([`LeaseOptions::check_shutdown`]). A lease handed over with a short
    /// first TTL ([`LeaseOptions::handoff_ttl`]) has its deadline close until its first renewal:
    /// [`renew`](Self::renew) once first when the work needs a long shutdown.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only watches the clock and the lost signal.
    pub async fn stopping(&self, shutdown: Duration) -> crate::Stop {
        // A clock rate learned later may move the deadline back a little: look again at least
        // this often (and at every change of health).
        const LOOK_AGAIN: Duration = Duration::from_secs(1);
        let lost = self.lost();
        let mut health = self.health();
        loop {
            if let Some(reason) = lost.reason() {
                return crate::Stop::Lost(reason);
            }
            let st = &self.state;
            let stop_by = st.stop_by();
            let now = Instant::now();
            let at = stop_by.checked_sub(shutdown).unwrap_or(now);
            // While renewals succeed on time, a deadline that is close only because the store's
            // clock runs fast is moved on by the next renewal: wait for that renewal to be
            // overdue (or failing) before stopping, and stop by `stop_by` whatever happens.
            let hold_off = match st.renewal_overdue_at() {
                Some(overdue) if !st.renewals_failing() => overdue.min(stop_by),
                _ => now,
            };
            let when = at.max(hold_off);
            if when <= now {
                return crate::Stop::Due { stop_by };
            }
            tokio::select! {
                reason = lost.fired() => return crate::Stop::Lost(reason),
                _ = tokio::time::sleep_until(when.min(now + LOOK_AGAIN)) => {}
                _ = health.changed() => {}
            }
        }
    }

    /// How long it has been held, measured from before the acquire was sent.
    pub fn held_for(&self) -> Duration {
        self.state.acquired_at.elapsed()
    }

    /// Renews now (the watchdog does this on its own).
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when it is no longer ours: already lost by the
    /// client's deadline or max hold, or the store no longer holds our token. A store failure or
    /// [`Error::Timeout`](crate::Error::Timeout) leaves the deadline where it was.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a renewal that was sent and not awaited only extends our own lease.
    #[tracing::instrument(level = "debug", skip(self), fields(lease = %self.state.name(), fence = %self.state.fence))]
    pub async fn renew(&self) -> Result<()> {
        let st = &self.state;
        let sent_at = Instant::now();
        if let Some(reason) = st.check_time(sent_at) {
            return Err(st.lost_error(reason));
        }
        let reply = store::only(self.keeper.store().renew(&[st.held()]).await);
        match reply {
            Ok(true) => {
                metrics::renewal("renewed");
                st.extend(sent_at, self.keeper.store().clock_rate());
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
                st.renewal_failed();
                Err(e)
            }
        }
    }

    /// Writes `note` beside the lease, for anyone to read with
    /// [`LeaseClient::read_note`](crate::LeaseClient::read_note): only while the store still holds our
    /// token. It replaces the name's earlier note; it is kept while the lease is held, and may
    /// outlive it (up to the name's retention): a reader that needs the current holder's note writes
    /// the fence into it and compares. An election's leader record is one.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`](crate::Error::Invalid) for a note over
    /// [`MAX_NOTE_LEN`](crate::lease::store::MAX_NOTE_LEN) bytes, a semaphore's permit, or a store
    /// that keeps no notes; [`Error::LeaseLost`](crate::Error::LeaseLost) when the lease is no longer
    /// ours (nothing written); store errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a write that was sent and not awaited writes the same note or, if the lease was
    /// lost meanwhile, nothing.
    pub async fn write_note(&self, note: &[u8]) -> Result<()> {
        use crate::lease::store::MAX_NOTE_LEN;
        let st = &self.state;
        if note.len() > MAX_NOTE_LEN {
            return Err(crate::Error::invalid(
                "note",
                format!(
                    "{} bytes is over the {MAX_NOTE_LEN}-byte limit; keep a pointer (a URL, an id) \
                     in the note and the data elsewhere",
                    note.len()
                ),
            ));
        }
        if st.opts.permits > 1 {
            return Err(crate::Error::invalid(
                "note",
                "a semaphore's permits keep no note; elect with a lock (one permit)",
            ));
        }
        if let Some(reason) = st.check_time(Instant::now()) {
            return Err(st.lost_error(reason));
        }
        match self.keeper.store().write_note(&st.held(), note).await? {
            true => Ok(()),
            false => {
                st.fire(LostReason::NotOurs);
                Err(st.lost_error(st.signal.reason().unwrap_or(LostReason::NotOurs)))
            }
        }
    }

    /// Announces who holds it: writes `label` (a host and pid, a pod name), the time now and the
    /// fence beside the lease ([`write_note`](Self::write_note)), for
    /// [`LeaseClient::inspect`](crate::LeaseClient::inspect) and `leasehold status` to show. One
    /// round trip. It replaces the name's note (an election writes its own record instead).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`](crate::Error::Invalid) for a label over
    /// [`MAX_HOLDER_LABEL`](crate::lease::holder::MAX_HOLDER_LABEL) bytes or with control
    /// characters (nothing sent), a semaphore's permit or a store that keeps no notes; as
    /// [`write_note`](Self::write_note) otherwise.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`write_note`](Self::write_note).
    pub async fn announce(&self, label: &str) -> Result<()> {
        crate::lease::holder::check_label(label)?;
        let note = crate::lease::holder::encode(label, self.fence(), self.token());
        self.write_note(&note).await
    }

    /// Releases: frees the lease only if the store still holds our token, then wakes a waiter.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`](crate::Error::LeaseLost) when it was already gone (expired, or
    /// force-released), and also when the lost signal had fired before (deadline or max hold passed)
    /// even if the store still had it and it was freed now: the critical section was not covered the
    /// whole time. A store failure or [`Error::Timeout`](crate::Error::Timeout) (the release may or
    /// may not have happened) hands the release to the background, which tries once more.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if cancelled before the store answered, the release is handed to the background.
    #[tracing::instrument(level = "debug", skip(self), fields(lease = %self.state.name(), fence = %self.state.fence))]
    pub async fn release(mut self) -> Result<()> {
        let st = self.state.clone();
        st.released.store(true, Ordering::Release);
        self.keeper.forget(st.id);
        let reply = store::only(self.keeper.store().release(&[st.held()]).await);
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
    /// The release reached the store: Drop must not hand another one to the background.
    fn mark_done(&mut self) {
        self.done = true;
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.done {
            self.state.released.store(true, Ordering::Release);
            self.keeper.release_in_background(self.state.clone());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_can_cross_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<Lease>();
        send_sync::<LostSignal>();
        send_sync::<crate::LeaseClient>();
    }
}
