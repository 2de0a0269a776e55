//! Fault-injection verification: which strategy keeps data correct under which fault, counted from
//! the history the resource recorded.
//!
//! Promise: every cell (workload × fault × strategy) runs real worker processes against a real
//! lease store (Redis in the deployment the fault needs: one server, Redlock's three masters, a
//! Sentinel set, a Cluster; or a store the harness runs for the whole run, such as a PostgreSQL
//! server or a three-member etcd cluster) and a real SQL database, injects the fault for real
//! (SIGSTOP, SIGKILL, a Redis restart, a failover, a proxy that delays, cuts or swallows the
//! traffic, one holder cut off from its lease store, a jump of a Redis server's wall clock, a
//! Redlock master killed or restarted, a Sentinel or Cluster failover that loses the lock's write,
//! a lease store restarted or one of its members killed), several times per cell, and counts invariant violations from what the database
//! accepted, and lock waits that never ended (a lock nobody frees). Limit: a cell with 0 violations
//! shows the bug did not happen in this run, not that it cannot; only the strategies documented as
//! safe by design are expected to stay at 0 always.
//!
//! Layout, each file depending only on those listed after it: `harness/` drives the run (which
//! cells, each cell from start to verdict); `report/` writes the table, the JSON and the HTML
//! timeline; `faults/` is the fault table (what each fault needs, where it applies) and one file
//! per fault saying how it is done; `cell.rs` a cell's data (its result, its timeline, the running
//! cell the faults act on); `rig.rs` what a run and its cells run on (the run's context, the worker
//! processes and their log); `worker.rs` the worker process, its locks and its line protocol;
//! `checker.rs` turns a history into violations; `resource/` the SQL resource, its history and the
//! fenced and guarded writers; `timing.rs` a cell's timeline; `strategy.rs` the strategies, each a
//! (lock kind, store, fenced) named in one table; `store/` the stores a lock lives on, one file
//! each (Redis per cell, the others for the whole run: `store::RUN_WIDE`).
//!
//! Adding a fault of the workers or of Redis: a [`Fault`] variant below with its name and help, its
//! line in [`FAULTS`], its line in `Fault::needs` and a file in `faults/` with its lines in the
//! dispatch there (`faults/mod.rs`). Adding a strategy: a line in `strategy::TABLE`; a new lock kind
//! also needs its [`Lock`] variant and its arm in the worker's `Locker` (`worker.rs`). Adding a
//! lease store: a file in `store/` and its line in `store::RUN_WIDE`, which gives it its two
//! strategies; its own fault is a file in `faults/` ([`StoreFault`]) and its line in [`FAULTS`].
//! docs/verification.md has the whole recipe.

mod cell;
mod checker;
mod faults;
mod harness;
mod report;
mod resource;
mod rig;
pub(crate) mod store;
mod strategy;
mod timing;
mod worker;

use std::path::PathBuf;

use store::run_wide_names;

pub use cell::{CellResult, CellStatus};
pub use faults::{StoreFault, FAULTS};
pub use resource::fenced::FencedWriter;
pub use store::Store;
pub use strategy::{Lock, Strategy};
pub use worker::StopRule;

/// What the workers do to the resource.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// Read-modify-write of a counter (a ledger balance): violations are lost updates.
    Counter,
    /// Orders created from requests that arrive twice and are retried: violations are duplicate orders.
    Orders,
    /// Inventory decrements: violations are units sold that never left the stock (oversells).
    Inventory,
    /// Order state transitions created→paid→shipped→delivered: violations are illegal transitions.
    Transitions,
    /// Redelivered messages applied to a balance: violations are messages applied twice.
    Messages,
}

