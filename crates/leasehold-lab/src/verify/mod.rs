//! Fault-injection verification: which strategy keeps data correct under which fault, counted from
//! the history the resource recorded.
//!
//! Promise: every cell (workload × fault × strategy) runs real worker processes against a real
//! lease store (one Redis server, Redlock's three masters, a Sentinel set, a Cluster, a PostgreSQL
//! server or a three-member etcd cluster) and a real SQL database, injects the fault for real
//! (SIGSTOP, SIGKILL, a Redis restart, a failover, a proxy that delays, cuts or swallows the
//! traffic, a jump of a Redis server's wall clock, a Redlock master killed or restarted, a Sentinel
//! or Cluster failover that loses the lock's write, the PostgreSQL store restarted, an etcd member
//! killed), several times per cell, and counts invariant violations from what the database
//! accepted, and lock waits that never ended (a lock nobody frees). Limit: a cell with 0 violations
//! shows the bug did not happen in this run, not that it cannot; only the strategies documented as
//! safe by design are expected to stay at 0 always.
//!
//! Layout, each file depending only on those listed after it: `harness.rs` drives the run (which
//! cells, each cell from start to verdict); `report.rs` writes the table, the JSON and the HTML
//! timeline; `faults.rs` is the fault table (what each fault needs, where it applies, how it is
//! done); `cell.rs` a cell's data (its result, its timeline, the running cell the faults act on);
//! `rig.rs` what a run and its cells run on (the run's context and timings, the servers, proxies
//! and worker processes); `worker.rs` the worker process, its locks and its line protocol;
//! `checker.rs` turns a history into violations; `resource.rs` the SQL resource and its history.
//!
//! Adding a fault: a [`Fault`] variant, its line in `Fault::needs` and its arm in `Cell::inject`
//! (`faults.rs`; `Fault::slow` below if each injection takes seconds). Adding a strategy: a
//! [`Strategy`] variant, its answers in the `Strategy` methods below, and its arms in the worker's
//! `Locker` (`worker.rs`).

mod cell;
mod checker;
mod faults;
mod harness;
mod report;
mod resource;
mod rig;
mod worker;

use std::path::PathBuf;

pub use cell::{CellResult, CellStatus};

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

/// What goes wrong while the workers run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// No fault: the baseline.
    None,
    /// A holder is stopped (SIGSTOP) inside its critical section for longer than its lease, then resumed.
    Pause,
    /// A holder is killed (SIGKILL) inside its critical section; a new worker takes its place.
    Kill,
    /// Redis is restarted without persistence while a holder is inside its critical section.
    RedisRestart,
    /// The Redis primary is killed after granting a lock it had not replicated; the replica is promoted.
    Failover,
    /// The network between one holder and Redis gets slower than the lease.
    NetDelay,
    /// The network between one holder and Redis is cut for longer than the lease: connections closed.
    NetCut,
    /// The network between one holder and Redis swallows everything for longer than the lease:
    /// connections stay open and silent, then resume.
    NetBlackhole,
    /// The Redis server's wall clock jumps forward past the lease TTL while the lease is held. On
    /// Redlock, the schedule of the Redlock debate: the holder's lease on a bare majority (its link
    /// to the third master cut during its acquire), one master of that majority jumps, and a second
    /// client reaches a majority through it.
    ClockJump,
    /// Redlock: one of the three masters is killed while the lease is held, stays down for the fault
    /// window, and comes back empty.
    NodeKill,
    /// Redlock: one of the three masters is restarted empty while the lease is held.
    NodeRestart,
    /// A primary managed by three Redis Sentinels: its replica link cut (the lock's write never
    /// reaches the replica), then the primary killed and the replica promoted by the sentinels.
    SentinelFailover,
    /// A Redis Cluster: the replica link of the master owning the lease's slot cut, then that master
    /// killed and its replica promoted by the cluster.
    ClusterFailover,
    /// The PostgreSQL lease store is restarted (a fast shutdown and a start, same data) while a
    /// holder is inside its critical section.
    PgRestart,
    /// One member of the three-member etcd lease store, the leader and a follower in turn (the
    /// leader first), is killed while a holder is inside its critical section, and restarted after
    /// the fault window: a minority lost, which the lease is meant to survive.
    MemberKill,
}

/// How the workers coordinate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// `SETNX` + `PEXPIRE` to lock, `DEL` to unlock.
    Naive,
    /// `SET NX PX` to lock, a bare `DEL` to unlock.
    TtlDel,
    /// A leasehold lease (token, renewal, safe release); the fence is ignored.
    Lease,
    /// A leasehold lease whose fence the resource checks in the same transaction as each write.
    LeaseFence,
    /// A leasehold Redlock lease over three independent masters; the fence is ignored.
    Redlock,
    /// A leasehold Redlock lease whose fence the resource checks in the same transaction as each
    /// write, as `lease-fence` does.
    RedlockFence,
    /// No lock: unique index, conditional update, state check, inbox.
    DbGuards,
    /// A leasehold lease from the PostgreSQL lease store; the fence is ignored.
    PgLease,
    /// A leasehold lease from the PostgreSQL lease store whose fence the resource checks in the
    /// same transaction as each write, as `lease-fence` does.
    PgLeaseFence,
    /// A leasehold lease from a three-member etcd cluster; the fence is ignored.
    EtcdLease,
    /// A leasehold lease from a three-member etcd cluster whose fence the resource checks in the
    /// same transaction as each write, as `lease-fence` does.
    EtcdLeaseFence,
}

