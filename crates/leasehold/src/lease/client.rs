//! The client: one store, one renewal task, one contender per name for all waiting tasks; acquire,
//! wait, the scoped helper, inspect, list, force-release. Nothing here depends on which store it is.
//!
//! Promise: every call is bounded in time (the store bounds each request; waiting is bounded by the
//! caller's `max_wait`), so a stopped or unreachable store yields an error rather than a hang; an
//! acquire abandoned by its caller (cancelled, timed out) never leaves a lease it took held for its
//! TTL when the store can be reached. Limit: a request that timed out may still have been executed
//! by the store ([`Error::outcome_unknown`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::lease::guard::Lease;
use crate::lease::options::LeaseOptions;
use crate::lease::state::LeaseState;
use crate::lease::store::{self, Attempt, Grant, Request, Settings, Store, StoreKind, Turn};
use crate::lease::waiters::{self, Contenders};
use crate::lease::watchdog::Keeper;
use crate::lease::{metrics, ForcedRelease, LeaseInfo};

/// A handle to one lease store (chosen by URL). Cheap to clone; clones share the store's connections,
/// one renewal task, and one contender per lease name for all waiting tasks.
#[derive(Debug, Clone)]
pub struct LeaseClient {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    /// The store and the renewal task's channel, shared with every lease taken.
    keeper: Keeper,
    /// Namespace of the names in the store.
    prefix: String,
    /// Watchdog registry ids.
    next_id: AtomicU64,
    /// One FIFO queue per name for tasks waiting in [`LeaseClient::acquire`].
    contenders: Contenders,
    /// The options of the last lease taken, shared by every lease taken with equal options.
    last_opts: std::sync::Mutex<Option<Arc<LeaseOptions>>>,
}

/// Builder for [`LeaseClient`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .connect() is awaited"]
pub struct LeaseClientBuilder {
    /// Which store, and where: the scheme picks the store; several Redis masters make a Redlock.
    target: Target,
    /// Everything the store is opened with.
    settings: Settings,
}

/// The store a builder opens.
#[derive(Debug, Clone)]
enum Target {
    /// One URL; its scheme picks the store.
    One(String),
    /// Redlock over these Redis masters.
    Redlock(Vec<String>),
}

/// A Redis failure that a later attempt may not meet (connection dropped, refused, timed out).
/// The longest retention accepted: two of the longest schedule periods, so that a slot record of
/// any period a schedule accepts outlives its slot.
pub const MAX_RETENTION: Duration = Duration::from_secs(2 * 366 * 24 * 3600);

fn is_transient(e: &Error) -> bool {
    e.is_unavailable() && e.is_retryable()
}

