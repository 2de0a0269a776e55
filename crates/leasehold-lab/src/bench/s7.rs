//! S7, ten times the names: one process holds 10,000, 30,000 and 100,000 leases (TTL 30 s, renewed
//! every 10 s) on one Redis and on a three-master Redis Cluster started on loopback; the largest is
//! held for two minutes. Per size: leases lost (must be 0), client memory per lease (≤ 1 KiB), Redis
//! commands per renewal and the renewal load. On the cluster also: uncontended cycles per second on
//! distinct names from three processes, all names on one master against one per master.
//!
//! Limit: the renewal load is what one holder puts on the store; the scaling ratio says what the
//! cluster's masters add on this machine, whose cores the client processes share with the servers.

use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use super::measure::round3;
use super::s3::{self, Node};

/// The sizes, smallest first; the last is held for [`Plan::hold_largest`].
pub(crate) const SIZES: [u64; 3] = [10_000, 30_000, 100_000];

/// The lease TTL of S7 (renewed every third of it).
const TTL: Duration = Duration::from_secs(30);

/// How S7 runs.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The sizes held.
    pub(crate) sizes: Vec<u64>,
    /// How long each size but the largest is held (at least one renewal round: 10 s).
    pub(crate) hold: Duration,
    /// How long the largest is held.
    pub(crate) hold_largest: Duration,
    /// How long each side of the cluster's scaling runs, in all (split into alternating windows).
    pub(crate) scaling_each: Duration,
}

/// One size on one topology.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S7Row {
    pub(crate) topology: &'static str,
    pub(crate) leases: u64,
    pub(crate) acquire_all_s: f64,
    pub(crate) held_s: f64,
    /// Leases whose lost signal fired while held (must be 0).
    pub(crate) lost: u64,
    /// Client resident memory per held lease at the end of the hold (≤ 1 KiB).
    pub(crate) bytes_per_lease: f64,
    /// Renewals per second (each successful renewal is one `PEXPIRE` in Redis).
    pub(crate) renewals_per_s: f64,
    /// Redis command calls per renewal (script calls and the commands they run).
    pub(crate) commands_per_renewal: f64,
    /// Script calls (`EVALSHA`) per renewal.
    pub(crate) scripts_per_renewal: f64,
    pub(crate) renewal_commands_per_s: f64,
    pub(crate) renewal_round_trips_per_s: f64,
    /// The holder's CPU while holding, as a share of one core.
    pub(crate) client_cpu_share: f64,
    /// The Redis servers' CPU while holding (summed over the masters), as a share of one core.
    pub(crate) redis_cpu_share: f64,
    /// 0 lost and ≤ 1 KiB per lease.
    pub(crate) target_met: bool,
}

/// Uncontended cycles on a cluster: three processes, each cycling on names of its own.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Scaling {
    pub(crate) processes: u32,
    pub(crate) names_per_process: u32,
    pub(crate) seconds_each: f64,
    /// Every name on one master.
    pub(crate) one_master_cycles_per_s: f64,
    /// The names spread over the three masters.
    pub(crate) three_masters_cycles_per_s: f64,
    /// Three masters ÷ one.
    pub(crate) ratio: f64,
}

/// The figures of S7.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S7Report {
    pub(crate) ttl_ms: u64,
    pub(crate) rows: Vec<S7Row>,
    pub(crate) cluster_scaling: Option<Scaling>,
    /// Why the cluster part did not run, when it did not.
    pub(crate) cluster_skipped: Option<String>,
    /// Every row met its target.
    pub(crate) target_met: bool,
}

fn row(topology: &'static str, r: &s3::S3Report) -> S7Row {
    let pexpire = r.commands.get("pexpire").copied().unwrap_or(0);
    let evalsha = r.commands.get("evalsha").copied().unwrap_or(0);
    let total: u64 = r.commands.values().sum();
    let per = |n: u64| {
        if pexpire == 0 {
            0.0
        } else {
            round3(n as f64 / pexpire as f64)
        }
    };
    S7Row {
        topology,
        leases: r.leases,
        acquire_all_s: r.acquire_all_s,
        held_s: r.held_s,
        lost: r.lost,
        bytes_per_lease: r.bytes_per_lease,
        renewals_per_s: round3(pexpire as f64 / r.held_s.max(1e-9)),
        commands_per_renewal: per(total),
        scripts_per_renewal: per(evalsha),
        renewal_commands_per_s: r.renewal_commands_per_s,
        renewal_round_trips_per_s: r.renewal_round_trips_per_s,
        client_cpu_share: r.client_cpu_share,
        redis_cpu_share: r.redis_cpu_share,
        target_met: r.target_met && pexpire > 0,
    }
}

