//! The lease contract, run against every store compiled in: the behaviour a user can count on
//! whichever store keeps the lease. Each store's own faults (restarts, failovers, pauses of the
//! server) have their own test files.
//!
//! To add a store: give [`Env`] a constructor for it and add one line to the `stores!` call at the
//! bottom. Redis runs three times: one server, a primary found through Sentinel, and a Cluster.
// A build with no store has no contract to run.
#![cfg_attr(
    not(any(feature = "redis", feature = "etcd")),
    allow(dead_code, unused_imports)
)]

mod lease_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lease_support::{eventually, ms};
use leasehold::{Error, LeaseClient, LeaseOptions, LostReason};

/// One store for one test: the server(s) it needs, kept alive as long as the test runs, and a way to
/// open clients on it that see only this test's names.
struct Env {
    /// One URL, or several Redis masters for a Redlock.
    urls: Vec<String>,
    prefix: String,
    _servers: Box<dyn std::any::Any + Send + Sync>,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

fn unique_prefix(store: &str) -> String {
    format!(
        "c{}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        store
    )
}

/// One topology shared by the tests that run at the same time (each test has its own key prefix,
/// and none of these tests injects faults), started again once the last of them is done, so that no
/// process outlives the test binary.
#[cfg(feature = "redis")]
fn shared<T: Send + Sync + 'static>(
    slot: &'static std::sync::Mutex<std::sync::Weak<T>>,
    start: impl FnOnce() -> T,
) -> Arc<T> {
    let mut weak = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = weak.upgrade() {
        return t;
    }
    let t = Arc::new(tokio::task::block_in_place(start));
    *weak = Arc::downgrade(&t);
    t
}

#[cfg(feature = "redis")]
static SENTINELS: std::sync::Mutex<std::sync::Weak<leasehold_testkit::SentinelSet>> =
    std::sync::Mutex::new(std::sync::Weak::new());
#[cfg(feature = "redis")]
static CLUSTERS: std::sync::Mutex<std::sync::Weak<leasehold_testkit::RedisCluster>> =
    std::sync::Mutex::new(std::sync::Weak::new());

impl Env {
    /// A primary, a replica and three sentinels; the client finds the primary through them.
    #[cfg(feature = "redis")]
    async fn sentinel() -> Env {
        let set = shared(&SENTINELS, || {
            leasehold_testkit::SentinelSet::start().expect("start a sentinel set")
        });
        Env {
            urls: vec![set.sentinel_url()],
            prefix: unique_prefix("sentinel"),
            _servers: Box::new(set),
        }
    }

    /// A Redis Cluster of three masters and three replicas.
    #[cfg(feature = "redis")]
    async fn cluster() -> Env {
        let cluster = shared(&CLUSTERS, || {
            leasehold_testkit::RedisCluster::start().expect("start a redis cluster")
        });
        Env {
            urls: vec![cluster.seed_url()],
            prefix: unique_prefix("cluster"),
            _servers: Box::new(cluster),
        }
    }

    /// A private redis-server.
    #[cfg(feature = "redis")]
    async fn redis() -> Env {
        let srv = lease_support::server();
        Env {
            urls: vec![srv.url()],
            prefix: unique_prefix("redis"),
            _servers: Box::new(srv),
        }
    }

    /// Three private redis-servers as the masters of a Redlock.
    #[cfg(feature = "redis")]
    async fn redlock() -> Env {
        let servers: Vec<_> = (0..3).map(|_| lease_support::server()).collect();
        Env {
            urls: servers.iter().map(|s| s.url()).collect(),
            prefix: unique_prefix("redlock"),
            _servers: Box::new(servers),
        }
    }

    /// A private single-node etcd.
    #[cfg(feature = "etcd")]
    async fn etcd() -> Env {
        let cluster =
            tokio::task::spawn_blocking(leasehold_testkit::etcd::EtcdCluster::start_single)
                .await
                .unwrap()
                .expect("start a private etcd (is etcd-server installed?)");
        Env {
            urls: vec![cluster.url()],
            prefix: unique_prefix("etcd"),
            _servers: Box::new(cluster),
        }
    }

