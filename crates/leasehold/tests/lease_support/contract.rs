//! The lease contract suite's harness for the built-in stores: each store's own test file runs the
//! whole suite (`leasehold::contract_suite!`, the list of tests a store written outside the crate
//! runs too) with one line, `contract_suite!(Env::open("<store>", async { <what starts it> }))`, in a
//! `mod contract` of its own. A new kind of server says what it hands a client ([`Urls`]) in its
//! store's test file (or here, once it serves several); a new store touches nothing shared. Redis runs it four times: one server
//! (`lease_basic.rs`), a primary found through Sentinel (`lease_sentinel.rs`), a Cluster
//! (`lease_cluster.rs`) and Redlock's three masters (`redlock_input.rs`); PostgreSQL, MariaDB and
//! etcd in `lease_postgres.rs`, `lease_mysql.rs`, `lease_etcd.rs`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::ms;
use leasehold::lease::store::contract_suite::Harness;
use leasehold::LeaseClient;

/// One store for one test: the server(s) it needs, kept alive as long as the test runs, and a way to
/// open clients on it that see only this test's names.
pub struct Env {
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
    /// The store `started` gives, for a test of `store` (a short name, part of the key prefix).
    pub async fn open<S: Urls>(store: &str, started: impl std::future::Future<Output = S>) -> Env {
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
pub trait Urls: Send + Sync + 'static {
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
impl Urls for super::pg::PgSchema {
    fn urls(&self) -> Vec<String> {
        vec![self.url()]
    }
}

#[cfg(feature = "mysql")]
impl Urls for super::my::MyDatabase {
    fn urls(&self) -> Vec<String> {
        vec![self.url()]
    }
}

/// One topology shared by the tests that run at the same time (each test has its own key prefix,
/// and none of these tests injects faults), started again once the last of them is done, so that no
/// process outlives the test binary.
#[cfg(feature = "redis")]
pub fn shared<T: Send + Sync + 'static>(
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
pub static SENTINELS: std::sync::Mutex<std::sync::Weak<leasehold_testkit::SentinelSet>> =
    std::sync::Mutex::new(std::sync::Weak::new());
#[cfg(feature = "redis")]
pub static CLUSTERS: std::sync::Mutex<std::sync::Weak<leasehold_testkit::RedisCluster>> =
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
