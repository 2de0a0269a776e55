//! The command line: clap definitions only, no behaviour. Promise: every argument is checked for form
//! here (durations, numbers, addresses) and for meaning by the library before anything touches Redis.

use std::ffi::OsString;
use std::net::SocketAddr;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand};

use crate::duration;

/// Leases with fencing tokens, and proof of what they promise
///
/// The leasehold command: run a command under a lease, inspect and force-release leases, the live
/// demo, verify and bench. Leases with fencing tokens (on Redis and other stores), and proof of what
/// they can and cannot promise.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version)]
pub(crate) struct Cli {
    /// More on stderr: -v info, -vv debug, -vvv trace
    ///
    /// More on stderr: -v info (`run` says when it acquires and releases), -vv debug, -vvv trace.
    ///
    /// Log lines go to stderr through `tracing`; RUST_LOG (e.g. `RUST_LOG=leasehold=debug`), when
    /// set, replaces what -v and -q choose.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub(crate) verbose: u8,
    /// Less on stderr: errors only.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: bool,
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
    /// 70 leasehold failed (e.g. its watcher was killed; the command was stopped); 74 the command
    /// exited 0 but the lease could not be released (it stays held until its TTL lapses); 75 busy (see
    /// --busy-exit-code); 76 the lease was lost, or became suspect under --on-suspect stop, and the
    /// command was stopped; 77 the store refused our credentials or a permission; 78 the store is
    /// misconfigured (a replica, an evicting memory policy, a key of the wrong type under leasehold's
    /// names); 126/127 the command could not be executed / was not found.
    #[command(
        after_help = "Example: leasehold run --wait 30s --ttl 1m nightly-import -- ./import.sh --full"
    )]
    Run(RunArgs),
    /// Campaign to lead NAME; run a command while leader
    ///
    /// Campaign to lead NAME; run a command while leader, with the term in LEASEHOLD_TERM.
    ///
    /// Waits (in the store's queue, woken by the leader's release, never polling) until it leads,
    /// advertises --value, then runs the command under the same supervision as `run`: stopped when
    /// the leadership is lost, stopped by the watcher if `elect` dies. When the command ends the
    /// leadership is resigned at once: the next candidate leads within a round trip, not a TTL.
    /// With --again it then campaigns again (a standby replica), until a signal stops it.
    ///
    /// The term is a fencing token: present LEASEHOLD_TERM (the same as LEASEHOLD_FENCE) to fenced
    /// writes so that a deposed leader's writes are refused.
    ///
    /// Exit codes: as `run`'s (the command's own; 2 bad usage; 69 store unreachable; 70 leasehold
    /// failed; 74 the command exited 0 but the leadership could not be resigned (it stays held until
    /// its TTL lapses); 75 not leader within --wait; 76 the leadership was lost, or became suspect
    /// under --on-suspect stop, and the command was stopped; 77 the store refused our credentials or
    /// a permission; 78 the store is misconfigured; 126/127 the command could not be executed / was
    /// not found).
    #[command(
        after_help = "Example: leasehold elect --again --value \"$(hostname):8080\" scheduler -- ./scheduler"
    )]
    Elect(ElectArgs),
    /// Show who leads an election: term, value, holder, since when
    ///
    /// Show who leads an election: term, advertised value, holder, since when.
    ///
    /// Exit codes: 0 someone leads; 3 nobody leads; 2 bad usage; 69 store unreachable; 77 the store
    /// refused our credentials or a permission; 78 the store is misconfigured.
    Leader(LeaderArgs),
    /// Show what ran in each slot of a `run --once-per` job
    ///
    /// Show what ran in each slot of a `run --once-per` job: outcome, holder, fence, start,
    /// duration, exit code, attempts.
    ///
    /// Records are kept as long as the store keeps the slot's name (at least two periods).
    History(HistoryArgs),
    /// Run scheduled jobs on every replica, each slot once: cron in a TOML file
    ///
    /// Run the jobs of a TOML file on every replica (same file, same store): each job's slot runs
    /// on exactly one replica, as `run` runs a command, its outcome in `history JOB`. Slots are
    /// reckoned on the store's clock. Subcommands: check, next, trigger, pause, resume.
    ///
    /// Exit codes: 0 stopped by SIGTERM/SIGINT after draining; 2 a jobs file or argument that is
    /// wrong (the line and the field named); 69 store unreachable (a subcommand; the daemon
    /// retries); 77 credentials refused; 78 the store is misconfigured.
    #[command(
        after_help = "Example: leasehold cron --store redis://coordination:6379 /etc/leasehold/jobs.toml"
    )]
    Cron(crate::cron::CronArgs),
    /// Show whether a lease is held, for how long, and its fence
    ///
    /// Show whether a lease is held, for how long, its current fence and where the store keeps it.
    Status(StatusArgs),
    /// List leases whose name matches a glob pattern (default: all).
    List(ListArgs),
    /// UNSAFE: take a lease away from its holder, advance its fence
    ///
    /// UNSAFE operator override: take a lease away from its holder and advance its fence.
    ///
    /// The evicted holder is NOT asked: its renewal fails, its `leasehold run` stops its command
    /// (exit 76), and fenced resources refuse its later writes. Anything it does outside fenced
    /// resources before it notices can overlap with the next holder. Use it to unstick a lease whose
    /// holder you know is dead or must stop now.
    Release(ReleaseArgs),
    /// Create or upgrade leasehold's tables in a database
    ///
    /// Create or upgrade leasehold's tables in a PostgreSQL, MariaDB/MySQL or SQLite database: the
    /// lease table a postgres:// or mysql:// store needs, and the tables of fenced writes,
    /// idempotency keys and the inbox.
    ///
    /// Run it once before the first `leasehold run --store postgres://…` (the store does not change
    /// the schema by itself). Idempotent and safe to run from several places at once.
    ///
    /// Exit codes: 0 done; 2 bad URL or no such database; 69 unreachable; 77 credentials refused.
    #[command(after_help = "Example: leasehold migrate --store postgres://app@db.internal/app")]
    Migrate(MigrateArgs),
    /// Print a shell completion script to stdout
    ///
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    #[command(
        after_help = "Example: leasehold completions bash > ~/.local/share/bash-completion/completions/leasehold"
    )]
    Completions(CompletionsArgs),
    /// Print the manual page (roff) to stdout.
    #[command(after_help = "Example: leasehold man > ~/.local/share/man/man1/leasehold.1")]
    Man,
    /// Tell the story live: each naive lock failing, and its fix.
    #[cfg(feature = "lab")]
    Demo(leasehold_lab::demo::DemoArgs),
    /// Inject faults and count which strategy keeps data correct.
    #[cfg(feature = "lab")]
    Verify(leasehold_lab::verify::VerifyArgs),
    /// Measure leasehold against the protocol's limit.
    #[cfg(feature = "lab")]
    Bench(leasehold_lab::bench::BenchArgs),
    /// Internal: a worker process of `leasehold demo`
    #[cfg(feature = "lab")]
    #[command(name = "__demo-worker", hide = true)]
    DemoWorker(leasehold_lab::demo::WorkerArgs),
    /// Internal: a worker process of `leasehold verify`
    #[cfg(feature = "lab")]
    #[command(name = "__verify-worker", hide = true)]
    VerifyWorker(leasehold_lab::verify::WorkerArgs),
    /// Internal: a worker process of `leasehold bench`
    #[cfg(feature = "lab")]
    #[command(name = "__bench-worker", hide = true)]
    BenchWorker(leasehold_lab::bench::WorkerArgs),
    /// Internal: the watcher process that is the parent of `run`'s command
    #[command(name = "__run-watcher", hide = true)]
    RunWatcher(crate::watcher::WatcherArgs),
}

