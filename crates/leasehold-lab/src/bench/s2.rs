//! S2, contended: N contenders on one name, each holding it for 1 ms, as tasks of one process or as
//! separate processes; throughput against the floor of the mechanism (a bare FIFO hand-off run the
//! same way, in windows taken in turn with leasehold's) and against the ideal of 1 / (hold + one
//! round trip), handoff gaps, round trips, Redis commands and CPU per acquisition, overlapping holds.
//! Limit: the two locks share the machine's load only as far as windows of a second or two taken in
//! turn do; a stall inside one window still weighs on that lock alone.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use super::baseline::BaselineLock;
use super::contend::{analyze, contend, ContenderRecord, HoldAnalysis, Locker};
use super::floor::FifoFloor;
use super::measure::{
    connected_clients, mono_ns, own_cpu_seconds, ping_rtt_us, process_cpu_seconds, round3,
    CommandStats,
};

/// Where the contenders run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// Tasks of this process sharing one client (clones of one `LeaseClient`).
    Tasks,
    /// One process per contender, each with its own client.
    Processes,
}

/// Which lock the contenders use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum LockKind {
    /// leasehold's lease.
    Leasehold,
    /// The baseline `SET NX PX` lock, polling every 0.5–1.5 ms while busy.
    BaselinePoll,
    /// The floor of the mechanism: a bare FIFO hand-off between `BLPOP` waiters (`floor.rs`).
    FifoFloor,
}

impl LockKind {
    /// Its name on the worker's command line and in the report's table.
    pub(crate) fn arg(self) -> &'static str {
        match self {
            LockKind::Leasehold => "leasehold",
            LockKind::BaselinePoll => "baseline-poll",
            LockKind::FifoFloor => "fifo-floor",
        }
    }
}

/// One S2 configuration.
#[derive(Debug, Clone)]
pub(crate) struct S2Config {
    pub(crate) lock: LockKind,
    pub(crate) mode: Mode,
    pub(crate) contenders: u32,
    pub(crate) hold: Duration,
    pub(crate) duration: Duration,
    pub(crate) rtt_samples: usize,
}

/// The figures of one S2 configuration.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S2Row {
    pub(crate) lock: LockKind,
    pub(crate) mode: Mode,
    pub(crate) contenders: u32,
    pub(crate) hold_us: f64,
    /// How many windows the figures add up (S2 alternates leasehold's and the floor's).
    pub(crate) windows: u32,
    /// The windows' time, added up.
    pub(crate) seconds: f64,
    pub(crate) acquisitions: u64,
    pub(crate) acquisitions_per_s: f64,
    /// 1 / (measured mean hold + PING round trip measured just before the run).
    pub(crate) ideal_acquisitions_per_s: f64,
    pub(crate) throughput_vs_ideal: f64,
    pub(crate) rtt_us: f64,
    pub(crate) mean_hold_us: f64,
    pub(crate) handoff_p50_us: f64,
    pub(crate) handoff_p99_us: f64,
    pub(crate) cross_handoff_p50_us: f64,
    pub(crate) cross_handoff_p99_us: f64,
    pub(crate) cross_share: f64,
    pub(crate) round_trips_per_acquisition: f64,
    pub(crate) commands_per_acquisition: f64,
    /// Redis commands per acquisition in the run's middle three fifths only (the commands between
    /// two readings of `INFO commandstats` at 1/5 and 4/5 of the window, over the acquisitions that
    /// returned between them): the steady state, without each contender's first request (no
    /// estimate of the server's clock yet) and its giving up at the end (a waiter leaves the queue).
    pub(crate) steady_commands_per_acquisition: f64,
    /// Redis command calls during the run by command (script internals included).
    pub(crate) commands: BTreeMap<String, u64>,
    pub(crate) overlaps: u64,
    pub(crate) fence_regressions: u64,
    pub(crate) lost: u64,
    pub(crate) errors: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) first_error: Option<String>,
    /// Connections the contenders had open to Redis at the end of the run.
    pub(crate) redis_connections: u64,
    /// The fewest acquisitions of one contender, as a fraction of the mean (FIFO: close to 1).
    pub(crate) share_min: f64,
    /// The most acquisitions of one contender, as a fraction of the mean.
    pub(crate) share_max: f64,
    /// The longest time a contender waited, from calling acquire to holding the lease, in µs.
    pub(crate) max_wait_us: f64,
    /// The bound the longest wait is held to: 1.5 × contenders × (mean hold + round trip), in µs.
    pub(crate) max_wait_bound_us: f64,
    /// The most acquisitions by other contenders while one contender waited (FIFO: about
    /// contenders − 1). Unlike the longest wait, the machine's pauses hardly move it.
    pub(crate) max_overtakes: u64,
    /// CPU the redis-server used during the run, as a share of one core.
    pub(crate) redis_cpu_share: f64,
    /// Redis's own time running the lock's scripts, per acquisition, in µs (`INFO commandstats`
    /// of `EVALSHA`: what the protocol's logic costs the server, without the network's share).
    pub(crate) redis_script_us_per_acquisition: f64,
    /// The redis-server's CPU time per acquisition, in µs (what the hand-offs cost the server,
    /// network included).
    pub(crate) redis_cpu_us_per_acquisition: f64,
    /// The contenders' CPU time per acquisition, in µs (user + system): this process's over the
    /// run with tasks, the worker processes' summed over their own runs with processes. What the
    /// client library and its runtime cost, waking up included.
    pub(crate) client_cpu_us_per_acquisition: f64,
    #[serde(flatten)]
    pub(crate) floor: FloorFigures,
    pub(crate) targets_met: S2Targets,
}

