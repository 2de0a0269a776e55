//! The store contract: the one trait every store implements and the types it speaks. It names no
//! store and imports none; stores depend on it, never the reverse (the registry, `registry.rs`, is
//! the one place that knows them all).
//!
//! Where a lease lives. A store answers the few questions the store-independent machinery asks
//! (take, wait for a turn, renew, release, force-release, inspect, list, and the holder's note that
//! elections and scheduled jobs keep beside a lease) and owns the rule that makes
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
//!
//! # A store of your own
//!
//! The trait is public: a store written outside this crate implements it, is opened with
//! [`LeaseClientBuilder::connect_with`](crate::LeaseClientBuilder::connect_with), and proves itself
//! with the same contract suite the built-in stores run (feature `contract-suite`,
//! `contract_suite!`). A complete one, a toy that keeps leases in memory, from
//! `tests/contract_memory.rs` (`cargo test -p leasehold --test contract_memory` runs the suite on it):
//!
#![doc = concat!("```rust,ignore\n", include_str!("../../../tests/contract_memory.rs"), "```")]

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

pub use async_trait::async_trait;
use tokio::time::Instant;

use crate::error::{Error, LostReason, Result};
use crate::fence::Fence;
use crate::lease::options::LeaseOptions;

/// Which kind of store keeps a client's leases: a short name (`redis`, `postgres`, ...), shown in
/// messages and `status --json`. Each store defines its own constant beside its code
/// (`StoreKind::REDIS` in `store/redis/`, ...); a store written outside this crate makes its own
/// with [`StoreKind::new`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StoreKind(&'static str);

impl StoreKind {
    /// A kind named `name` (lower case, as it should appear in messages).
    pub const fn new(name: &'static str) -> Self {
        StoreKind(name)
    }

    /// The kind's name.
    pub const fn name(self) -> &'static str {
        self.0
    }
}

impl fmt::Display for StoreKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
}

impl serde::Serialize for StoreKind {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(self.0)
    }
}

/// What a store says about itself whoever asks: its kind, where it is (secrets removed) and how many
/// requests it sent. A store keeps one, returns it from [`Store::meta`], and counts each request it
/// sends (a pipeline, a script, a batch: one round trip) with [`count`](Self::count); clones share
/// the count, so a store's connections can each hold one.
#[derive(Debug, Clone)]
pub struct StoreMeta {
    kind: StoreKind,
    location: Arc<str>,
    round_trips: Arc<AtomicU64>,
}

impl StoreMeta {
    /// A store of `kind` at `location` (a URL without its password), no request sent yet.
    pub fn new(kind: StoreKind, location: impl Into<Arc<str>>) -> Self {
        StoreMeta {
            kind,
            location: location.into(),
            round_trips: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Which kind of store it is.
    pub fn kind(&self) -> StoreKind {
        self.kind
    }

    /// Where it is, with secrets removed.
    pub fn location(&self) -> &str {
        &self.location
    }

    /// Requests sent so far, by this value and every clone of it.
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// Counts `n` requests sent.
    pub fn count(&self, n: u64) {
        self.round_trips.fetch_add(n, Ordering::Relaxed);
    }

    /// The shared count, for connection layers that count their own requests (the Redis family's).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) fn counter(&self) -> Arc<AtomicU64> {
        self.round_trips.clone()
    }
}

/// What a store says about one lease name (for `status` and `list`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
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
    /// What is wrong with the name in the store, when something is: a key under it that leasehold
    /// did not write (another type, or a fence that is not a number), with how to repair it. The
    /// other fields then say nothing. `None` for a healthy name.
    pub problem: Option<String>,
    /// Who holds it, as the holder announced it ([`Lease::announce`](crate::Lease::announce), or an
    /// election's leader record), filled in by [`LeaseClient::inspect`](crate::LeaseClient::inspect)
    /// and [`LeaseClient::list`](crate::LeaseClient::list); `None` when nobody announced (a store's
    /// own answer never has it).
    pub holder: Option<crate::lease::holder::HolderLabel>,
}

