//! Benchmarks: the figures users compare locks on, each measured against a baseline in the same run.
//!
//! Promise: every figure comes from real servers (a private `redis-server`, the PostgreSQL at
//! `--database`, an SQLite file) and each ratio is taken between runs that shared the machine at the
//! same time. Limit: the figures describe this machine under its load at that moment; compare ratios
//! across machines, not absolute rates.
//!
//! | scenario | what | against |
//! |---|---|---|
//! | S1 | one client, acquire + release of one free name, as a try and as a waiting acquire | the minimal correct lock (`SET NX PX` + compare-and-delete script; its wait: `SET NX PX` retried every 1 ms) |
//! | S2 | 16 and 128 contenders on one name, 1 ms holds, as tasks and as processes: throughput, hand-over gaps, round trips, each contender's share, the longest wait | the floor of the mechanism (a bare FIFO hand-off between `BLPOP` waiters, run the same way), and the ideal 1 / (hold + one round trip) |
//! | S3 | one process holding 10,000 leases with renewal on | 1 KiB per lease |
//! | S4 | a fenced SQL transaction on PostgreSQL and SQLite | the same transaction unfenced |
//! | S5 | S1, S2 (16 contenders) and S3 in every store this build can start or reach | the Redis store, in the same run |
//! | S6 | election hand-over: a leader resigns, the waiting candidate leads, in every store | the same hand-over of a plain lease, alternating |
//! | S7 | ten times the names: one process holding 10,000, 30,000 and 100,000 leases (TTL 30 s; the largest for 2 minutes) on one Redis and on a three-master cluster on loopback; the cluster's uncontended cycles from 3 processes on one master and on three | 1 KiB per lease, 0 lost; one master (the scaling ratio) |
//!
//! Layout: [`measure`](self) (clock, histograms, commandstats, /proc), `baseline` (the reference
//! lock), `floor` (S2's floor of the mechanism), `contend` (the S2 contender loop and hold analysis), `s1`..`s4`, `s6` and `s7` (one file per scenario), `stores` (S5).
//! Worker processes are this same binary run as `leasehold __bench-worker`.

mod baseline;
mod contend;
mod floor;
mod measure;
mod s1;
mod s2;
mod s3;
mod s4;
mod s6;
mod s6_observe;
mod s7;
mod stores;
mod table;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use leasehold::LeaseOptions;

use measure::Machine;
use s2::{LockKind, Mode, S2Config};

/// Default PostgreSQL for S4 when neither `--database` nor `LEASEHOLD_TEST_DATABASE_URL` is set.
const DEFAULT_DATABASE_URL: &str = "postgres://postgres:postgres@127.0.0.1:5432/test";

/// A benchmark scenario, for `--only`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Scenario {
    /// Uncontended acquire + release against the baseline lock.
    S1,
    /// 16 and 128 contenders on one name, as tasks and as processes.
    S2,
    /// One process holding many leases with renewal on.
    S3,
    /// Fenced vs unfenced SQL transaction on PostgreSQL and SQLite.
    S4,
    /// S1, S2 and S3 in every store this build can start or reach, as ratios to Redis.
    S5,
    /// Election hand-over in every store, against a plain lease's hand-over.
    S6,
    /// 10,000 to 100,000 leases on one Redis and on a cluster (about 7 minutes: run only when named).
    S7,
}