/// What goes wrong while the workers run: a fault of the workers or of Redis (the variants below),
/// or a fault of one run-wide lease store, declared in its own file ([`StoreFault`]). Each fault's
/// name and `--help` text are [`Fault::name`] and [`Fault::help`]; the faults a run offers, in
/// order, are [`FAULTS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// `none`.
    None,
    /// `pause`.
    Pause,
    /// `kill`.
    Kill,
    /// `redis-restart`.
    RedisRestart,
    /// `failover`.
    Failover,
    /// `net-delay`.
    NetDelay,
    /// `net-cut`.
    NetCut,
    /// `net-blackhole`.
    NetBlackhole,
    /// `partition`.
    Partition,
    /// `clock-jump`.
    ClockJump,
    /// `node-kill`.
    NodeKill,
    /// `node-restart`.
    NodeRestart,
    /// `sentinel-failover`.
    SentinelFailover,
    /// `cluster-failover`.
    ClusterFailover,
    /// `eviction`.
    Eviction,
    /// A fault of one run-wide lease store (`pg-restart`, for one), which the harness does only to
    /// that store's strategies.
    Store(&'static StoreFault),
}

impl Fault {
    /// The fault's name on the command line and in the reports.
    pub fn name(self) -> &'static str {
        self.about().0
    }

    /// What the fault does, for `--help`.
    pub fn help(self) -> &'static str {
        self.about().1
    }

    fn about(self) -> (&'static str, &'static str) {
        match self {
            Fault::None => ("none", "No fault: the baseline"),
            Fault::Pause => ("pause", "A holder is stopped (SIGSTOP) inside its critical section for longer than its lease, then resumed"),
            Fault::Kill => ("kill", "A holder is killed (SIGKILL) inside its critical section; a new worker takes its place"),
            Fault::RedisRestart => ("redis-restart", "Redis is restarted without persistence while a holder is inside its critical section"),
            Fault::Failover => ("failover", "The Redis primary is killed after granting a lock it had not replicated; the replica is promoted"),
            Fault::NetDelay => ("net-delay", "The network between one holder and Redis gets slower than the lease"),
            Fault::NetCut => ("net-cut", "The network between one holder and Redis is cut for longer than the lease: connections closed"),
            Fault::NetBlackhole => ("net-blackhole", "The network between one holder and Redis swallows everything for longer than the lease: connections stay open and silent, then resume"),
            Fault::Partition => ("partition", "The holder's connection to its lease store swallows everything for longer than the lease while the store stays up for the others (on every store: Redis, Redlock's masters, PostgreSQL, MariaDB, etcd); the holder's critical section is long and stops by its stop rule (--stop-rule), then takes a slow shutdown (60% of the longest its lease allows) before its write"),
            Fault::ClockJump => ("clock-jump", "The Redis server's wall clock jumps forward past the lease TTL while the lease is held. On Redlock, the schedule of the Redlock debate: the holder's lease on a bare majority (its link to the third master cut during its acquire), one master of that majority jumps, and a second client reaches a majority through it"),
            Fault::NodeKill => ("node-kill", "Redlock: one of the three masters is killed while the lease is held, stays down for the fault window, and comes back empty"),
            Fault::NodeRestart => ("node-restart", "Redlock: one of the three masters is restarted empty while the lease is held"),
            Fault::SentinelFailover => ("sentinel-failover", "A primary managed by three Redis Sentinels: its replica link cut (the lock's write never reaches the replica), then the primary killed and the replica promoted by the sentinels"),
            Fault::ClusterFailover => ("cluster-failover", "A Redis Cluster: the replica link of the master owning the lease's slot cut, then that master killed and its replica promoted by the cluster"),
            Fault::Eviction => ("eviction", "Memory pressure on an evicting Redis: the server set to `allkeys-lru` with `maxmemory` just above its use, then filler keys written while a holder holds its lock until the server has evicted the lock key; leasehold opted in (`allow_eviction`)"),
            Fault::Store(fault) => (fault.name, fault.help),
        }
    }
}

impl clap::ValueEnum for Fault {
    fn value_variants<'a>() -> &'a [Self] {
        FAULTS
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.name()).help(self.help()))
    }
}

impl serde::Serialize for Fault {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

macro_rules! display_as_value_enum {
    ($($t:ty),*) => {$(
        impl std::fmt::Display for $t {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                use clap::ValueEnum as _;
                let name = self.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default();
                f.write_str(&name)
            }
        }
    )*};
}
display_as_value_enum!(Workload, Fault, Strategy, StopRule, FencedWriter);