/// The floor of the mechanism in the same configuration, run in windows taken in turn with
/// leasehold's: set on leasehold's rows, null on the others and when the floor did not run.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct FloorFigures {
    /// The floor's acquisitions/s.
    pub(crate) floor_acquisitions_per_s: Option<f64>,
    /// leasehold's acquisitions/s ÷ the floor's.
    pub(crate) throughput_vs_floor: Option<f64>,
    /// The floor's handoff gap, median and 99th percentile, in µs.
    pub(crate) floor_handoff_p50_us: Option<f64>,
    pub(crate) floor_handoff_p99_us: Option<f64>,
    /// Redis commands per acquisition of the floor (8 when every acquisition is a hand-off).
    pub(crate) floor_commands_per_acquisition: Option<f64>,
    /// The floor's longest wait, in µs: what the machine's pauses did to a bare FIFO hand-off.
    pub(crate) floor_max_wait_us: Option<f64>,
    /// The wait bound with the machine's hand-off in it: 1.5 × contenders × the floor's mean time
    /// per acquisition (hold and hand-off, waking the next waiter included), in µs.
    pub(crate) max_wait_floor_bound_us: Option<f64>,
    /// The floor's redis-server CPU per acquisition, in µs.
    pub(crate) floor_redis_cpu_us_per_acquisition: Option<f64>,
    /// The floor's client CPU per acquisition, in µs.
    pub(crate) floor_client_cpu_us_per_acquisition: Option<f64>,
}

impl S2Row {
    /// Takes the floor's figures from `floor`, the floor's row of this configuration in this run.
    pub(crate) fn compare_with_floor(&mut self, floor: &S2Row) {
        let ratio = (floor.acquisitions_per_s > 0.0)
            .then(|| self.acquisitions_per_s / floor.acquisitions_per_s);
        let bound = (floor.acquisitions_per_s > 0.0)
            .then(|| 1.5 * f64::from(self.contenders) * 1e6 / floor.acquisitions_per_s);
        self.floor = FloorFigures {
            floor_acquisitions_per_s: Some(floor.acquisitions_per_s),
            throughput_vs_floor: ratio.map(round3),
            floor_handoff_p50_us: Some(floor.handoff_p50_us),
            floor_handoff_p99_us: Some(floor.handoff_p99_us),
            floor_commands_per_acquisition: Some(floor.commands_per_acquisition),
            floor_max_wait_us: Some(floor.max_wait_us),
            max_wait_floor_bound_us: bound.map(round3),
            floor_redis_cpu_us_per_acquisition: Some(floor.redis_cpu_us_per_acquisition),
            floor_client_cpu_us_per_acquisition: Some(floor.client_cpu_us_per_acquisition),
        };
        self.targets_met.throughput_at_least_0_95_floor = ratio.map(|r| r >= 0.95);
        self.targets_met.overtakes_within_fifo = self.acquisitions > 0
            && self.max_overtakes <= u64::from(self.contenders).max(floor.max_overtakes);
        self.targets_met.max_wait_within_floor_bound =
            bound.map(|b| self.acquisitions > 0 && self.max_wait_us <= b);
    }
}

