//! Measuring instruments: a clock shared by every process on the machine, latency histograms,
//! `INFO commandstats` deltas, and CPU and memory figures read from the kernel.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use hdrhistogram::Histogram;
use nix::time::{clock_gettime, ClockId};

/// Nanoseconds on `CLOCK_MONOTONIC`. One clock for every process on this machine, so the release
/// recorded by one contender process and the acquire recorded by another can be subtracted.
pub(crate) fn mono_ns() -> u64 {
    // CLOCK_MONOTONIC cannot fail on Linux; a zero would only shift the figures, never crash.
    clock_gettime(ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// A latency histogram in nanoseconds (1 ns .. 1 h, 3 significant digits).
#[derive(Debug, Clone)]
pub(crate) struct Latencies {
    hist: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Latencies {
            hist: Histogram::new_with_bounds(1, 3_600_000_000_000, 3)
                .expect("constant histogram bounds are valid"),
        }
    }
}

impl Latencies {
    pub(crate) fn record_ns(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
    }

    pub(crate) fn record(&mut self, d: Duration) {
        self.record_ns(u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    }

    pub(crate) fn len(&self) -> u64 {
        self.hist.len()
    }

    /// Adds `other`'s samples to these.
    pub(crate) fn add(&mut self, other: &Latencies) {
        // Both have the same bounds, so adding cannot fail; a sample out of range is dropped.
        let _ = self.hist.add(&other.hist);
    }

    /// The `q` quantile in microseconds (0 when empty).
    pub(crate) fn quantile_us(&self, q: f64) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.value_at_quantile(q) as f64 / 1000.0
    }

    pub(crate) fn mean_us(&self) -> f64 {
        if self.hist.is_empty() {
            return 0.0;
        }
        self.hist.mean() / 1000.0
    }
}

/// Commands that the harness itself sends (measuring, connecting) and that must not be charged to
/// the lock.
const HARNESS_COMMANDS: &[&str] = &[
    "info", "ping", "hello", "client", "auth", "select", "config", "command",
];

/// Per-command call counts from `INFO commandstats`. Redis 7 also counts the commands a Lua script
/// runs, next to the `evalsha` call itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct CommandStats(BTreeMap<String, (u64, u64)>);

impl CommandStats {
    pub(crate) async fn read(con: &mut redis::aio::MultiplexedConnection) -> anyhow::Result<Self> {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(con)
            .await
            .context("reading INFO commandstats from the benchmark's redis-server")?;
        Ok(Self::parse(&info))
    }

    /// Parses lines such as `cmdstat_set:calls=12,usec=30,...` (subcommands appear as
    /// `cmdstat_client|setinfo`).
    pub(crate) fn parse(info: &str) -> Self {
        let mut map = BTreeMap::new();
        for line in info.lines() {
            let Some(rest) = line.trim().strip_prefix("cmdstat_") else {
                continue;
            };
            let Some((name, fields)) = rest.split_once(':') else {
                continue;
            };
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|f| f.strip_prefix(key))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            if let Some(calls) = field("calls=") {
                map.insert(name.to_owned(), (calls, field("usec=").unwrap_or(0)));
            }
        }
        CommandStats(map)
    }

    /// Calls since `earlier`, leaving out the harness's own commands.
    pub(crate) fn since(&self, earlier: &CommandStats) -> BTreeMap<String, u64> {
        self.deltas(earlier)
            .filter(|&(_, calls, _)| calls > 0)
            .map(|(name, calls, _)| (name.to_owned(), calls))
            .collect()
    }

    /// Microseconds Redis spent running scripts (`EVALSHA`, `EVAL`) since `earlier`, by its own
    /// `usec` counts: the script and the commands it called, not reading the request or writing
    /// the reply. (The commands a script calls are counted under their own names too, so a sum
    /// over every command would count them twice.)
    pub(crate) fn script_usec_since(&self, earlier: &CommandStats) -> u64 {
        self.usec_since(earlier, true)
    }

    /// Microseconds Redis spent running every command but the script calls since `earlier`, each
    /// by its own `usec` count: a command a script called and one sent on its own alike (add
    /// [`script_usec_since`](Self::script_usec_since) for a script's whole time, which includes the
    /// commands it called).
    pub(crate) fn command_usec_since(&self, earlier: &CommandStats) -> u64 {
        self.usec_since(earlier, false)
    }

    /// The `usec` since `earlier` of the script calls (`scripts`) or of every other command.
    fn usec_since(&self, earlier: &CommandStats, scripts: bool) -> u64 {
        self.deltas(earlier)
            .filter(|(name, _, _)| matches!(*name, "evalsha" | "eval") == scripts)
            .map(|(_, _, usec)| usec)
            .sum()
    }

    fn deltas<'a>(
        &'a self,
        earlier: &'a CommandStats,
    ) -> impl Iterator<Item = (&'a str, u64, u64)> + 'a {
        self.0
            .iter()
            .filter(|(name, _)| {
                let base = name.split('|').next().unwrap_or(name);
                !HARNESS_COMMANDS.contains(&base)
            })
            .map(|(name, (calls, usec))| {
                let (c0, u0) = earlier.0.get(name).copied().unwrap_or((0, 0));
                (
                    name.as_str(),
                    calls.saturating_sub(c0),
                    usec.saturating_sub(u0),
                )
            })
    }
}