/// Every size on one topology: `url` for the holder, `nodes` for the counts.
async fn sizes(
    topology: &'static str,
    url: &str,
    nodes: &[Node],
    worker_exe: &Path,
    plan: &Plan,
) -> anyhow::Result<Vec<S7Row>> {
    let opts = leasehold::LeaseOptions::with_ttl(TTL)?;
    let mut rows = Vec::new();
    for (i, &n) in plan.sizes.iter().enumerate() {
        let hold = if i + 1 == plan.sizes.len() {
            plan.hold_largest
        } else {
            plan.hold
        };
        eprintln!(
            "bench: S7 {topology}: {n} leases held for {:.0} s",
            hold.as_secs_f64()
        );
        // A prefix per run: the leases of the one before still hold their names until their TTL.
        let prefix = format!("s7-{topology}-{n}");
        let r = s3::run_on(url, &prefix, nodes, worker_exe, n, &opts, hold).await?;
        rows.push(row(topology, &r));
    }
    Ok(rows)
}

/// Runs S7: the sizes on the bench's server (`url`, `pid`), then on a cluster of its own.
pub(crate) async fn run(
    url: &str,
    pid: Option<u32>,
    worker_exe: &Path,
    plan: &Plan,
) -> anyhow::Result<S7Report> {
    let one = [Node {
        url: url.to_owned(),
        pid,
    }];
    let mut rows = sizes("redis", url, &one, worker_exe, plan).await?;
    eprintln!("bench: S7 starting a three-master Redis Cluster on loopback");
    let cluster = tokio::task::spawn_blocking(|| {
        leasehold_testkit::RedisCluster::builder()
            .masters(3)
            .replicas_per_master(0)
            .start()
    })
    .await?;
    let (mut cluster_scaling, mut cluster_skipped) = (None, None);
    match cluster {
        Ok(cluster) => {
            let nodes: Vec<Node> = cluster
                .nodes()
                .iter()
                .map(|n| Node {
                    url: n.url(),
                    pid: n.pid(),
                })
                .collect();
            let seed = cluster.seed_url();
            rows.extend(sizes("redis-cluster", &seed, &nodes, worker_exe, plan).await?);
            cluster_scaling = Some(scaling(&cluster, worker_exe, plan.scaling_each).await?);
            tokio::task::spawn_blocking(move || drop(cluster)).await?;
        }
        Err(e) => cluster_skipped = Some(format!("the cluster did not start: {e}")),
    }
    Ok(S7Report {
        ttl_ms: TTL.as_millis() as u64,
        target_met: rows.iter().all(|r| r.target_met),
        rows,
        cluster_scaling,
        cluster_skipped,
    })
}

const PROCESSES: u32 = 3;
const NAMES_PER_PROCESS: u32 = 4;
const SCALING_PREFIX: &str = "s7s";

/// `PROCESSES × NAMES_PER_PROCESS` names whose lock keys live on `masters` (in turn).
fn names_on(
    cluster: &leasehold_testkit::RedisCluster,
    masters: &[usize],
    tag: &str,
) -> anyhow::Result<Vec<String>> {
    let want = (PROCESSES * NAMES_PER_PROCESS) as usize;
    let mut names = Vec::with_capacity(want);
    let mut i = 0u64;
    while names.len() < want {
        let target = masters[names.len() % masters.len()];
        let name = format!("{tag}-{i}");
        i += 1;
        anyhow::ensure!(i < 1_000_000, "no names found on the masters {masters:?}");
        let key = leasehold::lease::store::redis::keys::LeaseKeys::new(SCALING_PREFIX, &name)?.lock;
        if cluster.master_of_key(&key)? == target {
            names.push(name);
        }
    }
    Ok(names)
}

