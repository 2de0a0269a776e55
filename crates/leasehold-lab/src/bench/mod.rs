//! Benchmarks: the figures users compare locks on, each measured against a baseline in the same run.
//!
//! Promise: every figure comes from real servers (a private `redis-server`, the PostgreSQL at
//! `--database`, an SQLite file) and each ratio is taken between runs that shared the machine at the
//! same time. Limit: the figures describe this machine under its load at that moment; compare ratios
//! across machines, not absolute rates.
//!
//! | scenario | what | against |
//! |---|---|---|
//! | S1 | one client, acquire + release of one free name | the minimal correct lock (`SET NX PX` + compare-and-delete script) |
//! | S2 | 16 and 128 contenders on one name, 1 ms holds, as tasks and as processes: throughput, hand-over gaps, round trips, each contender's share, the longest wait | the ideal 1 / (hold + one round trip) |
//! | S3 | one process holding 10,000 leases with renewal on | 1 KiB per lease |
//! | S4 | a fenced SQL transaction on PostgreSQL and SQLite | the same transaction unfenced |
//! | S5 | S1, S2 (16 contenders) and S3 in every store this build can start or reach | the Redis store, in the same run |
//!
//! Layout: [`measure`](self) (clock, histograms, commandstats, /proc), `baseline` (the reference
//! lock), `contend` (the S2 contender loop and hold analysis), `s1`..`s4` (one file per scenario), `stores` (S5).
//! Worker processes are this same binary run as `leasehold __bench-worker`.

mod baseline;
mod contend;
mod measure;
mod s1;
mod s2;
mod s3;
mod s4;
mod stores;

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
}

/// Command-line arguments of `leasehold bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Short runs (under a minute in all), for a smoke check; the figures are noisier.
    #[arg(long)]
    pub quick: bool,
    /// Print one JSON object on stdout instead of the table (progress still goes to stderr).
    #[arg(long)]
    pub json: bool,
    /// PostgreSQL for S4. S4 on PostgreSQL is skipped, with a note, when it cannot be reached.
    #[arg(
        long,
        value_name = "URL",
        env = "LEASEHOLD_TEST_DATABASE_URL",
        default_value = DEFAULT_DATABASE_URL,
        hide_env_values = true
    )]
    pub database: String,
    /// Run only these scenarios (comma-separated).
    #[arg(long, value_enum, value_delimiter = ',', value_name = "S1,S2,S3,S4,S5")]
    pub only: Vec<Scenario>,
    /// Seconds each measurement runs (default 5, or 1.5 with --quick).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub seconds: Option<f64>,
    /// Leases held in S3.
    #[arg(long, default_value_t = 10_000, value_name = "N")]
    pub leases: u64,
    /// Also run S2 with the baseline lock polling (tasks mode), to show what wake-ups buy.
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
}

/// Arguments of the hidden worker process that the benchmarks spawns (`leasehold __bench-worker`).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The part this worker plays.
    #[arg(value_enum)]
    pub role: WorkerRole,
    /// The benchmark's redis-server (S2), or the store to hold leases in (S3: any store URL).
    #[arg(long, value_name = "URL")]
    pub redis_url: String,
    /// Key prefix of the leases (S3), so that runs against a shared store do not meet.
    #[arg(long, default_value = "leasehold")]
    pub prefix: String,
    /// Lease name contended for (S2).
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
}

