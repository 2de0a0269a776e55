//! The worker process: takes the lock its strategy prescribes, reads, waits where the harness can
//! inject a fault, writes, releases, and reports each step as one JSON line on stdout.
//!
//! Protocol. stdout: one [`Event`] per line. stdin: `hold` (stop at the next hold point, say
//! [`Event::Held`], and wait), `unhold` (forget a `hold` not yet reached), `go` (continue after a
//! hold), `long` (continue after a hold into a long critical section that ends when the worker's
//! stop rule says so, or at the next `go`, and then takes a slow shutdown before its write: the
//! `partition` fault), `stop` (finish the current operation, or give up a lock wait, and exit). The harness never
//! trusts a worker's word about what was written: the resource's history is the record; the events
//! only give the lease intervals, the refusals and the stalled lock waits for the report.

use std::io::{BufRead as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::watch;

use leasehold::lease::store::redis::keys::LeaseKeys;
use leasehold::lease::{Lease, LeaseClient, LeaseOptions};

use super::resource::fenced::Fenced;
use super::resource::guards::Guards;
use super::resource::{Outcome, Plan, Resource};
use super::strategy::{Lock, Strategy};
use super::WorkerArgs;

/// One line a worker prints.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "ev", rename_all = "kebab-case")]
pub(crate) enum Event {
    /// Connected and about to start.
    Ready,
    /// The lock is ours (by the strategy's own account), with the fence if it has one, and the
    /// value it put in the lock key when the harness can recognise it there (naive, ttl-del).
    Acquired {
        op: u64,
        at_ms: i64,
        fence: i64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        token: Option<String>,
    },
    /// Stopped at the hold point inside the critical section, as the harness asked.
    Held { op: u64 },
    /// A long critical section (`long`) was told to stop, by its stop rule (`why` the lease's
    /// signal) or by the harness's `go` (`why` "go"), and starts its shutdown of `shutdown_ms`.
    Stopping {
        op: u64,
        at_ms: i64,
        shutdown_ms: u64,
        why: String,
    },
    /// What the resource answered to our write.
    Wrote {
        op: u64,
        at_ms: i64,
        fence: i64,
        outcome: Outcome,
    },
    /// The lock was released (`ok` false when it was no longer ours or Redis did not answer;
    /// `error` says which, when the release failed).
    Released {
        op: u64,
        at_ms: i64,
        ok: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// An operation failed (lock or database error); the client retries it.
    Failed { op: u64, error: String },
    /// A lock wait gave up after `waited_ms` (the stall limit): nobody freed the lock in all that
    /// time. `lock_ttl_ms` is what Redis said of the lock key then: -1 held with no expiry, -2 free,
    /// otherwise its remaining TTL (`None` when it could not be asked). The operation is retried.
    Stalled {
        op: u64,
        at_ms: i64,
        waited_ms: u64,
        lock_ttl_ms: Option<i64>,
    },
    /// Exiting after `stop`.
    Exit { ops: u64 },
}

/// Milliseconds since the Unix epoch on this machine's clock.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

fn emit(event: &Event) {
    let mut out = std::io::stdout().lock();
    // The harness reads this pipe; if it is gone the worker has nobody to report to and stops.
    if serde_json::to_writer(&mut out, event).is_err()
        || out.write_all(b"\n").is_err()
        || out.flush().is_err()
    {
        std::process::exit(3);
    }
}

/// The commands the harness sends on stdin.
#[derive(Debug)]
struct Control {
    hold_next: AtomicBool,
    /// Set once by `stop` (or a closed stdin); a lock wait gives up when it is.
    stop: watch::Sender<bool>,
    /// Bumped by each `go` or `long` (and a closed stdin): a hold waits for the next bump, so a
    /// `go` that arrives when nothing is held is not kept for a later hold.
    go: watch::Sender<u64>,
    /// Set by `long` just before its bump: the held section goes on as a long one.
    long: AtomicBool,
}

impl Control {
    fn stopping(&self) -> bool {
        *self.stop.borrow()
    }

    async fn stopped(&self) {
        let mut stop = self.stop.subscribe();
        // Fails only when the sender is gone, and `self` owns it.
        let _ = stop.wait_for(|s| *s).await;
    }
}

/// The lease name the lease strategies lock.
const LEASE_NAME: &str = "resource";

/// The Redis key that holds the lock of `strategy` for a cell whose keys start with `key`, for
/// the harness to look at (`None` without a lock). The one place that knows each strategy's key.
pub(crate) fn lock_key(strategy: Strategy, key: &str) -> Option<String> {
    match strategy.lock() {
        Lock::Naive | Lock::TtlDel => Some(format!("{key}:lock")),
        Lock::Lease | Lock::Redlock | Lock::Election if strategy.uses_redis() => {
            LeaseKeys::new(key, LEASE_NAME).ok().map(|k| k.lock)
        }
        // Not on Redis: the harness has no key of theirs to look at.
        Lock::Lease | Lock::Redlock | Lock::Election | Lock::Guards => None,
    }
}

/// The lock a strategy takes before its critical section.
enum Locker {
    /// `SETNX key token` then `PEXPIRE key ttl` (two commands), released with `DEL`.
    Naive {
        con: ConnectionManager,
        key: String,
        ttl: Duration,
    },
    /// `SET key token NX PX ttl`, released with a bare `DEL`.
    TtlDel {
        con: ConnectionManager,
        key: String,
        ttl: Duration,
    },
    /// A leasehold lease; with `elect`, the leadership of an election on the name (campaign).
    Lease {
        client: LeaseClient,
        name: String,
        opts: LeaseOptions,
        elect: bool,
    },
    /// No lock at all: the database guards.
    Nothing,
}

enum Held {
    /// A plain Redis lock holding this token.
    Redis(String),
    Lease(Lease),
    Nothing,
}

/// How a lock wait ended.
enum Acquired {
    /// The lock is ours, with its fence (0 without one).
    Held(Held, i64),
    /// Nobody freed the lock within the stall limit.
    Stalled(Duration),
    /// The harness said `stop` while we waited.
    Stopping,
}

impl std::fmt::Debug for Locker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Locker")
    }
}

