//! One renewal task per client keeps every held lease alive: each tick it sends all renewals that are
//! due in one batch (the store pipelines them), fires lost signals at their deadlines on its own clock
//! (a hung store cannot delay them), stops renewing at the maximum hold time, and releases dropped
//! leases in the background.
//!
//! [`Keeper`] is the narrow handle a held [`Lease`](crate::Lease) and the client share: the store and
//! the way to this task, nothing else.
//!
//! A lease taken is not sent to the task at once: it is parked beside it ([`Parked`]), and the task
//! is woken only when the lease's first event (its first renewal, or its deadline) comes before the
//! time the task already sleeps until. A lease released before that event is taken off the park and
//! the task never hears of it, so an uncontended acquire and release cost no wake-up of another task
//! (one lock of an uncontended mutex each), however often they repeat. The task takes everything
//! parked each time it wakes.
//!
//! Promise: a lease's lost signal fires at its deadline by this process's clock even when the store
//! hangs; a dropped lease is released in the background, never in `Drop`.
//! Limit: it runs on the tokio runtime; a process (or runtime) that is stalled cannot renew, and the
//! lease then expires in the store. The lost signal fires when the runtime runs again.

mod schedule;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use self::schedule::{Renewed, Schedule};
use crate::error::LostReason;
use crate::lease::metrics;
use crate::lease::state::LeaseState;
use crate::lease::store::{Held, Store};

/// Leases handed to the task but not yet taken by it, and when it looks next.
#[derive(Debug, Default)]
struct Parked {
    /// Leases taken since the task last looked, by id.
    watch: HashMap<u64, Arc<LeaseState>>,
    /// Leases the task watches that were released since it last looked.
    forget: Vec<u64>,
    /// When the task wakes next on its own (`None`: only when told).
    wakes_at: Option<Instant>,
}

/// The park and the task's wake-up, shared by the task and every [`Keeper`].
#[derive(Debug, Default)]
struct Shared {
    parked: Mutex<Parked>,
    wake: Notify,
    /// Background clean-ups (releases of dropped leases, abandons of cancelled acquires) not
    /// finished yet, for [`Keeper::settle`].
    cleanups: std::sync::atomic::AtomicUsize,
    /// Notified each time `cleanups` drops to zero.
    settled: Notify,
}

impl Shared {
    fn parked(&self) -> std::sync::MutexGuard<'_, Parked> {
        // A panic while the lock was held cannot leave the maps half-updated in a way that matters
        // (each update is one insert or remove): go on with them.
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The store and the way to the client's renewal task: what a held lease needs, and all it holds.
#[derive(Debug, Clone)]
pub(crate) struct Keeper {
    /// Where the leases live.
    store: Arc<dyn Store>,
    /// Leases dropped without release, for the task to release.
    releases: mpsc::UnboundedSender<Arc<LeaseState>>,
    /// The park.
    shared: Arc<Shared>,
}

impl Keeper {
    /// Spawns the client's renewal task (inside a Tokio runtime); it runs while any clone of the
    /// returned handle lives.
    pub(crate) fn spawn(store: Arc<dyn Store>, response_timeout: Duration) -> Self {
        let (releases, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::default());
        tokio::spawn(run(rx, shared.clone(), store.clone(), response_timeout));
        Keeper {
            store,
            releases,
            shared,
        }
    }