/// Command-line arguments of `leasehold verify`.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// A short run for CI and a first look (under 3 minutes on 2 cores)
    #[arg(long, long_help = quick_help())]
    pub quick: bool,
    /// Write the cells as a JSON array to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write each cell's record (verdict, writes, holders) into this directory
    ///
    /// As each cell finishes, one JSON Lines file per cell (`NNN-WORKLOAD-FAULT-STRATEGY.jsonl`):
    /// the cell's verdict, every write the resource accepted
    /// (who, with which fence, when), every holder's interval with its fence, the stale writes
    /// refused, the stalled lock waits and the fault windows. `crates/leasehold-lab/tools/check_history.py`
    /// judges them on its own and exits 1 where it disagrees with a verdict.
    #[arg(long, value_name = "DIR")]
    pub history_dir: Option<PathBuf>,
    /// Write an HTML report into this directory (`index.html`)
    ///
    /// A table and SVG timelines.
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Use this Redis instead of private redis-server processes
    ///
    /// Faults that kill Redis are skipped.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// Use this database (postgres://… or sqlite://FILE)
    ///
    /// Instead of a temporary SQLite file. Each cell works in its own schema on PostgreSQL
    /// (dropped afterwards) or its own `r<run>_c<cell>_` tables on SQLite (kept, for inspection).
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// Only these workloads, comma-separated (names: see --help)
    #[arg(long, value_delimiter = ',', hide_possible_values = true,
          long_help = with_values::<Workload>("Only these workloads (repeat or comma-separate)."))]
    pub workload: Vec<Workload>,
    /// Only these faults, comma-separated (names: see --help)
    #[arg(long, value_delimiter = ',', hide_possible_values = true,
          long_help = with_values::<Fault>("Only these faults (repeat or comma-separate)."))]
    pub fault: Vec<Fault>,
    /// Only these strategies, comma-separated (names: see --help)
    #[arg(long, value_delimiter = ',', hide_possible_values = true,
          long_help = with_values::<Strategy>("Only these strategies (repeat or comma-separate)."))]
    pub strategy: Vec<Strategy>,
    /// Worker processes per cell.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=16))]
    pub workers: u32,
    /// Lease time-to-live in milliseconds (the faults last about three times this).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub ttl_ms: u64,
    /// Fault injections per cell (default: 1 with --quick, else 5)
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50),
          long_help = format!("Fault injections per cell (default: 1 with --quick, else 5)\n\nWithout --quick, 2 for the Sentinel and Cluster failovers and for the strategies on {}.", run_wide_names("and")))]
    pub injections: Option<u32>,
    /// When a lease holder's long critical section starts to stop under `partition`
    ///
    /// `in-time` when `Lease::stopping(grace)` says so, the grace being the longest shutdown the
    /// lease allows (its shutdown and write done by `Lease::stop_by`, before the store may hand the
    /// name on), `at-loss` when the lease is lost at its deadline (the old rule,
    /// whose shutdown runs past the hand-over). The other faults do not use it.
    #[arg(long, value_enum, default_value_t = StopRule::InTime)]
    pub stop_rule: StopRule,
    /// Who writes the fenced strategies' writes: `rust` or `psql`
    ///
    /// `rust` (the default): leasehold's own fenced transactions (`Database::begin_fenced`).
    /// `psql`: a `psql` process per write calling the SQL function `leasehold_fence(resource, fence)`
    /// first thing in its own transaction, as a shell job or a service in another language does;
    /// SQLSTATE LHF01 is counted as a stale write refused. Needs `--database postgres://…` and
    /// the `psql` program.
    #[arg(long, value_enum, value_name = "WRITER", default_value_t = FencedWriter::Rust)]
    pub fenced_writer: FencedWriter,
    /// The executable to spawn workers from (default: this program). For tests.
    #[arg(long, hide = true, value_name = "PATH")]
    pub worker_exe: Option<PathBuf>,
}