/// Command-line arguments of `leasehold bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Short runs (under a minute in all), for a smoke check
    ///
    /// The figures are noisier.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object on stdout instead of the table
    ///
    /// Progress still goes to stderr.
    #[arg(long)]
    pub json: bool,
    /// PostgreSQL for S4
    ///
    /// S4 on PostgreSQL is skipped, with a note, when it cannot be reached.
    #[arg(
        long,
        value_name = "URL",
        env = "LEASEHOLD_TEST_DATABASE_URL",
        default_value = DEFAULT_DATABASE_URL,
        hide_env_values = true
    )]
    pub database: String,
    /// Run only these scenarios (comma-separated).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "S1,S2,S3,S4,S5,S6,S7"
    )]
    pub only: Vec<Scenario>,
    /// Seconds each measurement runs (default 5, or 1.5 with --quick).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub seconds: Option<f64>,
    /// Leases held in S3.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub leases: u64,
    /// Also run S2 with the baseline lock polling (tasks mode)
    ///
    /// In tasks mode, to show what wake-ups buy.
    #[arg(long)]
    pub baseline_s2: bool,
    /// The executable to run as `__bench-worker` (default: this executable).
    #[arg(long, hide = true, value_name = "PATH")]
    pub worker_exe: Option<PathBuf>,
}

/// Which part of a benchmark a worker process plays.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WorkerRole {
    /// One S2 contender.
    S2,
    /// The S3 process holding many leases.
    S3,
    /// The S6 leader killed (SIGKILL) while a standby campaigns.
    S6Leader,
    /// One S7 process cycling on names of its own (`--name a,b,c`) on a cluster.
    S7Cycle,
}

/// Arguments of the hidden worker process that the benchmarks spawns (`leasehold __bench-worker`).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The part this worker plays.
    #[arg(value_enum)]
    pub role: WorkerRole,
    /// The benchmark's redis-server (S2), or the store (S3)
    ///
    /// The benchmark's redis-server (S2), or the store to hold leases in (S3: any store URL).
    #[arg(long, value_name = "URL")]
    pub redis_url: String,
    /// Key prefix of the leases (S3), so that runs against a shared store do not meet.
    #[arg(long, default_value = "leasehold")]
    pub prefix: String,
    /// Lease name contended for (S2); the names cycled on, comma-separated (S7).
    #[arg(long, default_value = "s2")]
    pub name: String,
    /// This contender's number (S2).
    #[arg(long, default_value_t = 0)]
    pub contender: u32,
    /// How long each hold lasts, in microseconds (S2).
    #[arg(long, default_value_t = 1000)]
    pub hold_us: u64,
    /// Lease TTL in milliseconds.
    #[arg(long, default_value_t = 2000)]
    pub ttl_ms: u64,
    /// Which lock to contend with (S2).
    #[arg(long, value_enum, default_value = "leasehold")]
    pub lock: LockKindArg,
    /// Leases to hold (S3).
    #[arg(long, default_value_t = 10_000)]
    pub leases: u64,
}

/// Which lock an S2 worker uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LockKindArg {
    /// leasehold's lease.
    Leasehold,
    /// The baseline lock, polling.
    BaselinePoll,
    /// The floor of the mechanism: a bare FIFO hand-off.
    FifoFloor,
}

impl From<LockKindArg> for LockKind {
    fn from(k: LockKindArg) -> Self {
        match k {
            LockKindArg::Leasehold => LockKind::Leasehold,
            LockKindArg::BaselinePoll => LockKind::BaselinePoll,
            LockKindArg::FifoFloor => LockKind::FifoFloor,
        }
    }
}

/// The whole report; `--json` prints it as is.
#[derive(Debug, serde::Serialize)]
struct BenchReport {
    /// The command line that produced it.
    command: String,
    quick: bool,
    machine: Machine,
    s1: Option<s1::S1Report>,
    s2: Vec<s2::S2Row>,
    s3: Option<s3::S3Report>,
    s4: Option<s4::S4Report>,
    /// One row per store (S5); the Redis row is the reference.
    stores: Vec<stores::StoreRow>,
    /// One row per store (S6): election hand-over against lease hand-over.
    elections: Vec<s6::S6Row>,
    /// Two rows per store (S6): 100 observers of one election, pushed and polled.
    observers: Vec<s6_observe::ObserveRow>,
    /// Ten times the names (S7), when named with `--only`.
    s7: Option<s7::S7Report>,
    /// Scenarios that failed, with the reason.
    failures: BTreeMap<String, String>,
    notes: Vec<String>,
}