/// Which shell a completion script is for.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// Where the leases live.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// Store URL: redis://, postgres://, mysql://, mariadb://, etcd://…
    ///
    /// The lease store's URL: redis://, rediss://, redis-sentinel://, redis-cluster://, postgres://,
    /// mysql://, mariadb://, etcd://, etcds://.
    ///
    /// `redis://[user:password@]host[:port][/db]` or `rediss://…` (TLS); through
    /// Sentinel `redis-sentinel://[user:password@]host[:port][,host[:port]…][/db][?sentinel_password=…]#master`;
    /// a Redis Cluster `redis-cluster://[user:password@]host:port[,host:port…]` (`rediss-…` for TLS);
    /// `postgres://user[:password]@host[:port]/database` or `mysql://…` / `mariadb://…` (MariaDB or
    /// MySQL; after `leasehold migrate`);
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
    /// Key prefix: the namespace of lease names in the store
    ///
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
    /// How long the store keeps a name after its last use
    ///
    /// How long the store keeps what it knows of a name after its last use.
    ///
    /// On Redis the fence key; the queue's keys live seconds. Names no longer used leave nothing
    /// behind.
    /// Fences stay increasing after it passes (they are at least the server's time in µs).
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEHOLD_RETENTION",
        value_parser = duration::parse,
        default_value = "1h"
    )]
    pub(crate) retention: Duration,
    /// Use a Redis that may evict lease keys (refused otherwise)
    ///
    /// Use a Redis whose memory policy may evict lease keys (`maxmemory` with a `maxmemory-policy`
    /// other than `noeviction`), which is refused otherwise: an evicted lock key lets a second
    /// holder in while the first still runs. With it, leasehold warns once and a lease whose key
    /// was evicted is reported lost at its next renewal. Fence the resource on such a Redis.
    #[arg(long, env = "LEASEHOLD_ALLOW_EVICTION")]
    pub(crate) allow_eviction: bool,
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