/// The `--help` text of `--quick`, naming the run-wide stores.
fn quick_help() -> String {
    let stores = run_wide_names("and");
    format!(
        "A short run for CI and a first look (under 3 minutes on 2 cores)\n\nEvery strategy and workload under the pause fault (the strategies on {stores} and the elections on the counter only), and every fault on the counter workload (the elections under the pause only, the partition on lease and lease-fence only), one injection per cell. Without it, every cell of the matrix with 5 injections each (2 for the Sentinel and Cluster failovers, which take seconds each, and for the strategies on {stores}; under 30 minutes on 2 cores)."
    )
}

/// The `--help` text of an option whose values are `T`'s: `summary`, then each value with what it
/// means, the list clap would print itself if `-h` were to show it too (`-h` hides it: too long).
fn with_values<T: clap::ValueEnum>(summary: &str) -> String {
    let mut text = format!("{summary}\n\nPossible values:");
    for value in T::value_variants()
        .iter()
        .filter_map(T::to_possible_value)
        .filter(|v| !v.is_hide_set())
    {
        text.push_str("\n- ");
        text.push_str(value.get_name());
        if let Some(help) = value.get_help() {
            text.push_str(": ");
            text.push_str(&help.to_string());
        }
    }
    text
}

impl Default for VerifyArgs {
    fn default() -> Self {
        Self {
            quick: false,
            json: None,
            history_dir: None,
            report: None,
            redis: None,
            database: None,
            workload: Vec::new(),
            fault: Vec::new(),
            strategy: Vec::new(),
            workers: 3,
            ttl_ms: 200,
            injections: None,
            stop_rule: StopRule::InTime,
            fenced_writer: FencedWriter::Rust,
            worker_exe: None,
        }
    }
}

/// Arguments of the hidden worker process that the fault-injection verifier spawns (`leasehold __verify-worker`).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The coordination strategy.
    #[arg(long)]
    pub strategy: Strategy,
    /// The workload.
    #[arg(long)]
    pub workload: Workload,
    /// Redis URL (through the harness's proxy); one per master
    ///
    /// Redis URL (through the harness's proxy); not needed for db-guards. Repeated, one per master,
    /// for Redlock.
    #[arg(long)]
    pub redis: Vec<String>,
    /// The lease store's URL (postgres://…, etcd://…)
    ///
    /// The lease store's URL (any URL `LeaseClient::connect` takes: postgres://…, etcd://…) for the
    /// strategies whose lease is not on Redis.
    #[arg(long)]
    pub lease_store: Option<String>,
    /// Database URL.
    #[arg(long)]
    pub database: String,
    /// Prefix of this cell's tables.
    #[arg(long, default_value = "")]
    pub prefix: String,
    /// Prefix of this cell's Redis keys.
    #[arg(long, default_value = "lhv")]
    pub key: String,
    /// This worker's slot, recorded as the writer of each row.
    #[arg(long)]
    pub slot: u32,
    /// Lease TTL in milliseconds.
    #[arg(long)]
    pub ttl_ms: u64,
    /// Time spent inside the critical section between read and write, in milliseconds.
    #[arg(long, default_value_t = 1)]
    pub work_ms: u64,
    /// A lock wait longer than this is a stall: reported, then the operation is retried.
    #[arg(long, default_value_t = 5_000)]
    pub stall_ms: u64,
    /// The first operation number
    ///
    /// The first operation number (a replacement worker continues where the killed one stopped).
    #[arg(long, default_value_t = 0)]
    pub start_op: u64,
    /// When a long critical section (the harness's `long`) starts to stop.
    #[arg(long, value_enum, default_value_t = StopRule::InTime)]
    pub stop_rule: StopRule,
    /// Who writes the fenced strategies' writes.
    #[arg(long, value_enum, default_value_t = FencedWriter::Rust)]
    pub fenced_writer: FencedWriter,
}

/// Runs `leasehold verify`; returns the process exit code: 0 when every strategy documented as safe
/// showed no violation, 1 when one did, 2 when cells could not run.
pub async fn run(args: VerifyArgs) -> anyhow::Result<i32> {
    harness::run(args).await
}

/// Runs one worker process of the fault-injection verifier; returns the process exit code.
pub async fn run_worker(args: WorkerArgs) -> anyhow::Result<i32> {
    worker::run(args).await
}