struct Plan {
    measure: Duration,
    s1_slices: u32,
    /// S2's windows per lock and configuration (the measured time is split between them).
    s2_windows: u32,
    rtt_samples: usize,
    s3_hold: Duration,
    s3_ttl: Duration,
    s4_each: Duration,
}

impl BenchArgs {
    fn plan(&self) -> anyhow::Result<Plan> {
        let measure = match self.seconds {
            Some(s) if !(s.is_finite() && (0.1..=3600.0).contains(&s)) => anyhow::bail!(
                "--seconds {s} is out of range; give a number of seconds between 0.1 and 3600"
            ),
            Some(s) => Duration::from_secs_f64(s),
            None if self.quick => Duration::from_millis(1500),
            None => Duration::from_secs(5),
        };
        if self.leases == 0 || self.leases > 1_000_000 {
            anyhow::bail!(
                "--leases {} is out of range; give between 1 and 1000000",
                self.leases
            );
        }
        Ok(Plan {
            measure,
            // 50 ms slices: bursts of machine noise last longer than that, so both locks see them.
            s1_slices: ((measure.as_millis() / 50) as u32).max(2),
            // Windows of 1.5 s or more: at 128 contenders each holds about eight times in one.
            s2_windows: ((measure.as_millis() / 1500) as u32).clamp(1, 5),
            rtt_samples: if self.quick { 300 } else { 2000 },
            s3_hold: if self.quick {
                Duration::from_millis(3500)
            } else {
                Duration::from_secs(12)
            },
            s3_ttl: Duration::from_secs(3),
            s4_each: measure,
        })
    }

    fn runs(&self, s: Scenario) -> bool {
        // S7 takes minutes: only when named.
        (self.only.is_empty() && s != Scenario::S7) || self.only.contains(&s)
    }
}

/// Runs `leasehold bench`; returns the process exit code (1 when a scenario failed).
pub async fn run(args: BenchArgs) -> anyhow::Result<i32> {
    let plan = args.plan()?;
    let worker_exe = match &args.worker_exe {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .context("finding this executable to start the benchmark's worker processes")?,
    };
    if !leasehold_testkit::redis_server_available() {
        anyhow::bail!("redis-server is not installed; the benchmarks start a private one (apt-get install -y redis-server, or set REDIS_SERVER_BIN)");
    }
    // The benchmarks use a private server so that commandstats see only their own traffic. 128
    // contender processes need more than the default backlog of connections at once.
    let server = tokio::task::spawn_blocking(|| {
        leasehold_testkit::RedisServer::builder()
            .arg("--tcp-backlog")
            .arg("1024")
            .start()
    })
    .await?
    .context("starting the benchmark's private redis-server")?;
    let url = server.url();
    let mut probe = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await
        .context("connecting to the benchmark's redis-server")?;
    let machine = Machine::describe(&mut probe).await;
    let mut report = BenchReport::new(args.quick, machine);
    let bench = Bench {
        args: &args,
        plan,
        redis_pid: server.pid(),
        url,
        worker_exe,
    };
    if args.runs(Scenario::S1) {
        bench.s1(&mut report).await;
    }
    if args.runs(Scenario::S2) {
        bench.s2(&mut report).await?;
    }
    if args.runs(Scenario::S3) {
        bench.s3(&mut report).await?;
    }
    if args.runs(Scenario::S4) {
        bench.s4(&mut report).await;
    }
    if args.runs(Scenario::S7) {
        bench.s7(&mut report).await;
    }
    drop(server);
    if args.runs(Scenario::S5) {
        bench.s5(&mut report).await;
    }
    if args.runs(Scenario::S6) {
        bench.s6(&mut report).await;
    }
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        table::print_table(&report);
    }
    Ok(if report.failures.is_empty() { 0 } else { 1 })
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

