//! The command line: clap definitions only, no behaviour. Promise: every argument is checked for form
//! here (durations, numbers, addresses) and for meaning by the library before anything touches Redis.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use crate::duration;

/// Leases with fencing tokens (on Redis and other stores), and proof of what they can and cannot
/// promise.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding a lease; stop it if the lease is lost.
    ///
    /// If `run` itself dies (kill -9, OOM killer), the command's parent, a watcher process, stops it.
    ///
    /// Exit codes: the command's own (128+N if it died by signal N); 2 bad usage; 69 store unreachable;
    /// 70 leasehold failed (e.g. its watcher was killed; the command was stopped); 75 busy (see
    /// --busy-exit-code); 76 the lease was lost and the command was stopped; 126/127 the command could
    /// not be executed / was not found.
    #[command(
        after_help = "Example: leasehold run --wait 30s --ttl 1m nightly-import -- ./import.sh --full"
    )]
    Run(RunArgs),
    /// Show whether a lease is held, for how long, its current fence and where the store keeps it.
    Status(StatusArgs),
    /// List leases whose name matches a glob pattern (default: all).
    List(ListArgs),
    /// UNSAFE operator override: take a lease away from its holder and advance its fence.
    Release(ReleaseArgs),
    /// Create or upgrade leasehold's tables in a PostgreSQL or SQLite database: the lease table a
    /// postgres:// store needs, and the tables of fenced writes, idempotency keys and the inbox.
    ///
    /// Run it once before the first `leasehold run --store postgres://…` (the store does not change
    /// the schema by itself). Idempotent and safe to run from several places at once.
    ///
    /// Exit codes: 0 done; 2 bad URL or a database that refuses the credentials; 69 unreachable.
    #[command(after_help = "Example: leasehold migrate --store postgres://app@db.internal/app")]
    Migrate(MigrateArgs),
    /// Tell the story live: each naive lock failing, and its fix.
    Demo(leasehold_lab::demo::DemoArgs),
    /// Inject faults and count which strategy keeps data correct.
    Verify(leasehold_lab::verify::VerifyArgs),
    /// Measure leasehold against the protocol's limit.
    Bench(leasehold_lab::bench::BenchArgs),
    #[command(name = "__demo-worker", hide = true)]
    DemoWorker(leasehold_lab::demo::WorkerArgs),
    #[command(name = "__verify-worker", hide = true)]
    VerifyWorker(leasehold_lab::verify::WorkerArgs),
    #[command(name = "__bench-worker", hide = true)]
    BenchWorker(leasehold_lab::bench::WorkerArgs),
    #[command(name = "__run-watcher", hide = true)]
    RunWatcher(crate::watcher::WatcherArgs),
}

/// Where the leases live.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// The lease store: `redis://[user:password@]host[:port][/db]` or `rediss://…` (TLS); through
    /// Sentinel `redis-sentinel://[user:password@]host[:port][,host[:port]…][/db][?sentinel_password=…]#master`;
    /// a Redis Cluster `redis-cluster://[user:password@]host:port[,host:port…]` (`rediss-…` for TLS);
    /// `postgres://user[:password]@host[:port]/database` (after `leasehold migrate`);
    /// `etcd://[user:password@]host:port[,host:port…]` (the members of an etcd cluster) or `etcds://…`
    /// (TLS). Give a Redis URL an odd number of times, 3 or more, for Redlock over that many
    /// independent Redis masters (a majority must hold the lease). Also read from LEASEHOLD_STORE
    /// (several URLs separated by spaces for Redlock), then LEASEHOLD_REDIS_URL; default
    /// redis://127.0.0.1:6379. `--redis` is an alias.
    #[arg(
        long = "store",
        visible_alias = "redis",
        value_name = "URL",
        env = "LEASEHOLD_STORE",
        hide_env_values = true
    )]
    pub(crate) urls: Vec<String>,
    /// Key prefix: the namespace of lease names in the store (Redis keys {PREFIX:NAME}:lock, :fence,
    /// :queue and the like; the `prefix` column of PostgreSQL's leasehold_leases; etcd keys
    /// PREFIX/{NAME} and PREFIX/{NAME}/TOKEN).
    #[arg(
        long,
        value_name = "PREFIX",
        env = "LEASEHOLD_KEY_PREFIX",
        default_value = "leasehold"
    )]
    pub(crate) key_prefix: String,
    /// How long the store keeps what it knows of a name after its last use (on Redis the fence
    /// key; the queue's keys live seconds), so that names no longer used leave nothing behind.
    /// Fences stay increasing after it passes (they are at least the server's time in µs).
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEHOLD_RETENTION",
        value_parser = duration::parse,
        default_value = "1h"
    )]
    pub(crate) retention: Duration,
}

