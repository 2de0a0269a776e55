//! S3, many leases: one worker process holds 10,000 leases with renewal on; Redis commands and round
//! trips per second that renewal costs, the holder's CPU share, and its resident memory per held lease.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use super::measure::{own_cpu_seconds, own_rss_bytes, process_cpu_seconds, round3, CommandStats};

/// The figures of S3.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S3Report {
    pub(crate) leases: u64,
    pub(crate) ttl_ms: u64,
    pub(crate) renew_every_ms: Option<u64>,
    /// How long it took to acquire all of them (256 requests in flight).
    pub(crate) acquire_all_s: f64,
    pub(crate) held_s: f64,
    /// Redis command calls per second while only renewal ran (script internals included).
    pub(crate) renewal_commands_per_s: f64,
    /// Requests the client sent per second while only renewal ran.
    pub(crate) renewal_round_trips_per_s: f64,
    /// Renewal calls by command.
    pub(crate) commands: BTreeMap<String, u64>,
    /// CPU the holding process used while holding, as a share of one core.
    pub(crate) client_cpu_share: f64,
    /// CPU the redis-server used meanwhile, as a share of one core.
    pub(crate) redis_cpu_share: f64,
    pub(crate) rss_before_bytes: u64,
    /// Resident memory right after acquiring every lease.
    pub(crate) rss_held_bytes: u64,
    /// Resident memory at the end of the window, after several renewal rounds (their buffers
    /// included): the figure `bytes_per_lease` is computed from.
    pub(crate) rss_end_bytes: u64,
    /// (resident memory at the end − before acquiring) ÷ leases.
    pub(crate) bytes_per_lease: f64,
    /// The same, right after acquiring, before any renewal ran.
    pub(crate) bytes_per_lease_at_acquire: f64,
    /// Leases whose lost signal fired during the hold (must be 0).
    pub(crate) lost: u64,
    pub(crate) target_met: bool,
}

/// What the S3 worker says once it holds every lease.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct HeldLine {
    pub(crate) rss_before_bytes: u64,
    pub(crate) rss_held_bytes: u64,
    pub(crate) acquire_all_s: f64,
    pub(crate) held: u64,
}

/// What the S3 worker says at `stop`.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct StopLine {
    pub(crate) rss_end_bytes: u64,
    pub(crate) cpu_s: f64,
    pub(crate) wall_s: f64,
    pub(crate) round_trips: u64,
    pub(crate) lost: u64,
}

pub(crate) async fn run(
    url: &str,
    redis_pid: Option<u32>,
    worker_exe: &Path,
    leases: u64,
    lease_opts: &leasehold::LeaseOptions,
    hold_for: Duration,
) -> anyhow::Result<S3Report> {
    let nodes = [Node {
        url: url.to_owned(),
        pid: redis_pid,
    }];
    run_on(
        url,
        "leasehold",
        &nodes,
        worker_exe,
        leases,
        lease_opts,
        hold_for,
    )
    .await
}

/// One data node of the store the leases live in: where its commands are counted and its CPU read.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    /// A plain `redis://` URL to this node alone.
    pub(crate) url: String,
    pub(crate) pid: Option<u32>,
}

/// Command counts summed over `probes` (one connection per data node).
async fn stats_of(
    probes: &mut [redis::aio::MultiplexedConnection],
) -> anyhow::Result<Vec<CommandStats>> {
    let mut all = Vec::with_capacity(probes.len());
    for p in probes.iter_mut() {
        all.push(CommandStats::read(p).await?);
    }
    Ok(all)
}

/// CPU seconds of every node's process so far (`None`: a pid is not known).
fn cpu_of(nodes: &[Node]) -> anyhow::Result<Option<f64>> {
    let mut sum = 0.0;
    for n in nodes {
        let Some(pid) = n.pid else { return Ok(None) };
        sum += process_cpu_seconds(pid)?;
    }
    Ok(Some(sum))
}

