//! S1 and S2 of `leasehold bench`, run against each store this build has, so that their costs can
//! be compared on one machine in one run. Not a test: it asserts only that there was no overlap,
//! and prints figures. Run it with
//!
//!     cargo test -p leasehold --test store_bench -- --ignored --nocapture
//!
//! (`--release` for figures comparable to docs/benchmarks.md). Redis is a private redis-server;
//! `postgres` is the test database (`LEASEHOLD_TEST_DATABASE_URL`), in a schema of its own, whose
//! commits wait for its disk; `pg-tmpfs` is a private PostgreSQL on tmpfs, where they do not.
//! `LEASEHOLD_BENCH_SECONDS` sets each measurement's length (default 3).

mod lease_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_support::ms;
use leasehold::{LeaseClient, LeaseOptions};
use tokio::time::Instant;

fn seconds() -> Duration {
    Duration::from_secs_f64(
        std::env::var("LEASEHOLD_BENCH_SECONDS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(3.0),
    )
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

async fn connect(url: &str, prefix: &str) -> LeaseClient {
    LeaseClient::builder(url)
        .key_prefix(prefix)
        .connect()
        .await
        .unwrap()
}

/// S1: one client takes and releases one free name over and over.
async fn s1(store: &str, url: &str) {
    let c = connect(url, "bench-s1").await;
    let o = LeaseOptions::default();
    for _ in 0..200 {
        c.try_acquire("s1", &o)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let rt0 = c.round_trips();
    let mut lat = Vec::new();
    let end = Instant::now() + seconds();
    while Instant::now() < end {
        let t = Instant::now();
        c.try_acquire("s1", &o)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        lat.push(t.elapsed());
    }
    let n = lat.len();
    let rt = (c.round_trips() - rt0) as f64 / n as f64;
    lat.sort();
    println!(
        "S1 {store:>8}: {:>7.0} cycles/s  p50 {:>6.0} µs  p99 {:>6.0} µs  {rt:.2} round trips/cycle",
        n as f64 / seconds().as_secs_f64(),
        pct(&lat, 0.5),
        pct(&lat, 0.99),
    );
}

/// S2: `n` contenders on one name, each holding it 1 ms; `shared`: clones of one client (tasks of
/// one process), else a client each.
async fn s2(store: &str, url: &str, n: usize, shared: bool) {
    let prefix = format!("bench-s2-{n}-{shared}");
    let first = connect(url, &prefix).await;
    let mut clients = Vec::new();
    for _ in 0..n {
        clients.push(if shared {
            first.clone()
        } else {
            connect(url, &prefix).await
        });
    }
    let rt0: u64 = if shared {
        first.round_trips()
    } else {
        clients.iter().map(|c| c.round_trips()).sum()
    };
    let o = LeaseOptions::with_ttl(ms(5_000)).unwrap();
    let inside = Arc::new(AtomicU64::new(0));
    let overlaps = Arc::new(AtomicU64::new(0));
    // (acquired, released) per hold, for the hand-off gaps.
    let holds = Arc::new(Mutex::new(Vec::new()));
    let end = Instant::now() + seconds();
    let tasks: Vec<_> = clients
        .iter()
        .map(|c| {
            let (c, o, inside, overlaps, holds) = (
                c.clone(),
                o.clone(),
                inside.clone(),
                overlaps.clone(),
                holds.clone(),
            );
            tokio::spawn(async move {
                while Instant::now() < end {
                    let Ok(l) = c.acquire("s2", &o, ms(10_000)).await else {
                        continue;
                    };
                    let got = Instant::now();
                    if inside.fetch_add(1, Ordering::SeqCst) != 0 {
                        overlaps.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(ms(1)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    let released = Instant::now();
                    l.release().await.unwrap();
                    holds.lock().unwrap().push((got, released));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let rt: u64 = if shared {
        first.round_trips()
    } else {
        clients.iter().map(|c| c.round_trips()).sum()
    };
    let mut holds = holds.lock().unwrap().clone();
    holds.sort();
    let mut gaps: Vec<Duration> = holds
        .windows(2)
        .map(|w| w[1].0.saturating_duration_since(w[0].1))
        .collect();
    gaps.sort();
    let acquisitions = holds.len();
    println!(
        "S2 {store:>8} {n:>3} {}: {:>6.0} acq/s  hand-off gap p50 {:>6.0} µs p99 {:>6.0} µs  \
         {:.2} round trips/acq  overlaps {}",
        if shared { "tasks  " } else { "clients" },
        acquisitions as f64 / seconds().as_secs_f64(),
        pct(&gaps, 0.5),
        pct(&gaps, 0.99),
        (rt - rt0) as f64 / acquisitions as f64,
        overlaps.load(Ordering::SeqCst),
    );
    assert_eq!(overlaps.load(Ordering::SeqCst), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: prints figures; run with --ignored --nocapture"]
async fn s1_and_s2_on_every_store() {
    let redis = lease_support::server();
    let mut stores = vec![("redis", redis.url(), None::<Box<dyn std::any::Any>>)];
    #[cfg(feature = "postgres")]
    {
        let schema = lease_support::pg::PgSchema::create().await;
        stores.push(("postgres", schema.url(), Some(Box::new(schema))));
        // The same protocol where a commit's flush costs nothing (a private server on tmpfs): what
        // is left is the store's own cost, without the disk's.
        let private = tokio::task::spawn_blocking(leasehold_testkit::PostgresServer::start)
            .await
            .unwrap()
            .unwrap();
        let db = leasehold::db::Database::connect(&private.url())
            .await
            .unwrap();
        db.migrate().await.unwrap();
        db.close().await;
        stores.push(("pg-tmpfs", private.url(), Some(Box::new(private))));
    }
    for (store, url, _keep) in &stores {
        s1(store, url).await;
    }
    for (store, url, _keep) in &stores {
        for n in [16, 128] {
            s2(store, url, n, true).await;
        }
        s2(store, url, 16, false).await;
    }
}