/// Issue targets for S2, evaluated on this run. The first four are the earlier, looser targets,
/// kept so that runs stay comparable; the rest are the fair hand-over's.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S2Targets {
    /// Cross-contender handoff p99 under 2 ms.
    pub(crate) cross_handoff_p99_under_2ms: bool,
    /// Round trips per acquisition at most 4.
    pub(crate) round_trips_at_most_4: bool,
    /// Acquisitions/s at least 0.9 × the ideal.
    pub(crate) throughput_at_least_0_9_ideal: bool,
    /// No overlapping holds.
    pub(crate) no_overlaps: bool,
    /// Cross-contender handoff p99 at most 1 ms.
    pub(crate) cross_handoff_p99_at_most_1ms: bool,
    /// Round trips per acquisition at most 3.
    pub(crate) round_trips_at_most_3: bool,
    /// Acquisitions/s at least 0.95 × the ideal.
    pub(crate) throughput_at_least_0_95_ideal: bool,
    /// Every contender's share of acquisitions within ±10 % of the mean.
    pub(crate) shares_within_10_percent: bool,
    /// The longest wait at most 1.5 × contenders × (mean hold + round trip).
    pub(crate) max_wait_within_bound: bool,
    /// Acquisitions/s at least 0.95 × the floor of the mechanism's in the same configuration (null
    /// when not compared).
    pub(crate) throughput_at_least_0_95_floor: Option<bool>,
    /// No contender waited while more acquisitions went to others than a FIFO allows: the
    /// contenders − 1 queued ahead, and one more, since a contender joins the queue a request after
    /// it calls acquire and the holder of that moment may come round again in between; compared
    /// with the floor, at most the floor's own most in the same configuration and run where that is
    /// more (on a busy machine the time to the queue can be a few hand-offs).
    pub(crate) overtakes_within_fifo: bool,
    /// The longest wait at most 1.5 × contenders × the floor's mean time per acquisition in the
    /// same configuration and run (null when not compared).
    pub(crate) max_wait_within_floor_bound: Option<bool>,
}

/// One measured window of a configuration, analysed. S2 alternates short windows of leasehold and
/// of the floor ([`row`] adds them up), so that both see the same drifts of the machine's load.
pub(crate) struct Window {
    analysis: HoldAnalysis,
    /// The median `PING` round trip measured just before the window, µs.
    rtt_us: f64,
    /// From the start signal to the end, or to the last release if a hold ran past it.
    seconds: f64,
    /// The acquisitions that returned in the steady state.
    steady_taken: u64,
    /// What the server and the contenders said of the window.
    run: RunOutput,
}

/// Runs one window of a configuration against the redis-server at `url` (process id `redis_pid`)
/// for `cfg.duration`.
pub(crate) async fn run_window(
    cfg: &S2Config,
    url: &str,
    redis_pid: Option<u32>,
    worker_exe: &Path,
    lease_opts: &leasehold::LeaseOptions,
) -> anyhow::Result<Window> {
    let name = format!(
        "s2-{}-{:?}-{}-{}",
        match cfg.lock {
            LockKind::Leasehold => "lh",
            LockKind::BaselinePoll => "base",
            LockKind::FifoFloor => "floor",
        },
        cfg.mode,
        cfg.contenders,
        mono_ns()
    )
    .to_lowercase();
    let client = redis::Client::open(url)?;
    let mut probe = client.get_multiplexed_async_connection().await?;
    let rtt_us = ping_rtt_us(&mut probe, cfg.rtt_samples).await?;

    let (records, run) = match cfg.mode {
        Mode::Tasks => run_tasks(cfg, url, &name, lease_opts, &mut probe, redis_pid).await?,
        Mode::Processes => {
            run_processes(
                cfg, url, &name, worker_exe, lease_opts, &mut probe, redis_pid,
            )
            .await?
        }
    };
    let (start, end) = run.window;
    let last_release = records
        .iter()
        .flat_map(|r| r.holds.iter().map(|h| h.released_ns))
        .max()
        .unwrap_or(end);
    Ok(Window {
        analysis: analyze(&records),
        rtt_us,
        seconds: (last_release.max(end) - start) as f64 / 1e9,
        steady_taken: run.steady.taken(&records),
        run,
    })
}