impl Locker {
    async fn new(args: &WorkerArgs) -> anyhow::Result<Self> {
        let ttl = Duration::from_millis(args.ttl_ms);
        let redis = || async {
            let url = args.redis.first().context("this strategy needs --redis")?;
            let client = redis::Client::open(url.as_str())
                .with_context(|| format!("bad Redis URL {url:?}"))?;
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(Duration::from_millis(500)))
                .set_connection_timeout(Some(Duration::from_millis(500)))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_millis(100));
            ConnectionManager::new_with_config(client, config)
                .await
                .with_context(|| format!("cannot connect to Redis at {url}"))
        };
        let lock = || lock_key(args.strategy, &args.key).unwrap_or_default();
        Ok(match args.strategy.lock() {
            Lock::Naive => Self::Naive {
                con: redis().await?,
                key: lock(),
                ttl,
            },
            Lock::TtlDel => Self::TtlDel {
                con: redis().await?,
                key: lock(),
                ttl,
            },
            Lock::Lease | Lock::Election => {
                // On Redis through the worker's proxy (or a Sentinel or Cluster URL); elsewhere
                // the run-wide store's URL.
                let url = if args.strategy.uses_redis() {
                    args.redis.first().context("this strategy needs --redis")?
                } else {
                    args.lease_store
                        .as_ref()
                        .context("this strategy needs --lease-store")?
                };
                // Opted in to a Redis that may evict (the `eviction` fault's server): the cell
                // measures what that opt-in accepts. A server that does not evict is unaffected.
                let client = LeaseClient::builder(url.as_str())
                    .key_prefix(args.key.clone())
                    .store_options(
                        leasehold::lease::store::redis::RedisOptions::default()
                            .allow_eviction(true),
                    )
                    .connect()
                    .await?;
                Self::Lease {
                    client,
                    name: LEASE_NAME.to_owned(),
                    opts: lease_options(ttl)?,
                    elect: args.strategy.election(),
                }
            }
            Lock::Redlock => {
                anyhow::ensure!(
                    args.redis.len() == 3,
                    "Redlock needs --redis three times, one per master"
                );
                // Each master's reply is bounded well inside the lease, so a master that is down
                // or cut off costs an attempt little, as the published algorithm asks.
                let bound = (ttl / 2).max(Duration::from_millis(25));
                let client = LeaseClient::redlock(args.redis.iter().cloned())
                    .key_prefix(args.key.clone())
                    .response_timeout(bound)
                    .connect_timeout(bound)
                    .connect()
                    .await?;
                Self::Lease {
                    client,
                    name: LEASE_NAME.to_owned(),
                    opts: lease_options(ttl)?,
                    elect: false,
                }
            }
            Lock::Guards => Self::Nothing,
        })
    }

    /// Waits for the lock up to `stall_after`, or until the harness says stop.
    async fn acquire(
        &mut self,
        stall_after: Duration,
        control: &Control,
    ) -> anyhow::Result<Acquired> {
        let started = tokio::time::Instant::now();
        let gave_up = || {
            if control.stopping() {
                Some(Acquired::Stopping)
            } else if started.elapsed() >= stall_after {
                Some(Acquired::Stalled(started.elapsed()))
            } else {
                None
            }
        };
        match self {
            Self::Naive { con, key, ttl } => loop {
                // A token, not `1`, only so the harness can tell one holder's lock from the next
                // (the lock is as naive as ever: release is a bare DEL).
                let token = format!("{:032x}", rand::random::<u128>());
                let won: bool = redis::cmd("SETNX")
                    .arg(&*key)
                    .arg(&token)
                    .query_async(con)
                    .await?;
                if won {
                    // The classic mistake: the expiry is a second command, so a crash (or a
                    // failover) between the two leaves a lock that never expires.
                    let _: bool = redis::cmd("PEXPIRE")
                        .arg(&*key)
                        .arg(ttl.as_millis() as u64)
                        .query_async(con)
                        .await?;
                    return Ok(Acquired::Held(Held::Redis(token), 0));
                }
                if let Some(end) = gave_up() {
                    return Ok(end);
                }
                backoff().await;
            },
            Self::TtlDel { con, key, ttl } => loop {
                let token = format!("{:032x}", rand::random::<u128>());
                let won: Option<String> = redis::cmd("SET")
                    .arg(&*key)
                    .arg(&token)
                    .arg("NX")
                    .arg("PX")
                    .arg(ttl.as_millis() as u64)
                    .query_async(con)
                    .await?;
                if won.is_some() {
                    return Ok(Acquired::Held(Held::Redis(token), 0));
                }
                if let Some(end) = gave_up() {
                    return Ok(end);
                }
                backoff().await;
            },
            Self::Lease {
                client,
                name,
                opts,
                elect,
            } => {
                let taken = async {
                    if *elect {
                        // The term is the lease's fence: the leadership is supervised as the lease.
                        let election = leasehold::election::Election::new(client, name, opts)?;
                        election
                            .campaign(&std::process::id().to_string(), stall_after)
                            .await
                            .map(leasehold::election::Leadership::into_lease)
                    } else {
                        client.acquire(name, opts, stall_after).await
                    }
                };
                tokio::select! {
                    r = taken => match r {
                        Ok(lease) => {
                            let fence = lease.fence().as_i64();
                            Ok(Acquired::Held(Held::Lease(lease), fence))
                        }
                        Err(leasehold::Error::WaitTimeout { waited, .. }) => {
                            Ok(Acquired::Stalled(waited))
                        }
                        Err(e) => Err(e.into()),
                    },
                    // Cancelling a lease wait is clean (documented cancel safe).
                    _ = control.stopped() => Ok(Acquired::Stopping),
                }
            }
            Self::Nothing => Ok(Acquired::Held(Held::Nothing, 0)),
        }
    }

    /// What Redis says of the lock key now: its PTTL (-1 no expiry, -2 absent).
    async fn lock_ttl_ms(&mut self) -> Option<i64> {
        match self {
            Self::Naive { con, key, .. } | Self::TtlDel { con, key, .. } => {
                redis::cmd("PTTL").arg(&*key).query_async(con).await.ok()
            }
            Self::Lease { client, name, .. } => {
                let info = client.inspect(name).await.ok()?;
                Some(match (info.held, info.ttl_ms) {
                    (false, _) => -2,
                    (true, None) => -1,
                    (true, Some(ms)) => i64::try_from(ms).unwrap_or(i64::MAX),
                })
            }
            Self::Nothing => None,
        }
    }

    /// Releases `held`: whether a lock was deleted, or why the release failed.
    async fn release(&mut self, held: Held) -> Result<bool, String> {
        match (self, held) {
            (Self::Naive { con, key, .. } | Self::TtlDel { con, key, .. }, Held::Redis(_)) => {
                // A bare DEL: it deletes whoever's lock is there now.
                redis::cmd("DEL")
                    .arg(&*key)
                    .query_async::<i64>(con)
                    .await
                    .map(|n| n == 1)
                    .map_err(|e| e.to_string())
            }
            (_, Held::Lease(lease)) => lease
                .release()
                .await
                .map(|_| true)
                .map_err(|e| e.to_string()),
            _ => Ok(true),
        }
    }
}