/// How a command runs under a lease, for `run` and `elect` alike.
#[derive(Debug, Clone, Args)]
pub(crate) struct SuperviseArgs {
    /// Lease length on the server, renewed every third of it
    ///
    /// Lease length on the server; renewed every third of it while the command runs.
    ///
    /// A holder (or leader) that stops renewing (crash, pause) keeps others out for at most this
    /// long.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "30s")]
    pub(crate) ttl: Duration,
    /// Time between SIGTERM and SIGKILL when the command must stop
    ///
    /// Default: a third of --ttl, at most 10s. Applies to the command's process group and everything below it, when the lease is lost,
    /// when leasehold dies, or to what the command left running when it exits.
    ///
    /// When renewals fail, SIGTERM goes out --grace before the instant the store may hand the name
    /// on (less a margin: the drift allowance and 100 ms), and SIGKILL at that instant, so the
    /// command is gone before anyone else can hold the name. It must fit inside the lease:
    /// grace + margin under the TTL less one renewal period and 100 ms (about two thirds of
    /// --ttl), else exit 2.
    #[arg(long = "grace", value_name = "DURATION", value_parser = duration::parse)]
    pub(crate) grace_given: Option<Duration>,
    /// The grace in force: `--grace`, or the default that fits the lease (set by `prepare`).
    #[arg(skip)]
    pub(crate) grace: Duration,
    /// Test knob: the old stop rule, SIGTERM once the deadline passed
    ///
    /// Test and demonstration knob: the old stop rule (SIGTERM only once the lease's deadline
    /// passed, SIGKILL --grace later), which lets the command overlap the next holder.
    #[arg(long, hide = true)]
    pub(crate) stop_at_deadline: bool,
    /// What to do when the lease becomes suspect (at risk)
    ///
    /// What to do when the lease becomes suspect: at risk before its deadline (renewals failing, or
    /// the store's clock running faster than ours beyond the drift allowance).
    ///
    /// `warn` (the default) says so once on stderr and lets the command run on; `stop` stops the
    /// command as a lost lease does (SIGTERM, SIGKILL after --grace) and exits 76.
    #[arg(long, value_name = "ACTION", value_enum, default_value_t = OnSuspect::Warn)]
    pub(crate) on_suspect: OnSuspect,
    /// Exit code when the lease is busy and no wait is left
    ///
    /// Exit code when the lease (for `elect`, the leadership) is not had and no wait is left (like
    /// flock -E).
    #[arg(long, value_name = "CODE", default_value_t = crate::exit::BUSY,
          value_parser = clap::value_parser!(i32).range(0..=255))]
    pub(crate) busy_exit_code: i32,
    /// Serve Prometheus metrics on this address, e.g. 127.0.0.1:9464.
    ///
    /// The metrics: wait, hold, renewals, lost leases.
    #[arg(long, value_name = "ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// Serve `/healthz` and `/leader` over HTTP on this address
    ///
    /// Serve `/healthz` and `/leader` over HTTP on this address, e.g. 0.0.0.0:8081, for
    /// Kubernetes probes and load balancers.
    ///
    /// `/healthz`: 503 while the lease held is suspect or lost, else 200 (a standby not holding is
    /// healthy). `/leader`: who leads the name, as `leasehold leader --json` prints it with
    /// `"self"`; 200 when this process leads, 503 when it does not (a readiness probe that routes
    /// to the leader alone).
    #[arg(long, value_name = "ADDR")]
    pub(crate) health: Option<SocketAddr>,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// How long to wait for a busy lease; 0, the default, tries once.
    ///
    /// The wait is woken by the holder's release, not by polling.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "0")]
    pub(crate) wait: Duration,
    #[command(flatten)]
    pub(crate) supervise: SuperviseArgs,
    /// Who holds it, shown by `status` and `list` (default: host:pid)
    ///
    /// Who holds the lease, written beside it once acquired and shown by `status` and `list` with
    /// the time since it holds; at most 128 bytes, no control characters, nothing secret. Default:
    /// the host name and this process's id. Not written for a semaphore's permits.
    #[arg(long, value_name = "LABEL")]
    pub(crate) holder: Option<String>,
    /// Hard cap on how long the command may hold the lease
    ///
    /// Hard cap on how long the command may hold the lease (default: none).
    ///
    /// When reached, the lease counts as lost and the command is stopped (exit 76).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    pub(crate) max_hold: Option<Duration>,
    /// Keep the lease at least this long after the command started
    ///
    /// Keep the lease at least this long after the command started, even if it ends sooner
    /// (ShedLock's lockAtLeastFor; --once-per does not need it).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    pub(crate) min_hold: Option<Duration>,
    /// Run at most once per slot of PERIOD (`1h`, `1d`)
    ///
    /// Run the command at most once per slot of PERIOD (`1h`, `1d`): for a scheduled job fired on
    /// every replica.
    ///
    /// "Now" maps to the slot whose start is nearest, so replicas whose clocks are apart by up to
    /// half the period claim the same slot. The first runs the command under the slot's lease
    /// (NAME@SLOT) with LEASEHOLD_SLOT in its environment; the slot is recorded done only when it
    /// exits 0. Others exit --busy-exit-code while it runs, --done-exit-code once it is done. A
    /// failed or lost run leaves the slot open for a later replica or retry, up to --max-attempts;
    /// then the last attempt's code. `leasehold history NAME` shows every slot.
    #[arg(long, value_name = "PERIOD", value_parser = duration::parse, conflicts_with_all = ["wait", "permits"])]
    pub(crate) once_per: Option<Duration>,
    /// Shift the slots of --once-per
    ///
    /// Shift the slots of --once-per: `--once-per 1d --offset 2h` is daily at 02:00 UTC.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "once_per")]
    pub(crate) offset: Option<Duration>,
    /// Latest start of a late firing after its slot's start (--once-per)
    ///
    /// Latest start of a late firing after its slot's start (--once-per; default: the period).
    ///
    /// A firing more than half a period late (a timer catching up after a reboot) runs its own
    /// slot, never the next one early, if still within this of its start; past it, the slot is
    /// recorded missed and nothing runs.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "once_per")]
    pub(crate) starting_deadline: Option<Duration>,
    /// Attempts of one slot (--once-per) before it is given up.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub(crate) max_attempts: u32,
    /// Exit code when the slot was already done (--once-per).
    #[arg(long, value_name = "CODE", default_value_t = 0,
          value_parser = clap::value_parser!(i32).range(0..=255))]
    pub(crate) done_exit_code: i32,
    /// Holders the name admits at once: 1 is a lock, more a semaphore
    ///
    /// Holders the name admits at once: 1 (the default) is a lock, more a semaphore.
    ///
    /// This run holds one of the permits. Everyone using a name must give the same number while
    /// it is in use.
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(crate) permits: u32,
    /// Say on stderr when the lease is acquired and released (the global -v).
    #[arg(skip)]
    pub(crate) verbose: bool,
    /// Lease name
    ///
    /// Lease name (no braces or control characters, at most 256 bytes).
    pub(crate) name: String,
    /// The command and its arguments, after `--`.
    ///
    /// It gets LEASEHOLD_NAME and LEASEHOLD_FENCE in its environment and, unless stdin is a
    /// terminal, runs in its own process group. Its parent is a watcher process that stops it if
    /// `run` dies.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// What the leader advertises, e.g. its address
    ///
    /// What the leader advertises (an address, an id), shown by `leasehold leader`; at most 512
    /// bytes. Default: the holder identity.
    #[arg(long, value_name = "VALUE")]
    pub(crate) value: Option<String>,
    /// Who this candidate is, shown by `leasehold leader`
    ///
    /// Who this candidate is, shown by `leasehold leader`; at most 128 bytes, nothing secret.
    /// Default: host name, process id and a random id.
    #[arg(long, value_name = "HOLDER")]
    pub(crate) holder: Option<String>,
    /// Campaign again after the command ends: a standby replica
    ///
    /// After the command ends (stopped or exited), campaign again: a standby replica. Without
    /// it, `elect` exits with the command's code.
    #[arg(long)]
    pub(crate) again: bool,
    /// How long each campaign waits to lead
    ///
    /// How long each campaign waits to lead (default: as long as it takes).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse)]
    pub(crate) wait: Option<Duration>,
    /// Program run when this candidate starts leading, e.g. one that labels its pod
    ///
    /// Program (a path, or a name on PATH; no arguments, no shell) run each time this candidate
    /// starts leading, before the command starts, with LEASEHOLD_EVENT=lead, LEASEHOLD_NAME,
    /// LEASEHOLD_TERM and LEASEHOLD_VALUE in its environment: e.g. a script that labels the pod
    /// `role=leader` so that a Kubernetes Service selects the leader alone. It gets 10 s; a
    /// failure is said on stderr and the leadership goes on. Checked before campaigning: a
    /// program that is missing or not executable is exit 2.
    #[arg(long, value_name = "PROGRAM")]
    pub(crate) on_lead: Option<std::path::PathBuf>,
    /// Program run when this candidate stops leading
    ///
    /// As --on-lead, with LEASEHOLD_EVENT=lose, run once the command is gone and the leadership is
    /// resigned or lost (not when `elect` itself is killed with SIGKILL: the next leader's
    /// --on-lead should take the label from every other pod first).
    #[arg(long, value_name = "PROGRAM")]
    pub(crate) on_lose: Option<std::path::PathBuf>,
    #[command(flatten)]
    pub(crate) supervise: SuperviseArgs,
    /// Say on stderr when this candidate leads and resigns (the global -v).
    #[arg(skip)]
    pub(crate) verbose: bool,
    /// Election name
    ///
    /// Election name (a lease name: no braces or control characters, at most 256 bytes).
    pub(crate) name: String,
    /// The command and its arguments, after `--`.
    ///
    /// It gets LEASEHOLD_NAME, LEASEHOLD_TERM and LEASEHOLD_FENCE (the same number) in its
    /// environment.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print one JSON object, or `null` when nobody leads
    ///
    /// Print one JSON object (name, term, value, holder, since_unix_ms, ttl_ms), or `null` when
    /// nobody leads.
    #[arg(long)]
    pub(crate) json: bool,
    /// Keep printing a line per change of leader or value
    ///
    /// Keep printing: one line (or JSON object) per change of leader or value, until interrupted.
    #[arg(long)]
    pub(crate) watch: bool,
    /// Election name.
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print a JSON array of records
    ///
    /// Print a JSON array of records (job, slot, outcome, attempts, holder, fence,
    /// started_unix_ms, duration_ms, exit_code).
    #[arg(long)]
    pub(crate) json: bool,
    /// Print the last success time and counts for Prometheus
    ///
    /// Print the last success time and counts in Prometheus's text format, for node_exporter's
    /// textfile collector.
    #[arg(long, conflicts_with = "json")]
    pub(crate) prometheus: bool,
    /// Most slots shown, newest first
    ///
    /// Most slots shown, newest first (`--prometheus` counts every slot on record).
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) limit: usize,
    /// The job's name (as given to `run --once-per`).
    pub(crate) name: String,
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
    /// Print one JSON object
    ///
    /// Print one JSON object. Its fields: name, key, held, ttl_ms, fence, permits, free, holders, waiting, fence_key,
    /// queue_key.
    #[arg(long)]
    pub(crate) json: bool,
    /// Lease name.
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print a JSON array, each object as `status --json` prints it
    ///
    /// Print a JSON array of objects, each as `status --json` prints one.
    #[arg(long)]
    pub(crate) json: bool,
    /// Glob over lease names (`*`, `?`, `[abc]`).
    #[arg(default_value = "*")]
    pub(crate) pattern: String,
}

