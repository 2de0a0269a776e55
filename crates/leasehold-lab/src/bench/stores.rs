//! S5, every store: what a lease costs in each store this build can start or reach, as ratios to the
//! Redis store measured in the same run. S1 (one client taking and releasing one free name) alternates
//! slices of the store and of Redis so that both see the same machine noise; S2 (16 contenders on one
//! name, 1 ms holds, each its own client) runs the store and Redis back to back; S3 (one worker process
//! holding many leases with renewal on) reports resident memory per held lease.
//!
//! Stores are found at run time: a private redis-server always; then each lease store of the
//! verifier's table (`verify::store::RUN_WIDE`) whose URL scheme this build opens, reached or started
//! as its file says (PostgreSQL at `--database`, private servers for the others), then the Redis
//! deployments of [`TOPOLOGIES`] (a Sentinel set, a Cluster). A store that cannot be started is
//! skipped with a note, not failed. A new lease store is measured once it is in `RUN_WIDE`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::future::BoxFuture;
use leasehold::{LeaseClient, LeaseOptions};
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _, BufReader};

use super::measure::{round3, Latencies};
use super::s3::{HeldLine, StopLine};
use crate::verify::store::RUN_WIDE;

/// One store under measurement: how to reach it, and what keeps its servers alive.
pub(crate) struct Target {
    /// Short label for the table (`redis`, `postgres`, `etcd`, ...).
    pub(crate) label: &'static str,
    /// The store URL(s) a client connects with (several for Redlock).
    pub(crate) urls: Vec<String>,
    /// Private servers, stopped on drop.
    _servers: Box<dyn std::any::Any + Send>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("label", &self.label)
            .field(
                "urls",
                &self
                    .urls
                    .iter()
                    .map(|u| leasehold::url::redact(u))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// Whether this build of the library opens `scheme`.
fn built_in(scheme: &str) -> bool {
    leasehold::lease::lease_schemes()
        .iter()
        .any(|s| s == scheme)
}

/// Connects to a target's store with a key prefix of its own.
pub(crate) async fn connect(urls: &[String], prefix: &str) -> anyhow::Result<LeaseClient> {
    let [url] = urls else {
        anyhow::bail!(
            "{} store URLs given; this build connects to one store URL at a time",
            urls.len()
        );
    };
    LeaseClient::builder(url.as_str())
        .key_prefix(prefix)
        .connect()
        .await
        .with_context(|| format!("connecting to {}", leasehold::url::redact(url)))
}

/// A Redis deployment S5 and S6 measure against one Redis server: one line of [`TOPOLOGIES`].
struct Topology {
    /// The URL scheme that says whether this build has it.
    scheme: &'static str,
    /// Where it is, for a skip note ("via Sentinel").
    on: &'static str,
    /// Starts a private one.
    start: fn() -> BoxFuture<'static, anyhow::Result<Target>>,
}

/// The Redis deployments measured beside the lease stores, after them.
const TOPOLOGIES: &[Topology] = &[
    Topology {
        scheme: "redis-sentinel://",
        on: "via Sentinel",
        start: || Box::pin(sentinel()),
    },
    Topology {
        scheme: "redis-cluster://",
        on: "on Redis Cluster",
        start: || Box::pin(cluster()),
    },
];

/// The stores other than Redis this run can measure, each started (or reached); notes for those it
/// cannot. The lease stores come from the verifier's table of them (`verify::store::RUN_WIDE`,
/// each store's file saying how the benchmarks reach it), then the Redis deployments.
pub(crate) async fn others(database: &str, notes: &mut Vec<String>) -> Vec<Target> {
    let mut out = Vec::new();
    for store in RUN_WIDE.iter().filter(|s| built_in(s.scheme)) {
        match (store.measured)(database.to_owned()).await {
            Ok(started) => {
                let (url, servers) = started.into_parts();
                out.push(Target {
                    label: store.label,
                    urls: vec![url],
                    _servers: servers,
                });
            }
            Err(e) => notes.push(format!("S5 on {} skipped: {e:#}", store.name)),
        }
    }
    for topology in TOPOLOGIES.iter().filter(|t| built_in(t.scheme)) {
        match (topology.start)().await {
            Ok(target) => out.push(target),
            Err(e) => notes.push(format!("S5 {} skipped: {e:#}", topology.on)),
        }
    }
    out
}

/// A private Sentinel set (a primary, a replica, three sentinels).
async fn sentinel() -> anyhow::Result<Target> {
    let set =
        tokio::task::spawn_blocking(leasehold_testkit::sentinel::SentinelSet::start).await??;
    Ok(Target {
        label: "sentinel",
        urls: vec![set.sentinel_url()],
        _servers: Box::new(set),
    })
}

/// A private Redis Cluster (three masters, a replica each).
async fn cluster() -> anyhow::Result<Target> {
    let cluster =
        tokio::task::spawn_blocking(leasehold_testkit::cluster::RedisCluster::start).await??;
    Ok(Target {
        label: "cluster",
        urls: vec![cluster.seed_url()],
        _servers: Box::new(cluster),
    })
}

/// A private redis-server as the reference store.
pub(crate) async fn redis() -> anyhow::Result<Target> {
    let srv = tokio::task::spawn_blocking(leasehold_testkit::RedisServer::start)
        .await?
        .context("starting a private redis-server for S5")?;
    Ok(Target {
        label: "redis",
        urls: vec![srv.url()],
        _servers: Box::new(srv),
    })
}

/// Three private redis-servers as the masters of a Redlock.
pub(crate) async fn redlock() -> anyhow::Result<Target> {
    let servers = tokio::task::spawn_blocking(|| {
        (0..3)
            .map(|_| leasehold_testkit::RedisServer::start())
            .collect::<std::io::Result<Vec<_>>>()
    })
    .await?
    .context("starting three private redis-servers for Redlock")?;
    Ok(Target {
        label: "redlock",
        urls: servers.iter().map(|s| s.url()).collect(),
        _servers: Box::new(servers),
    })
}

/// A client on `urls` (several: a Redlock over them) with key prefix `prefix`.
pub(crate) async fn connect_any(urls: &[String], prefix: &str) -> anyhow::Result<LeaseClient> {
    let builder = match urls {
        [one] => LeaseClient::builder(one.as_str()),
        many => LeaseClient::redlock(many),
    };
    builder
        .key_prefix(prefix)
        .connect()
        .await
        .context("connecting to the store under measurement")
}

/// The figures of one store.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct StoreRow {
    /// The target's label: `redis`, one per lease store (`postgres`, `etcd`, ...), `sentinel`,
    /// `cluster`, `redlock`.
    pub(crate) store: &'static str,
    /// S1: acquire + release cycles per second of one client on one free name.
    pub(crate) s1_cycles_per_s: f64,
    pub(crate) s1_p50_us: f64,
    pub(crate) s1_p99_us: f64,
    /// Requests to the store per S1 cycle (`LeaseClient::round_trips`).
    pub(crate) s1_round_trips_per_cycle: f64,
    /// S1 cycles/s ÷ the Redis store's in alternating slices of the same run.
    pub(crate) s1_ratio_to_redis: f64,
    /// S2: acquisitions per second, 16 contenders (one client each) on one name, 1 ms holds.
    pub(crate) s2_acquisitions_per_s: f64,
    /// Requests to the store per S2 acquisition, all contenders together.
    pub(crate) s2_round_trips_per_acquisition: f64,
    /// S2 acquisitions/s ÷ the Redis store's, measured right before.
    pub(crate) s2_ratio_to_redis: f64,
    /// Times two contenders held it at once (must be 0).
    pub(crate) s2_overlaps: u64,
    /// S3: leases held by one process with renewal on.
    pub(crate) s3_leases: u64,
    /// Resident memory of the holding process per held lease, after several renewal rounds.
    pub(crate) s3_bytes_per_lease: f64,
    /// Requests per second renewal cost while holding them.
    pub(crate) s3_renewal_round_trips_per_s: f64,
    /// Seconds to acquire them all (256 requests in flight).
    pub(crate) s3_acquire_all_s: f64,
    /// Leases lost while held (must be 0).
    pub(crate) s3_lost: u64,
}

/// S1 and S2 of `target` against `redis`, then S3 of `target`.
pub(crate) async fn measure(
    target: &Target,
    redis: &Target,
    each: Duration,
    slices: u32,
    leases: u64,
    s3_hold: Duration,
    worker_exe: &std::path::Path,
) -> anyhow::Result<StoreRow> {
    let opts = LeaseOptions::with_ttl(Duration::from_secs(10))?;
    let (s1, s1_redis) = s1_pair(target, redis, each, slices, &opts).await?;
    let s2_redis = s2(redis, each, &opts).await?;
    let s2 = if target.label == "redis" {
        s2_redis.clone()
    } else {
        s2(target, each, &opts).await?
    };
    let s3 = s3(target, worker_exe, leases, s3_hold).await?;
    Ok(StoreRow {
        store: target.label,
        s1_cycles_per_s: round3(s1.rate),
        s1_p50_us: round3(s1.lat.quantile_us(0.5)),
        s1_p99_us: round3(s1.lat.quantile_us(0.99)),
        s1_round_trips_per_cycle: round3(s1.round_trips_per_cycle),
        s1_ratio_to_redis: round3(s1.rate / s1_redis.rate.max(f64::MIN_POSITIVE)),
        s2_acquisitions_per_s: round3(s2.rate),
        s2_round_trips_per_acquisition: round3(s2.round_trips_per_acquisition),
        s2_ratio_to_redis: round3(s2.rate / s2_redis.rate.max(f64::MIN_POSITIVE)),
        s2_overlaps: s2.overlaps,
        s3_leases: leases,
        s3_bytes_per_lease: round3(s3.bytes_per_lease),
        s3_renewal_round_trips_per_s: round3(s3.renewal_round_trips_per_s),
        s3_acquire_all_s: round3(s3.acquire_all_s),
        s3_lost: s3.lost,
    })
}

/// What a store's S3 losing leases means, for the report's notes: the store did not renew that many
/// leases within their TTL on this machine (its limit here, not a fault of the run); `None` when it
/// lost none.
pub(crate) fn s3_lost_note(row: &StoreRow) -> Option<String> {
    (row.s3_lost > 0).then(|| {
        format!(
            "S5 S3 on {}: {} of {} leases lost while held (TTL 3 s, renewal every 1 s): this store did not keep up with {} renewals a second on this machine; run S5 with fewer --leases to find what it does keep up with",
            row.store,
            row.s3_lost,
            row.s3_leases,
            row.s3_leases
        )
    })
}

struct S1Side {
    rate: f64,
    lat: Latencies,
    round_trips_per_cycle: f64,
}

fn unique(what: &str) -> String {
    format!("s5-{what}-{}", std::process::id())
}

/// Alternating slices of `a` and `b`, `each` in all for each.
async fn s1_pair(
    a: &Target,
    b: &Target,
    each: Duration,
    slices: u32,
    opts: &LeaseOptions,
) -> anyhow::Result<(S1Side, S1Side)> {
    let prefix = unique("s1");
    let clients = [
        connect(&a.urls, &prefix).await?,
        connect(&b.urls, &prefix).await?,
    ];
    let name = "s1-uncontended";
    for c in &clients {
        for _ in 0..50 {
            c.try_acquire(name, opts).await?.release().await?;
        }
    }
    let slice = each / slices.max(1);
    let mut lat = [Latencies::default(), Latencies::default()];
    let mut time = [Duration::ZERO; 2];
    let mut trips = [0u64; 2];
    for i in 0..slices.max(1) {
        for which in [i as usize % 2, (i as usize + 1) % 2] {
            let c = &clients[which];
            let rt0 = c.round_trips();
            let start = Instant::now();
            while start.elapsed() < slice {
                let t = Instant::now();
                let lease = c
                    .try_acquire(name, opts)
                    .await
                    .context("S5/S1: acquire of a free name")?;
                lease.release().await.context("S5/S1: release")?;
                lat[which].record(t.elapsed());
            }
            time[which] += start.elapsed();
            trips[which] += c.round_trips() - rt0;
        }
    }
    let [la, lb] = lat;
    let side = |lat: Latencies, time: Duration, trips: u64| {
        let n = lat.len().max(1) as f64;
        S1Side {
            rate: lat.len() as f64 / time.as_secs_f64().max(f64::MIN_POSITIVE),
            round_trips_per_cycle: trips as f64 / n,
            lat,
        }
    };
    Ok((side(la, time[0], trips[0]), side(lb, time[1], trips[1])))
}

#[derive(Clone)]
struct S2Side {
    rate: f64,
    round_trips_per_acquisition: f64,
    overlaps: u64,
}

/// 16 contenders, each its own client, on one name with 1 ms holds, for `each`.
async fn s2(target: &Target, each: Duration, opts: &LeaseOptions) -> anyhow::Result<S2Side> {
    let prefix = unique(&format!("s2-{}", target.label));
    let mut clients = Vec::new();
    for _ in 0..16 {
        clients.push(connect(&target.urls, &prefix).await?);
    }
    let inside = Arc::new(AtomicU64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    let acquisitions = Arc::new(AtomicU64::new(0));
    let rt0: u64 = clients.iter().map(LeaseClient::round_trips).sum();
    let start = Instant::now();
    let end = start + each;
    let mut tasks = Vec::new();
    for c in clients.clone() {
        let (inside, overlaps, acquisitions, opts) = (
            inside.clone(),
            overlaps.clone(),
            acquisitions.clone(),
            opts.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while Instant::now() < end {
                let left = end.saturating_duration_since(Instant::now());
                let lease = match c
                    .acquire("s2", &opts, left.max(Duration::from_millis(1)))
                    .await
                {
                    Ok(l) => l,
                    Err(leasehold::Error::WaitTimeout { .. } | leasehold::Error::Busy { .. }) => {
                        break
                    }
                    Err(e) => return Err(anyhow::Error::from(e).context("S5/S2: acquire")),
                };
                if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                lease.release().await.context("S5/S2: release")?;
                acquisitions.fetch_add(1, Ordering::SeqCst);
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let wall = start.elapsed().as_secs_f64();
    let rt1: u64 = clients.iter().map(LeaseClient::round_trips).sum();
    let n = acquisitions.load(Ordering::SeqCst);
    Ok(S2Side {
        rate: n as f64 / wall,
        round_trips_per_acquisition: (rt1 - rt0) as f64 / n.max(1) as f64,
        overlaps: overlaps.load(Ordering::SeqCst),
    })
}

struct S3Side {
    bytes_per_lease: f64,
    renewal_round_trips_per_s: f64,
    acquire_all_s: f64,
    lost: u64,
}

/// The S3 worker (the same one as S3 on Redis) holding `leases` leases in `target`.
async fn s3(
    target: &Target,
    worker_exe: &std::path::Path,
    leases: u64,
    hold_for: Duration,
) -> anyhow::Result<S3Side> {
    let [url] = target.urls.as_slice() else {
        anyhow::bail!(
            "the S3 worker takes one store URL; {} were given",
            target.urls.len()
        );
    };
    let mut child = tokio::process::Command::new(worker_exe)
        .arg("__bench-worker")
        .arg("s3")
        .args(["--redis-url", url])
        .args(["--leases", &leases.to_string()])
        .args(["--ttl-ms", "3000"])
        .args(["--prefix", &unique("s3")])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("spawning bench worker {}", worker_exe.display()))?;
    let mut stdin = child.stdin.take().context("worker stdin")?;
    let mut out = BufReader::new(child.stdout.take().context("worker stdout")?).lines();
    let line = tokio::time::timeout(Duration::from_secs(300), out.next_line())
        .await
        .context("the S3 worker did not acquire its leases within 300 s")??
        .context("the S3 worker exited before holding its leases (its error is above)")?;
    let held: HeldLine = serde_json::from_str(&line)?;
    anyhow::ensure!(
        held.held == leases,
        "the S3 worker holds {} of {leases} leases",
        held.held
    );
    stdin.write_all(b"go\n").await?;
    tokio::time::sleep(hold_for).await;
    stdin.write_all(b"stop\n").await?;
    let line = tokio::time::timeout(Duration::from_secs(60), out.next_line())
        .await
        .context("the S3 worker did not report")??
        .context("the S3 worker exited without a report")?;
    let stop: StopLine = serde_json::from_str(&line)?;
    drop(stdin);
    let _ = child.wait().await;
    Ok(S3Side {
        bytes_per_lease: stop.rss_end_bytes.saturating_sub(held.rss_before_bytes) as f64
            / leases as f64,
        renewal_round_trips_per_s: stop.round_trips as f64 / stop.wall_s.max(f64::MIN_POSITIVE),
        acquire_all_s: held.acquire_all_s,
        lost: stop.lost,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(lost: u64) -> StoreRow {
        StoreRow {
            store: "etcd",
            s1_cycles_per_s: 1.0,
            s1_p50_us: 1.0,
            s1_p99_us: 1.0,
            s1_round_trips_per_cycle: 2.0,
            s1_ratio_to_redis: 0.1,
            s2_acquisitions_per_s: 1.0,
            s2_round_trips_per_acquisition: 2.0,
            s2_ratio_to_redis: 0.5,
            s2_overlaps: 0,
            s3_leases: 10_000,
            s3_bytes_per_lease: 900.0,
            s3_renewal_round_trips_per_s: 40.0,
            s3_acquire_all_s: 1.0,
            s3_lost: lost,
        }
    }

    #[test]
    fn leases_lost_in_s3_are_named_as_the_store_not_keeping_up() {
        assert_eq!(s3_lost_note(&row(0)), None);
        let note = s3_lost_note(&row(9_232)).expect("a note");
        assert!(
            note.contains("etcd") && note.contains("9232 of 10000") && note.contains("--leases"),
            "{note}"
        );
    }
}
