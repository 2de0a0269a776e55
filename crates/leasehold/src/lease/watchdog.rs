//! One scheduler task per client renews every held lease: each tick it sends all renewals that are
//! due in one pipelined round trip, fires lost signals at their deadlines on its own clock (a hung
//! Redis cannot delay them), stops renewing at the maximum hold time, and releases dropped leases in
//! the background.
//!
//! Limit: it runs on the tokio runtime; a process (or runtime) that is stalled cannot renew, and the
//! lease then expires in Redis. The lost signal fires when the runtime runs again.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::LostReason;
use crate::lease::conn::Shared;
use crate::lease::guard::LeaseState;
use crate::lease::{metrics, scripts};

/// Messages to the scheduler.
#[derive(Debug)]
pub(crate) enum Command {
    /// Start watching a newly acquired lease.
    Watch(Arc<LeaseState>),
    /// Stop watching (released explicitly).
    Forget(u64),
    /// Dropped without release: release it from here.
    Release(Arc<LeaseState>),
}

/// A renewal batch's outcome for one lease.
#[derive(Debug)]
struct RenewOutcome {
    id: u64,
    sent_at: Instant,
    result: Result<bool, ()>,
}

struct Watched {
    state: Arc<LeaseState>,
    /// When the next renewal is due (`None`: renewal off).
    next_renew: Option<Instant>,
    /// A renewal is on the wire; do not send another.
    in_flight: bool,
    /// The instant under which this entry sits in the timer set.
    timer_at: Instant,
}

impl Watched {
    fn next_event(&self) -> Instant {
        let mut t = self.state.effective_deadline();
        if let (Some(r), false) = (self.next_renew, self.in_flight) {
            t = t.min(r);
        }
        t
    }
}

/// Most renewals sent in one pipeline; a larger due set goes out as several pipelines in a row.
const RENEW_CHUNK: usize = 1_000;

/// Upper bound on waiting for one renewal batch; a hung server is noticed by the deadline timers
/// anyway, this only frees the lease for a retry.
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