    /// A schema of its own on the test PostgreSQL database, migrated.
    #[cfg(feature = "postgres")]
    async fn postgres() -> Env {
        let schema = lease_support::pg::PgSchema::create().await;
        Env {
            urls: vec![schema.url()],
            prefix: unique_prefix("postgres"),
            _servers: Box::new(schema),
        }
    }

    async fn client(&self) -> LeaseClient {
        let builder = match self.urls.as_slice() {
            [one] => LeaseClient::builder(one),
            many => LeaseClient::redlock(many),
        };
        builder
            .key_prefix(&self.prefix)
            .response_timeout(ms(1_000))
            .connect_timeout(ms(1_000))
            .connect()
            .await
            .expect("connect to the test's store")
    }
}

fn opts(ttl_ms: u64) -> LeaseOptions {
    LeaseOptions::with_ttl(ms(ttl_ms)).unwrap()
}

async fn exclusive_with_growing_fences(env: Env) {
    let c = env.client().await;
    let o = opts(5_000);
    let a = c.try_acquire("orders", &o).await.unwrap();
    assert_eq!(a.name(), "orders");
    assert_eq!(a.token().len(), 32);
    assert!(a.remaining() > ms(4_000) && a.remaining() <= ms(5_000));
    match c.try_acquire("orders", &o).await {
        Err(Error::Busy { name, remaining }) => {
            assert_eq!(name, "orders");
            if let Some(r) = remaining {
                assert!(r <= ms(5_000), "{r:?}");
            }
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    // Another client (another process, as far as the store can tell) is excluded too.
    let other = env.client().await;
    assert!(matches!(
        other.try_acquire("orders", &o).await,
        Err(Error::Busy { .. })
    ));
    let info = c.inspect("orders").await.unwrap();
    assert!(info.held);
    assert_eq!(info.fence, Some(a.fence()));
    let first = a.fence();
    a.release().await.unwrap();
    assert!(!c.inspect("orders").await.unwrap().held);
    let b = other.try_acquire("orders", &o).await.unwrap();
    assert!(b.fence() > first, "{} must exceed {}", b.fence(), first);
    // Other names are independent.
    let n = c.try_acquire("other-name", &o).await.unwrap();
    n.release().await.unwrap();
    b.release().await.unwrap();
}

async fn expiry_frees_it_and_a_late_release_is_told(env: Env) {
    let c = env.client().await;
    let short = LeaseOptions::builder()
        .ttl(ms(300))
        .no_renewal()
        .build()
        .unwrap();
    let a = c.try_acquire("job", &short).await.unwrap();
    let reason = tokio::time::timeout(ms(3_000), a.lost().fired())
        .await
        .expect("the signal fires at the deadline");
    assert_eq!(reason, LostReason::DeadlinePassed);
    // The store expires it on its own clock.
    assert!(eventually(ms(5_000), async || !c.inspect("job").await.unwrap().held).await);
    let b = c.try_acquire("job", &opts(5_000)).await.unwrap();
    assert!(b.fence() > a.fence());
    // A wakes up late and releases: it must not free B's lease, and must be told.
    assert!(matches!(a.release().await, Err(Error::LeaseLost { .. })));
    assert!(c.inspect("job").await.unwrap().held, "B still holds it");
    b.release().await.unwrap();
}

async fn renewal_keeps_it_for_many_ttls(env: Env) {
    let c = env.client().await;
    let a = c.try_acquire("long", &opts(400)).await.unwrap();
    tokio::time::sleep(ms(1_600)).await;
    assert!(!a.is_lost(), "renewed in the background");
    assert!(matches!(
        c.try_acquire("long", &opts(400)).await,
        Err(Error::Busy { .. })
    ));
    a.renew().await.unwrap();
    a.release().await.unwrap();
}

async fn force_release_evicts_and_the_fence_moves_past_the_holder(env: Env) {
    let c = env.client().await;
    let a = c.try_acquire("stuck", &opts(800)).await.unwrap();
    let forced = c.force_release("stuck").await.unwrap();
    assert!(forced.evicted);
    assert!(forced.fence > a.fence());
    // The holder hears of it at its next renewal.
    let reason = tokio::time::timeout(ms(3_000), a.lost().fired())
        .await
        .expect("the holder is told");
    assert_eq!(reason, LostReason::NotOurs);
    let b = c.try_acquire("stuck", &opts(5_000)).await.unwrap();
    assert!(b.fence() > forced.fence);
    b.release().await.unwrap();
    let again = c.force_release("stuck").await.unwrap();
    assert!(!again.evicted);
}

async fn list_and_inspect_see_names(env: Env) {
    let c = env.client().await;
    let a = c.try_acquire("report-a", &opts(5_000)).await.unwrap();
    let b = c.try_acquire("report-b", &opts(5_000)).await.unwrap();
    let z = c.try_acquire("zeta", &opts(5_000)).await.unwrap();
    b.release().await.unwrap();
    let names: Vec<String> = c
        .list("report-*")
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert!(names.contains(&"report-a".to_owned()), "{names:?}");
    assert!(!names.contains(&"zeta".to_owned()), "{names:?}");
    let all = c.list("*").await.unwrap();
    assert!(all.iter().any(|i| i.name == "zeta" && i.held), "{all:?}");
    let never = c.inspect("never-taken").await.unwrap();
    assert!(!never.held && never.ttl_ms.is_none());
    a.release().await.unwrap();
    z.release().await.unwrap();
}

async fn a_dropped_lease_is_released_in_the_background(env: Env) {
    let c = env.client().await;
    drop(c.try_acquire("dropped", &opts(30_000)).await.unwrap());
    assert!(
        eventually(ms(5_000), async || !c
            .inspect("dropped")
            .await
            .unwrap()
            .held)
        .await,
        "released long before its 30 s TTL"
    );
}

async fn max_hold_ends_it(env: Env) {
    let c = env.client().await;
    let o = LeaseOptions::builder()
        .ttl(ms(600))
        .max_hold(ms(400))
        .build()
        .unwrap();
    let a = c.try_acquire("capped", &o).await.unwrap();
    let reason = tokio::time::timeout(ms(3_000), a.lost().fired())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::MaxHoldReached);
    assert!(matches!(a.release().await, Err(Error::LeaseLost { .. })));
}

async fn a_release_wakes_a_waiter_from_another_client(env: Env) {
    let holder = env.client().await;
    let waiter = env.client().await;
    let a = holder.try_acquire("handoff", &opts(20_000)).await.unwrap();
    let fence_a = a.fence();
    let task = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let b = waiter
            .acquire("handoff", &opts(20_000), ms(15_000))
            .await
            .unwrap();
        (started.elapsed(), b.fence(), b)
    });
    tokio::time::sleep(ms(300)).await;
    a.release().await.unwrap();
    let (waited, fence_b, b) = task.await.unwrap();
    assert!(fence_b > fence_a);
    assert!(
        waited < ms(10_000),
        "woken by the release, not by the 20 s TTL: waited {waited:?}"
    );
    b.release().await.unwrap();
}

