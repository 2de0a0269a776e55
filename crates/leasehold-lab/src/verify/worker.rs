//! The worker process: takes the lock its strategy prescribes, reads, waits where the harness can
//! inject a fault, writes, releases, and reports each step as one JSON line on stdout.
//!
//! Protocol. stdout: one [`Event`] per line. stdin: `hold` (stop at the next hold point, say
//! [`Event::Held`], and wait), `unhold` (forget a `hold` not yet reached), `go` (continue after a hold), `stop` (finish the current operation and
//! exit). The harness never trusts a worker's word about what was written: the resource's history is
//! the record; the events only give the lease intervals and the refusals for the report.

use std::io::{BufRead as _, Write as _};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::Notify;

use leasehold::lease::{Lease, LeaseClient, LeaseOptions};

use super::resource::{Fenced, Guards, Outcome, Plan, Resource};
use super::{Strategy, WorkerArgs};

/// One line a worker prints.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
#[serde(tag = "ev", rename_all = "kebab-case")]
pub(crate) enum Event {
    /// Connected and about to start.
    Ready,
    /// The lock is ours (by the strategy's own account), with the fence if it has one.
    Acquired { op: u64, at_ms: i64, fence: i64 },
    /// Stopped at the hold point inside the critical section, as the harness asked.
    Held { op: u64 },
    /// What the resource answered to our write.
    Wrote {
        op: u64,
        at_ms: i64,
        fence: i64,
        outcome: Outcome,
    },
    /// The lock was released (`ok` false when it was no longer ours or Redis did not answer).
    Released { op: u64, at_ms: i64, ok: bool },
    /// An operation failed (lock or database error); the client retries it.
    Failed { op: u64, error: String },
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
#[derive(Debug, Default)]
struct Control {
    hold_next: AtomicBool,
    stop: AtomicBool,
    go: Notify,
}

/// The lock a strategy takes before its critical section.
enum Locker {
    /// `SETNX key 1` then `PEXPIRE key ttl` (two commands), released with `DEL`.
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
    /// A leasehold lease.
    Lease {
        client: LeaseClient,
        name: String,
        opts: LeaseOptions,
    },
    /// No lock at all: the database guards.
    Nothing,
}

enum Held {
    Redis,
    Lease(Lease),
    Nothing,
}

impl std::fmt::Debug for Locker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Locker")
    }
}

const MAX_WAIT: Duration = Duration::from_secs(10);

impl Locker {
    async fn new(args: &WorkerArgs) -> anyhow::Result<Self> {
        let ttl = Duration::from_millis(args.ttl_ms);
        let redis = || async {
            let url = args
                .redis
                .as_deref()
                .context("this strategy needs --redis")?;
            let client =
                redis::Client::open(url).with_context(|| format!("bad Redis URL {url:?}"))?;
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(Duration::from_millis(500)))
                .set_connection_timeout(Some(Duration::from_millis(500)))
                .set_number_of_retries(2)
                .set_max_delay(Duration::from_millis(100));
            ConnectionManager::new_with_config(client, config)
                .await
                .with_context(|| format!("cannot connect to Redis at {url}"))
        };
        Ok(match args.strategy {
            Strategy::Naive => Self::Naive {
                con: redis().await?,
                key: format!("{}:lock", args.key),
                ttl,
            },
            Strategy::TtlDel => Self::TtlDel {
                con: redis().await?,
                key: format!("{}:lock", args.key),
                ttl,
            },
            Strategy::Lease | Strategy::LeaseFence => {
                let url = args
                    .redis
                    .as_deref()
                    .context("this strategy needs --redis")?;
                let client = LeaseClient::builder(url)
                    .key_prefix(args.key.clone())
                    .connect()
                    .await?;
                Self::Lease {
                    client,
                    name: "resource".to_owned(),
                    opts: LeaseOptions::with_ttl(ttl)?,
                }
            }
            Strategy::DbGuards => Self::Nothing,
        })
    }

    async fn acquire(&mut self) -> anyhow::Result<(Held, i64)> {
        let deadline = tokio::time::Instant::now() + MAX_WAIT;
        match self {
            Self::Naive { con, key, ttl } => loop {
                let won: bool = redis::cmd("SETNX")
                    .arg(&*key)
                    .arg(1)
                    .query_async(con)
                    .await?;
                if won {
                    // The classic mistake: the expiry is a second command, so a crash between the
                    // two leaves a lock that never expires.
                    let _: bool = redis::cmd("PEXPIRE")
                        .arg(&*key)
                        .arg(ttl.as_millis() as u64)
                        .query_async(con)
                        .await?;
                    return Ok((Held::Redis, 0));
                }
                backoff(deadline).await?;
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
                    return Ok((Held::Redis, 0));
                }
                backoff(deadline).await?;
            },
            Self::Lease { client, name, opts } => {
                let lease = client.acquire(name, opts, MAX_WAIT).await?;
                let fence = lease.fence().as_i64();
                Ok((Held::Lease(lease), fence))
            }
            Self::Nothing => Ok((Held::Nothing, 0)),
        }
    }

    async fn release(&mut self, held: Held) -> bool {
        match (self, held) {
            (Self::Naive { con, key, .. } | Self::TtlDel { con, key, .. }, Held::Redis) => {
                // A bare DEL: it deletes whoever's lock is there now.
                redis::cmd("DEL")
                    .arg(&*key)
                    .query_async::<i64>(con)
                    .await
                    .map(|n| n == 1)
                    .unwrap_or(false)
            }
            (_, Held::Lease(lease)) => lease.release().await.is_ok(),
            _ => true,
        }
    }
}

