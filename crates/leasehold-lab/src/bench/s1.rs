//! S1, uncontended: one client takes and releases one name over and over; leasehold against the
//! baseline lock, in alternating slices of the same run so that both see the same machine noise.

use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::baseline::BaselineLock;
use super::measure::{own_cpu_seconds, process_cpu_seconds, round3, CommandStats, Latencies};

/// The figures of S1.
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
    pub(crate) baseline_cycles: u64,
    pub(crate) baseline_cycles_per_s: f64,
    pub(crate) baseline_p50_us: f64,
    pub(crate) baseline_p99_us: f64,
    pub(crate) baseline_commands_per_cycle: f64,
    pub(crate) baseline_redis_cpu_us_per_cycle: f64,
    pub(crate) baseline_client_cpu_us_per_cycle: f64,
    /// leasehold cycles/s ÷ baseline cycles/s.
    pub(crate) ratio: f64,
    /// The earlier target, ratio ≥ 0.9 (kept so that runs stay comparable).
    pub(crate) target_met: bool,
    /// The target with the queue in place: ratio ≥ 0.95 (what the queue may cost uncontended).
    pub(crate) target_0_95_met: bool,
}

/// Runs `slices` alternating slices of each lock, `total_each` in all for each.
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
    let name = "s1-uncontended";
    let key = "bench-baseline:s1-uncontended";
    // Warm both up (script loading, connection buffers, allocator) outside the measurement.
    for _ in 0..200 {
        client
            .try_acquire(name, lease_opts)
            .await?
            .release()
            .await?;
        let held = baseline
            .try_acquire(key)
            .await?
            .context("baseline warm-up")?;
        baseline.release(held).await?;
    }
    let slice = total_each / slices.max(1);
    let (mut lh, mut base) = (Latencies::default(), Latencies::default());
    let (mut lh_time, mut base_time) = (Duration::ZERO, Duration::ZERO);
    let rt0 = client.round_trips();
    let mut probe = redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?;
    let cpu = || -> anyhow::Result<f64> {
        Ok(redis_pid
            .map(process_cpu_seconds)
            .transpose()?
            .unwrap_or(0.0))
    };
    // [leasehold, baseline]: Redis calls and Redis CPU seconds spent during each side's slices.
    let mut calls = [0u64; 2];
    let mut redis_cpu = [0f64; 2];
    let mut client_cpu = [0f64; 2];
    for i in 0..slices.max(1) {
        // Alternate which goes first, so neither always runs right after the other's garbage.
        for which in [i % 2, (i + 1) % 2] {
            let stats0 = CommandStats::read(&mut probe).await?;
            let cpu0 = cpu()?;
            let own0 = own_cpu_seconds();
            let start = Instant::now();
            if which == 0 {
                while start.elapsed() < slice {
                    let t = Instant::now();
                    let lease = client
                        .try_acquire(name, lease_opts)
                        .await
                        .context("S1: leasehold acquire of a free name")?;
                    lease.release().await.context("S1: leasehold release")?;
                    lh.record(t.elapsed());
                }
                lh_time += start.elapsed();
            } else {
                while start.elapsed() < slice {
                    let t = Instant::now();
                    let held = baseline
                        .try_acquire(key)
                        .await?
                        .context("S1: the baseline lock was busy on a name nobody else uses")?;
                    anyhow::ensure!(
                        baseline.release(held).await?,
                        "S1: the baseline lock was lost"
                    );
                    base.record(t.elapsed());
                }
                base_time += start.elapsed();
            }
            let side = which as usize;
            redis_cpu[side] += cpu()? - cpu0;
            client_cpu[side] += own_cpu_seconds() - own0;
            calls[side] += CommandStats::read(&mut probe)
                .await?
                .since(&stats0)
                .values()
                .sum::<u64>();
        }
    }
    let lh_rate = lh.len() as f64 / lh_time.as_secs_f64();
    let base_rate = base.len() as f64 / base_time.as_secs_f64();
    let ratio = lh_rate / base_rate;
    Ok(S1Report {
        seconds_each: round3(lh_time.as_secs_f64()),
        leasehold_cycles: lh.len(),
        leasehold_cycles_per_s: round3(lh_rate),
        leasehold_p50_us: round3(lh.quantile_us(0.5)),
        leasehold_p99_us: round3(lh.quantile_us(0.99)),
        leasehold_round_trips_per_cycle: round3(
            (client.round_trips() - rt0) as f64 / lh.len().max(1) as f64,
        ),
        leasehold_commands_per_cycle: round3(calls[0] as f64 / lh.len().max(1) as f64),
        leasehold_redis_cpu_us_per_cycle: round3(redis_cpu[0] * 1e6 / lh.len().max(1) as f64),
        leasehold_client_cpu_us_per_cycle: round3(client_cpu[0] * 1e6 / lh.len().max(1) as f64),
        baseline_cycles: base.len(),
        baseline_cycles_per_s: round3(base_rate),
        baseline_p50_us: round3(base.quantile_us(0.5)),
        baseline_p99_us: round3(base.quantile_us(0.99)),
        baseline_commands_per_cycle: round3(calls[1] as f64 / base.len().max(1) as f64),
        baseline_redis_cpu_us_per_cycle: round3(redis_cpu[1] * 1e6 / base.len().max(1) as f64),
        baseline_client_cpu_us_per_cycle: round3(client_cpu[1] * 1e6 / base.len().max(1) as f64),
        ratio: round3(ratio),
        target_met: ratio >= 0.9,
        target_0_95_met: ratio >= 0.95,
    })
}