/// CPU seconds (user + system) a process has used so far, from `/proc/<pid>/stat`.
/// The kernel reports them in clock ticks of `USER_HZ`, which is 100 on Linux.
pub(crate) fn process_cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let path = format!("/proc/{pid}/stat");
    let stat = std::fs::read_to_string(&path).with_context(|| format!("reading {path}"))?;
    // The command name (field 2) may contain spaces; the fields after its closing parenthesis are
    // fixed: state is field 3, utime field 14, stime field 15.
    let after = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .with_context(|| format!("{path} has no command name"))?;
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .and_then(|v| v.parse().ok())
            .with_context(|| format!("{path}: field {} is not a number", i + 3))
    };
    Ok((ticks(11)? + ticks(12)?) as f64 / 100.0)
}

/// CPU seconds (user + system) this process has used, from `getrusage` (microsecond resolution).
pub(crate) fn own_cpu_seconds() -> f64 {
    use nix::sys::resource::{getrusage, UsageWho};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(u) => {
            let tv = |t: nix::sys::time::TimeVal| t.tv_sec() as f64 + t.tv_usec() as f64 / 1e6;
            tv(u.user_time()) + tv(u.system_time())
        }
        Err(_) => 0.0,
    }
}

/// Resident memory of this process in bytes (`VmRSS` in `/proc/self/status`).
pub(crate) fn own_rss_bytes() -> anyhow::Result<u64> {
    let status =
        std::fs::read_to_string("/proc/self/status").context("reading /proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .context("/proc/self/status has no VmRSS line")
}

/// The machine the figures come from.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Machine {
    /// Logical CPUs this process may use.
    pub(crate) nproc: usize,
    /// First `model name` in `/proc/cpuinfo`.
    pub(crate) cpu_model: String,
    /// `redis_version` of the benchmark's redis-server.
    pub(crate) redis_version: String,
    /// Load average (1 min) when the run started: the machine is shared, and this says how much.
    pub(crate) loadavg_1m: f64,
}

impl Machine {
    pub(crate) async fn describe(con: &mut redis::aio::MultiplexedConnection) -> Self {
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("model name"))
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        let info: String = redis::cmd("INFO")
            .arg("server")
            .query_async(con)
            .await
            .unwrap_or_default();
        let redis_version = info
            .lines()
            .find_map(|l| l.strip_prefix("redis_version:"))
            .map(|v| v.trim().to_owned())
            .unwrap_or_else(|| "unknown".to_owned());
        let loadavg_1m = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|s| s.split_whitespace().next().and_then(|v| v.parse().ok()))
            .unwrap_or(0.0);
        Machine {
            nproc: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model,
            redis_version,
            loadavg_1m,
        }
    }
}

/// Clients connected to Redis now (`INFO clients`), not counting `con` itself.
pub(crate) async fn connected_clients(
    con: &mut redis::aio::MultiplexedConnection,
) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("clients")
        .query_async(con)
        .await
        .context("reading INFO clients")?;
    let n = info
        .lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .context("INFO clients has no connected_clients")?;
    Ok(n.saturating_sub(1))
}

/// Median round trip of `PING` on `con`, in microseconds, over `n` sequential requests.
pub(crate) async fn ping_rtt_us(
    con: &mut redis::aio::MultiplexedConnection,
    n: usize,
) -> anyhow::Result<f64> {
    let mut lat = Latencies::default();
    for _ in 0..n {
        let t = std::time::Instant::now();
        redis::cmd("PING")
            .query_async::<String>(con)
            .await
            .context("PING to the benchmark's redis-server")?;
        lat.record(t.elapsed());
    }
    Ok(lat.quantile_us(0.5))
}

/// Rounds for the report: figures with more digits than the machine's noise only mislead.
pub(crate) fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_deltas_skip_the_harness_and_keep_script_internals() {
        let before = CommandStats::parse(
            "# Commandstats\r\ncmdstat_set:calls=10,usec=5,usec_per_call=0.5\r\ncmdstat_info:calls=1,usec=1\r\n",
        );
        let after = CommandStats::parse(
            "# Commandstats\r\ncmdstat_set:calls=15,usec=9\r\ncmdstat_evalsha:calls=5,usec=9\r\ncmdstat_info:calls=2,usec=1\r\ncmdstat_client|setinfo:calls=4,usec=1\r\n",
        );
        let d = after.since(&before);
        assert_eq!(d.get("set"), Some(&5));
        assert_eq!(d.get("evalsha"), Some(&5));
        assert!(!d.contains_key("info"));
        assert!(!d.contains_key("client|setinfo"));
        // The script's time and the other commands' time, the harness's left out.
        assert_eq!(after.script_usec_since(&before), 9);
        assert_eq!(after.command_usec_since(&before), 4);
    }

    #[test]
    fn own_process_figures_are_readable() {
        assert!(own_rss_bytes().unwrap() > 0);
        let pid = std::process::id();
        assert!(process_cpu_seconds(pid).unwrap() >= 0.0);
        let a = mono_ns();
        let b = mono_ns();
        assert!(b >= a && a > 0);
    }
}
