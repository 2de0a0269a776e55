//! Where a lease lives. A store answers the few questions the store-independent machinery asks
//! (take, wait for a turn, renew, release, force-release, inspect, list) and owns the rule that makes
//! its fence monotonic; everything else (the holder's deadline on its own clock, the watchdog, the lost
//! signal, the maximum hold, the in-process queue, cancel safety, metrics) lives once, above it.
//!
//! Promise: every store keeps these contracts, and the lease tests run against each.
//! * A grant's fence is strictly greater than every fence an earlier holder of the name could have
//!   acted on (each store says in its docs what that rests on).
//! * `since` in a grant is a local instant no later than the moment the store started the lease's
//!   TTL, so a deadline counted from it is never later than the store's own expiry (up to clock rate
//!   drift, which the drift allowance covers).
//! * renew and release act only while the store still holds the caller's token, and running either
//!   twice (a retry after a reconnect) has the effect of running it once.
//!
//! Limit: a store promises nothing about a holder that is paused past its deadline; fence the resource.

#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "redis")]
pub(crate) mod redlock;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lease::options::LeaseOptions;

/// Which kind of store keeps a client's leases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum StoreKind {
    /// Redis: one server (`redis://`, `rediss://`), a primary found through Sentinel
    /// (`redis-sentinel://`, `rediss-sentinel://`) or a Redis Cluster (`redis-cluster://`,
    /// `rediss-cluster://`). One kind for all three: the keys, scripts, fence rule and interop with
    /// other `SET NX PX` locks are the same; only where requests go differs. The topology shows in
    /// the store's [`location`](crate::LeaseClient::location) (its URL's scheme).
    Redis,
    /// Redlock over an odd number (three or more) of independent Redis masters.
    Redlock,
    /// An etcd cluster (`etcd://`, `etcds://`).
    Etcd,
    /// A table in a PostgreSQL database (`postgres://`, `postgresql://`).
    Postgres,
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreKind::Redis => "redis",
            StoreKind::Redlock => "redlock",
            StoreKind::Etcd => "etcd",
            StoreKind::Postgres => "postgres",
        })
    }
}

/// What a store says about one lease name (for `status` and `list`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseInfo {
    /// Lease name.
    pub name: String,
    /// Where the store keeps it (the Redis lock key, the table row, the etcd key prefix).
    pub key: String,
    /// Whether a holder has it now (for a semaphore: at least one holder).
    pub held: bool,
    /// Remaining TTL of the current holder, in milliseconds (`None` when free or without expiry; for
    /// a semaphore, the holder whose permit runs out first).
    pub ttl_ms: Option<u64>,
    /// The last fence issued for this name (`None` if none is known: never acquired, or the store
    /// dropped it after the retention period).
    pub fence: Option<Fence>,
    /// How many holders the name admits at once: 1 for a lock, more for a semaphore in use.
    pub permits: u32,
    /// Who holds it now, the soonest to expire first (a lock: at most one).
    pub holders: Vec<HolderInfo>,
    /// Waiters queued for it in the store (0 for a store that keeps no queue).
    pub waiting: u64,
}

impl LeaseInfo {
    /// A name nobody holds, as a store reports one it knows nothing of.
    pub(crate) fn free(name: &str, key: String) -> Self {
        LeaseInfo {
            name: name.to_owned(),
            key,
            held: false,
            ttl_ms: None,
            fence: None,
            permits: 1,
            holders: Vec::new(),
            waiting: 0,
        }
    }

    /// Permits nobody holds now.
    pub fn free_permits(&self) -> u32 {
        self.permits
            .saturating_sub(u32::try_from(self.holders.len()).unwrap_or(u32::MAX))
    }
}

/// One holder of a lease name.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HolderInfo {
    /// The holder's token (what `release --force --token` evicts).
    pub token: String,
    /// Its remaining TTL, in milliseconds (`None`: without expiry).
    pub ttl_ms: Option<u64>,
    /// The fence it was granted, when the store keeps it per holder (a semaphore's permits; for a
    /// lock the name's last fence is its holder's).
    pub fence: Option<Fence>,
}

/// Result of [`LeaseClient::force_release`](crate::LeaseClient::force_release).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ForcedRelease {
    /// Whether a holder was evicted.
    pub evicted: bool,
    /// The fence after the forced release: strictly above anything the evicted holder presented, so
    /// fenced resources refuse its later writes.
    pub fence: Fence,
}

/// URL schemes this build can open, for the message that refuses any other.
pub const SCHEMES: &[&str] = &[
    #[cfg(feature = "redis")]
    "redis://",
    #[cfg(feature = "redis")]
    "rediss://",
    #[cfg(feature = "redis")]
    "redis-sentinel://",
    #[cfg(feature = "redis")]
    "rediss-sentinel://",
    #[cfg(feature = "redis")]
    "redis-cluster://",
    #[cfg(feature = "redis")]
    "rediss-cluster://",
    #[cfg(feature = "etcd")]
    "etcd://",
    #[cfg(feature = "etcd")]
    "etcds://",
    #[cfg(feature = "postgres")]
    "postgres://",
    #[cfg(feature = "postgres")]
    "postgresql://",
];

