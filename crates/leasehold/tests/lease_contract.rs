//! The lease contract, run against every store compiled in: the behaviour a user can count on
//! whichever store keeps the lease. Each store's own faults (restarts, failovers, pauses of the
//! server) have their own test files.
//!
//! The tests themselves are `leasehold::lease::store::contract_suite` (feature `contract-suite`),
//! which a store written outside the crate runs too. To add a store: give [`Env`] a constructor for
//! it and add one line to the `stores!` call at the bottom. Redis runs three times: one server, a primary found through Sentinel, and a Cluster.
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

    /// A database of its own on the test MariaDB server, migrated.
    #[cfg(feature = "mysql")]
    async fn mysql() -> Env {
        let db = lease_support::my::MyDatabase::create().await;
        Env {
            urls: vec![db.url()],
            prefix: unique_prefix("mysql"),
            _servers: Box::new(db),
        }
    }
}

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
/// list of tests a store outside the crate runs) against that store's `Env`.
macro_rules! stores {
    ($($store:ident $(if $feature:literal)?),* $(,)?) => {$(
        $(#[cfg(feature = $feature)])?
        mod $store {
            use super::*;
            leasehold::contract_suite!(Env::$store());
        }
    )*};
}

stores!(
    redis if "redis",
    sentinel if "redis",
    cluster if "redis",
    redlock if "redis",
    postgres if "postgres",
    mysql if "mysql",
    etcd if "etcd",
);