impl BenchReport {
    fn new(quick: bool, machine: Machine) -> Self {
        Self {
            command: std::env::args()
                .map(|a| leasehold::url::redact(&a))
                .collect::<Vec<_>>()
                .join(" "),
            quick,
            machine,
            s1: None,
            s2: Vec::new(),
            s3: None,
            s4: None,
            stores: Vec::new(),
            elections: Vec::new(),
            observers: Vec::new(),
            s7: None,
            failures: BTreeMap::new(),
            notes: Vec::new(),
        }
    }
}

/// What every scenario of one run shares: the arguments, the plan, the private redis-server (S1 to
/// S3) and the executable the worker processes run.
struct Bench<'a> {
    args: &'a BenchArgs,
    plan: Plan,
    url: String,
    redis_pid: Option<u32>,
    worker_exe: PathBuf,
}

impl Bench<'_> {
    async fn s1(&self, report: &mut BenchReport) {
        progress("S1 uncontended: leasehold vs the baseline lock");
        let (url, redis_pid) = (self.url.clone(), self.redis_pid);
        let (each, slices) = (self.plan.measure, self.plan.s1_slices);
        let opts = LeaseOptions::default();
        match guarded(async move { s1::run(&url, redis_pid, each, slices, &opts).await }).await {
            Ok(r) => report.s1 = Some(r),
            Err(e) => {
                report.failures.insert("s1".into(), e);
            }
        }
    }

    async fn s2(&self, report: &mut BenchReport) -> anyhow::Result<()> {
        let opts = LeaseOptions::with_ttl(Duration::from_secs(2))?;
        for contenders in [16, 128] {
            for mode in [Mode::Tasks, Mode::Processes] {
                // leasehold and the floor in alternating windows, so that both see the same
                // drifts of the machine's load.
                let locks = [LockKind::Leasehold, LockKind::FifoFloor];
                let mut rows = self
                    .s2_windows(report, &locks, mode, contenders, &opts)
                    .await;
                if let [Some(lh), Some(floor)] = &mut rows[..] {
                    lh.compare_with_floor(floor);
                }
                report.s2.extend(rows.into_iter().flatten());
            }
            if self.args.baseline_s2 {
                let locks = [LockKind::BaselinePoll];
                let rows = self
                    .s2_windows(report, &locks, Mode::Tasks, contenders, &opts)
                    .await;
                report.s2.extend(rows.into_iter().flatten());
            }
        }
        Ok(())
    }

    /// Runs `locks` in one configuration, window after window, each lock once per window in turn
    /// (the order reversed every other window, so that neither always goes first); one row per lock,
    /// `None` where a window failed (the failure is in the report).
    async fn s2_windows(
        &self,
        report: &mut BenchReport,
        locks: &[LockKind],
        mode: Mode,
        contenders: u32,
        opts: &LeaseOptions,
    ) -> Vec<Option<s2::S2Row>> {
        let count = self.plan.s2_windows;
        let cfg = |lock| S2Config {
            lock,
            mode,
            contenders,
            hold: Duration::from_millis(1),
            duration: self.plan.measure / count,
            rtt_samples: self.plan.rtt_samples,
        };
        let mut windows: Vec<Option<Vec<s2::Window>>> =
            locks.iter().map(|_| Some(Vec::new())).collect();
        for w in 0..count {
            let mut order: Vec<usize> = (0..locks.len()).collect();
            if w % 2 == 1 {
                order.reverse();
            }
            for i in order {
                let Some(done) = windows[i].as_mut() else {
                    continue;
                };
                let lock = locks[i];
                progress(&format!(
                    "S2 contended: {contenders} contenders as {mode:?}, lock {lock:?}, window {} of {count}",
                    w + 1
                ));
                let (c, url, exe) = (cfg(lock), self.url.clone(), self.worker_exe.clone());
                let (opts, redis_pid) = (opts.clone(), self.redis_pid);
                match guarded(async move { s2::run_window(&c, &url, redis_pid, &exe, &opts).await })
                    .await
                {
                    Ok(window) => done.push(window),
                    Err(e) => {
                        let key = format!("s2 {lock:?} {mode:?} {contenders}").to_lowercase();
                        report.failures.insert(key, e);
                        windows[i] = None;
                    }
                }
            }
        }
        locks
            .iter()
            .zip(windows)
            .map(|(&lock, w)| w.map(|w| s2::row(&cfg(lock), &w)))
            .collect()
    }

    async fn s3(&self, report: &mut BenchReport) -> anyhow::Result<()> {
        progress(&format!(
            "S3 many leases: one process holding {} leases",
            self.args.leases
        ));
        let opts = LeaseOptions::with_ttl(self.plan.s3_ttl)?;
        let (url, exe) = (self.url.clone(), self.worker_exe.clone());
        let (leases, hold, redis_pid) = (self.args.leases, self.plan.s3_hold, self.redis_pid);
        match guarded(async move { s3::run(&url, redis_pid, &exe, leases, &opts, hold).await })
            .await
        {
            Ok(r) => report.s3 = Some(r),
            Err(e) => {
                report.failures.insert("s3".into(), e);
            }
        }
        Ok(())
    }

    async fn s7(&self, report: &mut BenchReport) {
        progress("S7 ten times the names: one Redis and a three-master cluster");
        let plan = s7::Plan {
            sizes: s7::SIZES.to_vec(),
            hold: if self.args.quick {
                Duration::from_secs(11)
            } else {
                Duration::from_secs(30)
            },
            hold_largest: if self.args.quick {
                Duration::from_secs(11)
            } else {
                Duration::from_secs(120)
            },
            scaling_each: self.plan.measure * 2,
        };
        let (url, exe, pid) = (self.url.clone(), self.worker_exe.clone(), self.redis_pid);
        match guarded(async move { s7::run(&url, pid, &exe, &plan).await }).await {
            Ok(r) => {
                if let Some(note) = &r.cluster_skipped {
                    report
                        .notes
                        .push(format!("S7 on a cluster skipped: {note}"));
                }
                report.s7 = Some(r);
            }
            Err(e) => {
                report.failures.insert("s7".into(), e);
            }
        }
    }

    async fn s4(&self, report: &mut BenchReport) {
        progress("S4 fenced vs unfenced transaction: PostgreSQL and SQLite");
        let (database, each) = (self.args.database.clone(), self.plan.s4_each);
        match guarded(async move { s4::run(&database, each).await }).await {
            Ok(r) => {
                if let Some(note) = &r.postgres_skipped {
                    report
                        .notes
                        .push(format!("S4 on PostgreSQL skipped: {note}"));
                }
                report.s4 = Some(r);
            }
            Err(e) => {
                report.failures.insert("s4".into(), e);
            }
        }
    }

    async fn s5(&self, report: &mut BenchReport) {
        let mut notes = Vec::new();
        match stores::redis().await {
            Ok(redis) => {
                let others = stores::others(&self.args.database, &mut notes).await;
                for target in std::iter::once(&redis).chain(others.iter()) {
                    progress(&format!(
                        "S5 {}: S1 and S2 against redis, S3 with {} leases",
                        target.label, self.args.leases
                    ));
                    let r = stores::measure(
                        target,
                        &redis,
                        self.plan.measure,
                        self.plan.s1_slices,
                        self.args.leases,
                        self.plan.s3_hold,
                        &self.worker_exe,
                    )
                    .await;
                    match r {
                        Ok(row) => {
                            if let Some(note) = stores::s3_lost_note(&row) {
                                report.notes.push(note);
                            }
                            report.stores.push(row);
                        }
                        Err(e) => {
                            report
                                .failures
                                .insert(format!("s5 {}", target.label), format!("{e:#}"));
                        }
                    }
                }
            }
            Err(e) => {
                report.failures.insert("s5".into(), format!("{e:#}"));
            }
        }
        report.notes.extend(notes);
    }
}