    /// The store.
    pub(crate) fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// The store, shared.
    pub(crate) fn store_arc(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Counts a background clean-up until the returned guard is dropped.
    pub(crate) fn cleanup(&self) -> Cleanup {
        self.shared
            .cleanups
            .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        Cleanup(self.shared.clone())
    }

    /// Waits until no background clean-up is in flight, at most `within`; whether none is.
    pub(crate) async fn settle(&self, within: Duration) -> bool {
        use std::sync::atomic::Ordering;
        let until = Instant::now() + within;
        loop {
            let settled = self.shared.settled.notified();
            if self.shared.cleanups.load(Ordering::Acquire) == 0 {
                return true;
            }
            if tokio::time::timeout_at(until, settled).await.is_err() {
                return self.shared.cleanups.load(Ordering::Acquire) == 0;
            }
        }
    }

    /// Starts renewing `state`: parks it, and wakes the task only if the lease's first event comes
    /// before the task's next look.
    pub(crate) fn watch(&self, state: Arc<LeaseState>) {
        let first = match state.first_renewal {
            Some(r) => r.min(state.effective_deadline()),
            None => state.effective_deadline(),
        };
        let mut p = self.shared.parked();
        p.watch.insert(state.id, state);
        let wake = p.wakes_at.is_none_or(|at| first < at);
        drop(p);
        if wake {
            self.shared.wake.notify_one();
        }
    }

    /// Stops renewing lease `id` (it is being released). A lease still parked is taken off the
    /// park; the task, which watches the others, forgets them when it next looks, before renewing.
    pub(crate) fn forget(&self, id: u64) {
        let mut p = self.shared.parked();
        if p.watch.remove(&id).is_none() {
            p.forget.push(id);
        }
    }

    /// Releases `state` from the task (Drop does no I/O in place).
    pub(crate) fn release_in_background(&self, state: Arc<LeaseState>) {
        self.forget(state.id);
        // Counted until the task's release of it is done (the guard travels with the lease).
        std::mem::forget(self.cleanup());
        if self.releases.send(state).is_err() {
            done_cleanups(&self.shared, 1);
        }
    }
}

/// One background clean-up in flight (see [`Keeper::cleanup`]).
#[derive(Debug)]
pub(crate) struct Cleanup(Arc<Shared>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        done_cleanups(&self.0, 1);
    }
}

fn done_cleanups(shared: &Shared, n: usize) {
    use std::sync::atomic::Ordering;
    if n > 0 && shared.cleanups.fetch_sub(n, Ordering::AcqRel) == n {
        shared.settled.notify_waiters();
    }
}

/// How long the task keeps looking on its own after a lease woke it with nothing else to watch: a
/// lease taken and released again and again (one at a time) would otherwise find the task with
/// nothing scheduled each time and wake it each time, a thread wake-up per lease (S1 in
/// docs/benchmarks.md). Within this, a new lease whose first renewal comes after the look is parked
/// without a wake-up; an idle client stops looking after one quiet period.
const IDLE_LOOK: Duration = Duration::from_secs(1);

/// The earlier of two times, either of which may be none.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Moves the parked leases into the schedule and records when the task wakes next (its schedule's
/// next event, or `idle`, the end of an idle look), under one lock: a lease parked after this sees
/// the new time, one parked before is in the schedule.
fn take_parked(shared: &Shared, schedule: &mut Schedule, idle: Option<Instant>) {
    let mut p = shared.parked();
    for id in p.forget.drain(..) {
        schedule.forget(id);
    }
    for (_, state) in p.watch.drain() {
        schedule.watch(state);
    }
    p.wakes_at = earliest(schedule.next_wake(), idle);
}

/// Upper bound on waiting for one renewal batch; a hung store is noticed by the deadline timers
/// anyway, this only frees the leases for a retry.
fn batch_timeout(items: &[Arc<LeaseState>], response_timeout: Duration) -> Duration {
    let shortest = items
        .iter()
        .filter_map(|s| s.opts.renew_every)
        .min()
        .unwrap_or(response_timeout);
    shortest
        .max(Duration::from_millis(250))
        .min(response_timeout)
}

/// Runs until every sender (the client, its clones and its leases) is gone.
async fn run(
    mut dropped: mpsc::UnboundedReceiver<Arc<LeaseState>>,
    shared: Arc<Shared>,
    store: Arc<dyn Store>,
    response_timeout: Duration,
) {
    let mut schedule = Schedule::default();
    let (outcome_tx, mut outcomes) = mpsc::unbounded_channel::<(Instant, Vec<(u64, Renewed)>)>();
    let look_every = store.look_every();
    let mut next_look = look_every.map(|every| Instant::now() + every);
    let looking = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // The end of the current idle look, if one runs.
    let mut idle: Option<Instant> = None;
    loop {
        let mut releases = Vec::new();
        let mut woken = false;
        tokio::select! {
            state = dropped.recv() => {
                let Some(state) = state else { break };
                releases.push(state);
                while let Ok(s) = dropped.try_recv() {
                    releases.push(s);
                }
            }
            () = shared.wake.notified() => woken = true,
            Some((sent_at, batch)) = outcomes.recv() => {
                let t = schedule.settle(sent_at, Instant::now(), store.clock_rate(), batch);
                metrics::renewals("renewed", t.renewed);
                metrics::renewals("not_ours", t.not_ours);
                metrics::renewals("error", t.failed);
            }
            _ = sleep_until_opt(earliest(schedule.next_wake(), idle)) => {}
            _ = sleep_until_opt(next_look) => {
                next_look = look_every.map(|every| Instant::now() + every);
                look_in_background(&store, &looking);
            }
        }
        let now = Instant::now();
        if woken {
            idle = Some(now + IDLE_LOOK);
        } else if idle.is_some_and(|end| end <= now) {
            idle = None;
        }
        take_parked(&shared, &mut schedule, idle);
        let due = schedule.due(Instant::now());
        if !due.is_empty() {
            let (store, tx) = (store.clone(), outcome_tx.clone());
            let limit = batch_timeout(&due, response_timeout);
            tokio::spawn(async move {
                let sent_at = Instant::now();
                let results = renew(&*store, &due, limit).await;
                let _ = tx.send((sent_at, results));
            });
        }
        // What `due` changed (renewals in flight, losses fired) moves the next wake.
        take_parked(&shared, &mut schedule, idle);
        if !releases.is_empty() {
            let (store, shared) = (store.clone(), shared.clone());
            tokio::spawn(async move {
                let n = releases.len();
                release_in_background(&*store, releases, response_timeout).await;
                done_cleanups(&shared, n);
            });
        }
    }
    // The client is gone: leases still held were dropped, and their releases were sent above.
}

/// Takes the store's slow look in a task of its own, unless the last one is still running.
fn look_in_background(store: &Arc<dyn Store>, looking: &Arc<std::sync::atomic::AtomicBool>) {
    use std::sync::atomic::Ordering;
    if looking.swap(true, Ordering::AcqRel) {
        return;
    }
    let (store, looking) = (store.clone(), looking.clone());
    tokio::spawn(async move {
        store.look().await;
        looking.store(false, Ordering::Release);
    });
}

/// Leases renewed per call to the store: a batch of 10,000 due leases goes out as 40 calls in a row,
/// so that what a call prepares (the leases' keys, the pipeline, the replies) is a few hundred kB at
/// most, never the whole batch at once (S3 in docs/benchmarks.md: resident memory per held lease).
const RENEW_CHUNK: usize = 256;

/// Renews `due` within `limit` for the whole batch (its calls share the bound, so a hung store
/// delays the outcomes by `limit` at most, however many calls the batch takes).
async fn renew(store: &dyn Store, due: &[Arc<LeaseState>], limit: Duration) -> Vec<(u64, Renewed)> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::with_capacity(due.len());
    for chunk in due.chunks(RENEW_CHUNK) {
        out.extend(renew_chunk(store, chunk, deadline).await);
    }
    out
}