async fn contenders_never_overlap(env: Env) {
    // 8 clients x 2 tasks, 5 acquisitions each, a shared "resource" that counts holders.
    let inside = Arc::new(AtomicU64::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let c = env.client().await;
        for _ in 0..2 {
            let (c, inside, fences) = (c.clone(), inside.clone(), fences.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let l = c
                        .acquire("counter", &opts(5_000), ms(60_000))
                        .await
                        .unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    fences.lock().unwrap().push(l.fence());
                    tokio::time::sleep(ms(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    l.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let fences = fences.lock().unwrap();
    assert_eq!(fences.len(), 80);
    assert!(
        fences.windows(2).all(|w| w[1] > w[0]),
        "fences in acquisition order must strictly increase"
    );
}

async fn a_wait_gives_up_at_its_bound(env: Env) {
    let c = env.client().await;
    let a = c.try_acquire("held", &opts(10_000)).await.unwrap();
    let other = env.client().await;
    let started = tokio::time::Instant::now();
    match other.acquire("held", &opts(10_000), ms(500)).await {
        Err(Error::WaitTimeout { .. }) => {}
        r => panic!("expected WaitTimeout, got {r:?}"),
    }
    assert!(started.elapsed() < ms(3_000));
    a.release().await.unwrap();
    // Giving up left nothing behind that blocks the next one.
    other
        .try_acquire("held", &opts(1_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

async fn a_cancelled_acquire_leaves_nothing_held(env: Env) {
    let c = env.client().await;
    let o = opts(30_000);
    for i in 0..20 {
        let name = format!("cancel-{i}");
        // Cancel at once, or after a few polls: wherever it stops, nothing may stay held.
        let fut = c.try_acquire(&name, &o);
        let _ = tokio::time::timeout(Duration::from_micros(i * 50), fut).await;
    }
    for i in 0..20 {
        let name = format!("cancel-{i}");
        assert!(
            eventually(ms(5_000), async || !c.inspect(&name).await.unwrap().held).await,
            "{name} stayed held after its acquire was cancelled"
        );
    }
}

async fn with_lease_runs_the_work_and_stops_it_on_loss(env: Env) {
    let c = env.client().await;
    let out = c
        .with_lease("scoped", &opts(5_000), ms(1_000), async |l| l.fence())
        .await
        .unwrap();
    assert!(
        !c.inspect("scoped").await.unwrap().held,
        "released after the work"
    );
    assert_eq!(c.inspect("scoped").await.unwrap().fence, Some(out));
    // Lost mid-work (an operator's forced release): the work is cancelled and the loss returned.
    let operator = env.client().await;
    let finished = Arc::new(AtomicU64::new(0));
    let f = finished.clone();
    let r = c
        .with_lease("scoped", &opts(600), ms(1_000), async move |_l| {
            tokio::spawn(async move {
                tokio::time::sleep(ms(100)).await;
                operator.force_release("scoped").await.unwrap();
            });
            tokio::time::sleep(ms(10_000)).await;
            f.store(1, Ordering::SeqCst);
        })
        .await;
    assert!(matches!(r, Err(Error::LeaseLost { .. })), "{r:?}");
    assert_eq!(finished.load(Ordering::SeqCst), 0, "the work was cancelled");
}

async fn garbage_names_are_refused_before_anything_is_sent(env: Env) {
    let c = env.client().await;
    let before = c.round_trips();
    for bad in [
        "",
        "a{b",
        "x}",
        "tab\there",
        &"n".repeat(leasehold::lease::MAX_NAME_LEN + 1),
    ] {
        for r in [
            c.try_acquire(bad, &opts(1_000)).await.map(drop),
            c.acquire(bad, &opts(1_000), ms(100)).await.map(drop),
            c.inspect(bad).await.map(drop),
            c.force_release(bad).await.map(drop),
        ] {
            assert!(
                matches!(
                    r,
                    Err(Error::Invalid {
                        what: "lease name",
                        ..
                    })
                ),
                "{bad:?}: {r:?}"
            );
        }
    }
    assert_eq!(c.round_trips(), before, "nothing reached the store");
}

macro_rules! stores {
    ($($store:ident $(if $feature:literal)?),* $(,)?) => {$(
        $(#[cfg(feature = $feature)])?
        mod $store {
            use super::*;
            stores!(@tests $store:
                exclusive_with_growing_fences,
                expiry_frees_it_and_a_late_release_is_told,
                renewal_keeps_it_for_many_ttls,
                force_release_evicts_and_the_fence_moves_past_the_holder,
                list_and_inspect_see_names,
                a_dropped_lease_is_released_in_the_background,
                max_hold_ends_it,
                a_release_wakes_a_waiter_from_another_client,
                contenders_never_overlap,
                a_wait_gives_up_at_its_bound,
                a_cancelled_acquire_leaves_nothing_held,
                with_lease_runs_the_work_and_stops_it_on_loss,
                garbage_names_are_refused_before_anything_is_sent,
            );
        }
    )*};
    (@tests $store:ident: $($test:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            super::$test(Env::$store().await).await
        }
    )*};
}

stores!(
    redis if "redis",
    sentinel if "redis",
    cluster if "redis",
    redlock if "redis",
    postgres if "postgres",
    etcd if "etcd",
);