impl LeaseClientBuilder {
    /// Key prefix (default `leasehold`): the namespace of lease names in the store (Redis keys
    /// `{<prefix>:<name>}:lock` and so on, etcd keys `<prefix>/{<name>}/…`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.settings.prefix = prefix.into();
        self
    }

    /// Longest wait for one reply from the store (default 2 s). A stopped server turns into an error
    /// after this, never a hang. Held leases do not depend on it: their lost signal fires at their
    /// own deadline.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.settings.response_timeout = timeout;
        self
    }

    /// Longest wait for a new connection, including authentication and TLS (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.settings.connect_timeout = timeout;
        self
    }

    /// How long what the store keeps of a name outlives the name's last use (default 1 h): on Redis
    /// the fence key, and no other key longer (the queue's keys and markers live seconds); on
    /// PostgreSQL the name's idle row. A name no longer used then leaves nothing behind. Fences stay monotonic after it is gone: the next fence
    /// is at least the server's time in microseconds, above every fence issued before as long as the
    /// server's clock has not stepped back by more than the retention. Between 1 s and 366 days.
    pub fn retention(mut self, retention: Duration) -> Self {
        self.settings.retention = retention;
        self
    }

    /// Options only one store reads, one value per type: the Redis family reads
    /// [`RedisOptions`](crate::lease::store::redis::RedisOptions) (e.g. accepting a Redis that may
    /// evict lease keys); every other store ignores it. A second value of one type replaces the
    /// first.
    ///
    /// ```no_run
    /// # async fn example() -> leasehold::Result<()> {
    /// use leasehold::lease::store::redis::RedisOptions;
    /// let client = leasehold::LeaseClient::builder("redis://127.0.0.1:6379")
    ///     .store_options(RedisOptions::default().allow_eviction(true))
    ///     .connect()
    ///     .await?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn store_options<T: std::any::Any + Send + Sync>(mut self, options: T) -> Self {
        self.settings.options.insert(options);
        self
    }

    /// Trusts these PEM root certificate(s) for TLS (a private CA or a self-signed server
    /// certificate) instead of the built-in web PKI roots. Refused at connect for a non-TLS URL.
    pub fn tls_root_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.settings.tls_root_ca_pem = Some(pem.into());
        self
    }

    /// Opens the store the URL names (`redis://`, `rediss://`, `redis-sentinel://`,
    /// `redis-cluster://`, `postgres://`, with the `etcd` feature `etcd://`, `etcds://`; see
    /// [`lease_schemes`](crate::lease::lease_schemes) for what this build knows) and spawns the client's renewal
    /// task. Call it inside a Tokio runtime: the task lives as long as the client or any of its
    /// leases.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a malformed URL, an unknown scheme or a bad setting (nothing was
    /// sent, also an etcd endpoint that answers as something else), an unknown Sentinel master
    /// name, or a URL of the wrong topology for the server it reaches (`redis://` at a cluster
    /// node, `redis-cluster://` at a single server, a sentinel given as a data node or the
    /// reverse); [`Error::Store`] or [`Error::Timeout`] with
    /// [`Phase::Connect`](crate::Phase::Connect) for a store that cannot be reached or refuses the
    /// credentials (it is asked once; every member of an etcd cluster); for a Redlock,
    /// [`Error::Invalid`] also for a replica or two URLs naming one server, and
    /// [`Error::NoQuorum`] when fewer than a majority of the masters answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is held before it returns.
    pub async fn connect(self) -> Result<LeaseClient> {
        self.check()?;
        let prefix = self.settings.prefix.clone();
        let response_timeout = self.settings.response_timeout;
        let store = match &self.target {
            Target::One(url) => store::open(std::slice::from_ref(url), self.settings).await?,
            Target::Redlock(urls) => store::open(urls, self.settings).await?,
        };
        Ok(LeaseClient::with_store(store, prefix, response_timeout))
    }

    /// Checks the settings before anything is opened.
    fn check(&self) -> Result<()> {
        crate::lease::names::check_prefix(&self.settings.prefix)?;
        if let Target::Redlock(urls) = &self.target {
            // One URL would open that one server: asked for a quorum, say it is not one.
            if urls.len() == 1 {
                return Err(Error::invalid(
                    "redlock masters",
                    "1 given; Redlock needs an odd number of independent Redis masters, at least 3 (for one server use LeaseClient::builder)",
                ));
            }
        }
        let retention = self.settings.retention;
        if !(Duration::from_secs(1)..=MAX_RETENTION).contains(&retention) {
            return Err(Error::invalid(
                "retention",
                format!(
                    "{} is out of range; use between 1s and {}",
                    crate::lease::options::show(retention),
                    crate::lease::options::show(MAX_RETENTION)
                ),
            ));
        }
        for (what, d) in [
            ("response timeout", self.settings.response_timeout),
            ("connect timeout", self.settings.connect_timeout),
        ] {
            if d < Duration::from_millis(1) || d > Duration::from_secs(3600) {
                return Err(Error::invalid(
                    what,
                    format!(
                        "{} ms is out of range; use between 1 ms and 1 h",
                        d.as_millis()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Opens a store of your own instead of one this crate knows: `open` gets the builder's URL
    /// (as given to [`LeaseClient::builder`]; this crate does not read it) and the settings
    /// (prefix, timeouts, retention), and returns anything that implements
    /// [`Store`]. The client's core (deadlines, the watchdog, the lost
    /// signal, waiting, cancel safety) then runs on it exactly as on the built-in stores; the
    /// contract suite (feature `contract-suite`) checks that the store keeps its side.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad setting (before `open` runs); whatever `open` returns.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe as far as `open` is: nothing is held before it returns.
    pub async fn connect_with<S, F, Fut>(self, open: F) -> Result<LeaseClient>
    where
        S: Store,
        F: FnOnce(String, Settings) -> Fut,
        Fut: std::future::Future<Output = Result<S>>,
    {
        self.check()?;
        let url = match self.target {
            Target::One(url) => url,
            Target::Redlock(urls) => urls.join(","),
        };
        let prefix = self.settings.prefix.clone();
        let response_timeout = self.settings.response_timeout;
        let store: Arc<dyn Store> = Arc::new(open(url, self.settings).await?);
        Ok(LeaseClient::with_store(store, prefix, response_timeout))
    }
}

/// Armed while a caller is inside an acquire with an attempt in flight, or queued in the store.
/// Dropped armed (the caller was cancelled), it asks the store in the background to abandon the
/// attempt, so that a lease the abandoned request took (or was handed) is not left held for its TTL.
struct AbandonGuard<'a> {
    keeper: &'a Keeper,
    req: Request<'a>,
    armed: bool,
}

impl<'a> AbandonGuard<'a> {
    /// Disarmed, for the first request (step 0) with `token`, which waits up to `wait`.
    fn first(
        keeper: &'a Keeper,
        name: &'a str,
        token: &'a str,
        opts: &'a LeaseOptions,
        wait: Duration,
    ) -> Self {
        AbandonGuard {
            keeper,
            req: Request {
                name,
                token,
                opts,
                wait,
                step: 0,
            },
            armed: false,
        }
    }

    /// Abandons now, in the caller's task (the caller gave up without being cancelled).
    async fn abandon_now(&mut self) {
        self.armed = false;
        if let Err(e) = self.keeper.store().abandon(&self.req).await {
            tracing::debug!(error = %e, "abandoning an acquire failed; anything it took expires by its TTL");
        }
    }
}

impl Drop for AbandonGuard<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // No runtime to send it from: anything taken expires after its TTL.
            return;
        };
        let store = self.keeper.store_arc();
        let owned = store::OwnedRequest::of(&self.req);
        let counted = self.keeper.cleanup();
        rt.spawn(async move {
            let _counted = counted;
            let req = owned.get();
            // One retry: an abandon that fails twice leaves anything taken to expire after its TTL.
            for _ in 0..2 {
                match store.abandon(&req).await {
                    Ok(()) => {
                        tracing::debug!("abandoned acquire cleaned up");
                        return;
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, "cleaning up an abandoned acquire failed")
                    }
                }
            }
        });
    }
}