/// S3 against a store whose data nodes are `nodes` (one server, or a cluster's masters): `url` is
/// what the worker connects to, `prefix` its key prefix (a run of its own when leases of an earlier
/// run may still be held there).
pub(crate) async fn run_on(
    url: &str,
    prefix: &str,
    nodes: &[Node],
    worker_exe: &Path,
    leases: u64,
    lease_opts: &leasehold::LeaseOptions,
    hold_for: Duration,
) -> anyhow::Result<S3Report> {
    let mut probes = Vec::with_capacity(nodes.len());
    for n in nodes {
        probes.push(
            redis::Client::open(n.url.as_str())?
                .get_multiplexed_async_connection()
                .await
                .with_context(|| format!("connecting to {}", n.url))?,
        );
    }
    let mut child = tokio::process::Command::new(worker_exe)
        .arg("__bench-worker")
        .arg("s3")
        .args(["--redis-url", url])
        .args(["--prefix", prefix])
        .args(["--leases", &leases.to_string()])
        .args(["--ttl-ms", &lease_opts.ttl().as_millis().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawning bench worker {}", worker_exe.display()))?;
    let mut stdin = child.stdin.take().context("worker stdin")?;
    let mut out = BufReader::new(child.stdout.take().context("worker stdout")?).lines();
    let line = tokio::time::timeout(Duration::from_secs(300), out.next_line())
        .await
        .context("the S3 worker did not acquire its leases within 300 s")??
        .context("the S3 worker exited before holding its leases (its error is above)")?;
    let held: HeldLine = serde_json::from_str(&line)
        .with_context(|| format!("unreadable S3 worker line: {line}"))?;
    anyhow::ensure!(
        held.held == leases,
        "the S3 worker holds {} of {leases} leases",
        held.held
    );

    let stats0 = stats_of(&mut probes).await?;
    let cpu0 = cpu_of(nodes)?;
    let t0 = Instant::now();
    stdin.write_all(b"go\n").await?;
    stdin.flush().await?;
    tokio::time::sleep(hold_for).await;
    stdin.write_all(b"stop\n").await?;
    stdin.flush().await?;
    let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
        .await
        .context("the S3 worker did not report")??
        .context("the S3 worker exited without a report")?;
    let wall = t0.elapsed().as_secs_f64();
    let stats1 = stats_of(&mut probes).await?;
    let cpu1 = cpu_of(nodes)?;
    let stop: StopLine = serde_json::from_str(&line)
        .with_context(|| format!("unreadable S3 worker report: {line}"))?;
    drop(stdin);
    let _ = child.wait().await;

    let mut commands = BTreeMap::<String, u64>::new();
    for (now, then) in stats1.iter().zip(&stats0) {
        for (name, calls) in now.since(then) {
            *commands.entry(name).or_default() += calls;
        }
    }
    let total: u64 = commands.values().sum();
    let per_lease = |rss: u64| rss.saturating_sub(held.rss_before_bytes) as f64 / leases as f64;
    let bytes_per_lease = per_lease(stop.rss_end_bytes);
    Ok(S3Report {
        leases,
        ttl_ms: lease_opts.ttl().as_millis() as u64,
        renew_every_ms: lease_opts.renew_every().map(|d| d.as_millis() as u64),
        acquire_all_s: round3(held.acquire_all_s),
        held_s: round3(stop.wall_s),
        renewal_commands_per_s: round3(total as f64 / wall),
        renewal_round_trips_per_s: round3(stop.round_trips as f64 / stop.wall_s),
        commands,
        client_cpu_share: round3(stop.cpu_s / stop.wall_s),
        redis_cpu_share: round3(cpu0.zip(cpu1).map(|(a, b)| b - a).unwrap_or(0.0) / wall),
        rss_before_bytes: held.rss_before_bytes,
        rss_held_bytes: held.rss_held_bytes,
        rss_end_bytes: stop.rss_end_bytes,
        bytes_per_lease: round3(bytes_per_lease),
        bytes_per_lease_at_acquire: round3(per_lease(held.rss_held_bytes)),
        lost: stop.lost,
        target_met: bytes_per_lease <= 1024.0 && stop.lost == 0,
    })
}

/// The worker side of S3: hold `leases` leases, say so, measure between `go` and `stop`.
pub(crate) async fn worker(
    url: &str,
    prefix: &str,
    leases: u64,
    lease_opts: leasehold::LeaseOptions,
) -> anyhow::Result<()> {
    let client = leasehold::LeaseClient::builder(url)
        .key_prefix(prefix)
        .connect()
        .await
        .context("connecting leasehold")?;
    // One acquire first, so that the connection, scripts and background tasks exist before the
    // baseline memory figure.
    client
        .try_acquire("s3-warmup", &lease_opts)
        .await?
        .release()
        .await?;
    let rss_before_bytes = own_rss_bytes()?;
    let t = Instant::now();
    // Straight into one pre-sized Vec: the harness should add no more than a pointer-sized slot per
    // lease to what is measured.
    let mut held = Vec::with_capacity(leases as usize);
    let mut acquiring = futures::stream::iter(0..leases)
        .map(|i| {
            let client = client.clone();
            let opts = lease_opts.clone();
            async move { client.try_acquire(&format!("s3-{i}"), &opts).await }
        })
        .buffer_unordered(256);
    while let Some(r) = acquiring.next().await {
        held.push(r.context("S3: acquiring a free lease")?);
    }
    drop(acquiring);
    let acquire_all_s = t.elapsed().as_secs_f64();
    // Let allocations made while acquiring settle into what holding costs.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let rss_held_bytes = own_rss_bytes()?;
    let mut stdout = tokio::io::stdout();
    let line = serde_json::to_string(&HeldLine {
        rss_before_bytes,
        rss_held_bytes,
        acquire_all_s,
        held: held.len() as u64,
    })?;
    stdout.write_all(format!("{line}\n").as_bytes()).await?;
    stdout.flush().await?;

    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    expect_line(&mut lines, "go").await?;
    let (cpu0, rt0, t0) = (own_cpu_seconds(), client.round_trips(), Instant::now());
    expect_line(&mut lines, "stop").await?;
    let stop = StopLine {
        rss_end_bytes: own_rss_bytes()?,
        cpu_s: own_cpu_seconds() - cpu0,
        wall_s: t0.elapsed().as_secs_f64(),
        round_trips: client.round_trips() - rt0,
        lost: held.iter().filter(|l| l.lost().is_fired()).count() as u64,
    };
    let line = serde_json::to_string(&stop)?;
    stdout.write_all(format!("{line}\n").as_bytes()).await?;
    stdout.flush().await?;
    // The leases expire with their TTL on the benchmark's private server; releasing 10,000 of them
    // one by one would only slow the run down.
    std::mem::forget(held);
    Ok(())
}

async fn expect_line(
    lines: &mut tokio::io::Lines<BufReader<tokio::io::Stdin>>,
    want: &str,
) -> anyhow::Result<()> {
    let got = lines
        .next_line()
        .await?
        .with_context(|| format!("the bench closed stdin before `{want}`"))?;
    anyhow::ensure!(
        got.trim() == want,
        "expected `{want}` on stdin, got {got:?}"
    );
    Ok(())
}