/// Settings every store takes from [`LeaseClientBuilder`](crate::LeaseClientBuilder).
#[derive(Clone)]
pub(crate) struct Settings {
    /// Namespace of the names: Redis keys `{<prefix>:<name>}:…`, rows and etcd keys under it.
    pub(crate) prefix: String,
    /// Bound on one request's reply.
    pub(crate) response_timeout: Duration,
    /// Bound on opening a connection (including authentication and TLS).
    pub(crate) connect_timeout: Duration,
    /// PEM roots to trust for TLS instead of the built-in ones.
    pub(crate) tls_root_ca_pem: Option<Vec<u8>>,
    /// How long what a store keeps of a name (its last fence, its queue) outlives the name's last
    /// use; afterwards nothing of it is left.
    pub(crate) retention: Duration,
}

/// How long what a store keeps of a name outlives its last use, by default.
pub(crate) const DEFAULT_RETENTION: Duration = Duration::from_secs(3600);

impl fmt::Debug for Settings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Settings")
            .field("prefix", &self.prefix)
            .field("response_timeout", &self.response_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("tls_root_ca_pem", &self.tls_root_ca_pem.is_some())
            .field("retention", &self.retention)
            .finish()
    }
}

/// One acquire attempt as the client asks it of a store.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Request<'a> {
    /// The lease name (already checked by [`Store::check_name`]).
    pub(crate) name: &'a str,
    /// 128 random bits as 32 hex digits, unique to this attempt; the store keeps it while we hold.
    pub(crate) token: &'a str,
    /// TTL, replica policy and the rest.
    pub(crate) opts: &'a LeaseOptions,
    /// How long the caller will wait if the lease is busy (zero: it will not): its time left at each
    /// step of a wait.
    pub(crate) wait: Duration,
}

/// A lease a store granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Grant {
    /// The fencing token of this holding.
    pub(crate) fence: Fence,
    /// A local instant no later than the moment the store started this lease's TTL; the holder's
    /// deadline counts from here.
    pub(crate) since: Instant,
    /// The TTL the store set; the holder's first deadline is `since + ttl - drift`.
    pub(crate) ttl: Duration,
    /// The store will wake a waiter when this holding is released, so the next waiting task of this
    /// client may block at once instead of asking first.
    pub(crate) wakes_next: bool,
}

/// What one acquire attempt got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// Ours.
    Taken(Grant),
    /// Held by someone else for about `remaining` more (`None`: the store could not say).
    Busy { remaining: Option<Duration> },
}

/// What waiting for a turn ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Turn {
    /// The store handed the lease to the waiter while it waited.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))] // built by stores with a queue
    Taken(Grant),
    /// Woken, or the block time passed: ask again.
    AskAgain,
}

/// A held lease as a store needs it to renew or release it.
#[derive(Debug, Clone, Copy)]
// etcd identifies a holding by its token alone.
#[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(dead_code))]
pub(crate) struct Held<'a> {
    /// The lease name.
    pub(crate) name: &'a str,
    /// The holder's token.
    pub(crate) token: &'a str,
    /// The options it was taken with (TTL to renew to).
    pub(crate) opts: &'a LeaseOptions,
}