/// One attempt's outcome, with the lease built.
enum Outcome {
    Taken(Lease),
    Busy(Option<Duration>),
}

/// The longest wait [`LeaseClient::acquire`] keeps to: a year. A longer bound (`Duration::MAX`) is cut
/// to it; a caller that must wait longer asks again on [`Error::WaitTimeout`].
pub const MAX_WAIT: Duration = Duration::from_secs(365 * 24 * 3600);

impl LeaseClient {
    /// Starts a builder for the store at `url`: `redis://[user:password@]host[:port][/db]`,
    /// `rediss://…` (TLS); a primary found through Sentinel,
    /// `redis-sentinel://[[user]:password@]host[:port][,host[:port]…][/db][?sentinel_user=…&sentinel_password=…]#master`
    /// (the user-info is for the data nodes, the query for the sentinels; port 26379 by default);
    /// a Redis Cluster, `redis-cluster://[[user]:password@]host:port[,host:port…]` (seed nodes);
    /// `rediss-sentinel://` and `rediss-cluster://` for TLS;
    /// `postgres://user[:password]@host[:port]/database` (a database where
    /// [`Database::migrate`](crate::db::Database::migrate) ran); `etcd://[user:password@]host:port[,host:port…]`
    /// and `etcds://…` (with the `etcd` feature); and whatever else
    /// [`lease_schemes`](crate::lease::lease_schemes) lists. `docs/topologies.md` says what a lease promises in
    /// each Redis topology.
    pub fn builder(url: impl Into<String>) -> LeaseClientBuilder {
        LeaseClientBuilder {
            target: Target::One(url.into()),
            settings: Settings::default(),
        }
    }