impl Bench<'_> {
    async fn s6(&self, report: &mut BenchReport) {
        let rounds = if self.args.quick { 20 } else { 100 };
        // A kill round waits for a 2 s lease to run out.
        let kill_rounds = if self.args.quick { 3 } else { 8 };
        let mut notes = Vec::new();
        let mut targets = Vec::new();
        match stores::redis().await {
            Ok(t) => targets.push(t),
            Err(e) => {
                report.failures.insert("s6".into(), format!("{e:#}"));
                return;
            }
        }
        // The quick run measures Redis alone: the other stores' servers take longer to start than
        // their rounds take.
        if !self.args.quick {
            targets.extend(stores::others(&self.args.database, &mut notes).await);
            match stores::redlock().await {
                Ok(t) => targets.push(t),
                Err(e) => notes.push(format!("S6 on Redlock skipped: {e:#}")),
            }
        }
        for target in &targets {
            progress(&format!(
                "S6 {}: election hand-over vs lease hand-over, {rounds} rounds each; {kill_rounds} takeovers after kill -9 of the leader",
                target.label
            ));
            match s6::run(target, rounds, kill_rounds, &self.worker_exe).await {
                Ok(row) => report.elections.push(row),
                Err(e) => {
                    report
                        .failures
                        .insert(format!("s6 {}", target.label), format!("{e:#}"));
                }
            }
            let changes = if self.args.quick { 10 } else { 20 };
            progress(&format!(
                "S6 {}: {} observers of one election, {changes} changes, pushed and polled",
                target.label,
                s6_observe::OBSERVERS
            ));
            for pushed in [true, false] {
                match s6_observe::run(target, changes, pushed).await {
                    Ok(row) => report.observers.push(row),
                    Err(e) => {
                        report.failures.insert(
                            format!("s6 observers {} pushed={pushed}", target.label),
                            format!("{e:#}"),
                        );
                    }
                }
            }
        }
        report
            .notes
            .extend(notes.into_iter().map(|n| n.replace("S5", "S6")));
    }
}

