//! One renewal task per client keeps every held lease alive: each tick it sends all renewals that are
//! due in one batch (the store pipelines them), fires lost signals at their deadlines on its own clock
//! (a hung store cannot delay them), stops renewing at the maximum hold time, and releases dropped
//! leases in the background.
//!
//! [`Keeper`] is the narrow handle a held [`Lease`](crate::Lease) and the client share: the store and
//! the channel to this task, nothing else.
//!
//! Limit: it runs on the tokio runtime; a process (or runtime) that is stalled cannot renew, and the
//! lease then expires in the store. The lost signal fires when the runtime runs again.

mod schedule;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use self::schedule::{Renewed, Schedule};
use crate::error::LostReason;
use crate::lease::metrics;
use crate::lease::state::LeaseState;
use crate::lease::store::{Held, Store};

/// Messages to the task.
#[derive(Debug)]
enum Command {
    /// Start watching a newly acquired lease.
    Watch(Arc<LeaseState>),
    /// Stop watching (released explicitly).
    Forget(u64),
    /// Dropped without release: release it from here.
    Release(Arc<LeaseState>),
}

/// The store and the way to the client's renewal task: what a held lease needs, and all it holds.
#[derive(Debug, Clone)]
pub(crate) struct Keeper {
    /// Where the leases live.
    store: Arc<dyn Store>,
    /// To the renewal task.
    commands: mpsc::UnboundedSender<Command>,
}

impl Keeper {
    /// Spawns the client's renewal task (inside a Tokio runtime); it runs while any clone of the
    /// returned handle lives.
    pub(crate) fn spawn(store: Arc<dyn Store>, response_timeout: Duration) -> Self {
        let (commands, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, store.clone(), response_timeout));
        Keeper { store, commands }
    }

    /// The store.
    pub(crate) fn store(&self) -> &dyn Store {
        &*self.store
    }

    /// The store, shared.
    pub(crate) fn store_arc(&self) -> Arc<dyn Store> {
        self.store.clone()
    }

    /// Starts renewing `state`.
    pub(crate) fn watch(&self, state: Arc<LeaseState>) {
        let _ = self.commands.send(Command::Watch(state));
    }

    /// Stops renewing lease `id` (it is being released).
    pub(crate) fn forget(&self, id: u64) {
        let _ = self.commands.send(Command::Forget(id));
    }

    /// Releases `state` from the task (Drop does no I/O in place).
    pub(crate) fn release_in_background(&self, state: Arc<LeaseState>) {
        let _ = self.commands.send(Command::Release(state));
    }
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
    mut commands: mpsc::UnboundedReceiver<Command>,
    store: Arc<dyn Store>,
    response_timeout: Duration,
) {
    let mut schedule = Schedule::default();
    let (outcome_tx, mut outcomes) = mpsc::unbounded_channel::<(Instant, Vec<(u64, Renewed)>)>();
    let look_every = store.look_every();
    let mut next_look = look_every.map(|every| Instant::now() + every);
    let looking = Arc::new(std::sync::atomic::AtomicBool::new(false));
    loop {
        let mut releases = Vec::new();
        tokio::select! {
            cmd = commands.recv() => {
                let Some(cmd) = cmd else { break };
                let mut pending = vec![cmd];
                while let Ok(c) = commands.try_recv() {
                    pending.push(c);
                }
                for cmd in pending {
                    match cmd {
                        Command::Watch(state) => schedule.watch(state),
                        Command::Forget(id) => schedule.forget(id),
                        Command::Release(state) => {
                            schedule.forget(state.id);
                            releases.push(state);
                        }
                    }
                }
            }
            Some((sent_at, batch)) = outcomes.recv() => {
                let t = schedule.settle(sent_at, Instant::now(), store.clock_rate(), batch);
                metrics::renewals("renewed", t.renewed);
                metrics::renewals("not_ours", t.not_ours);
                metrics::renewals("error", t.failed);
            }
            _ = sleep_until_opt(schedule.next_wake()) => {}
            _ = sleep_until_opt(next_look) => {
                next_look = look_every.map(|every| Instant::now() + every);
                look_in_background(&store, &looking);
            }
        }
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
        if !releases.is_empty() {
            let store = store.clone();
            tokio::spawn(async move {
                release_in_background(&*store, releases, response_timeout).await;
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

async fn renew(store: &dyn Store, due: &[Arc<LeaseState>], limit: Duration) -> Vec<(u64, Renewed)> {
    let held: Vec<Held<'_>> = due.iter().map(|s| s.held()).collect();
    let outcomes: Vec<Renewed> = match tokio::time::timeout(limit, store.renew(&held)).await {
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
