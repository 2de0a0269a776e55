//! S1, uncontended: one client takes and releases one name over and over, in two cycles: the try
//! (`try_acquire`, the minimal lock's `SET NX PX`) and the waiting acquire (`acquire` with a wait
//! bound, the minimal lock's `SET NX PX` retried every 1 ms), each leasehold's against the minimal
//! lock's, in alternating slices of the same run so that all four see the same machine noise.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::baseline::BaselineLock;
use super::measure::{own_cpu_seconds, process_cpu_seconds, round3, CommandStats, Latencies};

/// The wait bound of the waiting cycle: far above any cycle, so it never ends one.
const WAIT: Duration = Duration::from_secs(30);

/// The figures of S1. The top-level `leasehold_*` and `baseline_*` fields are the try cycle (kept
/// as they were, so that runs stay comparable); `wait` is the waiting cycle.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S1Report {
    pub(crate) seconds_each: f64,
    pub(crate) leasehold_cycles: u64,
    pub(crate) leasehold_cycles_per_s: f64,
    pub(crate) leasehold_p50_us: f64,
    pub(crate) leasehold_p99_us: f64,
    /// Round trips per cycle counted by `LeaseClient::round_trips`.
    pub(crate) leasehold_round_trips_per_cycle: f64,
    /// Redis command calls per cycle (commandstats; script internals included).
    pub(crate) leasehold_commands_per_cycle: f64,
    /// redis-server CPU per cycle (user + system, from /proc), in microseconds.
    pub(crate) leasehold_redis_cpu_us_per_cycle: f64,
    /// This (client) process's CPU per cycle, in microseconds: the lock's client-side cost plus the
    /// benchmark loop, which is the same for both.
    pub(crate) leasehold_client_cpu_us_per_cycle: f64,
    /// Redis's own time in the cycle's script calls, per cycle ([`Side::redis_script_us_per_cycle`]).
    pub(crate) leasehold_redis_script_us_per_cycle: f64,
    /// Redis's own time in every other command, per cycle ([`Side::redis_command_us_per_cycle`]).
    pub(crate) leasehold_redis_command_us_per_cycle: f64,
    pub(crate) baseline_cycles: u64,
    pub(crate) baseline_cycles_per_s: f64,
    pub(crate) baseline_p50_us: f64,
    pub(crate) baseline_p99_us: f64,
    pub(crate) baseline_round_trips_per_cycle: f64,
    pub(crate) baseline_commands_per_cycle: f64,
    pub(crate) baseline_redis_cpu_us_per_cycle: f64,
    pub(crate) baseline_client_cpu_us_per_cycle: f64,
    pub(crate) baseline_redis_script_us_per_cycle: f64,
    pub(crate) baseline_redis_command_us_per_cycle: f64,
    /// leasehold cycles/s ÷ baseline cycles/s.
    pub(crate) ratio: f64,
    /// The earlier target, ratio ≥ 0.9 (kept so that runs stay comparable).
    pub(crate) target_met: bool,
    /// The target with the queue in place: ratio ≥ 0.95 (what the queue may cost uncontended).
    pub(crate) target_0_95_met: bool,
    /// Redis CPU per try cycle, leasehold's ÷ the minimal lock's.
    pub(crate) redis_cpu_ratio: f64,
    /// Client CPU per try cycle, leasehold's ÷ the minimal lock's.
    pub(crate) client_cpu_ratio: f64,
    /// The waiting cycle on a free name.
    pub(crate) wait: S1Cycle,
    /// Each target of this run: wait cycle ≥ 1.0× the minimal lock's cycles/s; Redis CPU ≤ 1.3× and
    /// client CPU ≤ 1.15× per cycle, for both cycles.
    pub(crate) targets_met: S1Targets,
}

/// One cycle's figures for one lock.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub(crate) struct Side {
    pub(crate) cycles: u64,
    pub(crate) cycles_per_s: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    pub(crate) round_trips_per_cycle: f64,
    /// Redis command calls per cycle (commandstats; script internals included).
    pub(crate) commands_per_cycle: f64,
    /// redis-server CPU per cycle (user + system), in microseconds.
    pub(crate) redis_cpu_us_per_cycle: f64,
    /// This process's CPU per cycle, in microseconds.
    pub(crate) client_cpu_us_per_cycle: f64,
    /// Redis's own time running the cycle's script calls, by `INFO commandstats` (`usec` of
    /// `EVALSHA`: the script and the commands it called; not reading requests, writing replies or
    /// the event loop), in microseconds per cycle.
    pub(crate) redis_script_us_per_cycle: f64,
    /// Redis's own time running every other command, by `INFO commandstats`: those the scripts
    /// called (already inside the script figure) and those sent on their own (the minimal lock's
    /// `SET NX PX`), in microseconds per cycle.
    pub(crate) redis_command_us_per_cycle: f64,
}