/// A worker's lease options: a lease handed over starts with its whole TTL (the default first
/// TTL of a hand-over is 1 s, which at the partition cells' 2 s leases would leave a long section
/// that starts at once too little time to stop in: the `leasehold` command renews first instead).
fn lease_options(ttl: Duration) -> anyhow::Result<LeaseOptions> {
    Ok(LeaseOptions::builder().ttl(ttl).handoff_ttl(ttl).build()?)
}

/// The rest of a long critical section (the `partition` fault's target): it runs until it is told
/// to stop, by `rule` on its lease or by the harness's next `go` (the only word a strategy without
/// a lease gets), then takes a slow shutdown, [`slow_shutdown`] of its lease, before the write
/// that follows it (a flush, a checkpoint). Under [`StopRule::InTime`] it asks
/// [`Lease::stopping`] for the longest shutdown the lease allows, its grace: the shutdown and the
/// write together must fit in it.
async fn long_section(
    rule: StopRule,
    lease: Option<&Lease>,
    go: &mut watch::Receiver<u64>,
    op: u64,
) {
    let shutdown = lease.map_or(Duration::ZERO, |l| slow_shutdown(l.options()));
    // What it is told to fit its shutdown in: the longest the lease allows (its grace), of which
    // the shutdown takes 60%, the rest left for the write that follows.
    let grace = lease.map_or(Duration::ZERO, |l| l.options().longest_shutdown());
    let told = async {
        match (lease, rule) {
            (Some(lease), StopRule::InTime) => lease.stopping(grace).await.to_string(),
            (Some(lease), StopRule::AtLoss) => {
                format!("lost: {}", lease.lost().fired().await)
            }
            // Nothing to watch: wait for the harness.
            (None, _) => std::future::pending().await,
        }
    };
    let why = tokio::select! {
        why = told => why,
        _ = go.changed() => "go".to_owned(),
    };
    emit(&Event::Stopping {
        op,
        at_ms: now_ms(),
        shutdown_ms: shutdown.as_millis() as u64,
        why,
    });
    tokio::time::sleep(shutdown).await;
}

