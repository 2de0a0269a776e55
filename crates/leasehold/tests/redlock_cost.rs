//! What a Redlock over three masters costs against the single-server store, measured in one run on
//! private redis-servers: S1 (one client takes and releases one free name, over and over) and S2
//! (16 contenders on one name holding it 1 ms each, as tasks of one client and as 16 clients), with
//! requests, sequential round trips and Redis commands per acquisition.
//!
//! It measures; it does not judge (performance is never a test assertion here). Ignored by default:
//!
//! ```sh
//! cargo test --release -p leasehold --test redlock_cost -- --ignored --nocapture
//! REDLOCK_COST_SECONDS=2 cargo test ...   # seconds per measurement (default 5)
//! ```
#![cfg(feature = "redis")]

mod lease_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lease_support::ms;
use leasehold::lease::metrics as m;
use leasehold::{LeaseClient, LeaseOptions};
use leasehold_testkit::RedisServer;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

fn seconds() -> Duration {
    let s: f64 = std::env::var("REDLOCK_COST_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5.0);
    Duration::from_secs_f64(s)
}

/// Redis command calls so far on `servers` (INFO commandstats), minus the INFO calls themselves.
fn commands(servers: &[&RedisServer]) -> u64 {
    servers
        .iter()
        .map(|s| {
            let mut con = s.connection().unwrap();
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(&mut con)
                .unwrap();
            info.lines()
                .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
                .filter_map(|l| {
                    l.split_once("calls=")?
                        .1
                        .split(',')
                        .next()?
                        .parse::<u64>()
                        .ok()
                })
                .sum::<u64>()
        })
        .sum()
}

fn fence_writebacks(snap: &Snapshotter) -> (u64, u64) {
    let (mut agreed, mut confirmed) = (0, 0);
    for (k, _, _, v) in snap.snapshot().into_vec() {
        if k.key().name() != m::REDLOCK_FENCE_TOTAL {
            continue;
        }
        let DebugValue::Counter(n) = v else { continue };
        match k
            .key()
            .labels()
            .find(|l| l.key() == "how")
            .map(|l| l.value().to_owned())
        {
            Some(h) if h == "agreed" => agreed += n,
            Some(h) if h == "confirmed" => confirmed += n,
            _ => {}
        }
    }
    (agreed, confirmed)
}

/// What an S1 side runs: leasehold's lease, or the minimal lock on the same masters.
enum Lock {
    Lease(LeaseClient),
    /// `SET key token NX PX` on every master at once, then a compare-and-delete script on every
    /// master at once, each step done when a majority answered: the protocol's floor, without
    /// fences, renewal or cancel safety. One master: the single-server store's S1 baseline.
    Minimal(Vec<redis::aio::MultiplexedConnection>),
}

static CAD: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    )
});

impl Lock {
    async fn cycle(&self, opts: &LeaseOptions) {
        match self {
            Lock::Lease(c) => c
                .try_acquire("s1", opts)
                .await
                .unwrap()
                .release()
                .await
                .unwrap(),
            Lock::Minimal(cons) => {
                let token = format!("{:032x}", rand::random::<u128>());
                let need = cons.len() / 2 + 1;
                let set = |con: &redis::aio::MultiplexedConnection| {
                    let (mut con, token) = (con.clone(), token.clone());
                    async move {
                        redis::cmd("SET")
                            .arg("s1-minimal")
                            .arg(token)
                            .arg("NX")
                            .arg("PX")
                            .arg(30_000)
                            .query_async::<Option<String>>(&mut con)
                            .await
                            .unwrap()
                            .is_some()
                    }
                };
                majority(cons.iter().map(set).collect(), need).await;
                let del = |con: &redis::aio::MultiplexedConnection| {
                    let (mut con, token) = (con.clone(), token.clone());
                    async move {
                        CAD.key("s1-minimal")
                            .arg(token)
                            .invoke_async::<i64>(&mut con)
                            .await
                            .unwrap()
                            == 1
                    }
                };
                majority(cons.iter().map(del).collect(), need).await;
            }
        }
    }

    fn requests(&self) -> u64 {
        match self {
            Lock::Lease(c) => c.round_trips(),
            Lock::Minimal(_) => 0,
        }
    }
}

