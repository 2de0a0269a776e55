//! Waiting without polling: one session per store `LISTEN`s on the lease channel, and each
//! notification wakes the waiter of its name in this process.
//!
//! The session starts before the first acquire that may wait is sent, and listens on one channel
//! for every name, so a release that commits after a contender was told "busy" always finds the
//! session listening; a notification that arrives before the contender starts waiting is kept (one
//! per name, for [`LINGER`]) and ends its wait at once.
//!
//! The same session listens on the change channel for the observers of elections
//! ([`Observers`]): a leader's record written, a release of a row that carries one, a forced
//! release; each notification bumps the notices of its name.
//!
//! Promise: a release committed after a waiter of this process was told "busy" wakes it (or the
//! next waiter of the name, within [`LINGER`]); a session that dropped is reopened, and every
//! waiter and observer is then told to look again; a session that cannot be started is no error of
//! the acquire, whose wait then ends by its time bound. A stale wake-up costs one extra attempt,
//! never a wrong grant.
//!
//! Limit: a notification sent while the session is down (the server restarted, the connection
//! dropped) is lost; every waiter is then woken to ask again, and one that was not yet waiting
//! notices the free lease when its wait ends, at most the holder's remaining time plus jitter later.
//! Behind a pooler in transaction mode (PgBouncer) `LISTEN` is accepted but no notification arrives:
//! waiting falls back to that bound.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::statements::{payload_name, CHANGE_CHANNEL, CHANNEL};

/// How long a wake-up that found nobody waiting is kept for the next waiter of its name. A stale
/// wake-up costs that waiter one extra acquire attempt, no more.
const LINGER: Duration = Duration::from_secs(30);

/// Names tracked before stale entries are pruned.
const PRUNE_ABOVE: usize = 1024;

/// After a failed start, how long before the next acquire that may wait tries again.
const RETRY_START_AFTER: Duration = Duration::from_secs(1);

/// One wake-up slot per name with recent waiters or notifications.
#[derive(Debug, Default)]
pub(super) struct Wakeups {
    slots: Mutex<HashMap<Box<str>, Slot>>,
}

#[derive(Debug)]
struct Slot {
    /// Holds one wake-up when it fired with nobody waiting (tokio's `notify_one` semantics).
    notify: Arc<Notify>,
    /// When it last fired (or was created).
    at: Instant,
}

impl Wakeups {
    /// The wake-up of `name`, to wait on. A wake-up kept for longer than [`LINGER`] is dropped.
    pub(super) fn of(&self, name: &str) -> Arc<Notify> {
        let mut slots = lock(&self.slots);
        let now = Instant::now();
        if let Some(slot) = slots.get_mut(name) {
            if now.duration_since(slot.at) > LINGER && Arc::strong_count(&slot.notify) == 1 {
                slot.notify = Arc::new(Notify::new());
                slot.at = now;
            }
            return slot.notify.clone();
        }
        prune(&mut slots, now);
        let notify = Arc::new(Notify::new());
        slots.insert(
            name.into(),
            Slot {
                notify: notify.clone(),
                at: now,
            },
        );
        notify
    }

    /// A release of `name` was notified: wake its waiter, or keep the wake-up for the next one.
    pub(super) fn wake(&self, name: &str) {
        let mut slots = lock(&self.slots);
        let now = Instant::now();
        match slots.get_mut(name) {
            Some(slot) => {
                slot.at = now;
                slot.notify.notify_one();
            }
            None => {
                prune(&mut slots, now);
                let notify = Arc::new(Notify::new());
                notify.notify_one();
                slots.insert(name.into(), Slot { notify, at: now });
            }
        }
    }

    /// Notifications may have been lost: every waiter asks again.
    pub(super) fn wake_all(&self) {
        let mut slots = lock(&self.slots);
        let now = Instant::now();
        for slot in slots.values_mut() {
            slot.notify.notify_waiters();
            slot.notify.notify_one();
            slot.at = now;
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        lock(&self.slots).len()
    }
}

/// The notices of each observed name: a notification on the change channel bumps its name's, a
/// reopened session bumps them all (what was notified meanwhile is lost: every observer reads).
#[derive(Debug, Default)]
pub(super) struct Observers {
    /// One sender per name with observers; dropped when its last observer is gone.
    senders: Mutex<HashMap<Box<str>, tokio::sync::watch::Sender<u64>>>,
}

impl Observers {
    /// Notices for `name`, from now on.
    pub(super) fn subscribe(&self, name: &str) -> tokio::sync::watch::Receiver<u64> {
        let mut senders = lock(&self.senders);
        senders.retain(|_, s| s.receiver_count() > 0);
        senders
            .entry(name.into())
            .or_insert_with(|| tokio::sync::watch::Sender::new(0))
            .subscribe()
    }