#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Required: confirms you mean to evict the holder
    ///
    /// Required: confirms you mean to evict whoever holds the lease (unsafe for that holder).
    #[arg(long, required = true)]
    pub(crate) force: bool,
    /// Evict only the holder with this token
    ///
    /// Evict only the holder with this token (as `status` lists them); without it, every holder.
    #[arg(long, value_name = "TOKEN")]
    pub(crate) token: Option<String>,
    /// Print one JSON object: name, evicted, fence.
    #[arg(long)]
    pub(crate) json: bool,
    /// Lease name.
    pub(crate) name: String,
}

/// `run --on-suspect`: what a suspect lease does to the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OnSuspect {
    /// Say so once on stderr; the command runs on.
    Warn,
    /// Stop the command as a lost lease does; exit 76.
    Stop,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// The longest a short help or about may be, in characters.
    const MAX: usize = 80;

    fn too_long(text: &str) -> bool {
        text.contains('\n') || text.chars().count() > MAX
    }

    /// Every short help and about under `cmd` that is not one line of at most [`MAX`] characters.
    fn long_lines(cmd: &clap::Command, parent: &str, bad: &mut Vec<String>) {
        let path = if parent.is_empty() {
            cmd.get_name().to_owned()
        } else {
            format!("{parent} {}", cmd.get_name())
        };
        if let Some(about) = cmd.get_about().map(ToString::to_string) {
            if too_long(&about) {
                bad.push(format!("`{path}` about ({} chars): {about}", about.len()));
            }
        }
        // A global argument is checked where it is defined, not again in every subcommand.
        for arg in cmd
            .get_arguments()
            .filter(|a| parent.is_empty() || !a.is_global_set())
        {
            if let Some(help) = arg.get_help().map(ToString::to_string) {
                if too_long(&help) {
                    bad.push(format!(
                        "`{path}` argument `{}` help ({} chars): {help}",
                        arg.get_id(),
                        help.len()
                    ));
                }
            }
        }
        for sub in cmd.get_subcommands() {
            long_lines(sub, &path, bad);
        }
    }

    #[test]
    fn every_short_help_and_about_is_one_short_line() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut bad = Vec::new();
        long_lines(&cmd, "", &mut bad);
        assert!(
            bad.is_empty(),
            "{} short helps or abouts are not one line of at most {MAX} characters \
             (make the doc comment's first paragraph a short summary):\n{}",
            bad.len(),
            bad.join("\n")
        );
    }

    #[test]
    fn run_and_elect_long_help_list_every_exit_code_of_leasehold_itself() {
        let mut cmd = Cli::command();
        cmd.build();
        for name in ["run", "elect"] {
            let sub = cmd.find_subcommand(name).expect("the subcommand exists");
            let long = sub
                .get_long_about()
                .unwrap_or_else(|| panic!("`{name}` has a long about"))
                .to_string();
            for code in [
                "; 2 ",
                "; 69 ",
                "; 70 ",
                "; 74 ",
                "; 75 ",
                "; 76 ",
                "; 77 ",
                "; 78 ",
                "; 126/127 ",
            ] {
                assert!(
                    long.contains(code),
                    "`{name} --help` lacks exit code {}: {long}",
                    code.trim_matches([';', ' '])
                );
            }
        }
    }
}