/// Waits until `need` of the futures said yes; the rest finish in the background.
async fn majority<F>(futs: Vec<F>, need: usize)
where
    F: std::future::Future<Output = bool> + Send + 'static,
{
    let mut pending: futures::stream::FuturesUnordered<F> = futs.into_iter().collect();
    let mut yes = 0;
    while let Some(ok) = futures::StreamExt::next(&mut pending).await {
        yes += usize::from(ok);
        if yes >= need {
            break;
        }
    }
    assert!(
        yes >= need,
        "the minimal lock was busy on a name nobody else uses"
    );
    if !pending.is_empty() {
        tokio::spawn(
            async move { while futures::StreamExt::next(&mut pending).await.is_some() {} },
        );
    }
}

struct Side {
    label: &'static str,
    lock: Lock,
    servers: Vec<usize>,
    cycles: u64,
    time: Duration,
    lat: Vec<Duration>,
    requests: u64,
    commands: u64,
}

fn pct(v: &mut [Duration], q: f64) -> f64 {
    v.sort_unstable();
    if v.is_empty() {
        return 0.0;
    }
    v[((v.len() - 1) as f64 * q) as usize].as_secs_f64() * 1e6
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measures; run with --ignored --nocapture, in release"]
async fn redlock_against_one_server_s1_and_s2() {
    let recorder = DebuggingRecorder::new();
    let snap = recorder.snapshotter();
    recorder.install().expect("first recorder in this binary");
    let servers: Vec<RedisServer> = (0..4).map(|_| RedisServer::start().unwrap()).collect();
    let single_url = servers[0].url();
    let masters: Vec<String> = servers[1..].iter().map(|s| s.url()).collect();
    let connect = async |urls: &[String]| {
        let b = match urls {
            [one] => LeaseClient::builder(one),
            many => LeaseClient::redlock(many),
        };
        b.response_timeout(ms(500)).connect().await.unwrap()
    };
    let opts = LeaseOptions::default();
    let total = seconds();
    println!(
        "redis-server {}, {} s per side, load average {}",
        {
            let mut con = servers[0].connection().unwrap();
            let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
            info.lines()
                .find_map(|l| l.strip_prefix("redis_version:"))
                .unwrap_or("?")
                .trim()
                .to_owned()
        },
        total.as_secs_f64(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .next()
            .unwrap_or("?")
    );

    // S1: alternating 50 ms slices, so every side sees the same machine noise.
    let conns = async |idx: &[usize]| {
        let mut v = Vec::new();
        for &i in idx {
            v.push(
                redis::Client::open(servers[i].url())
                    .unwrap()
                    .get_multiplexed_async_connection()
                    .await
                    .unwrap(),
            );
        }
        v
    };
    let side = |label, lock, servers| Side {
        label,
        lock,
        servers,
        cycles: 0,
        time: Duration::ZERO,
        lat: Vec::new(),
        requests: 0,
        commands: 0,
    };
    let mut sides = [
        side(
            "leasehold, single server",
            Lock::Lease(connect(std::slice::from_ref(&single_url)).await),
            vec![0],
        ),
        side(
            "leasehold, redlock on 3 masters",
            Lock::Lease(connect(&masters).await),
            vec![1, 2, 3],
        ),
        side(
            "minimal lock, single server",
            Lock::Minimal(conns(&[0]).await),
            vec![0],
        ),
        side(
            "minimal lock, majority of 3 masters",
            Lock::Minimal(conns(&[1, 2, 3]).await),
            vec![1, 2, 3],
        ),
    ];
    for side in &sides {
        for _ in 0..200 {
            side.lock.cycle(&opts).await;
        }
    }
    let (agreed0, confirmed0) = fence_writebacks(&snap);
    let slices = ((total.as_millis() / 50) as u32).max(2);
    let slice = total / slices;
    for i in 0..slices as usize {
        for k in 0..sides.len() {
            let side = &mut sides[(i + k) % 4];
            let srv: Vec<&RedisServer> = side.servers.iter().map(|&j| &servers[j]).collect();
            let (c0, r0) = (commands(&srv), side.lock.requests());
            let start = Instant::now();
            while start.elapsed() < slice {
                let t = Instant::now();
                side.lock.cycle(&opts).await;
                side.lat.push(t.elapsed());
                side.cycles += 1;
            }
            side.time += start.elapsed();
            side.requests += side.lock.requests() - r0;
            side.commands += commands(&srv) - c0 - srv.len() as u64;
        }
    }
    let (agreed, confirmed) = fence_writebacks(&snap);
    println!("\nS1 uncontended: acquire + release of one free name, one client");
    println!("| | cycles/s | p50 µs | p99 µs | requests / cycle | Redis commands / cycle |");
    println!("|---|---|---|---|---|---|");
    let mut rates = [0.0; 4];
    for (k, side) in sides.iter_mut().enumerate() {
        rates[k] = side.cycles as f64 / side.time.as_secs_f64();
        let requests = match side.lock {
            Lock::Lease(_) => format!("{:.2}", side.requests as f64 / side.cycles as f64),
            Lock::Minimal(ref c) => format!("{}", 2 * c.len()),
        };
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {requests} | {:.2} |",
            side.label,
            rates[k],
            pct(&mut side.lat, 0.5),
            pct(&mut side.lat, 0.99),
            side.commands as f64 / side.cycles as f64
        );
    }
    println!(
        "ratios: leasehold redlock / leasehold single server {:.2}; minimal majority / minimal single {:.2} (what fanning out to three masters costs on this machine); leasehold redlock / minimal majority {:.2}",
        rates[1] / rates[0],
        rates[3] / rates[2],
        rates[1] / rates[3]
    );
    println!(
        "redlock fences settled in the acquire itself: {}; written back in a second round trip: {}",
        agreed - agreed0,
        confirmed - confirmed0
    );

    // S2: 16 contenders, 1 ms holds; as 16 tasks of one client and as 16 clients.
    println!("\nS2 contended: 16 contenders on one name, each holding it 1 ms");
    println!("| | contenders as | acquisitions/s | requests / acquisition | Redis commands / acquisition | overlaps | fence regressions |");
    println!("|---|---|---|---|---|---|---|");
    for (label, urls, srv) in [
        ("single server", vec![single_url.clone()], vec![0usize]),
        ("redlock, 3 masters", masters.clone(), vec![1, 2, 3]),
    ] {
        for clients in [1usize, 16] {
            let mut cs = Vec::new();
            for _ in 0..clients {
                cs.push(connect(&urls).await);
            }
            let servers_here: Vec<&RedisServer> = srv.iter().map(|&j| &servers[j]).collect();
            let c0 = commands(&servers_here);
            let r0: u64 = cs.iter().map(|c| c.round_trips()).sum();
            let inside = Arc::new(AtomicU64::new(0));
            let overlaps = Arc::new(AtomicU64::new(0));
            let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
            let count = Arc::new(AtomicU64::new(0));
            let name = format!("s2-{clients}");
            let end = Instant::now() + total;
            let start = Instant::now();
            let mut tasks = Vec::new();
            for t in 0..16 {
                let c = cs[t % clients].clone();
                let (inside, overlaps, fences, count, name) = (
                    inside.clone(),
                    overlaps.clone(),
                    fences.clone(),
                    count.clone(),
                    name.clone(),
                );
                let o = LeaseOptions::with_ttl(ms(2_000)).unwrap();
                tasks.push(tokio::spawn(async move {
                    while Instant::now() < end {
                        let Ok(l) = c.acquire(&name, &o, ms(5_000)).await else {
                            continue;
                        };
                        if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                            overlaps.fetch_add(1, Ordering::SeqCst);
                        }
                        fences.lock().unwrap().push(l.fence());
                        tokio::time::sleep(ms(1)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        let _ = l.release().await;
                        count.fetch_add(1, Ordering::SeqCst);
                    }
                }));
            }
            for t in tasks {
                t.await.unwrap();
            }
            let secs = start.elapsed().as_secs_f64();
            let n = count.load(Ordering::SeqCst).max(1);
            let r1: u64 = cs.iter().map(|c| c.round_trips()).sum();
            let c1 = commands(&servers_here);
            let f = fences.lock().unwrap();
            let regressions = f.windows(2).filter(|w| w[1] <= w[0]).count();
            println!(
                "| {label} | {} | {:.0} | {:.2} | {:.2} | {} | {} |",
                if clients == 1 {
                    "16 tasks, 1 client"
                } else {
                    "16 clients"
                },
                n as f64 / secs,
                (r1 - r0) as f64 / n as f64,
                (c1 - c0) as f64 / n as f64,
                overlaps.load(Ordering::SeqCst),
                regressions
            );
        }
    }
}