    /// A change of `name` was notified.
    fn changed(&self, name: &str) {
        if let Some(s) = lock(&self.senders).get(name) {
            s.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Notifications may have been lost: every observer reads again.
    fn all_changed(&self) {
        for s in lock(&self.senders).values() {
            s.send_modify(|n| *n = n.wrapping_add(1));
        }
    }
}

fn prune(slots: &mut HashMap<Box<str>, Slot>, now: Instant) {
    if slots.len() >= PRUNE_ABOVE {
        slots.retain(|_, s| Arc::strong_count(&s.notify) > 1 || now.duration_since(s.at) <= LINGER);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding this map leaves it consistent: every change is one insert or field set.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The listening session of one store, started on first need, stopped with the store.
pub(super) struct Listener {
    /// Where notifications go.
    pub(super) wakeups: Arc<Wakeups>,
    /// Where change notifications go.
    pub(super) observers: Arc<Observers>,
    /// Whether the session runs, or when its start last failed.
    state: tokio::sync::Mutex<State>,
    /// Stops the session's task when the store is dropped.
    stop: CancellationToken,
    /// How to open the session.
    options: PgConnectOptions,
    /// This store's prefix: notifications for other prefixes are ignored.
    prefix: Arc<str>,
    /// Bound on opening the session.
    connect_timeout: Duration,
}

// Not derived: the connect options hold the password.
impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("prefix", &self.prefix)
            .field("wakeups", &self.wakeups)
            .finish_non_exhaustive()
    }
}

#[derive(Debug)]
enum State {
    NotStarted,
    Running,
    Failed(Instant),
}

impl Listener {
    pub(super) fn new(
        options: PgConnectOptions,
        prefix: Arc<str>,
        connect_timeout: Duration,
    ) -> Self {
        Listener {
            wakeups: Arc::new(Wakeups::default()),
            observers: Arc::new(Observers::default()),
            state: tokio::sync::Mutex::new(State::NotStarted),
            stop: CancellationToken::new(),
            options,
            prefix,
            connect_timeout,
        }
    }

    /// Makes sure the session listens before the caller sends an acquire that may wait. A session
    /// that cannot be started is not an error of the acquire: waiting then ends by its time bound.
    /// Whether it listens.
    pub(super) async fn ensure(&self) -> bool {
        let mut state = self.state.lock().await;
        match *state {
            State::Running => return true,
            State::Failed(at) if at.elapsed() < RETRY_START_AFTER => return false,
            _ => {}
        }
        match tokio::time::timeout(self.connect_timeout * 2, open(&self.options)).await {
            Ok(Ok(listener)) => {
                tokio::spawn(run(
                    listener,
                    self.options.clone(),
                    self.prefix.clone(),
                    (self.wakeups.clone(), self.observers.clone()),
                    self.stop.clone(),
                ));
                *state = State::Running;
                true
            }
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "cannot LISTEN; waiters will ask again when their wait ends");
                *state = State::Failed(Instant::now());
                false
            }
            Err(_) => {
                tracing::debug!("LISTEN timed out; waiters will ask again when their wait ends");
                *state = State::Failed(Instant::now());
                false
            }
        }
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Opens a session and listens on the lease channel and the change channel.
async fn open(options: &PgConnectOptions) -> Result<PgListener, sqlx::Error> {
    // A pool of one, only so that the listener can reconnect by itself after a dropped connection.
    let pool = PgPoolOptions::new()
        .max_connections(1)
        .min_connections(0)
        .idle_timeout(None)
        .max_lifetime(None)
        .test_before_acquire(false)
        .connect_lazy_with(options.clone());
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.ignore_pool_close_event(true);
    listener.listen_all([CHANNEL, CHANGE_CHANNEL]).await?;
    Ok(listener)
}

/// Receives notifications until the store is dropped, reopening the session after an error.
async fn run(
    mut listener: PgListener,
    options: PgConnectOptions,
    prefix: Arc<str>,
    (wakeups, observers): (Arc<Wakeups>, Arc<Observers>),
    stop: CancellationToken,
) {
    let lost = || {
        wakeups.wake_all();
        observers.all_changed();
    };
    loop {
        let received = tokio::select! {
            _ = stop.cancelled() => return,
            r = listener.try_recv() => r,
        };
        match received {
            Ok(Some(n)) => {
                if let Some(name) = payload_name(n.payload(), &prefix) {
                    if n.channel() == CHANGE_CHANNEL {
                        observers.changed(name);
                    } else {
                        wakeups.wake(name);
                    }
                }
            }
            // The connection dropped and was reopened (and listens again): whatever was notified
            // in between is lost.
            Ok(None) => lost(),
            Err(e) => {
                tracing::debug!(error = %e, "listening session failed; reopening it");
                lost();
                listener = loop {
                    let pause = Duration::from_millis(rand::random_range(100..=500));
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(pause) => {}
                    }
                    if let Ok(l) = open(&options).await {
                        // Releases during the gap were not heard.
                        lost();
                        break l;
                    }
                };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_wake_up_with_nobody_waiting_is_kept_for_the_next_waiter() {
        let w = Wakeups::default();
        w.wake("a");
        let n = w.of("a");
        tokio::time::timeout(Duration::from_millis(100), n.notified())
            .await
            .expect("the kept wake-up ends the wait at once");
        // Consumed: the next wait blocks.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), n.notified())
                .await
                .is_err()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_wake_up_is_dropped() {
        let w = Wakeups::default();
        w.wake("a");
        tokio::time::advance(LINGER + Duration::from_secs(1)).await;
        let n = w.of("a");
        assert!(
            tokio::time::timeout(Duration::from_millis(50), n.notified())
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn wake_all_wakes_the_waiting_and_the_next() {
        let w = Arc::new(Wakeups::default());
        let n = w.of("a");
        let waiting = tokio::spawn(async move { n.notified().await });
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        w.wake_all();
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("woken")
            .unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn slots_of_idle_names_are_pruned() {
        let w = Wakeups::default();
        for i in 0..PRUNE_ABOVE {
            w.wake(&format!("n{i}"));
        }
        tokio::time::advance(LINGER + Duration::from_secs(1)).await;
        let _held = w.of("new");
        assert_eq!(w.len(), 1);
    }
}