impl LeaseInfo {
    /// A name nobody holds, as a store reports one it knows nothing of.
    pub fn free(name: &str, key: String) -> Self {
        LeaseInfo {
            name: name.to_owned(),
            key,
            held: false,
            ttl_ms: None,
            fence: None,
            permits: 1,
            holders: Vec::new(),
            waiting: 0,
            problem: None,
            holder: None,
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
#[non_exhaustive]
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
#[non_exhaustive]
pub struct ForcedRelease {
    /// Whether a holder was evicted.
    pub evicted: bool,
    /// The fence after the forced release: strictly above anything the evicted holder presented, so
    /// fenced resources refuse its later writes.
    pub fence: Fence,
}

impl ForcedRelease {
    /// What a store reports after a forced release (for a store written outside this crate).
    pub fn new(evicted: bool, fence: Fence) -> Self {
        ForcedRelease { evicted, fence }
    }
}

impl HolderInfo {
    /// One holder as a store reports it (for a store written outside this crate).
    pub fn new(token: String, ttl_ms: Option<u64>, fence: Option<Fence>) -> Self {
        HolderInfo {
            token,
            ttl_ms,
            fence,
        }
    }
}

/// Settings every store takes from [`LeaseClientBuilder`](crate::LeaseClientBuilder).
#[derive(Clone)]
#[non_exhaustive]
pub struct Settings {
    /// Namespace of the names: Redis keys `{<prefix>:<name>}:…`, rows and etcd keys under it.
    pub prefix: String,
    /// Bound on one request's reply.
    pub response_timeout: Duration,
    /// Bound on opening a connection (including authentication and TLS).
    pub connect_timeout: Duration,
    /// PEM roots to trust for TLS instead of the built-in ones.
    pub tls_root_ca_pem: Option<Vec<u8>>,
    /// How long what a store keeps of a name (its last fence, its queue) outlives the name's last
    /// use; afterwards nothing of it is left.
    pub retention: Duration,
    /// Options only one store reads (the Redis store's `RedisOptions`), as handed to
    /// [`LeaseClientBuilder::store_options`](crate::LeaseClientBuilder::store_options).
    pub options: StoreOptions,
}

impl Default for Settings {
    /// What [`LeaseClient::builder`](crate::LeaseClient::builder) starts from: prefix `leasehold`,
    /// 2 s to reply and to connect, the built-in TLS roots, a retention of an hour, no store options.
    fn default() -> Self {
        Settings {
            prefix: "leasehold".to_owned(),
            response_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            tls_root_ca_pem: None,
            retention: DEFAULT_RETENTION,
            options: StoreOptions::default(),
        }
    }
}

/// Options that only one store reads, one value per type, carried to every store unread by the rest
/// (the Redis family reads [`RedisOptions`](crate::lease::store::redis::RedisOptions)). The generic
/// client names no store: a store's own options travel here.
#[derive(Clone, Default)]
pub struct StoreOptions(Arc<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>);

impl StoreOptions {
    /// Sets `options`, replacing any earlier value of its type.
    pub fn insert<T: Any + Send + Sync>(&mut self, options: T) {
        Arc::make_mut(&mut self.0).insert(TypeId::of::<T>(), Arc::new(options));
    }

    /// The value of type `T` set, if any.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.0
            .get(&TypeId::of::<T>())
            .and_then(|v| v.as_ref().downcast_ref::<T>())
    }
}

impl fmt::Debug for StoreOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StoreOptions({} set)", self.0.len())
    }
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
            .field("options", &self.options)
            .finish()
    }
}

/// One acquire attempt as the client asks it of a store.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Request<'a> {
    /// The lease name (already checked by [`Store::check_name`]).
    pub name: &'a str,
    /// 128 random bits as 32 hex digits, unique to this attempt; the store keeps it while we hold.
    pub token: &'a str,
    /// TTL, replica policy and the rest.
    pub opts: &'a LeaseOptions,
    /// How long the caller will wait if the lease is busy (zero: it will not): its time left at each
    /// step of a wait.
    pub wait: Duration,
    /// Which step of a wait this is: 0 for the first request made with this token (none before it
    /// reached the store, so nothing the store left for this token can be older than it), 1 and up
    /// for the steps after it.
    pub step: u32,
}