/// The row of one configuration from its windows (at least one), added up: counts, times and
/// latencies over all of them, the round trip their mean, the longest wait and the most overtakes
/// the largest of any window.
pub(crate) fn row(cfg: &S2Config, windows: &[Window]) -> S2Row {
    let mut a = HoldAnalysis::default();
    let (mut seconds, mut round_trips, mut script_us, mut client_cpu) = (0.0, 0u64, 0u64, 0.0);
    let (mut steady_commands, mut steady_taken, mut redis_connections) = (0u64, 0u64, 0u64);
    let mut redis_cpu = Some(0.0);
    let mut commands = BTreeMap::<String, u64>::new();
    for w in windows {
        a.merge(&w.analysis);
        seconds += w.seconds;
        steady_taken += w.steady_taken;
        let run = &w.run;
        round_trips += run.round_trips;
        script_us += run.script_us;
        client_cpu += run.client_cpu;
        steady_commands += run.steady.commands;
        redis_connections = redis_connections.max(run.redis_connections);
        redis_cpu = redis_cpu.zip(run.redis_cpu).map(|(a, b)| a + b);
        for (c, n) in &run.commands {
            *commands.entry(c.clone()).or_default() += n;
        }
    }
    let rtt_us = windows.iter().map(|w| w.rtt_us).sum::<f64>() / windows.len().max(1) as f64;
    let seconds = seconds.max(1e-9);
    let acquisitions = a.acquisitions.max(1) as f64;
    let total_commands: u64 = commands.values().sum();
    let mean_hold_us = a.hold_times.mean_us();
    let ideal = 1e6 / (mean_hold_us + rtt_us);
    let acquisitions_per_s = a.acquisitions as f64 / seconds;
    let (share_min, share_max) = a.share_range();
    let max_wait_us = a.max_wait_ns as f64 / 1e3;
    let max_wait_bound_us = 1.5 * f64::from(cfg.contenders) * (mean_hold_us + rtt_us);
    let rt_per_acq = round_trips as f64 / acquisitions;
    let cross_p99_us = a.cross_handoffs.quantile_us(0.99);
    let cross_share = if a.handoffs.len() == 0 {
        0.0
    } else {
        a.cross_handoffs.len() as f64 / a.handoffs.len() as f64
    };
    S2Row {
        lock: cfg.lock,
        mode: cfg.mode,
        contenders: cfg.contenders,
        hold_us: cfg.hold.as_secs_f64() * 1e6,
        windows: windows.len() as u32,
        seconds: round3(seconds),
        acquisitions: a.acquisitions,
        acquisitions_per_s: round3(acquisitions_per_s),
        ideal_acquisitions_per_s: round3(ideal),
        throughput_vs_ideal: round3(acquisitions_per_s / ideal),
        rtt_us: round3(rtt_us),
        mean_hold_us: round3(mean_hold_us),
        handoff_p50_us: round3(a.handoffs.quantile_us(0.5)),
        handoff_p99_us: round3(a.handoffs.quantile_us(0.99)),
        cross_handoff_p50_us: round3(a.cross_handoffs.quantile_us(0.5)),
        cross_handoff_p99_us: round3(a.cross_handoffs.quantile_us(0.99)),
        cross_share: round3(cross_share),
        round_trips_per_acquisition: round3(rt_per_acq),
        commands_per_acquisition: round3(total_commands as f64 / acquisitions),
        steady_commands_per_acquisition: round3(
            steady_commands as f64 / steady_taken.max(1) as f64,
        ),
        commands,
        overlaps: a.overlaps,
        fence_regressions: a.fence_regressions,
        lost: a.lost,
        errors: a.errors,
        first_error: a.first_error.clone(),
        redis_connections,
        share_min: round3(share_min),
        share_max: round3(share_max),
        max_wait_us: round3(max_wait_us),
        max_wait_bound_us: round3(max_wait_bound_us),
        max_overtakes: a.max_overtakes,
        redis_cpu_share: round3(redis_cpu.unwrap_or(0.0) / seconds),
        redis_script_us_per_acquisition: round3(script_us as f64 / acquisitions),
        redis_cpu_us_per_acquisition: round3(redis_cpu.unwrap_or(0.0) * 1e6 / acquisitions),
        client_cpu_us_per_acquisition: round3(client_cpu * 1e6 / acquisitions),
        floor: FloorFigures::default(),
        targets_met: S2Targets {
            cross_handoff_p99_under_2ms: a.cross_handoffs.len() > 0 && cross_p99_us < 2000.0,
            round_trips_at_most_4: a.acquisitions > 0 && rt_per_acq <= 4.0,
            throughput_at_least_0_9_ideal: acquisitions_per_s >= 0.9 * ideal,
            no_overlaps: a.overlaps == 0,
            cross_handoff_p99_at_most_1ms: a.cross_handoffs.len() > 0 && cross_p99_us <= 1000.0,
            round_trips_at_most_3: a.acquisitions > 0 && rt_per_acq <= 3.0,
            throughput_at_least_0_95_ideal: acquisitions_per_s >= 0.95 * ideal,
            shares_within_10_percent: a.acquisitions > 0 && share_min >= 0.9 && share_max <= 1.1,
            max_wait_within_bound: a.acquisitions > 0 && max_wait_us <= max_wait_bound_us,
            throughput_at_least_0_95_floor: None,
            overtakes_within_fifo: a.acquisitions > 0
                && a.max_overtakes <= u64::from(cfg.contenders),
            max_wait_within_floor_bound: None,
        },
    }
}