impl From<LockKindArg> for LockKind {
    fn from(k: LockKindArg) -> Self {
        match k {
            LockKindArg::Leasehold => LockKind::Leasehold,
            LockKindArg::BaselinePoll => LockKind::BaselinePoll,
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
    /// Scenarios that failed, with the reason.
    failures: BTreeMap<String, String>,
    notes: Vec<String>,
}

struct Plan {
    measure: Duration,
    s1_slices: u32,
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
        self.only.is_empty() || self.only.contains(&s)
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
    let redis_pid = server.pid();
    let mut probe = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await
        .context("connecting to the benchmark's redis-server")?;
    let machine = Machine::describe(&mut probe).await;

    let mut report = BenchReport {
        command: std::env::args()
            .map(|a| leasehold::url::redact(&a))
            .collect::<Vec<_>>()
            .join(" "),
        quick: args.quick,
        machine,
        s1: None,
        s2: Vec::new(),
        s3: None,
        s4: None,
        stores: Vec::new(),
        failures: BTreeMap::new(),
        notes: Vec::new(),
    };
    let progress = |msg: &str| eprintln!("bench: {msg}");

    if args.runs(Scenario::S1) {
        progress("S1 uncontended: leasehold vs the baseline lock");
        let url = url.clone();
        let (each, slices) = (plan.measure, plan.s1_slices);
        let opts = LeaseOptions::default();
        match guarded(async move { s1::run(&url, redis_pid, each, slices, &opts).await }).await {
            Ok(r) => report.s1 = Some(r),
            Err(e) => {
                report.failures.insert("s1".into(), e);
            }
        }
    }

    if args.runs(Scenario::S2) {
        let opts = LeaseOptions::with_ttl(Duration::from_secs(2))?;
        let mut configs = Vec::new();
        for contenders in [16, 128] {
            for mode in [Mode::Tasks, Mode::Processes] {
                configs.push((LockKind::Leasehold, mode, contenders));
            }
            if args.baseline_s2 {
                configs.push((LockKind::BaselinePoll, Mode::Tasks, contenders));
            }
        }
        for (lock, mode, contenders) in configs {
            progress(&format!(
                "S2 contended: {contenders} contenders as {mode:?}, lock {lock:?}"
            ));
            let cfg = S2Config {
                lock,
                mode,
                contenders,
                hold: Duration::from_millis(1),
                duration: plan.measure,
                rtt_samples: plan.rtt_samples,
            };
            let (url, exe, opts) = (url.clone(), worker_exe.clone(), opts.clone());
            match guarded(async move { s2::run(&cfg, &url, redis_pid, &exe, &opts).await }).await {
                Ok(row) => report.s2.push(row),
                Err(e) => {
                    report.failures.insert(
                        format!("s2 {lock:?} {mode:?} {contenders}").to_lowercase(),
                        e,
                    );
                }
            }
        }
    }

    if args.runs(Scenario::S3) {
        progress(&format!(
            "S3 many leases: one process holding {} leases",
            args.leases
        ));
        let opts = LeaseOptions::with_ttl(plan.s3_ttl)?;
        let (url, exe, leases, hold) = (url.clone(), worker_exe.clone(), args.leases, plan.s3_hold);
        match guarded(async move { s3::run(&url, redis_pid, &exe, leases, &opts, hold).await })
            .await
        {
            Ok(r) => report.s3 = Some(r),
            Err(e) => {
                report.failures.insert("s3".into(), e);
            }
        }
    }

    if args.runs(Scenario::S4) {
        progress("S4 fenced vs unfenced transaction: PostgreSQL and SQLite");
        let (database, each) = (args.database.clone(), plan.s4_each);
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
    drop(server);

    if args.runs(Scenario::S5) {
        let mut notes = Vec::new();
        match stores::redis().await {
            Ok(redis) => {
                let others = stores::others(&args.database, &mut notes).await;
                for target in std::iter::once(&redis).chain(others.iter()) {
                    progress(&format!(
                        "S5 {}: S1 and S2 against redis, S3 with {} leases",
                        target.label, args.leases
                    ));
                    let r = stores::measure(
                        target,
                        &redis,
                        plan.measure,
                        plan.s1_slices,
                        args.leases,
                        plan.s3_hold,
                        &worker_exe,
                    )
                    .await;
                    match r {
                        Ok(row) => report.stores.push(row),
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

    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(if report.failures.is_empty() { 0 } else { 1 })
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

fn yes_no(b: bool) -> &'static str {
    if b {
        "met"
    } else {
        "MISSED"
    }
}

fn print_table(r: &BenchReport) {
    let m = &r.machine;
    println!(
        "machine: {} CPUs, {}, redis {}, load {:.2}{}",
        m.nproc,
        m.cpu_model,
        m.redis_version,
        m.loadavg_1m,
        if r.quick { " (--quick)" } else { "" }
    );
    if let Some(s1) = &r.s1 {
        println!("\nS1 uncontended acquire+release, one client");
        println!(
            "  leasehold  {:>9.0} cycles/s  p50 {:>7.1} us  p99 {:>7.1} us  ({:.2} round trips/cycle)",
            s1.leasehold_cycles_per_s,
            s1.leasehold_p50_us,
            s1.leasehold_p99_us,
            s1.leasehold_round_trips_per_cycle
        );
        println!(
            "  baseline   {:>9.0} cycles/s  p50 {:>7.1} us  p99 {:>7.1} us",
            s1.baseline_cycles_per_s, s1.baseline_p50_us, s1.baseline_p99_us
        );
        println!(
            "  per cycle, leasehold vs baseline: redis commands {:.1} vs {:.1}, redis CPU {:.1} vs {:.1} us, client CPU {:.1} vs {:.1} us",
            s1.leasehold_commands_per_cycle,
            s1.baseline_commands_per_cycle,
            s1.leasehold_redis_cpu_us_per_cycle,
            s1.baseline_redis_cpu_us_per_cycle,
            s1.leasehold_client_cpu_us_per_cycle,
            s1.baseline_client_cpu_us_per_cycle
        );
        println!(
            "  ratio {:.3} (target >= 0.95: {})",
            s1.ratio,
            yes_no(s1.target_0_95_met)
        );
    }
    if !r.s2.is_empty() {
        println!("\nS2 contended, 1 ms holds");
        println!(
            "  {:<13} {:<9} {:>4} {:>8} {:>8} {:>6} {:>9} {:>9} {:>9} {:>6} {:>6} {:>7} {:>4}",
            "lock",
            "mode",
            "n",
            "acq/s",
            "ideal",
            "ratio",
            "hand p50",
            "hand p99",
            "cross p99",
            "cross%",
            "rt/acq",
            "cmd/acq",
            "ovl"
        );
        for row in &r.s2 {
            println!(
                "  {:<13} {:<9} {:>4} {:>8.0} {:>8.0} {:>6.2} {:>7.0}us {:>7.0}us {:>7.0}us {:>5.0}% {:>6.2} {:>7.2} {:>4}",
                format!("{:?}", row.lock).to_lowercase(),
                format!("{:?}", row.mode).to_lowercase(),
                row.contenders,
                row.acquisitions_per_s,
                row.ideal_acquisitions_per_s,
                row.throughput_vs_ideal,
                row.handoff_p50_us,
                row.handoff_p99_us,
                row.cross_handoff_p99_us,
                row.cross_share * 100.0,
                row.round_trips_per_acquisition,
                row.commands_per_acquisition,
                row.overlaps
            );
            println!(
                "      shares {:.2}-{:.2} of the mean; longest wait {:.1} ms (bound {:.1} ms)",
                row.share_min,
                row.share_max,
                row.max_wait_us / 1e3,
                row.max_wait_bound_us / 1e3
            );
            let t = &row.targets_met;
            println!(
                "      >= 0.95 x ideal: {}; round trips <= 3: {}; cross p99 <= 1 ms: {}; shares +-10%: {}; longest wait: {}; no overlaps: {}",
                yes_no(t.throughput_at_least_0_95_ideal),
                yes_no(t.round_trips_at_most_3),
                yes_no(t.cross_handoff_p99_at_most_1ms),
                yes_no(t.shares_within_10_percent),
                yes_no(t.max_wait_within_bound),
                yes_no(t.no_overlaps)
            );
        }
    }
    if let Some(s3) = &r.s3 {
        println!("\nS3 {} leases held with renewal on", s3.leases);
        println!(
            "  {:.0} renewal commands/s, {:.0} round trips/s, client CPU {:.1}% of a core, redis CPU {:.1}%",
            s3.renewal_commands_per_s,
            s3.renewal_round_trips_per_s,
            s3.client_cpu_share * 100.0,
            s3.redis_cpu_share * 100.0
        );
        println!(
            "  {:.0} bytes resident per lease after renewals ({:.0} right after acquiring; target <= 1024: {}), {} lost",
            s3.bytes_per_lease,
            s3.bytes_per_lease_at_acquire,
            yes_no(s3.target_met),
            s3.lost
        );
    }
    if let Some(s4) = &r.s4 {
        println!("\nS4 fenced vs unfenced transaction");
        for (label, side) in [("postgres", &s4.postgres), ("sqlite", &s4.sqlite)] {
            if let Some(side) = side {
                println!(
                    "  {label:<8} unfenced {:>7.0} tx/s, fenced {:>7.0} tx/s, ratio {:.3}",
                    side.unfenced_tx_per_s, side.fenced_tx_per_s, side.ratio
                );
            }
        }
        if let Some(met) = s4.target_met {
            println!("  PostgreSQL target >= 0.75: {}", yes_no(met));
        }
    }
    for note in &r.notes {
        println!("\nnote: {note}");
    }
    for (scenario, why) in &r.failures {
        println!("\nFAILED {scenario}: {why}");
    }
    if !r.stores.is_empty() {
        println!("\nS5 every store (ratios to redis in the same run)");
        println!(
            "  {:<9} {:>9} {:>8} {:>8} {:>6} {:>6} {:>8} {:>6} {:>6} {:>4} {:>9} {:>8} {:>4}",
            "store",
            "S1 cyc/s",
            "p50",
            "p99",
            "rt/cyc",
            "ratio",
            "S2 acq/s",
            "rt/acq",
            "ratio",
            "ovl",
            "S3 B/lease",
            "rt/s",
            "lost"
        );
        for row in &r.stores {
            println!(
                "  {:<9} {:>9.0} {:>6.0}us {:>6.0}us {:>6.2} {:>6.2} {:>8.0} {:>6.2} {:>6.2} {:>4} {:>9.0} {:>8.1} {:>4}",
                row.store,
                row.s1_cycles_per_s,
                row.s1_p50_us,
                row.s1_p99_us,
                row.s1_round_trips_per_cycle,
                row.s1_ratio_to_redis,
                row.s2_acquisitions_per_s,
                row.s2_round_trips_per_acquisition,
                row.s2_ratio_to_redis,
                row.s2_overlaps,
                row.s3_bytes_per_lease,
                row.s3_renewal_round_trips_per_s,
                row.s3_lost
            );
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