/// One cycle, leasehold's against the minimal lock's, with the ratios.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S1Cycle {
    pub(crate) leasehold: Side,
    pub(crate) baseline: Side,
    /// Cycles/s, leasehold's ÷ the minimal lock's.
    pub(crate) ratio: f64,
    pub(crate) redis_cpu_ratio: f64,
    pub(crate) client_cpu_ratio: f64,
}

/// S1's targets, each from this run's ratios.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S1Targets {
    /// Wait cycle ≥ 1.0× the minimal lock's waiting cycles/s.
    pub(crate) wait_ratio_at_least_1_0: bool,
    /// Redis CPU per try cycle ≤ 1.3× the minimal lock's.
    pub(crate) try_redis_cpu_at_most_1_3: bool,
    /// Client CPU per try cycle ≤ 1.15× the minimal lock's.
    pub(crate) try_client_cpu_at_most_1_15: bool,
    /// Redis CPU per wait cycle ≤ 1.3× the minimal lock's.
    pub(crate) wait_redis_cpu_at_most_1_3: bool,
    /// Client CPU per wait cycle ≤ 1.15× the minimal lock's.
    pub(crate) wait_client_cpu_at_most_1_15: bool,
    /// All of the above.
    pub(crate) all: bool,
}

/// What one side spent over its slices.
#[derive(Default)]
struct Tally {
    lat: Latencies,
    time: Duration,
    trips: u64,
    calls: u64,
    redis_cpu: f64,
    client_cpu: f64,
    script_usec: u64,
    command_usec: u64,
}

impl Tally {
    fn side(&self) -> Side {
        let n = self.lat.len().max(1) as f64;
        Side {
            cycles: self.lat.len(),
            cycles_per_s: round3(self.lat.len() as f64 / self.time.as_secs_f64().max(1e-9)),
            p50_us: round3(self.lat.quantile_us(0.5)),
            p99_us: round3(self.lat.quantile_us(0.99)),
            round_trips_per_cycle: round3(self.trips as f64 / n),
            commands_per_cycle: round3(self.calls as f64 / n),
            redis_cpu_us_per_cycle: round3(self.redis_cpu * 1e6 / n),
            client_cpu_us_per_cycle: round3(self.client_cpu * 1e6 / n),
            redis_script_us_per_cycle: round3(self.script_usec as f64 / n),
            redis_command_us_per_cycle: round3(self.command_usec as f64 / n),
        }
    }
}

fn ratio(a: f64, b: f64) -> f64 {
    if b > 0.0 {
        round3(a / b)
    } else {
        0.0
    }
}

fn cycle(lh: &Tally, base: &Tally) -> S1Cycle {
    let (leasehold, baseline) = (lh.side(), base.side());
    S1Cycle {
        ratio: ratio(leasehold.cycles_per_s, baseline.cycles_per_s),
        redis_cpu_ratio: ratio(
            leasehold.redis_cpu_us_per_cycle,
            baseline.redis_cpu_us_per_cycle,
        ),
        client_cpu_ratio: ratio(
            leasehold.client_cpu_us_per_cycle,
            baseline.client_cpu_us_per_cycle,
        ),
        leasehold,
        baseline,
    }
}

/// The four sides, in the order of [`Tally`]s: leasehold try, minimal try, leasehold wait, minimal
/// wait.
const SIDES: usize = 4;

/// One cycle of side `which`: acquire + release of a free name.
async fn one_cycle(
    which: usize,
    client: &leasehold::LeaseClient,
    baseline: &BaselineLock,
    lease_opts: &leasehold::LeaseOptions,
) -> anyhow::Result<()> {
    const NAME: &str = "s1-uncontended";
    const KEY: &str = "bench-baseline:s1-uncontended";
    match which {
        0 | 2 => {
            let lease = if which == 0 {
                client.try_acquire(NAME, lease_opts).await
            } else {
                client.acquire(NAME, lease_opts, WAIT).await
            }
            .context("S1: leasehold acquire of a free name")?;
            lease.release().await.context("S1: leasehold release")?;
        }
        _ => {
            let held = if which == 1 {
                baseline.try_acquire(KEY).await?
            } else {
                baseline
                    .acquire_retrying(KEY, Instant::now() + WAIT)
                    .await?
            }
            .context("S1: the baseline lock was busy on a name nobody else uses")?;
            anyhow::ensure!(
                baseline.release(held).await?,
                "S1: the baseline lock was lost"
            );
        }
    }
    Ok(())
}