/// The contenders as tasks of this process, clones of one client.
async fn run_tasks(
    cfg: &S2Config,
    url: &str,
    name: &str,
    lease_opts: &leasehold::LeaseOptions,
    probe: &mut redis::aio::MultiplexedConnection,
    redis_pid: Option<u32>,
) -> anyhow::Result<(Vec<ContenderRecord>, RunOutput)> {
    // Kept until the connections are counted: the floor's waiters close theirs when dropped.
    let lockers = connect_lockers(cfg.lock, url, lease_opts, cfg.contenders).await?;
    let counter = lockers.first().context("S2 needs a contender")?;
    let stats0 = CommandStats::read(probe).await?;
    let cpu0 = redis_pid.map(process_cpu_seconds).transpose()?;
    let rt0 = counter.round_trips();
    let own0 = own_cpu_seconds();
    let start = mono_ns();
    let end = start + cfg.duration.as_nanos() as u64;
    let tasks: Vec<_> = (0..cfg.contenders)
        .zip(lockers.iter().cloned())
        .map(|(i, locker)| tokio::spawn(contend(locker, name.to_owned(), i, cfg.hold, end)))
        .collect();
    let steady = Steady::read(probe, start, end).await?;
    let mut records = Vec::with_capacity(tasks.len());
    for t in tasks {
        records.push(t.await.context("an S2 contender task panicked")?);
    }
    let client_cpu = own_cpu_seconds() - own0;
    let round_trips = counter.round_trips() - rt0;
    let connections = connected_clients(probe).await?;
    let stats1 = CommandStats::read(probe).await?;
    let cpu1 = redis_pid.map(process_cpu_seconds).transpose()?;
    let run = RunOutput {
        round_trips,
        window: (start, end),
        commands: stats1.since(&stats0),
        script_us: stats1.script_usec_since(&stats0),
        steady,
        redis_cpu: cpu0.zip(cpu1).map(|(a, b)| b - a),
        redis_connections: connections,
        client_cpu,
    };
    Ok((records, run))
}