/// A lease a store granted. Built with [`Grant::new`] outside this crate (a field may be added).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Grant {
    /// The fencing token of this holding.
    pub fence: Fence,
    /// A local instant no later than the moment the store started this lease's TTL; the holder's
    /// deadline counts from here.
    pub since: Instant,
    /// The TTL the store set; the holder's first deadline is `since + ttl - drift`.
    pub ttl: Duration,
    /// The store will wake a waiter when this holding is released, so the next waiting task of this
    /// client may block at once instead of asking first.
    pub wakes_next: bool,
}

/// What one acquire attempt got. A match outside this crate needs a `_` arm (an answer may be
/// added).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attempt {
    /// Ours.
    Taken(Grant),
    /// Held by someone else for about `remaining` more (`None`: the store could not say).
    Busy {
        /// The holder's remaining time, as the store judged it.
        remaining: Option<Duration>,
    },
}

/// What waiting for a turn ended with. A match outside this crate needs a `_` arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Turn {
    /// The store handed the lease to the waiter while it waited.
    #[cfg_attr(not(feature = "etcd"), allow(dead_code))] // built by stores with a queue
    Taken(Grant),
    /// Woken, or the block time passed: ask again.
    AskAgain,
}

/// A held lease as a store needs it to renew or release it. Built with [`Held::new`] outside this
/// crate (a store's own tests).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
// etcd identifies a holding by its token alone.
#[cfg_attr(
    not(any(feature = "redis", feature = "postgres", feature = "mysql")),
    allow(dead_code)
)]
pub struct Held<'a> {
    /// The lease name.
    pub name: &'a str,
    /// The holder's token.
    pub token: &'a str,
    /// The options it was taken with (TTL to renew to).
    pub opts: &'a LeaseOptions,
}

impl Grant {
    /// A grant of fence `fence`, whose TTL `ttl` the store started no earlier than the local
    /// instant `since`; `wakes_next`: the store will wake a waiter when it is released.
    pub fn new(fence: Fence, since: Instant, ttl: Duration, wakes_next: bool) -> Self {
        Grant {
            fence,
            since,
            ttl,
            wakes_next,
        }
    }
}

impl<'a> Held<'a> {
    /// The holding of `name` by `token`, taken with `opts`.
    pub fn new(name: &'a str, token: &'a str, opts: &'a LeaseOptions) -> Self {
        Held { name, token, opts }
    }
}