/// The shutdown of a long critical section: 60% of the longest its lease allows
/// ([`LeaseOptions::longest_shutdown`]), the rest left for the write itself.
pub(crate) fn slow_shutdown(opts: &LeaseOptions) -> Duration {
    opts.longest_shutdown() * 6 / 10
}

/// When a long critical section starts to stop (`--stop-rule`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopRule {
    /// When [`Lease::stopping`] says so for its shutdown: early enough to be done by
    /// [`Lease::stop_by`], before the store may hand the name on (the rule since the stop before
    /// the hand-over).
    InTime,
    /// When the lease is lost at its deadline (the old rule): its shutdown then runs past the
    /// moment the store may hand the name on.
    AtLoss,
}

/// The polling locks' pause between two tries.
async fn backoff() {
    let jitter = rand::random::<u64>() % 5;
    tokio::time::sleep(Duration::from_millis(3 + jitter)).await;
}

/// Where the worker's reads and writes go: the cell's tables, and leasehold's fenced transactions
/// or guards when the strategy uses them.
#[derive(Debug)]
struct Writers {
    resource: Resource,
    fenced: Option<Fenced>,
    guards: Option<Guards>,
}

/// Runs the worker until `stop` arrives on stdin (or stdin closes).
pub(crate) async fn run(args: WorkerArgs) -> anyhow::Result<i32> {
    let resource = Resource::connect(&args.database, &args.prefix, 2).await?;
    let fenced = if args.strategy.fenced() {
        Some(Fenced::connect(&args.database, &args.prefix, &args.key, args.fenced_writer).await?)
    } else {
        None
    };
    let guards = if args.strategy.guarded() {
        Some(Guards::connect(&args.database, &args.prefix, &args.key).await?)
    } else {
        None
    };
    let writers = Writers {
        resource,
        fenced,
        guards,
    };
    let mut locker = Locker::new(&args).await?;
    let control = Arc::new(Control {
        hold_next: AtomicBool::new(false),
        stop: watch::channel(false).0,
        go: watch::channel(0).0,
        long: AtomicBool::new(false),
    });
    let reader = control.clone();
    // A plain thread: blocking reads of stdin must not occupy the async runtime.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(line) => match line.trim() {
                    "hold" => reader.hold_next.store(true, Ordering::SeqCst),
                    "unhold" => reader.hold_next.store(false, Ordering::SeqCst),
                    "go" => reader.go.send_modify(|n| *n += 1),
                    "long" => {
                        reader.long.store(true, Ordering::SeqCst);
                        reader.go.send_modify(|n| *n += 1);
                    }
                    "stop" => {
                        reader.stop.send_replace(true);
                    }
                    _ => {}
                },
                Err(_) => break,
            }
        }
        reader.stop.send_replace(true);
        reader.go.send_modify(|n| *n += 1);
    });
    emit(&Event::Ready);
    let work = Duration::from_millis(args.work_ms);
    let stall_after = Duration::from_millis(args.stall_ms);
    let mut op = args.start_op;
    let mut done = 0u64;
    let mut retries = 0u32;
    while !control.stopping() {
        let outcome = one_op(
            &args,
            &writers,
            &mut locker,
            &control,
            op,
            work,
            stall_after,
        )
        .await;
        let failed = match outcome {
            Ok(Step::Done) => {
                op += 1;
                done += 1;
                retries = 0;
                false
            }
            Ok(Step::Stopping) => break,
            Ok(Step::Stalled(waited)) => {
                let lock_ttl_ms = locker.lock_ttl_ms().await;
                emit(&Event::Stalled {
                    op,
                    at_ms: now_ms(),
                    waited_ms: waited.as_millis() as u64,
                    lock_ttl_ms,
                });
                true
            }
            Err(e) => {
                emit(&Event::Failed {
                    op,
                    error: format!("{e:#}"),
                });
                true
            }
        };
        if failed {
            // A client retry of the same request, up to three times, then move on.
            retries += 1;
            if retries >= 3 {
                op += 1;
                retries = 0;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    emit(&Event::Exit { ops: done });
    Ok(0)
}

/// How one operation ended, when it did not fail.
enum Step {
    Done,
    Stalled(Duration),
    Stopping,
}

async fn one_op(
    args: &WorkerArgs,
    writers: &Writers,
    locker: &mut Locker,
    control: &Control,
    op: u64,
    work: Duration,
    stall_after: Duration,
) -> anyhow::Result<Step> {
    let (held, fence) = match locker.acquire(stall_after, control).await? {
        Acquired::Held(held, fence) => (held, fence),
        Acquired::Stalled(waited) => return Ok(Step::Stalled(waited)),
        Acquired::Stopping => return Ok(Step::Stopping),
    };
    let locked = !matches!(held, Held::Nothing);
    if locked {
        emit(&Event::Acquired {
            op,
            at_ms: now_ms(),
            fence,
            token: match &held {
                Held::Redis(token) => Some(token.clone()),
                _ => None,
            },
        });
    }
    let lease = match &held {
        Held::Lease(lease) => Some(lease),
        _ => None,
    };
    let result = critical_section(args, writers, control, lease, op, work, fence).await;
    if locked {
        // The holder's own view ends when it sends the release, not when the reply arrives.
        let at_ms = now_ms();
        let released = locker.release(held).await;
        emit(&Event::Released {
            op,
            at_ms,
            ok: released == Ok(true),
            error: released.err(),
        });
    }
    result.map(|()| Step::Done)
}

async fn critical_section(
    args: &WorkerArgs,
    writers: &Writers,
    control: &Control,
    lease: Option<&Lease>,
    op: u64,
    work: Duration,
    fence: i64,
) -> anyhow::Result<()> {
    let Writers {
        resource,
        fenced,
        guards,
    } = writers;
    let registered = match fenced {
        Some(f) => f.register(fence).await?,
        None => true,
    };
    if !registered {
        emit(&Event::Wrote {
            op,
            at_ms: now_ms(),
            fence,
            outcome: Outcome::Stale,
        });
        return Ok(());
    }
    let plan = resource.read(args.workload).await?;
    // The harness's faults land here: inside the critical section, after the read, before a write
    // that depends on it (an operation with nothing to write cannot be hurt, so it does not stop).
    if !matches!(plan, Plan::Skip) && control.hold_next.swap(false, Ordering::SeqCst) {
        let mut go = control.go.subscribe();
        go.borrow_and_update();
        emit(&Event::Held { op });
        // Fails only when the sender is gone, and `control` owns it.
        let _ = go.changed().await;
        if control.long.swap(false, Ordering::SeqCst) {
            long_section(args.stop_rule, lease, &mut go, op).await;
        }
    }
    tokio::time::sleep(work).await;
    let outcome = match (fenced, guards) {
        (Some(f), _) => f.write(resource, &plan, args.slot as i64, fence).await?,
        (None, Some(g)) => g.write(&plan, args.slot as i64).await?,
        (None, None) => {
            resource
                .write(&plan, args.strategy, args.slot as i64, fence)
                .await?
        }
    };
    emit(&Event::Wrote {
        op,
        at_ms: now_ms(),
        fence,
        outcome,
    });
    Ok(())
}