/// One locker per contender, connected before the start signal. leasehold's contenders are clones
/// of one client (its tasks queue behind one waiter in Redis) and the baseline's share one
/// connection; each floor waiter has a connection and a wake list of its own. All lockers of one
/// call share one request counter.
async fn connect_lockers(
    lock: LockKind,
    url: &str,
    lease_opts: &leasehold::LeaseOptions,
    contenders: u32,
) -> anyhow::Result<Vec<Locker>> {
    let n = contenders as usize;
    Ok(match lock {
        LockKind::Leasehold => {
            let client = leasehold::LeaseClient::connect(url)
                .await
                .context("connecting leasehold for S2")?;
            let opts = lease_opts.clone();
            vec![Locker::Leasehold { client, opts }; n]
        }
        LockKind::BaselinePoll => {
            vec![Locker::Baseline(BaselineLock::connect(url, lease_opts.ttl()).await?); n]
        }
        LockKind::FifoFloor => {
            let floor = FifoFloor::new(url)?;
            let mut lockers = Vec::with_capacity(n);
            for _ in 0..n {
                lockers.push(Locker::Floor(floor.waiter().await?));
            }
            lockers
        }
    })
}

/// What one run of a configuration measured besides the contenders' records.
struct RunOutput {
    /// Requests the contenders sent.
    round_trips: u64,
    /// The measured window, start and end on [`mono_ns`].
    window: (u64, u64),
    /// Redis command calls during the run by command.
    commands: BTreeMap<String, u64>,
    /// Redis's time in `EVALSHA`, µs.
    script_us: u64,
    steady: Steady,
    /// CPU seconds the redis-server used.
    redis_cpu: Option<f64>,
    /// Connections the contenders had open at the end.
    redis_connections: u64,
    /// CPU seconds the contenders used (see [`S2Row::client_cpu_us_per_acquisition`]).
    client_cpu: f64,
}

/// The commands of the window's middle three fifths (the steady state).
#[derive(Debug, Default)]
struct Steady {
    from_ns: u64,
    to_ns: u64,
    commands: u64,
}

impl Steady {
    /// Reads `INFO commandstats` at 1/5 and at 4/5 of the window `start..end` (sleeping until
    /// each), while the contenders run.
    async fn read(
        probe: &mut redis::aio::MultiplexedConnection,
        start: u64,
        end: u64,
    ) -> anyhow::Result<Self> {
        let fifth = (end - start) / 5;
        let (from_ns, to_ns) = (start + fifth, end - fifth);
        sleep_until_ns(from_ns).await;
        let first = CommandStats::read(probe).await?;
        sleep_until_ns(to_ns).await;
        let last = CommandStats::read(probe).await?;
        Ok(Steady {
            from_ns,
            to_ns,
            commands: last.since(&first).values().sum(),
        })
    }

    /// The acquisitions that returned between the two readings.
    fn taken(&self, records: &[ContenderRecord]) -> u64 {
        records
            .iter()
            .flat_map(|r| &r.holds)
            .filter(|h| (self.from_ns..self.to_ns).contains(&h.acquired_ns))
            .count() as u64
    }
}

/// Sleeps until `at_ns` on [`mono_ns`] (at once if that has passed).
async fn sleep_until_ns(at_ns: u64) {
    tokio::time::sleep(Duration::from_nanos(at_ns.saturating_sub(mono_ns()))).await;
}