/// Runs `slices` alternating slices of each of the four sides, `total_each` in all for each.
pub(crate) async fn run(
    url: &str,
    redis_pid: Option<u32>,
    total_each: Duration,
    slices: u32,
    lease_opts: &leasehold::LeaseOptions,
) -> anyhow::Result<S1Report> {
    let client = leasehold::LeaseClient::connect(url)
        .await
        .context("connecting leasehold for S1")?;
    let baseline = BaselineLock::connect(url, lease_opts.ttl()).await?;
    // Warm all up (script loading, connection buffers, allocator) outside the measurement.
    for _ in 0..100 {
        for which in 0..SIDES {
            one_cycle(which, &client, &baseline, lease_opts).await?;
        }
    }
    let slice = total_each / slices.max(1);
    let mut tally: [Tally; SIDES] = Default::default();
    let mut probe = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let cpu = || -> anyhow::Result<f64> {
        Ok(redis_pid
            .map(process_cpu_seconds)
            .transpose()?
            .unwrap_or(0.0))
    };
    for i in 0..slices.max(1) as usize {
        // Rotate which goes first, so that none always runs right after another's garbage.
        for k in 0..SIDES {
            let which = (i + k) % SIDES;
            let trips = |which: usize| {
                if which.is_multiple_of(2) {
                    client.round_trips()
                } else {
                    baseline.round_trips()
                }
            };
            let stats0 = CommandStats::read(&mut probe).await?;
            let (cpu0, own0, trips0) = (cpu()?, own_cpu_seconds(), trips(which));
            let start = Instant::now();
            let t = &mut tally[which];
            while start.elapsed() < slice {
                let c = Instant::now();
                one_cycle(which, &client, &baseline, lease_opts).await?;
                t.lat.record(c.elapsed());
            }
            t.time += start.elapsed();
            t.redis_cpu += cpu()? - cpu0;
            t.client_cpu += own_cpu_seconds() - own0;
            t.trips += trips(which) - trips0;
            let stats = CommandStats::read(&mut probe).await?;
            t.calls += stats.since(&stats0).values().sum::<u64>();
            t.script_usec += stats.script_usec_since(&stats0);
            t.command_usec += stats.command_usec_since(&stats0);
        }
    }
    let tried = cycle(&tally[0], &tally[1]);
    let wait = cycle(&tally[2], &tally[3]);
    let targets = S1Targets {
        wait_ratio_at_least_1_0: wait.ratio >= 1.0,
        try_redis_cpu_at_most_1_3: tried.redis_cpu_ratio <= 1.3,
        try_client_cpu_at_most_1_15: tried.client_cpu_ratio <= 1.15,
        wait_redis_cpu_at_most_1_3: wait.redis_cpu_ratio <= 1.3,
        wait_client_cpu_at_most_1_15: wait.client_cpu_ratio <= 1.15,
        all: false,
    };
    let all = targets.wait_ratio_at_least_1_0
        && targets.try_redis_cpu_at_most_1_3
        && targets.try_client_cpu_at_most_1_15
        && targets.wait_redis_cpu_at_most_1_3
        && targets.wait_client_cpu_at_most_1_15;
    let (lh, base) = (&tried.leasehold, &tried.baseline);
    Ok(S1Report {
        seconds_each: round3(tally[0].time.as_secs_f64()),
        leasehold_cycles: lh.cycles,
        leasehold_cycles_per_s: lh.cycles_per_s,
        leasehold_p50_us: lh.p50_us,
        leasehold_p99_us: lh.p99_us,
        leasehold_round_trips_per_cycle: lh.round_trips_per_cycle,
        leasehold_commands_per_cycle: lh.commands_per_cycle,
        leasehold_redis_cpu_us_per_cycle: lh.redis_cpu_us_per_cycle,
        leasehold_client_cpu_us_per_cycle: lh.client_cpu_us_per_cycle,
        leasehold_redis_script_us_per_cycle: lh.redis_script_us_per_cycle,
        leasehold_redis_command_us_per_cycle: lh.redis_command_us_per_cycle,
        baseline_cycles: base.cycles,
        baseline_cycles_per_s: base.cycles_per_s,
        baseline_p50_us: base.p50_us,
        baseline_p99_us: base.p99_us,
        baseline_round_trips_per_cycle: base.round_trips_per_cycle,
        baseline_commands_per_cycle: base.commands_per_cycle,
        baseline_redis_cpu_us_per_cycle: base.redis_cpu_us_per_cycle,
        baseline_client_cpu_us_per_cycle: base.client_cpu_us_per_cycle,
        baseline_redis_script_us_per_cycle: base.redis_script_us_per_cycle,
        baseline_redis_command_us_per_cycle: base.redis_command_us_per_cycle,
        ratio: tried.ratio,
        target_met: tried.ratio >= 0.9,
        target_0_95_met: tried.ratio >= 0.95,
        redis_cpu_ratio: tried.redis_cpu_ratio,
        client_cpu_ratio: tried.client_cpu_ratio,
        wait,
        targets_met: S1Targets { all, ..targets },
    })
}