/// A store of leases. Implementations bound every call in time and map their failures to
/// [`Error`] with the phase that failed.
#[async_trait]
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Its kind, where it is and the requests it sent, the three questions below.
    fn meta(&self) -> &StoreMeta;

    /// Which kind of store this is.
    fn kind(&self) -> StoreKind {
        self.meta().kind()
    }

    /// Where it is, with secrets removed (for messages and `Debug`).
    fn location(&self) -> &str {
        self.meta().location()
    }

    /// Requests sent so far (a pipeline or a script is one), for benchmarks and tests.
    fn round_trips(&self) -> u64 {
        self.meta().round_trips()
    }

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

    /// What else this store keeps for `name` besides [`key_of`](Store::key_of), each with what it
    /// is (`("fence", key)`, `("queue", key)`), for status output; by default nothing. Called with
    /// a name already checked.
    fn extra_keys(&self, name: &str) -> Vec<(&'static str, String)> {
        let _ = name;
        Vec::new()
    }

    /// How often the renewal task should take [`Store::look`] at the store; `None`: never.
    fn look_every(&self) -> Option<Duration> {
        None
    }

    /// A look at how the store is configured, on the renewal task's slow cadence (never on the
    /// acquire path): a Redis store reads each data node's role, memory policy and evicted keys.
    ///
    /// # Cancel safety
    ///
    /// A read: dropped, nothing is left half done; the next look starts again.
    async fn look(&self) {}

    /// What the store's replies taught about its clock's rate against ours (store seconds per local
    /// second), for the holder's deadline; `None`: nothing (the default, for a store whose replies
    /// carry no time of its own, or whose replies may come from several clocks).
    fn clock_rate(&self) -> Option<crate::lease::clock::ClockRate> {
        None
    }

    /// Why a lease taken at `since` whose renewal found it not ours any more was lost: the store
    /// may know better than [`LostReason::NotOurs`] (a Redis that evicted keys meanwhile).
    ///
    /// # Cancel safety
    ///
    /// A read: dropped, nothing changes.
    async fn lost_reason(&self, since: Instant) -> LostReason {
        let _ = since;
        LostReason::NotOurs
    }

    /// Takes the lease if free; else says how long it stays busy (and, when `req.wait` is above zero,
    /// a store with a queue enqueues the caller).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe on its own: dropped after the request left, the lease may have been taken or
    /// the caller queued, and the store cannot say which. The client then calls [`Store::abandon`]
    /// with the same request (its abandon guard), so an implementation must make that undo either.
    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt>;

    /// Blocks until the store wakes this waiter or hands it the lease, or `block` passes. Never
    /// blocks a connection that other calls share.
    ///
    /// # Cancel safety
    ///
    /// As [`Store::acquire`]: dropped mid-block, the caller's place (or a lease handed over
    /// meanwhile) is left to [`Store::abandon`], which the client calls.
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
    ///
    /// # Cancel safety
    ///
    /// As [`Store::acquire`]: dropped, what it took or joined is undone by [`Store::abandon`],
    /// which the client calls; the default's two calls need nothing more.
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
    ///
    /// # Cancel safety
    ///
    /// Safe to drop and to run again: it may or may not have run, and running it twice has the
    /// effect of running it once. Left undone, a queue entry lapses after its liveness window and a
    /// lease after its TTL.
    async fn abandon(&self, req: &Request<'_>) -> Result<()> {
        let held = Held::new(req.name, req.token, req.opts);
        self.release(&[held])
            .await?
            .pop()
            .unwrap_or(Ok(false))
            .map(drop)
    }

    /// Resets the TTL of each lease that still holds its token: per item `Ok(true)` renewed,
    /// `Ok(false)` not ours any more, `Err` refused. The outer error: the batch did not get through.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: some leases of the batch may have been renewed and others not; renewing again
    /// is harmless (a retry renews once more), and a lease left unrenewed runs out on its TTL,
    /// which its holder's deadline already counts.
    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>>;

    /// Releases each lease that still holds its token and wakes a waiter: per item as [`Store::renew`].
    ///
    /// # Cancel safety
    ///
    /// Safe to drop and to run again: some leases may be released and others not; a release run
    /// again says released for one already released (within the lease's TTL) and acts once; one
    /// never sent runs out on its TTL.
    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>>;

    /// Operator's override: frees `name` whoever holds it (every holder of a semaphore) and advances
    /// its fence.
    ///
    /// # Cancel safety
    ///
    /// Dropped after the request left, it may have taken effect; calling it again frees whoever
    /// holds the name then and advances the fence once more (never backwards).
    async fn force_release(&self, name: &str) -> Result<ForcedRelease>;

    /// Operator's override for one holder: evicts the holder of `name` whose token is `token`, if it
    /// holds it, and advances the fence. The default refuses: a store without per-holder eviction.
    ///
    /// # Cancel safety
    ///
    /// As [`Store::force_release`]: dropped, it may have taken effect; again, it finds the holder
    /// gone.
    async fn force_release_holder(&self, name: &str, token: &str) -> Result<ForcedRelease> {
        let _ = (name, token);
        Err(Error::invalid(
            "holder",
            "this store cannot evict one holder by token; evict every holder instead",
        ))
    }

    /// Writes `note` (at most [`MAX_NOTE_LEN`] bytes, checked by the client) beside the lease
    /// `held`, only while the store still holds its token: `Ok(true)` written, `Ok(false)` not ours
    /// (nothing written). It replaces the name's earlier note and is kept at least while the lease is
    /// held (a store may keep it until the name's retention passes). Running it twice writes the same
    /// note twice. For a lock only; a semaphore's permits keep no note. The default refuses: a store
    /// that keeps no notes.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: the note may or may not have been written; writing the same note again has the
    /// effect of writing it once.
    async fn write_note(&self, held: &Held<'_>, note: &[u8]) -> Result<bool> {
        let _ = (held, note);
        Err(no_notes(self.kind()))
    }

    /// The note last written beside `name` ([`Store::write_note`]), by whichever holder wrote it
    /// (`None`: none kept). A reader tells a note of the current holder from an older one by what it
    /// wrote in it (an election writes its term, which is the holder's fence).
    ///
    /// # Cancel safety
    ///
    /// A read: dropped, nothing changes.
    async fn read_note(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let _ = name;
        Err(no_notes(self.kind()))
    }

    /// The store's wall clock, in milliseconds since the Unix epoch, read in one request (Redis
    /// `TIME`, PostgreSQL `clock_timestamp()`, MariaDB `NOW(3)`): the clock a scheduler reckons
    /// slots by, so that replicas whose own clocks disagree agree on the time. `None` (the
    /// default): a store with no clock of its own (etcd) or whose replies come from several clocks
    /// (Redlock).
    ///
    /// # Cancel safety
    ///
    /// A read: dropped, nothing changes.
    async fn wall_clock_ms(&self) -> Result<Option<i64>> {
        Ok(None)
    }

    /// Notices of changes to `name` (a new holder, a release, a forced release, a new note), pushed
    /// by the store as they happen: subscribed before this returns, so a change committed after it
    /// returns is noticed. `None` (the default): this store cannot push (MariaDB/MySQL, a store of
    /// your own), or cannot now (its subscription could not be opened); the reader then reads on a
    /// timer. Dropping the [`Changes`] ends the subscription. A notice can be lost (a dropped
    /// connection), so a reader also reads on a slow timer of its own.
    ///
    /// # Cancel safety
    ///
    /// Safe to drop: a subscription half opened is closed with the dropped future (no notices are
    /// promised until it returns).
    async fn changes(&self, name: &str) -> Result<Option<Changes>> {
        let _ = name;
        Ok(None)
    }

    /// Reads the state of each name without touching it.
    ///
    /// # Cancel safety
    ///
    /// A read: dropped, nothing changes.
    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>>;

    /// Names under this client's prefix matching the glob `pattern`, with their state.
    ///
    /// # Cancel safety
    ///
    /// A read: dropped, nothing changes.
    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>>;
}