    /// Starts a builder for a Redlock over `urls`: an odd number, three or more, of independent
    /// Redis masters, each any URL [`builder`](Self::builder) takes for Redis (`redis://`,
    /// `rediss://`, ACL users). The lease then needs a majority of them; its fence stays monotonic
    /// across different majorities (see the `docs/redlock.md` of the repository for the protocol
    /// and what it does not promise). The response timeout is the bound on each master's reply.
    ///
    /// ```no_run
    /// # async fn example() -> leasehold::Result<()> {
    /// let client = leasehold::LeaseClient::redlock([
    ///     "redis://10.0.0.1:6379",
    ///     "redis://10.0.0.2:6379",
    ///     "redis://10.0.0.3:6379",
    /// ])
    /// .response_timeout(std::time::Duration::from_millis(200))
    /// .connect()
    /// .await?;
    /// # let _ = client; Ok(()) }
    /// ```
    ///
    /// [`connect`](LeaseClientBuilder::connect) refuses an even count or fewer than three, a URL
    /// given twice, a replica and two URLs naming one server (by its `run_id`) with
    /// [`Error::Invalid`], and fails with [`Error::NoQuorum`] when fewer than a majority answer.
    pub fn redlock<I, S>(urls: I) -> LeaseClientBuilder
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut b = Self::builder(String::new());
        b.target = Target::Redlock(urls.into_iter().map(Into::into).collect());
        b
    }

    /// Connects with the default settings.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> leasehold::Result<()> {
    /// let client = leasehold::LeaseClient::connect("redis://127.0.0.1:6379/").await?;
    /// let opts = leasehold::LeaseOptions::default();
    /// let lease = client.try_acquire("doc-connect", &opts).await?;
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`LeaseClientBuilder::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is held before it returns.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    pub(crate) fn with_store(
        store: Arc<dyn Store>,
        prefix: String,
        response_timeout: Duration,
    ) -> Self {
        LeaseClient {
            inner: Arc::new(Inner {
                keeper: Keeper::spawn(store, response_timeout),
                prefix,
                next_id: AtomicU64::new(1),
                contenders: Contenders::default(),
                last_opts: std::sync::Mutex::new(None),
            }),
        }
    }

    fn store(&self) -> &dyn Store {
        self.inner.keeper.store()
    }

    /// Requests this client (all its clones) has sent to its store so far, counting a pipeline or
    /// script as one. For benchmarks and tests of round trips per acquisition. Opening a connection
    /// counts as one.
    pub fn round_trips(&self) -> u64 {
        self.store().round_trips()
    }

    /// The key prefix: the namespace of lease names in the store.
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// Which kind of store this client talks to.
    pub fn store_kind(&self) -> StoreKind {
        self.store().kind()
    }

    /// Where the store is, as its URL with secrets removed.
    pub fn location(&self) -> &str {
        self.store().location()
    }

    /// Where the store keeps `name` (the Redis lock key, the table row, the etcd key prefix).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a name no store accepts.
    pub fn key_of(&self, name: &str) -> Result<String> {
        self.store().check_name(name)?;
        Ok(self.store().key_of(name))
    }

    /// What else the store keeps for `name` besides [`key_of`](Self::key_of), each with what it is
    /// (on Redis `("fence", key)` and `("queue", key)`; on a Redlock the fence and wake keys); empty
    /// for a store that keeps nothing more.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a name no store accepts.
    pub fn extra_keys(&self, name: &str) -> Result<Vec<(&'static str, String)>> {
        self.store().check_name(name)?;
        Ok(self.store().extra_keys(name))
    }

    /// Checks a lease name the way acquire will, before anything is sent.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] naming what is wrong with it.
    pub fn check_name(&self, name: &str) -> Result<()> {
        self.store().check_name(name)
    }

    /// `opts` as a shared `Arc`: the one of the previous lease when equal (the common case of many
    /// leases taken with the same options), else a new one.
    fn shared_opts(&self, opts: &LeaseOptions) -> Arc<LeaseOptions> {
        let mut last = self.inner.last_opts.lock().expect("options lock");
        match &*last {
            Some(a) if **a == *opts => a.clone(),
            _ => {
                let a = Arc::new(opts.clone());
                *last = Some(a.clone());
                a
            }
        }
    }

    fn make_lease(&self, name: &str, token: &str, grant: &Grant, opts: &LeaseOptions) -> Lease {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(LeaseState::new(
            id,
            name,
            token,
            grant,
            self.shared_opts(opts),
        ));
        state.learned(self.store().clock_rate());
        Lease::new(state, self.inner.keeper.clone())
    }

    /// One acquire attempt with `guard` armed while it is in flight. A timed-out attempt (outcome
    /// unknown) is abandoned before the error is returned.
    async fn attempt(&self, guard: &mut AbandonGuard<'_>) -> Result<Outcome> {
        guard.armed = true;
        let r = self.store().acquire(&guard.req).await;
        guard.armed = false;
        let req = guard.req;
        match r {
            Ok(Attempt::Taken(grant)) => Ok(Outcome::Taken(
                self.make_lease(req.name, req.token, &grant, req.opts),
            )),
            Ok(Attempt::Busy { remaining }) => Ok(Outcome::Busy(remaining)),
            Err(e) => {
                if e.outcome_unknown() {
                    let _ = self.store().abandon(&req).await;
                }
                Err(e)
            }
        }
    }

    fn record_outcome(&self, started: Instant, r: &Result<Lease>) {
        let outcome = match r {
            Ok(_) => "acquired",
            Err(Error::Busy { .. }) => "busy",
            Err(Error::WaitTimeout { .. }) => "timeout",
            Err(Error::NotReplicated { .. }) => "not_replicated",
            Err(_) => "error",
        };
        metrics::acquired(outcome, started.elapsed());
    }

    /// Tries once: the lease, or [`Error::Busy`] with how long the holder's lease still runs. One
    /// round trip on Redis.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> leasehold::Result<()> {
    /// use leasehold::{Error, LeaseClient, LeaseOptions};
    ///
    /// let client = LeaseClient::connect("redis://127.0.0.1:6379/").await?;
    /// let opts = LeaseOptions::default();
    /// let lease = client.try_acquire("doc-try-acquire", &opts).await?;
    /// // A second try while it is held is refused at once.
    /// let again = client.try_acquire("doc-try-acquire", &opts).await;
    /// assert!(matches!(again, Err(Error::Busy { .. })));
    /// lease.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Busy`]; [`Error::Invalid`] for a bad name (nothing sent); [`Error::Store`] or
    /// [`Error::Timeout`] when the store failed (after a timeout the attempt is abandoned, so a lease
    /// it may have taken is released if the store can be reached); [`Error::NotReplicated`] under a
    /// fail-closed replica policy.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if cancelled after the request was sent, a lease it took is released at once in
    /// the background (not left to its TTL).
    #[tracing::instrument(level = "debug", skip(self, opts), fields(lease = name))]
    pub async fn try_acquire(&self, name: &str, opts: &LeaseOptions) -> Result<Lease> {
        self.store().check_name(name)?;
        let started = Instant::now();
        let token = store::new_token();
        let mut guard = AbandonGuard::first(&self.inner.keeper, name, &token, opts, Duration::ZERO);
        let r = match self.attempt(&mut guard).await {
            Ok(Outcome::Taken(lease)) => Ok(lease),
            Ok(Outcome::Busy(remaining)) => {
                metrics::contention();
                Err(Error::Busy {
                    name: name.to_owned(),
                    remaining,
                })
            }
            Err(e) => Err(e),
        };
        self.record_outcome(started, &r);
        r
    }

    /// Waits until the clean-ups this client does in the background are done (the release of a
    /// dropped [`Lease`], the withdrawal of a cancelled acquire from the store's queue), at most
    /// `within`; whether they are. A program about to exit calls it so that they reach the store
    /// instead of dying with the runtime (a withdrawal that never arrives leaves the store to hand
    /// the name to a waiter that is gone, which costs the next waiter a hand-over TTL).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn settle(&self, within: Duration) -> bool {
        self.inner.keeper.settle(within).await
    }

    /// Waits up to `max_wait` for the lease (`Duration::ZERO` behaves like
    /// [`try_acquire`](Self::try_acquire)). Woken by the store, not by polling: tasks of this client
    /// waiting for the same name queue in FIFO order behind one contender, which waits the store's
    /// way. On Redis the contender joins the name's queue in Redis, across all clients in arrival
    /// order, and the holder's release hands it the lease (one round trip per wait step, a step
    /// lasting at most half a second while it keeps its place); nobody jumps the queue, and a
    /// holder's expiry is noticed by the next step.
    ///
    /// The bound is kept to within one request's response time (an attempt already sent is
    /// awaited, not abandoned); a bound above [`MAX_WAIT`] (a year; `Duration::MAX`, say) is
    /// [`MAX_WAIT`]. Transient store failures while waiting (a dropped connection, a
    /// restart) are retried within the bound after a short jittered pause, keeping the place in the
    /// queue.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> leasehold::Result<()> {
    /// use std::time::Duration;
    /// use leasehold::{LeaseClient, LeaseOptions};
    ///
    /// let client = LeaseClient::connect("redis://127.0.0.1:6379/").await?;
    /// let opts = LeaseOptions::with_ttl(Duration::from_secs(5))?;
    /// let first = client.try_acquire("doc-acquire", &opts).await?;
    /// // Wait for the lease: woken by the release, not by polling.
    /// let waiter = {
    ///     let (client, opts) = (client.clone(), opts.clone());
    ///     tokio::spawn(async move {
    ///         client.acquire("doc-acquire", &opts, Duration::from_secs(5)).await
    ///     })
    /// };
    /// first.release().await?;
    /// let second = waiter.await.expect("the waiter ran")?;
    /// assert!(second.fence() > leasehold::Fence::new(0));
    /// second.release().await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::WaitTimeout`] when the bound passes; the last transient store error if the bound
    /// passes while the store is failing; otherwise as [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: cancelling while queued or blocked leaves nothing behind in this process, and
    /// in the background withdraws from the store's queue and releases (handing on) a lease that was
    /// taken or handed over meanwhile; a request still on its way then does nothing when it arrives.
    #[tracing::instrument(level = "debug", skip(self, opts), fields(lease = name, max_wait_ms = max_wait.as_millis() as u64))]
    pub async fn acquire(
        &self,
        name: &str,
        opts: &LeaseOptions,
        max_wait: Duration,
    ) -> Result<Lease> {
        if max_wait.is_zero() {
            return self.try_acquire(name, opts).await;
        }
        self.store().check_name(name)?;
        let started = Instant::now();
        let r = self
            .wait_for(name, opts, started, max_wait.min(MAX_WAIT))
            .await;
        self.record_outcome(started, &r);
        r
    }

    async fn wait_for(
        &self,
        name: &str,
        opts: &LeaseOptions,
        started: Instant,
        max_wait: Duration,
    ) -> Result<Lease> {
        let end = started + max_wait;
        let timed_out = || Error::WaitTimeout {
            name: name.to_owned(),
            waited: started.elapsed(),
        };
        let queue = self.inner.contenders.queue(name);
        let Ok(mut head) = tokio::time::timeout_at(end, queue.lock_owned()).await else {
            return Err(timed_out());
        };
        let token = store::new_token();
        let mut guard = AbandonGuard::first(&self.inner.keeper, name, &token, opts, max_wait);
        let queues = self.store().queues_waiters();
        // When the previous head of this queue got the lease and the store will wake a waiter at its
        // release, block at once instead of asking first (stores without a queue of their own).
        let mut block_first = head
            .held_here_until
            .take()
            .and_then(|t| t.checked_duration_since(Instant::now()));
        // What the last step said of the holder's remaining TTL: the next step blocks no longer
        // than that (plus jitter), so that an expiry is noticed when it happens.
        let mut holder_remaining = None;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                if queues {
                    guard.abandon_now().await;
                }
                return Err(timed_out());
            }
            guard.req.wait = left;
            guard.armed = true;
            let (first, remaining) = (block_first.take(), holder_remaining.take());
            let step = self.wait_step(&guard.req, first, remaining, left).await;
            guard.armed = false;
            guard.req.step = guard.req.step.saturating_add(1);
            let failed = match step {
                Ok(Attempt::Taken(grant)) => {
                    let lease = self.make_lease(name, &token, &grant, opts);
                    // The next head may skip asking only when this hold's release is sure to wake
                    // a waiter.
                    head.held_here_until = grant.wakes_next.then(|| Instant::now() + opts.ttl);
                    return Ok(lease);
                }
                Ok(Attempt::Busy { remaining }) => {
                    metrics::contention();
                    holder_remaining = remaining;
                    continue;
                }
                Err(e) if is_transient(&e) => match self.back_off(end, e).await {
                    Ok(()) => continue,
                    Err(e) => e,
                },
                Err(e) => e,
            };
            // Giving up with a place in the store's queue, or with an attempt that may have taken
            // the lease: leave nothing behind.
            if queues || failed.outcome_unknown() {
                guard.abandon_now().await;
            }
            return Err(failed);
        }
    }

    /// One step of a wait: block for a hand-over at once when the previous head's release is sure
    /// to wake a waiter (`block_first`, that holder's remaining TTL), otherwise ask the store (taking
    /// the lease or queueing and blocking), blocking no longer than `holder_remaining` plus jitter.
    async fn wait_step(
        &self,
        req: &Request<'_>,
        block_first: Option<Duration>,
        holder_remaining: Option<Duration>,
        left: Duration,
    ) -> Result<Attempt> {
        match block_first {
            Some(first) => {
                let block = waiters::block_for(Some(first), left);
                let turn = self.store().wait_turn(req, block).await?;
                Ok(match turn {
                    Turn::Taken(grant) => Attempt::Taken(grant),
                    Turn::AskAgain => Attempt::Busy { remaining: None },
                })
            }
            None => {
                let block = waiters::block_for(holder_remaining, left);
                self.store().acquire_or_wait(req, block).await
            }
        }
    }

    /// A store blip while waiting (a dropped connection, a restart) is retried within the wait bound
    /// after a jittered pause (50-150 ms); `last` is returned when no time is left.
    async fn back_off(&self, end: Instant, last: Error) -> Result<()> {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(last);
        }
        tracing::debug!(error = %last, "the store failed while waiting; retrying within the bound");
        let pause = Duration::from_millis(rand::random_range(50..=150));
        tokio::time::sleep(pause.min(left)).await;
        Ok(())
    }

    /// Runs `work` under the lease `name`: acquires it (waiting up to `max_wait`), runs the work,
    /// cancels it (drops its future) the moment the lease is lost, releases afterwards. The scoped
    /// form of [`acquire`](Self::acquire) + [`Lease::lost`] + [`Lease::release`], like
    /// node-redlock's `using`.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main]
    /// # async fn main() -> leasehold::Result<()> {
    /// # let client = leasehold::LeaseClient::connect("redis://127.0.0.1:6379/").await?;
    /// use std::time::Duration;
    /// let opts = leasehold::LeaseOptions::default();
    /// let rows = client
    ///     .with_lease("doc-with-lease", &opts, Duration::from_secs(5), async |lease| {
    ///         // Present lease.fence() to every resource the work writes to.
    ///         let _fence = lease.fence();
    ///         42
    ///     })
    ///     .await?;
    /// assert_eq!(rows, 42);
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// Whatever acquiring returns ([`Error::Busy`], [`Error::WaitTimeout`], store errors: the work
    /// did not run); [`Error::LeaseLost`] when the lease was lost while the work ran (the work was
    /// cancelled at that point) or when the release found it already gone (the store expired or
    /// force-released it; the work may have overlapped with another holder). A release that fails
    /// for a store error is not an error of the work: the work finished within the lease by this
    /// client's clock, and the lease expires after its TTL.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: cancelling drops the work and hands the release to the background.
    pub async fn with_lease<T>(
        &self,
        name: &str,
        opts: &LeaseOptions,
        max_wait: Duration,
        work: impl AsyncFnOnce(&Lease) -> T,
    ) -> Result<T> {
        let lease = self.acquire(name, opts, max_wait).await?;
        let lost = lease.lost();
        let out = tokio::select! {
            biased;
            reason = lost.fired() => {
                let e = Error::LeaseLost { name: name.to_owned(), reason };
                drop(lease);
                return Err(e);
            }
            out = work(&lease) => out,
        };
        match lease.release().await {
            Ok(()) => Ok(out),
            Err(e @ Error::LeaseLost { .. }) => Err(e),
            Err(e) => {
                tracing::warn!(lease = name, error = %e, "release after the work failed; the lease expires after its TTL");
                Ok(out)
            }
        }
    }

    /// Reads the state of `name` without touching it. One round trip.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad name; store errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn inspect(&self, name: &str) -> Result<LeaseInfo> {
        let mut info = self.inspect_store(name).await?;
        self.fill_holder(&mut info).await;
        Ok(info)
    }

    /// The store's own answer for `name`, without the holder's label (one request).
    pub(crate) async fn inspect_store(&self, name: &str) -> Result<LeaseInfo> {
        self.store().check_name(name)?;
        let mut infos = self.store().inspect(&[name]).await?;
        infos.pop().ok_or_else(|| {
            Error::invalid("inspect", "the store answered nothing for the name; retry")
        })
    }

    /// Reads the holder's announced label into `info` (a held lock on a store that keeps notes;
    /// a failed read leaves it out: the rest of the answer stands).
    async fn fill_holder(&self, info: &mut LeaseInfo) {
        if !info.held || info.permits > 1 || info.problem.is_some() {
            return;
        }
        if let Ok(note) = self.store().read_note(&info.name).await {
            crate::lease::holder::fill(info, note.as_deref());
        }
    }

    /// The note last written beside `name` by a holder ([`Lease::write_note`]), whoever wrote it and
    /// whether or not it still holds the name (`None`: none kept). An election reads its leader's
    /// record this way.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad name or a store that keeps no notes; store errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn read_note(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.store().check_name(name)?;
        self.store().read_note(name).await
    }

    /// Notices of changes to `name` pushed by the store ([`Store::changes`]); `None` where it
    /// cannot push. What [`Observer`](crate::election::Observer) waits on between reads.
    pub(crate) async fn changes(&self, name: &str) -> Result<Option<crate::lease::store::Changes>> {
        self.store().check_name(name)?;
        self.store().changes(name).await
    }

    /// The store's wall clock, in milliseconds since the Unix epoch, read in one request (Redis
    /// `TIME`, PostgreSQL `clock_timestamp()`, MariaDB `NOW(3)`); `None` for a store with no clock
    /// of its own (etcd) or several (Redlock). [`schedule::StoreClock`](crate::schedule::StoreClock)
    /// turns readings into an estimate of the store's time now.
    ///
    /// # Errors
    ///
    /// Store errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn store_clock_ms(&self) -> Result<Option<i64>> {
        self.store().wall_clock_ms().await
    }

    /// Lists lease names under this client's prefix matching the glob `pattern` (`*` for all). A name
    /// appears once it has been acquired (while the store keeps its fence) or while it is held.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for an empty pattern or one with braces or control characters; store errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        crate::lease::names::check_pattern(pattern)?;
        let mut infos = self.store().list(pattern).await?;
        for info in &mut infos {
            self.fill_holder(info).await;
        }
        Ok(infos)
    }

    /// Operator's override, unsafe for the evicted holder by design: frees the lease whoever holds it
    /// (every holder of a semaphore) and advances the fence, so the evicted holder's renewal fails and
    /// its fenced writes are refused. What it frees goes to the first waiters.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad name; store errors ([`Error::Timeout`]: it may or may not have
    /// happened; run it again, it is idempotent apart from advancing the fence once more).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that a sent request may still evict the holder.
    pub async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        self.store().check_name(name)?;
        let r = self.store().force_release(name).await?;
        tracing::warn!(target: crate::lease::HOLDER_EVENTS, lease = name, evicted = r.evicted, fence = %r.fence, "lease force-released");
        Ok(r)
    }

    /// Operator's override for one holder: evicts the holder of `name` whose token is `token` (a
    /// lock's holder or one of a semaphore's, as [`inspect`](Self::inspect) lists them) and advances
    /// the fence. `evicted` is false when that token holds nothing (already released or expired).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad name or an empty token, or a store that cannot evict one holder;
    /// store errors as [`force_release`](Self::force_release).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe in the sense that a sent request may still evict the holder.
    pub async fn force_release_holder(&self, name: &str, token: &str) -> Result<ForcedRelease> {
        self.store().check_name(name)?;
        if token.is_empty() || token.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(Error::invalid(
                "holder token",
                "it is empty or has spaces or control characters; copy it from `leasehold status`",
            ));
        }
        let r = self.store().force_release_holder(name, token).await?;
        tracing::warn!(target: crate::lease::HOLDER_EVENTS, lease = name, evicted = r.evicted, fence = %r.fence, "lease holder force-released");
        Ok(r)
    }
}
