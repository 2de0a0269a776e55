//! Real servers for leasehold's tests, its demo and its fault-injection verifier.
//!
//! * [`RedisServer`]: a private `redis-server` on a free loopback port that can be paused (SIGSTOP),
//!   resumed, killed, restarted without persistence (it comes back empty), paired as a replica, and
//!   started under a fake wall clock that can jump forward ([`RedisServerBuilder::fake_clock`],
//!   libfaketime).
//! * [`SentinelSet`]: one primary, one replica and three sentinels with short timings, for real
//!   failovers (including one that loses the writes the replica had not received).
//! * [`RedisCluster`]: a Redis Cluster (three masters, three replicas) with failovers of the master
//!   owning a slot and slot migrations mid-test (MOVED and ASK).
//! * [`EtcdCluster`]: a single etcd node or a cluster of members, each of which can be killed,
//!   restarted, paused and resumed, with the leader found through etcd's status API.
//! * [`PostgresServer`]: a private PostgreSQL server (`initdb` in a temporary directory) that can be
//!   stopped, crashed, paused and started again on the same port with the same data, leaving the
//!   machine's shared PostgreSQL alone.
//! * [`MariaDbServer`]: a private MariaDB server (`mariadb-install-db` in a temporary directory)
//!   that can be stopped, crashed, paused and started again on the same port with the same data.
//! * [`Proxy`]: a TCP proxy the harness controls (delay, cut, blackhole, restore, switch upstream).
//! * [`free_port`]: a free TCP port on 127.0.0.1.
//! * [`postgres_url`], [`mysql_url`]: where tests find the shared PostgreSQL and MariaDB.
//! * [`documented_acl_lines`]: the Redis users docs/operations.md tells operators to create.
//!
//! Nothing here mocks a server: every fault is done to a real process. Every topology picks free
//! ports (retrying when one is taken between the pick and the bind, so tests may start several in
//! parallel) and kills its processes and removes its temporary directories on drop.
#![forbid(unsafe_code)]

pub mod cluster;
mod credentials;
mod daemon;
pub mod etcd;
pub mod mariadb;
pub mod postgres;
mod proxy;
mod reaper;
mod redis_server;
pub mod sentinel;

pub use cluster::{RedisCluster, RedisClusterBuilder, SlotMigration};
pub use credentials::Credentials;
pub use etcd::{etcd_available, EtcdCluster, EtcdMember};
pub use mariadb::{mariadb_server_available, mysql_url, MariaDbServer};
pub use postgres::{postgres_server_available, PostgresServer, PostgresServerBuilder};
pub use proxy::Proxy;
pub use redis_server::{libfaketime_path, redis_server_available, RedisServer, RedisServerBuilder};
pub use sentinel::{SentinelServer, SentinelSet, SentinelSetBuilder};

use std::net::TcpListener;

/// A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("binding 127.0.0.1:0 must work on any machine that runs tests")
}

/// PostgreSQL URL for tests: `LEASEHOLD_TEST_DATABASE_URL`, else the local default
/// `postgres://postgres@127.0.0.1:5432/test`.
pub fn postgres_url() -> String {
    std::env::var("LEASEHOLD_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// The `ACL SETUSER leasehold …` lines docs/operations.md documents (one server first, then Redis
/// Cluster, then Redlock), read from the doc itself, so that the tests run as exactly the user the
/// doc tells operators to create.
pub fn documented_acl_lines() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/operations.md"
    ))
    .expect("docs/operations.md beside the workspace");
    doc.lines()
        .filter(|l| l.starts_with("ACL SETUSER leasehold "))
        .map(str::to_owned)
        .collect()
}