/// Three processes cycling on `names` (split between them) for `each`: cycles per second in all.
async fn cycles(
    seed: &str,
    worker_exe: &Path,
    names: &[String],
    each: Duration,
) -> anyhow::Result<f64> {
    let mut workers = Vec::new();
    for chunk in names.chunks(NAMES_PER_PROCESS as usize) {
        let mut child = tokio::process::Command::new(worker_exe)
            .arg("__bench-worker")
            .arg("s7-cycle")
            .args(["--redis-url", seed])
            .args(["--prefix", SCALING_PREFIX])
            .args(["--name", &chunk.join(",")])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("spawning bench worker {}", worker_exe.display()))?;
        let stdin = child.stdin.take().context("worker stdin")?;
        let mut out = BufReader::new(child.stdout.take().context("worker stdout")?).lines();
        let ready = tokio::time::timeout(Duration::from_secs(60), out.next_line())
            .await
            .context("an S7 worker was not ready within 60 s")??;
        anyhow::ensure!(
            ready.as_deref() == Some("ready"),
            "an S7 worker said {ready:?} (its error is above)"
        );
        workers.push((child, stdin, out));
    }
    for (_, stdin, _) in &mut workers {
        stdin.write_all(b"go\n").await?;
        stdin.flush().await?;
    }
    tokio::time::sleep(each).await;
    for (_, stdin, _) in &mut workers {
        stdin.write_all(b"stop\n").await?;
        stdin.flush().await?;
    }
    let mut rate = 0.0;
    for (mut child, stdin, mut out) in workers {
        let line = tokio::time::timeout(Duration::from_secs(30), out.next_line())
            .await
            .context("an S7 worker did not report")??
            .context("an S7 worker exited without a report")?;
        let done: CycleLine = serde_json::from_str(&line)
            .with_context(|| format!("unreadable S7 worker report: {line}"))?;
        rate += done.cycles as f64 / done.seconds.max(1e-9);
        drop(stdin);
        let _ = child.wait().await;
    }
    Ok(rate)
}

/// One master against three, in alternating windows (one, three, three, one).
async fn scaling(
    cluster: &leasehold_testkit::RedisCluster,
    worker_exe: &Path,
    each: Duration,
) -> anyhow::Result<Scaling> {
    let masters = cluster.masters()?;
    anyhow::ensure!(
        masters.len() >= 3,
        "the cluster has {} masters",
        masters.len()
    );
    let one = names_on(cluster, &masters[..1], "one")?;
    let three = names_on(cluster, &masters[..3], "three")?;
    let seed = cluster.seed_url();
    let window = each / 2;
    let (mut on_one, mut on_three) = (0.0, 0.0);
    for first_one in [true, false] {
        for one_now in [first_one, !first_one] {
            eprintln!(
                "bench: S7 cluster scaling: {} master(s), {:.1} s",
                if one_now { 1 } else { 3 },
                window.as_secs_f64()
            );
            let names = if one_now { &one } else { &three };
            let r = cycles(&seed, worker_exe, names, window).await?;
            if one_now {
                on_one += r / 2.0;
            } else {
                on_three += r / 2.0;
            }
        }
    }
    Ok(Scaling {
        processes: PROCESSES,
        names_per_process: NAMES_PER_PROCESS,
        seconds_each: round3(each.as_secs_f64()),
        one_master_cycles_per_s: round3(on_one),
        three_masters_cycles_per_s: round3(on_three),
        ratio: round3(if on_one > 0.0 { on_three / on_one } else { 0.0 }),
    })
}

/// What an S7 cycle worker says at `stop`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct CycleLine {
    pub(crate) cycles: u64,
    pub(crate) seconds: f64,
}

/// The worker side of the scaling: one task per name (comma-separated), each a loop of try-acquire
/// and release, between `go` and `stop` on stdin.
pub(crate) async fn cycle_worker(
    url: &str,
    prefix: &str,
    names: &str,
    lease_opts: leasehold::LeaseOptions,
) -> anyhow::Result<()> {
    let client = leasehold::LeaseClient::builder(url)
        .key_prefix(prefix)
        .connect()
        .await
        .context("connecting leasehold")?;
    let names: Vec<String> = names.split(',').map(str::to_owned).collect();
    for name in &names {
        client
            .try_acquire(name, &lease_opts)
            .await?
            .release()
            .await?;
    }
    let mut stdout = tokio::io::stdout();
    stdout.write_all(b"ready\n").await?;
    stdout.flush().await?;
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    anyhow::ensure!(
        lines.next_line().await?.as_deref().map(str::trim) == Some("go"),
        "expected `go` on stdin"
    );
    let stop = Arc::new(AtomicBool::new(false));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for name in names {
        let (client, opts, stop) = (client.clone(), lease_opts.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                client.try_acquire(&name, &opts).await?.release().await?;
                n += 1;
            }
            anyhow::Ok(n)
        }));
    }
    let _ = lines.next_line().await?;
    stop.store(true, Ordering::Relaxed);
    let seconds = t0.elapsed().as_secs_f64();
    let mut cycles = 0;
    for t in tasks {
        cycles += t.await??;
    }
    let line = serde_json::to_string(&CycleLine { cycles, seconds })?;
    stdout.write_all(format!("{line}\n").as_bytes()).await?;
    stdout.flush().await?;
    Ok(())
}
