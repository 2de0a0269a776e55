//! Shared helpers for the lease integration tests: a private redis-server per test and short options.
#![allow(dead_code, unreachable_pub)]

pub mod contract;
#[cfg(feature = "mysql")]
pub mod my;
#[cfg(feature = "postgres")]
pub mod pg;

use std::time::{Duration, Instant};

use leasehold::LeaseClient;
use leasehold::LeaseOptions;
#[cfg(feature = "redis")]
use leasehold_testkit::RedisServer;

#[cfg(feature = "redis")]
pub mod resource;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[cfg(feature = "redis")]
pub fn server() -> RedisServer {
    RedisServer::start().expect("start a private redis-server (is redis-server installed?)")
}

#[cfg(feature = "redis")]
pub async fn client(server: &RedisServer) -> LeaseClient {
    client_at(&server.url(), ms(500)).await
}

/// A client of the store at `url` with `timeout` for connecting and for each response.
pub async fn client_at(url: &str, timeout: Duration) -> LeaseClient {
    LeaseClient::builder(url)
        .response_timeout(timeout)
        .connect_timeout(timeout)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

pub fn opts(ttl_ms: u64) -> LeaseOptions {
    LeaseOptions::with_ttl(ms(ttl_ms)).expect("valid options")
}

/// Polls `f` every 10 ms until it is true or `within` passes; returns whether it became true.
pub async fn eventually(within: Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        tokio::time::sleep(ms(10)).await;
    }
}

#[cfg(feature = "redis")]
/// GET of a raw key through a fresh synchronous connection.
pub fn raw_get(server: &RedisServer, key: &str) -> Option<String> {
    let mut con = server.connection().expect("sync connection");
    redis::cmd("GET").arg(key).query(&mut con).expect("GET")
}

#[cfg(feature = "redis")]
/// The Redis lock key of a lease taken with the default key prefix.
pub fn lock_key(lease: &leasehold::Lease) -> String {
    leasehold::lease::store::redis::keys::LeaseKeys::new("leasehold", lease.name())
        .expect("a held lease's name is valid")
        .lock
}