/// Used when neither `--store`/`--redis` nor an environment variable names a store.
pub(crate) const DEFAULT_STORE: &str = "redis://127.0.0.1:6379";

impl StoreArgs {
    /// The store URL(s): `--store`/`--redis` (repeated for Redlock), else LEASEHOLD_STORE (clap
    /// reads it; URLs separated by spaces), else the older LEASEHOLD_REDIS_URL, else the local
    /// default. Whether several make a valid Redlock is the library's to say.
    pub(crate) fn urls(&self) -> Vec<String> {
        let given: Vec<String> = self
            .urls
            .iter()
            .flat_map(|u| u.split_whitespace())
            .map(str::to_owned)
            .collect();
        if !given.is_empty() {
            return given;
        }
        vec![std::env::var("LEASEHOLD_REDIS_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_STORE.to_owned())]
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// How long to wait for a busy lease before giving up (woken by the holder's release, not by
    /// polling). 0, the default, tries once.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "0")]
    pub(crate) wait: Duration,
    /// Lease length on the server; renewed every third of it while the command runs. A holder that
    /// stops renewing (crash, pause) keeps others out for at most this long.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "30s")]
    pub(crate) ttl: Duration,
    /// Hard cap on how long the command may hold the lease; when reached, the lease counts as lost and
    /// the command is stopped (exit 76). Default: no cap.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    pub(crate) max_hold: Option<Duration>,
    /// Time between SIGTERM and SIGKILL to the command's process group and everything below it, when
    /// the lease is lost, when `run` dies, or to what the command left running when it exits.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "10s")]
    pub(crate) grace: Duration,
    /// Holders the name admits at once: 1 (the default) is a lock; more makes it a semaphore, and
    /// this run holds one of its permits. Everyone using a name must give the same number while it is
    /// in use.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) permits: u32,
    /// Exit code when the lease is busy and no wait is left (like flock -E).
    #[arg(long, value_name = "CODE", default_value_t = crate::exit::BUSY,
          value_parser = clap::value_parser!(i32).range(0..=255))]
    pub(crate) busy_exit_code: i32,
    /// Serve Prometheus metrics (wait, hold, renewals, lost leases) on this address, e.g. 127.0.0.1:9464.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// Say on stderr when the lease is acquired and released.
    #[arg(long, short)]
    pub(crate) verbose: bool,
    /// Lease name (no braces or control characters, at most 256 bytes).
    pub(crate) name: String,
    /// The command and its arguments, after `--`. It gets LEASEHOLD_NAME and LEASEHOLD_FENCE in its
    /// environment and, unless stdin is a terminal, runs in its own process group. Its parent is a
    /// watcher process that stops it if `run` dies.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print one JSON object: name, key, held, ttl_ms, fence, permits, free, holders, waiting,
    /// fence_key, queue_key.
    #[arg(long)]
    pub(crate) json: bool,
    /// Lease name.
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print a JSON array of objects, each as `status --json` prints one.
    #[arg(long)]
    pub(crate) json: bool,
    /// Glob over lease names (`*`, `?`, `[abc]`).
    #[arg(default_value = "*")]
    pub(crate) pattern: String,
}

#[derive(Debug, Args)]
#[command(
    long_about = "UNSAFE operator override: delete a lease whoever holds it and advance its fence.\n\n\
The evicted holder is NOT asked: its renewal fails, its `leasehold run` stops its command (exit 76), \
and fenced resources refuse its later writes. Anything it does outside fenced resources before it \
notices can overlap with the next holder. Use it to unstick a lease whose holder you know is dead or \
must stop now."
)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Required: confirms you mean to evict whoever holds the lease (unsafe for that holder).
    #[arg(long, required = true)]
    pub(crate) force: bool,
    /// Evict only the holder with this token (as `status` lists them); without it, every holder.
    #[arg(long, value_name = "TOKEN")]
    pub(crate) token: Option<String>,
    /// Print one JSON object: name, evicted, fence.
    #[arg(long)]
    pub(crate) json: bool,
    /// Lease name.
    pub(crate) name: String,
}
