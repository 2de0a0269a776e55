//! The lease contract, run against every store compiled in: the behaviour a user can count on
//! whichever store keeps the lease. Each store's own faults (restarts, failovers, pauses of the
//! server) have their own test files.
//!
//! The tests themselves are `leasehold::lease::store::contract_suite` (feature `contract-suite`),
//! which a store written outside the crate runs too. To add a store: one line in the `stores!` call
//! at the bottom (its name, its feature, what starts it), and, for a new kind of server, its
//! [`Urls`] (what it hands a client). Redis runs four times: one server, a primary found through
//! Sentinel, a Cluster, and Redlock's three masters.
// A build with no store has no contract to run.
#![cfg_attr(
    not(any(feature = "redis", feature = "etcd")),
    allow(dead_code, unused_imports)
)]

mod lease_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lease_support::ms;
use leasehold::lease::store::contract_suite::Harness;
use leasehold::LeaseClient;

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

impl Env {
    /// The store `started` gives, for a test of `store` (its name in `stores!`).
    async fn open<S: Urls>(store: &str, started: impl std::future::Future<Output = S>) -> Env {
        let servers = started.await;
        Env {
            urls: servers.urls(),
            prefix: unique_prefix(store),
            _servers: Box::new(servers),
        }
    }
}

/// What a test's store hands a client: its URL, or a Redlock's masters' URLs. Each kind of server
/// (or of database made for one test) says it once here.
trait Urls: Send + Sync + 'static {
    fn urls(&self) -> Vec<String>;
}

impl<T: Urls> Urls for Arc<T> {
    fn urls(&self) -> Vec<String> {
        T::urls(self)
    }
}

impl Urls for leasehold_testkit::RedisServer {
    fn urls(&self) -> Vec<String> {
        vec![self.url()]
    }
}

/// A Redlock's masters.
impl Urls for Vec<leasehold_testkit::RedisServer> {
    fn urls(&self) -> Vec<String> {
        self.iter().map(|s| s.url()).collect()
    }
}

impl Urls for leasehold_testkit::SentinelSet {
    fn urls(&self) -> Vec<String> {
        vec![self.sentinel_url()]
    }
}

impl Urls for leasehold_testkit::RedisCluster {
    fn urls(&self) -> Vec<String> {
        vec![self.seed_url()]
    }
}

impl Urls for leasehold_testkit::EtcdCluster {
    fn urls(&self) -> Vec<String> {
        vec![self.url()]
    }
}

#[cfg(feature = "postgres")]
impl Urls for lease_support::pg::PgSchema {
    fn urls(&self) -> Vec<String> {
        vec![self.url()]
    }
}

#[cfg(feature = "mysql")]
impl Urls for lease_support::my::MyDatabase {
    fn urls(&self) -> Vec<String> {
        vec![self.url()]
    }
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

#[leasehold::lease::store::async_trait]
impl Harness for Env {
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

/// One module per store, each running the whole contract suite (`contract_suite!`, the same
/// list of tests a store outside the crate runs) against the store its line starts.
macro_rules! stores {
    ($($store:ident $(if $feature:literal)? => $start:expr),* $(,)?) => {$(
        $(#[cfg(feature = $feature)])?
        mod $store {
            use super::*;
            leasehold::contract_suite!(Env::open(stringify!($store), async { $start }));
        }
    )*};
}

// The list of stores: one line each, the store's name, the feature it needs and what starts it.
stores!(
    // A private redis-server.
    redis if "redis" => lease_support::server(),
    // A primary, a replica and three sentinels; the client finds the primary through them.
    sentinel if "redis" => shared(&SENTINELS, || {
        leasehold_testkit::SentinelSet::start().expect("start a sentinel set")
    }),
    // A Redis Cluster of three masters and three replicas.
    cluster if "redis" => shared(&CLUSTERS, || {
        leasehold_testkit::RedisCluster::start().expect("start a redis cluster")
    }),
    // Three private redis-servers as the masters of a Redlock.
    redlock if "redis" => (0..3).map(|_| lease_support::server()).collect::<Vec<_>>(),
    // A schema of its own on the test PostgreSQL database, migrated.
    postgres if "postgres" => lease_support::pg::PgSchema::create().await,
    // A database of its own on the test MariaDB server, migrated.
    mysql if "mysql" => lease_support::my::MyDatabase::create().await,
    // A private single-node etcd.
    etcd if "etcd" => tokio::task::spawn_blocking(leasehold_testkit::etcd::EtcdCluster::start_single)
        .await
        .unwrap()
        .expect("start a private etcd (is etcd-server installed?)"),
);