async fn renew_chunk(
    store: &dyn Store,
    due: &[Arc<LeaseState>],
    deadline: Instant,
) -> Vec<(u64, Renewed)> {
    let held: Vec<Held<'_>> = due.iter().map(|s| s.held()).collect();
    let outcomes: Vec<Renewed> = match tokio::time::timeout_at(deadline, store.renew(&held)).await {
        Ok(Ok(per_item)) => {
            // Only when a lease was lost: ask the store why (a Redis that evicts looks at its
            // nodes' evicted keys), once for the batch.
            let mut reason = None;
            if per_item.iter().any(|r| matches!(r, Ok(false))) {
                let since = due
                    .iter()
                    .map(|s| s.acquired_at)
                    .min()
                    .unwrap_or_else(Instant::now);
                reason = Some(store.lost_reason(since).await);
            }
            per_item
                .into_iter()
                .map(|r| match r {
                    Ok(true) => Renewed::Yes,
                    Ok(false) => Renewed::Lost(reason.unwrap_or(LostReason::NotOurs)),
                    Err(e) => {
                        tracing::debug!(error = %e, "renewal refused");
                        Renewed::Failed
                    }
                })
                .collect()
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, n = due.len(), "renewal batch failed");
            vec![Renewed::Failed; due.len()]
        }
        Err(_) => {
            tracing::debug!(n = due.len(), "renewal batch timed out");
            vec![Renewed::Failed; due.len()]
        }
    };
    due.iter().map(|s| s.id).zip(outcomes).collect()
}

async fn release_in_background(store: &dyn Store, batch: Vec<Arc<LeaseState>>, limit: Duration) {
    let held: Vec<Held<'_>> = batch.iter().map(|s| s.held()).collect();
    // One retry: a release that fails twice leaves the lease to expire after its TTL.
    for attempt in 0..2 {
        match tokio::time::timeout(limit * 2, store.release(&held)).await {
            Ok(Ok(results)) => {
                for (s, r) in batch.iter().zip(results) {
                    s.finish();
                    match r {
                        Ok(true) => metrics::background_release("released"),
                        Ok(false) => {
                            metrics::background_release("already_gone");
                            s.fire(LostReason::NotOurs);
                        }
                        Err(_) => metrics::background_release("error"),
                    }
                }
                return;
            }
            Ok(Err(e)) => tracing::debug!(error = %e, attempt, "background release failed"),
            Err(_) => tracing::debug!(attempt, "background release timed out"),
        }
    }
    for s in &batch {
        s.finish();
        metrics::background_release("error");
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
