//! `--store` and the settings of the store every command connects to.

use std::time::Duration;

use clap::Args;

use super::headings::STORE;
use crate::duration;

/// Where the leases live.
#[derive(Debug, Clone, Args)]
pub(crate) struct StoreArgs {
    /// Store URL: redis://, postgres://, mysql://, mariadb://, etcd://…
    ///
    /// One Redis `redis://[user:password@]host[:port][/db]` or `rediss://…` (TLS); through
    /// Sentinel `redis-sentinel://[user:password@]host[:port][,host[:port]…][/db][?sentinel_password=…]#master`;
    /// a Redis Cluster `redis-cluster://[user:password@]host:port[,host:port…]` (`rediss-…` for TLS);
    /// `postgres://user[:password]@host[:port]/database` or `mysql://…` / `mariadb://…` (MariaDB or
    /// MySQL; after `leasehold migrate`);
    /// `etcd://[user:password@]host:port[,host:port…]` (the members of an etcd cluster) or `etcds://…`
    /// (TLS). Give a Redis URL an odd number of times, 3 or more, for Redlock over that many
    /// independent Redis masters (a majority must hold the lease). Also read from LEASEHOLD_STORE
    /// (several URLs separated by spaces for Redlock), then LEASEHOLD_REDIS_URL; default
    /// redis://127.0.0.1:6379. A build without a store's feature refuses its URLs naming the
    /// feature.
    #[arg(
        long = "store",
        visible_alias = "redis",
        value_name = "URL",
        env = "LEASEHOLD_STORE",
        hide_env_values = true,
        help_heading = STORE
    )]
    pub(crate) urls: Vec<String>,
    /// Key prefix: the namespace of lease names in the store
    ///
    /// Redis keys {PREFIX:NAME}:lock, :fence, :queue and the like; the `prefix` column of
    /// PostgreSQL's and MariaDB's leasehold_leases; etcd keys PREFIX/{NAME} and
    /// PREFIX/{NAME}/TOKEN.
    #[arg(
        long,
        value_name = "PREFIX",
        env = "LEASEHOLD_KEY_PREFIX",
        default_value = "leasehold",
        help_heading = STORE
    )]
    pub(crate) key_prefix: String,
    /// How long the store keeps a name after its last use
    ///
    /// On Redis the fence key; the queue's keys live seconds. Names no longer used leave nothing
    /// behind. Fences stay increasing after it passes (they are at least the server's time in µs).
    #[arg(
        long,
        value_name = "DURATION",
        env = "LEASEHOLD_RETENTION",
        value_parser = duration::parse,
        default_value = "1h",
        help_heading = STORE
    )]
    pub(crate) retention: Duration,
    /// Use a Redis that may evict lease keys (refused otherwise)
    ///
    /// A Redis with `maxmemory` and a `maxmemory-policy` other than `noeviction` is refused: an
    /// evicted lock key lets a second holder in while the first still runs. With this flag,
    /// leasehold warns once and a lease whose key was evicted is reported lost at its next
    /// renewal. Fence the resource on such a Redis.
    #[arg(long, env = "LEASEHOLD_ALLOW_EVICTION", help_heading = STORE)]
    pub(crate) allow_eviction: bool,
    /// Keep every request to one server on its multiplexed connection (no direct ones)
    ///
    /// A client of one Redis server (`redis://`, no TLS) normally sends its single requests on
    /// direct connections of its own, up to 8, and so holds three connections where it takes
    /// leases one at a time. Where the server limits connections tightly (`maxclients`, a proxy's
    /// per-client limit), this keeps it to two (the multiplexed one and one for waits), at some
    /// client CPU per request. Other topologies open no direct connections anyway.
    #[arg(long, env = "LEASEHOLD_MULTIPLEXED_ONLY", help_heading = STORE)]
    pub(crate) multiplexed_only: bool,
}

/// Used when neither `--store`/`--redis` nor an environment variable names a store.
pub(crate) const DEFAULT_STORE: &str = "redis://127.0.0.1:6379";

impl StoreArgs {
    /// The store URL(s): `--store`/`--redis` (repeated for Redlock), else LEASEHOLD_STORE (clap
    /// reads it; URLs separated by spaces), else the older LEASEHOLD_REDIS_URL, else the local
    /// default. Whether several make a valid Redlock is the library's to say.
    pub(crate) fn urls(&self) -> Vec<String> {
        let given: Vec<String> = self
            .urls
            .iter()
            .flat_map(|u| u.split_whitespace())
            .map(str::to_owned)
            .collect();
        if !given.is_empty() {
            return given;
        }
        vec![std::env::var("LEASEHOLD_REDIS_URL")
            .ok()
            .filter(|u| !u.trim().is_empty())
            .unwrap_or_else(|| DEFAULT_STORE.to_owned())]
    }
}