/// Runs one scenario in its own task, so that a panic in it becomes a reported failure of that
/// scenario instead of ending the whole run.
async fn guarded<T: Send + 'static>(
    fut: impl std::future::Future<Output = anyhow::Result<T>> + Send + 'static,
) -> Result<T, String> {
    match tokio::spawn(fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => {
            let msg = format!("{e:#}");
            eprintln!("bench: failed: {msg}");
            Err(msg)
        }
        Err(e) => {
            let msg = if e.is_panic() {
                let p = e.into_panic();
                let text = p
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| p.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                format!("panicked: {text}")
            } else {
                "cancelled".to_owned()
            };
            eprintln!("bench: failed: {msg}");
            Err(msg)
        }
    }
}

/// Runs one worker process of the benchmarks; returns the process exit code.
pub async fn run_worker(args: WorkerArgs) -> anyhow::Result<i32> {
    let opts = LeaseOptions::with_ttl(Duration::from_millis(args.ttl_ms))?;
    match args.role {
        WorkerRole::S2 => {
            s2::worker(
                &args.redis_url,
                &args.name,
                args.contender,
                Duration::from_micros(args.hold_us),
                args.lock.into(),
                opts,
            )
            .await?
        }
        WorkerRole::S3 => s3::worker(&args.redis_url, &args.prefix, args.leases, opts).await?,
        WorkerRole::S6Leader => s6::leader(&args.redis_url, &args.prefix, &args.name, opts).await?,
        WorkerRole::S7Cycle => {
            s7::cycle_worker(&args.redis_url, &args.prefix, &args.name, opts).await?
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {

    #[test]
    fn passwords_in_urls_are_redacted_from_the_report() {
        use leasehold::url::redact;
        assert_eq!(
            redact("--database=postgres://u:pw@h:5432/db"),
            "--database=postgres://u:***@h:5432/db"
        );
        // A password holding `/` or `?` is hidden too (at the cost of over-hiding a URL whose query
        // holds an `@`).
        assert_eq!(redact("postgres://u:p/w?d@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact("--json"), "--json");
    }
}