/// A store of leases. Implementations bound every call in time and map their failures to
/// [`Error`] with the phase that failed.
#[async_trait]
pub(crate) trait Store: Send + Sync + fmt::Debug + 'static {
    /// Which kind of store this is.
    fn kind(&self) -> StoreKind;

    /// Where it is, with secrets removed (for messages and `Debug`).
    fn location(&self) -> &str;

    /// Requests sent so far (a pipeline or a script is one), for benchmarks and tests.
    fn round_trips(&self) -> u64;

    /// Refuses a name this store cannot keep, before anything is sent. The same rule for every store
    /// unless a store needs a stricter one.
    fn check_name(&self, name: &str) -> Result<()> {
        crate::lease::names::validate_name(name)
    }

    /// Whether a waiting acquire leaves an entry in the store (a queue) that it must withdraw when it
    /// gives up; without one, giving up while blocked costs nothing.
    fn queues_waiters(&self) -> bool {
        false
    }

    /// Where `name` lives in this store (a Redis key, a row), for status output.
    fn key_of(&self, name: &str) -> String;

    /// Takes the lease if free; else says how long it stays busy (and, when `req.wait` is above zero,
    /// a store with a queue enqueues the caller).
    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt>;

    /// Blocks until the store wakes this waiter or hands it the lease, or `block` passes. Never
    /// blocks a connection that other calls share.
    async fn wait_turn(&self, req: &Request<'_>, block: Duration) -> Result<Turn>;

    /// One step of a waiting acquire (`req.wait` is the time the caller has left): the lease if it is
    /// free or was handed over meanwhile, else busy after waiting at most `block` for a turn. Running
    /// it again with the same request continues the same wait (a store with a queue keeps the caller's
    /// place) and gets a lease taken meanwhile back.
    ///
    /// The default asks ([`Store::acquire`]) and, when busy, waits ([`Store::wait_turn`]) for the
    /// holder's remaining time plus jitter, at most `block`. A store with a queue may do both in one
    /// request: join the queue (or refresh the caller's place in it) and block until handed the
    /// lease.
    async fn acquire_or_wait(&self, req: &Request<'_>, block: Duration) -> Result<Attempt> {
        match self.acquire(req).await? {
            taken @ Attempt::Taken(_) => Ok(taken),
            Attempt::Busy { remaining } => {
                let block = crate::lease::waiters::block_for(remaining, block);
                if block < Duration::from_millis(1) {
                    return Ok(Attempt::Busy { remaining });
                }
                Ok(match self.wait_turn(req, block).await? {
                    Turn::Taken(grant) => Attempt::Taken(grant),
                    Turn::AskAgain => Attempt::Busy { remaining },
                })
            }
        }
    }

    /// The caller gave up on `req` (cancelled or timed out): leave any queue, and release the lease
    /// if it was taken or handed over in the meantime. Safe to call when nothing was taken.
    async fn abandon(&self, req: &Request<'_>) -> Result<()> {
        self.release(&[Held {
            name: req.name,
            token: req.token,
            opts: req.opts,
        }])
        .await?
        .pop()
        .unwrap_or(Ok(false))
        .map(drop)
    }

    /// Resets the TTL of each lease that still holds its token: per item `Ok(true)` renewed,
    /// `Ok(false)` not ours any more, `Err` refused. The outer error: the batch did not get through.
    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>>;

    /// Releases each lease that still holds its token and wakes a waiter: per item as [`Store::renew`].
    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>>;

    /// Operator's override: frees `name` whoever holds it (every holder of a semaphore) and advances
    /// its fence.
    async fn force_release(&self, name: &str) -> Result<ForcedRelease>;

    /// Operator's override for one holder: evicts the holder of `name` whose token is `token`, if it
    /// holds it, and advances the fence. The default refuses: a store without per-holder eviction.
    async fn force_release_holder(&self, name: &str, token: &str) -> Result<ForcedRelease> {
        let _ = (name, token);
        Err(Error::invalid(
            "holder",
            "this store cannot evict one holder by token; evict every holder instead",
        ))
    }

    /// Reads the state of each name without touching it.
    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>>;

    /// Names under this client's prefix matching the glob `pattern`, with their state.
    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>>;
}

/// Opens the store `url` names. An unknown scheme is [`Error::Invalid`] naming the schemes this
/// build knows.
pub(crate) async fn open(url: &str, settings: Settings) -> Result<Arc<dyn Store>> {
    let scheme = url.split_once("://").map(|(s, _)| s).unwrap_or("");
    match scheme {
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis-sentinel" | "rediss-sentinel" | "redis-cluster"
        | "rediss-cluster" => Ok(Arc::new(redis::RedisStore::connect(url, settings).await?)),
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => Ok(Arc::new(etcd::EtcdStore::connect(url, settings).await?)),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Arc::new(
            postgres::PostgresStore::connect(url, settings).await?,
        )),
        _ => Err(unknown_scheme(url)),
    }
}

/// Opens a Redlock over `urls` (an odd number, three or more, of independent Redis masters, each a
/// URL the Redis store takes). Wrong input is [`Error::Invalid`] before anything is sent (the count,
/// a URL given twice, a scheme that is not Redis) or once the masters answered (a replica, two URLs
/// naming one server); fewer than a majority answering is [`Error::NoQuorum`].
pub(crate) async fn open_redlock(urls: &[String], settings: Settings) -> Result<Arc<dyn Store>> {
    #[cfg(feature = "redis")]
    {
        Ok(Arc::new(
            redlock::RedlockStore::connect(urls, settings).await?,
        ))
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = settings;
        Err(Error::invalid(
            "store url",
            format!(
                "{} Redis masters given for Redlock, but this build of leasehold has no Redis store; enable the `redis` feature",
                urls.len()
            ),
        ))
    }
}

fn unknown_scheme(url: &str) -> Error {
    let known = if SCHEMES.is_empty() {
        "none: this build of leasehold has no lease store; enable the `redis`, `postgres` or `etcd` feature".to_owned()
    } else {
        SCHEMES.join(", ")
    };
    Error::invalid(
        "store url",
        format!(
            "`{}` does not start with a scheme this build knows; use one of {known}",
            crate::url::redact(url)
        ),
    )
}

/// 128 random bits from the thread's CSPRNG, as 32 hex digits: a holder's token.
pub(crate) fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_128_bit_hex_and_unique() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[tokio::test]
    async fn an_unknown_scheme_names_the_known_ones_and_hides_the_password() {
        let settings = Settings {
            prefix: "t".into(),
            response_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            tls_root_ca_pem: None,
            retention: DEFAULT_RETENTION,
        };
        let err = open("mongodb://u:secret@h/db", settings).await.unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                Error::Invalid {
                    what: "store url",
                    ..
                }
            ),
            "{msg}"
        );
        assert!(!msg.contains("secret"), "{msg}");
        for s in SCHEMES {
            assert!(msg.contains(s), "{msg}");
        }
    }
}