/// Notices that a name may have changed, from a store that pushes them ([`Store::changes`]).
///
/// A notice says only "read again": it carries no state, notices that come close together are
/// merged into one, and one may be lost (a connection that dropped and came back is itself reported
/// as a notice, but what changed while it was down is not). Dropping it ends the subscription.
pub struct Changes {
    /// Bumped by the store on each notice (and on a reconnect); its sender is dropped when the
    /// store stops pushing.
    notices: tokio::sync::watch::Receiver<u64>,
    /// Whatever keeps the store's subscription alive; dropped after `notices`, so that the store
    /// sees no receiver left when it is told.
    _subscription: Box<dyn std::any::Any + Send + Sync>,
}

impl Changes {
    /// Notices from `notices` (the store bumps its sender on each), with `subscription` kept alive
    /// as long as they are wanted (its `Drop` may end the store's subscription: it must not block).
    pub fn new(
        notices: tokio::sync::watch::Receiver<u64>,
        subscription: impl std::any::Any + Send + Sync,
    ) -> Self {
        Changes {
            notices,
            _subscription: Box::new(subscription),
        }
    }

    /// Waits for the next notice: `true` on one, `false` when the store stopped pushing (it was
    /// dropped, or gave the subscription up): read on a timer from then on.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a notice that came in meanwhile is returned by the next call.
    pub async fn notice(&mut self) -> bool {
        self.notices.changed().await.is_ok()
    }
}

impl fmt::Debug for Changes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Changes")
            .field("notices", &*self.notices.borrow())
            .finish_non_exhaustive()
    }
}

/// Longest note a holder may write beside its lease ([`Store::write_note`]): room for a leader's
/// address and term, or a scheduled run's record, and small enough that every store keeps it in one
/// row or key.
pub const MAX_NOTE_LEN: usize = 1024;

/// What a store that keeps no notes answers.
fn no_notes(kind: StoreKind) -> Error {
    Error::invalid(
        "store",
        format!(
            "the {kind} store keeps no notes beside its leases (elections and scheduled runs need \
             them); use a store that does (docs/stores.md)"
        ),
    )
}

/// 128 random bits from the thread's CSPRNG, as 32 hex digits: a holder's token.
pub(crate) fn new_token() -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let bits = rand::random::<u128>();
    // Written digit by digit rather than with `format!`: this runs on every acquire.
    (0..32)
        .map(|i| char::from(HEX[((bits >> (124 - 4 * i)) & 0xf) as usize]))
        .collect()
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
}