async fn backoff(deadline: tokio::time::Instant) -> anyhow::Result<()> {
    if tokio::time::Instant::now() > deadline {
        anyhow::bail!("lock not acquired within {MAX_WAIT:?}");
    }
    let jitter = rand::random::<u64>() % 5;
    tokio::time::sleep(Duration::from_millis(3 + jitter)).await;
    Ok(())
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
    let fenced = match args.strategy {
        Strategy::LeaseFence => {
            Some(Fenced::connect(&args.database, &args.prefix, &args.key).await?)
        }
        _ => None,
    };
    let guards = match args.strategy {
        Strategy::DbGuards => Some(Guards::connect(&args.database, &args.prefix, &args.key).await?),
        _ => None,
    };
    let writers = Writers {
        resource,
        fenced,
        guards,
    };
    let mut locker = Locker::new(&args).await?;
    let control = Arc::new(Control::default());
    let reader = control.clone();
    // A plain thread: blocking reads of stdin must not occupy the async runtime.
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(line) => match line.trim() {
                    "hold" => reader.hold_next.store(true, Ordering::SeqCst),
                    "unhold" => reader.hold_next.store(false, Ordering::SeqCst),
                    "go" => reader.go.notify_one(),
                    "stop" => reader.stop.store(true, Ordering::SeqCst),
                    _ => {}
                },
                Err(_) => break,
            }
        }
        reader.stop.store(true, Ordering::SeqCst);
        reader.go.notify_one();
    });
    emit(&Event::Ready);
    let work = Duration::from_millis(args.work_ms);
    let mut op = args.start_op;
    let mut done = 0u64;
    let mut retries = 0u32;
    while !control.stop.load(Ordering::SeqCst) {
        match one_op(&args, &writers, &mut locker, &control, op, work).await {
            Ok(()) => {
                op += 1;
                done += 1;
                retries = 0;
            }
            Err(e) => {
                emit(&Event::Failed {
                    op,
                    error: format!("{e:#}"),
                });
                // A client retry of the same request, up to three times, then move on.
                retries += 1;
                if retries >= 3 {
                    op += 1;
                    retries = 0;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    emit(&Event::Exit { ops: done });
    Ok(0)
}

async fn one_op(
    args: &WorkerArgs,
    writers: &Writers,
    locker: &mut Locker,
    control: &Control,
    op: u64,
    work: Duration,
) -> anyhow::Result<()> {
    let (held, fence) = locker.acquire().await?;
    let locked = !matches!(held, Held::Nothing);
    if locked {
        emit(&Event::Acquired {
            op,
            at_ms: now_ms(),
            fence,
        });
    }
    let result = critical_section(args, writers, control, op, work, fence).await;
    if locked {
        // The holder's own view ends when it sends the release, not when the reply arrives.
        let at_ms = now_ms();
        let ok = locker.release(held).await;
        emit(&Event::Released { op, at_ms, ok });
    }
    result
}

async fn critical_section(
    args: &WorkerArgs,
    writers: &Writers,
    control: &Control,
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
    let plan = resource.read(args.workload, op).await?;
    // The harness's faults land here: inside the critical section, after the read, before a write
    // that depends on it (an operation with nothing to write cannot be hurt, so it does not stop).
    if !matches!(plan, Plan::Skip) && control.hold_next.swap(false, Ordering::SeqCst) {
        emit(&Event::Held { op });
        control.go.notified().await;
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