/// Runs the scheduler until every sender (the client and its leases) is gone.
pub(crate) async fn run(
    mut commands: mpsc::UnboundedReceiver<Command>,
    con: Shared,
    response_timeout: Duration,
) {
    let mut watched: HashMap<u64, Watched> = HashMap::new();
    let mut timers: BTreeSet<(Instant, u64)> = BTreeSet::new();
    let (outcome_tx, mut outcomes) = mpsc::unbounded_channel::<Vec<RenewOutcome>>();
    let mut releases: Vec<Arc<LeaseState>> = Vec::new();

    let insert = |watched: &mut HashMap<u64, Watched>,
                  timers: &mut BTreeSet<(Instant, u64)>,
                  mut w: Watched| {
        let at = w.next_event();
        w.timer_at = at;
        timers.insert((at, w.state.id));
        watched.insert(w.state.id, w);
    };

    loop {
        let next = timers.first().map(|(t, _)| *t);
        tokio::select! {
            cmd = commands.recv() => {
                let Some(cmd) = cmd else { break };
                let mut pending = vec![cmd];
                while let Ok(c) = commands.try_recv() {
                    pending.push(c);
                }
                for cmd in pending {
                    match cmd {
                        Command::Watch(state) => {
                            let next_renew = state.opts.renew_every.map(|e| state.acquired_at + e);
                            insert(&mut watched, &mut timers, Watched {
                                state,
                                next_renew,
                                in_flight: false,
                                timer_at: Instant::now(),
                            });
                        }
                        Command::Forget(id) => {
                            if let Some(w) = watched.remove(&id) {
                                timers.remove(&(w.timer_at, id));
                            }
                        }
                        Command::Release(state) => {
                            if let Some(w) = watched.remove(&state.id) {
                                timers.remove(&(w.timer_at, state.id));
                            }
                            releases.push(state);
                        }
                    }
                }
            }
            Some(batch) = outcomes.recv() => {
                let now = Instant::now();
                let (mut ok, mut not_ours, mut failed) = (0, 0, 0);
                for o in batch {
                    let Some(mut w) = watched.remove(&o.id) else { continue };
                    timers.remove(&(w.timer_at, o.id));
                    w.in_flight = false;
                    match o.result {
                        Ok(true) => {
                            ok += 1;
                            w.state.extend(o.sent_at);
                            let every = w.state.opts.renew_every.unwrap_or(Duration::MAX);
                            w.next_renew = Some(o.sent_at + every);
                        }
                        Ok(false) => {
                            not_ours += 1;
                            w.state.fire(LostReason::NotOurs);
                            continue;
                        }
                        Err(()) => {
                            failed += 1;
                            // Retry soon; the deadline timer fires the signal if retries keep failing.
                            let every = w.state.opts.renew_every.unwrap_or(Duration::from_secs(1));
                            w.next_renew = Some(now + (every / 4).max(Duration::from_millis(5)));
                        }
                    }
                    if w.state.released.load(Ordering::Acquire) || w.state.signal.is_fired() {
                        continue;
                    }
                    insert(&mut watched, &mut timers, w);
                }
                metrics::renewals("renewed", ok);
                metrics::renewals("not_ours", not_ours);
                metrics::renewals("error", failed);
            }
            _ = sleep_until_opt(next) => {}
        }

        // Everything due now: losses first, then renewals.
        let now = Instant::now();
        let mut due = Vec::new();
        while let Some(&(at, id)) = timers.first() {
            if at > now {
                break;
            }
            timers.pop_first();
            let Some(mut w) = watched.remove(&id) else {
                continue;
            };
            let st = &w.state;
            if st.released.load(Ordering::Acquire) || st.check_time(now).is_some() {
                continue;
            }
            if let (Some(r), false) = (w.next_renew, w.in_flight) {
                if r <= now {
                    w.in_flight = true;
                    due.push(st.clone());
                }
            }
            insert(&mut watched, &mut timers, w);
        }
        if let Some(first) = due.first() {
            // Coalesce: renewals due within a quarter period ride along in this batch (renewing a
            // little early is harmless), so leases taken at slightly different times share round
            // trips instead of each getting its own tick.
            let window = first.opts.renew_every.unwrap_or_default() / 4;
            let mut early = Vec::new();
            for &(at, id) in timers.range(..=(now + window, u64::MAX)) {
                let Some(w) = watched.get(&id) else { continue };
                let own = w.state.opts.renew_every.unwrap_or_default() / 4;
                if let (Some(r), false) = (w.next_renew, w.in_flight) {
                    if r <= now + own && at > now {
                        early.push((at, id));
                    }
                }
            }
            for (at, id) in early {
                timers.remove(&(at, id));
                if let Some(mut w) = watched.remove(&id) {
                    w.in_flight = true;
                    due.push(w.state.clone());
                    insert(&mut watched, &mut timers, w);
                }
            }
        }
        if !due.is_empty() {
            let mut con = con.clone();
            let tx = outcome_tx.clone();
            let limit = batch_timeout(&due, response_timeout);
            tokio::spawn(async move {
                // Pipelines of at most RENEW_CHUNK commands, one after another: the request and
                // reply buffers stay small however many leases are held.
                for chunk in due.chunks(RENEW_CHUNK) {
                    let items: Vec<scripts::RenewItem<'_>> = chunk
                        .iter()
                        .map(|s| scripts::RenewItem {
                            lock_key: s.lock_key(),
                            token: s.token(),
                            ttl: s.opts.ttl,
                        })
                        .collect();
                    let sent_at = Instant::now();
                    let reply =
                        tokio::time::timeout(limit, scripts::renew_many(&mut con, &items)).await;
                    drop(items);
                    let results: Vec<Result<bool, ()>> = match reply {
                        Ok(Ok(per_item)) => per_item
                            .into_iter()
                            .map(|r| r.map_err(|e| tracing::debug!(error = %e, "renewal refused")))
                            .collect(),
                        Ok(Err(e)) => {
                            tracing::debug!(error = %e, n = chunk.len(), "renewal batch failed");
                            vec![Err(()); chunk.len()]
                        }
                        Err(_) => {
                            tracing::debug!(n = chunk.len(), "renewal batch timed out");
                            vec![Err(()); chunk.len()]
                        }
                    };
                    let batch = chunk
                        .iter()
                        .zip(results)
                        .map(|(s, result)| RenewOutcome {
                            id: s.id,
                            sent_at,
                            result,
                        })
                        .collect();
                    let _ = tx.send(batch);
                }
            });
        }
        if !releases.is_empty() {
            let batch = std::mem::take(&mut releases);
            let mut con = con.clone();
            tokio::spawn(async move {
                release_in_background(&mut con, batch, response_timeout).await;
            });
        }
    }
    // The client is gone: leases still held were dropped, and their releases were sent above.
}

async fn release_in_background(con: &mut Shared, batch: Vec<Arc<LeaseState>>, limit: Duration) {
    let items: Vec<scripts::ReleaseItem> = batch
        .iter()
        .map(|s| scripts::ReleaseItem {
            keys: s.keys().clone(),
            token: s.token().to_owned(),
        })
        .collect();
    // One retry: a release that fails twice leaves the lock to expire after its TTL.
    for attempt in 0..2 {
        match tokio::time::timeout(limit, scripts::release_many(con, &items)).await {
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