/// Spawns one `__bench-worker s2` per contender, waits for all to be connected, starts them together
/// and collects their recorded holds.
async fn run_processes(
    cfg: &S2Config,
    url: &str,
    name: &str,
    worker_exe: &Path,
    lease_opts: &leasehold::LeaseOptions,
    probe: &mut redis::aio::MultiplexedConnection,
    redis_pid: Option<u32>,
) -> anyhow::Result<(Vec<ContenderRecord>, RunOutput)> {
    let lock = cfg.lock.arg();
    let mut children = Vec::with_capacity(cfg.contenders as usize);
    for i in 0..cfg.contenders {
        let child = tokio::process::Command::new(worker_exe)
            .arg("__bench-worker")
            .arg("s2")
            .args(["--redis-url", url])
            .args(["--name", name])
            .args(["--contender", &i.to_string()])
            .args(["--hold-us", &cfg.hold.as_micros().to_string()])
            .args(["--ttl-ms", &lease_opts.ttl().as_millis().to_string()])
            .args(["--lock", lock])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawning bench worker {}", worker_exe.display()))?;
        children.push(child);
    }
    let mut pipes = Vec::with_capacity(children.len());
    for child in children.iter_mut() {
        let stdin = child.stdin.take().context("worker stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("worker stdout")?).lines();
        pipes.push((stdin, stdout));
    }
    // Every worker connects first, so that connection set-up is outside the measured window.
    for (i, (_, out)) in pipes.iter_mut().enumerate() {
        let line = tokio::time::timeout(Duration::from_secs(120), out.next_line())
            .await
            .with_context(|| format!("bench worker {i} did not get ready within 120 s"))??;
        if line.as_deref() != Some("ready") {
            anyhow::bail!("bench worker {i} failed to start (said {line:?}; its error is above)");
        }
    }
    let stats0 = CommandStats::read(probe).await?;
    let cpu0 = redis_pid.map(process_cpu_seconds).transpose()?;
    let start = mono_ns();
    let end = start + cfg.duration.as_nanos() as u64;
    for (stdin, _) in pipes.iter_mut() {
        stdin.write_all(format!("go {end}\n").as_bytes()).await?;
        stdin.flush().await?;
    }
    let steady = Steady::read(probe, start, end).await?;
    let mut records = Vec::with_capacity(pipes.len());
    let mut round_trips = 0u64;
    let mut client_cpu = 0.0;
    let wait = cfg.duration + Duration::from_secs(60);
    for (i, (_, out)) in pipes.iter_mut().enumerate() {
        let line = tokio::time::timeout(wait, out.next_line())
            .await
            .with_context(|| format!("bench worker {i} did not report"))??
            .with_context(|| format!("bench worker {i} exited without a report"))?;
        let report: WorkerS2Report = serde_json::from_str(&line)
            .with_context(|| format!("bench worker {i} sent an unreadable report: {line}"))?;
        round_trips += report.round_trips;
        client_cpu += report.cpu_s;
        records.push(report.record);
    }
    let stats1 = CommandStats::read(probe).await?;
    let cpu1 = redis_pid.map(process_cpu_seconds).transpose()?;
    // The workers have reported but not exited: their connections are all still open.
    let connections = connected_clients(probe).await?;
    for (stdin, _) in pipes {
        drop(stdin);
    }
    for mut child in children {
        let _ = child.wait().await;
    }
    let run = RunOutput {
        round_trips,
        window: (start, end),
        commands: stats1.since(&stats0),
        script_us: stats1.script_usec_since(&stats0),
        steady,
        redis_cpu: cpu0.zip(cpu1).map(|(a, b)| b - a),
        redis_connections: connections,
        client_cpu,
    };
    Ok((records, run))
}

/// What an S2 worker process sends back: one JSON line.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct WorkerS2Report {
    pub(crate) record: ContenderRecord,
    /// Round trips its client sent between `go` and the end.
    pub(crate) round_trips: u64,
    /// CPU seconds (user + system) the worker used between `go` and the end.
    pub(crate) cpu_s: f64,
}

/// The worker side of S2: connect, say `ready`, wait for `go <end_ns>`, contend, report.
pub(crate) async fn worker(
    url: &str,
    name: &str,
    contender: u32,
    hold: Duration,
    lock: LockKind,
    lease_opts: leasehold::LeaseOptions,
) -> anyhow::Result<()> {
    let locker = connect_lockers(lock, url, &lease_opts, 1)
        .await?
        .pop()
        .context("S2 worker without a locker")?;
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    let go = lines
        .next_line()
        .await?
        .context("the bench closed stdin before `go`")?;
    let end_ns: u64 = go
        .strip_prefix("go ")
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("expected `go <end_ns>` on stdin, got {go:?}"))?;
    let rt0 = locker.round_trips();
    let cpu0 = own_cpu_seconds();
    let record = contend(locker.clone(), name.to_owned(), contender, hold, end_ns).await;
    let report = WorkerS2Report {
        record,
        round_trips: locker.round_trips() - rt0,
        cpu_s: own_cpu_seconds() - cpu0,
    };
    let mut line = serde_json::to_string(&report)?;
    line.push('\n');
    stdout.write_all(line.as_bytes()).await?;
    stdout.flush().await?;
    // Stay connected until the bench closes stdin, so that it can count the connections.
    while lines.next_line().await?.is_some() {}
    Ok(())
}