impl Fault {
    /// Whether each injection takes seconds (a failure detected and a replica elected by sentinels
    /// or by the cluster), so a full run does fewer of them per cell.
    pub(crate) fn slow(self) -> bool {
        matches!(self, Fault::SentinelFailover | Fault::ClusterFailover)
    }
}

impl Strategy {
    /// Whether leasehold documents this strategy as keeping the data correct under every fault here.
    pub fn safe_by_design(self) -> bool {
        self.fenced() || self == Self::DbGuards
    }

    /// Whether the resource checks the lease's fence with each write.
    pub fn fenced(self) -> bool {
        matches!(
            self,
            Self::LeaseFence | Self::RedlockFence | Self::PgLeaseFence | Self::EtcdLeaseFence
        )
    }

    /// Whether the lease comes from the PostgreSQL lease store.
    pub fn on_postgres(self) -> bool {
        matches!(self, Self::PgLease | Self::PgLeaseFence)
    }

    /// Whether the lease comes from an etcd cluster.
    pub fn on_etcd(self) -> bool {
        matches!(self, Self::EtcdLease | Self::EtcdLeaseFence)
    }

    /// Whether the workers take a lock at all.
    pub fn locks(self) -> bool {
        self != Self::DbGuards
    }

    /// Whether the lock is a Redlock lease over three masters (else one server, or none).
    pub fn redlock(self) -> bool {
        matches!(self, Self::Redlock | Self::RedlockFence)
    }

    /// Whether the lock is a leasehold lease on one Redis deployment, which is what speaks Sentinel
    /// and Cluster URLs (the hand-made locks speak to one `redis://` server only).
    pub fn single_lease(self) -> bool {
        matches!(self, Self::Lease | Self::LeaseFence)
    }

    /// Whether the strategy talks to Redis at all.
    pub fn uses_redis(self) -> bool {
        self.locks() && !self.on_postgres() && !self.on_etcd()
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
display_as_value_enum!(Workload, Fault, Strategy);

/// Command-line arguments of `leasehold verify`.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {
    /// A short run for CI and a first look (under 3 minutes on 2 cores): every strategy and workload
    /// under the pause fault (the strategies on PostgreSQL and etcd on the counter only), and every
    /// fault on the counter workload, one injection per cell. Without it, every cell of the matrix
    /// with 5 injections each (2 for the Sentinel and Cluster failovers, which take seconds each, and
    /// for the strategies on PostgreSQL and etcd; under 30 minutes on 2 cores).
    #[arg(long)]
    pub quick: bool,
    /// Write the cells as a JSON array to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write an HTML report (table and SVG timelines) into this directory (`index.html`).
    #[arg(long, value_name = "DIR")]
    pub report: Option<PathBuf>,
    /// Use this Redis instead of private redis-server processes. Faults that kill Redis are skipped.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// Use this database (postgres://… or sqlite://FILE) instead of a temporary SQLite file. Each cell
    /// works in its own schema on PostgreSQL (dropped afterwards) or its own `r<run>_c<cell>_` tables
    /// on SQLite (kept, for inspection).
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// Only these workloads (repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    pub workload: Vec<Workload>,
    /// Only these faults (repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    pub fault: Vec<Fault>,
    /// Only these strategies (repeat or comma-separate).
    #[arg(long, value_delimiter = ',')]
    pub strategy: Vec<Strategy>,
    /// Worker processes per cell.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(2..=16))]
    pub workers: u32,
    /// Lease time-to-live in milliseconds (the faults last about three times this).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub ttl_ms: u64,
    /// Fault injections per cell (default: 1 with --quick, otherwise 5, and 2 for the Sentinel and
    /// Cluster failovers and for the strategies on PostgreSQL and etcd).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=50))]
    pub injections: Option<u32>,
    /// The executable to spawn workers from (default: this program). For tests.
    #[arg(long, hide = true, value_name = "PATH")]
    pub worker_exe: Option<PathBuf>,
}

impl Default for VerifyArgs {
    fn default() -> Self {
        Self {
            quick: false,
            json: None,
            report: None,
            redis: None,
            database: None,
            workload: Vec::new(),
            fault: Vec::new(),
            strategy: Vec::new(),
            workers: 3,
            ttl_ms: 200,
            injections: None,
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
    /// Redis URL (through the harness's proxy); not needed for db-guards. Repeated, one per master,
    /// for Redlock.
    #[arg(long)]
    pub redis: Vec<String>,
    /// The lease store's URL (postgres://… or etcd://…) for the strategies whose lease is not on
    /// Redis.
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
    /// The first operation number (a replacement worker continues where the killed one stopped).
    #[arg(long, default_value_t = 0)]
    pub start_op: u64,
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
