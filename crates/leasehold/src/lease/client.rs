//! The connection to Redis and the operations that are not tied to one held lease: acquire, inspect,
//! list, force-release.
//!
//! Promise: every call is bounded in time (response and connect timeouts), so a stopped or
//! unreachable Redis yields [`crate::Error::Redis`] rather than a hang. Limit: a call that timed out
//! may still have been executed by Redis.

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::ConnectionManagerConfig;
use redis::AsyncConnectionConfig;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::conn::{BlockingPool, Counted, Shared};
use crate::lease::guard::LeaseState;
use crate::lease::scripts::{self, AcquireReply};
use crate::lease::waiters::{self, Contenders};
use crate::lease::watchdog::{self, Command};
use crate::lease::{metrics, Lease, LeaseKeys, LeaseOptions, ReplicaPolicy};

/// A handle to one Redis deployment for leases. Cheap to clone; clones share one multiplexed connection,
/// one watchdog, and one contender per lease name for all waiting tasks.
#[derive(Debug, Clone)]
pub struct LeaseClient {
    inner: Arc<Inner>,
}

struct Inner {
    /// The multiplexed, reconnecting connection every non-blocking request goes through.
    shared: Shared,
    /// Dedicated connections for `BLPOP` (waiting) and `WAIT` (replica acknowledgements).
    blocking: BlockingPool,
    /// Key prefix: keys are `{<prefix>:<name>}:lock` etc.
    prefix: String,
    /// Requests sent by this client and its clones (shared with `shared`, `blocking`, the watchdog).
    round_trips: Arc<AtomicU64>,
    /// Bound on one request's reply; also the base of every call's overall bound.
    response_timeout: Duration,
    /// Bound on opening a connection.
    connect_timeout: Duration,
    /// To the watchdog (one task per client).
    watchdog: mpsc::UnboundedSender<Command>,
    /// Watchdog registry ids.
    next_id: AtomicU64,
    /// One FIFO queue per name for tasks waiting in [`LeaseClient::acquire`].
    contenders: Contenders,
    /// The options of the last lease taken, shared by every lease taken with equal options.
    last_opts: std::sync::Mutex<Option<Arc<LeaseOptions>>>,
    /// The URL with any password replaced, for logs.
    redacted_url: String,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseClient")
            .field("url", &self.redacted_url)
            .field("prefix", &self.prefix)
            .field("round_trips", &self.round_trips.load(Ordering::Relaxed))
            .field("response_timeout", &self.response_timeout)
            .finish_non_exhaustive()
    }
}

/// Builder for [`LeaseClient`].
#[derive(Debug, Clone)]
#[must_use]
pub struct LeaseClientBuilder {
    url: String,
    key_prefix: String,
    response_timeout: Duration,
    connect_timeout: Duration,
    /// PEM root certificate(s) to trust for `rediss://` instead of the built-in web PKI roots.
    tls_root_ca_pem: Option<Vec<u8>>,
}

/// What Redis says about one lease name (for `status` and `list`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseInfo {
    /// Lease name.
    pub name: String,
    /// The lock key.
    pub key: String,
    /// Whether a holder has it now.
    pub held: bool,
    /// Remaining TTL of the current holder, in milliseconds (`None` when free).
    pub ttl_ms: Option<u64>,
    /// The last fence issued for this name (`None` if never acquired since Redis last lost its data).
    pub fence: Option<Fence>,
}

/// Result of [`LeaseClient::force_release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ForcedRelease {
    /// Whether a holder was evicted.
    pub evicted: bool,
    /// The fence after the forced release: strictly above anything the evicted holder presented, so
    /// fenced resources refuse its later writes.
    pub fence: Fence,
}

/// Replaces the password in a redis URL by `***`.
fn redact(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_owned();
    };
    let rest = &url[scheme_end + 3..];
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => {
            let userinfo = &rest[..at];
            let user = userinfo.split(':').next().unwrap_or("");
            let masked = if userinfo.contains(':') {
                format!("{user}:***")
            } else {
                "***".to_owned()
            };
            format!("{}{masked}{}", &url[..scheme_end + 3], &rest[at..])
        }
        None => url.to_owned(),
    }
}

fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(Error::invalid(
            "key prefix",
            "it is empty; use a short word such as `leasehold` or your service name",
        ));
    }
    super::keys::refuse_tag_breakers("key prefix", prefix)
}

/// Escapes Redis glob metacharacters.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

fn timeout_error(what: &'static str) -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("no answer from redis within the time limit ({what})"),
    ))
}

/// A Redis failure that a later attempt may not meet (connection dropped, refused, timed out).
fn is_transient(e: &Error) -> bool {
    matches!(e, Error::Redis { .. }) && e.is_retryable()
}

/// 128 random bits from the thread's CSPRNG, as 32 hex digits.
fn new_token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

impl LeaseClientBuilder {
    /// Key prefix (default `leasehold`): keys are `{<prefix>:<name>}:lock` and so on.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Longest wait for one reply from Redis (default 2 s). A stopped server turns into an error
    /// after this, never a hang. Held leases do not depend on it: their lost signal fires at their
    /// own deadline.
    pub fn response_timeout(mut self, timeout: Duration) -> Self {
        self.response_timeout = timeout;
        self
    }

    /// Longest wait for a new connection, including AUTH and TLS (default 2 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Trusts these PEM root certificate(s) for `rediss://` (a private CA or a self-signed server
    /// certificate) instead of the built-in web PKI roots. Refused at connect for a non-TLS URL.
    pub fn tls_root_ca_pem(mut self, pem: impl Into<Vec<u8>>) -> Self {
        self.tls_root_ca_pem = Some(pem.into());
        self
    }

    /// Connects (AUTH/ACL and TLS from the URL: `redis://user:pass@host:port/db`, `rediss://...`).
    /// A malformed URL is [`crate::Error::Invalid`]; an unreachable server is
    /// [`crate::Error::Redis`] with [`crate::Phase::Connect`], as are missing or wrong credentials
    /// (the server is asked `PING` once). Call it inside a Tokio runtime: it spawns the client's one
    /// watchdog task, which lives as long as the client or any of its leases.
    pub async fn connect(self) -> Result<LeaseClient> {
        validate_prefix(&self.key_prefix)?;
        for (what, d) in [
            ("response timeout", self.response_timeout),
            ("connect timeout", self.connect_timeout),
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
        let redacted_url = redact(&self.url);
        let client = redis::Client::open(self.url.as_str()).map_err(|e| {
            Error::invalid(
                "redis url",
                format!(
                    "`{redacted_url}` was refused ({}); use redis://[user:password@]host[:port][/db] or rediss://... for TLS",
                    e.detail().unwrap_or("malformed")
                ),
            )
        })?;
        if self.url.starts_with("rediss://") {
            // rustls needs one process-wide crypto provider; an application may have installed its
            // own already, which is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = match self.tls_root_ca_pem {
            None => client,
            Some(pem) => {
                if !self.url.starts_with("rediss://") {
                    return Err(Error::invalid(
                        "tls root certificate",
                        format!("it was given for `{redacted_url}`, which is not a TLS URL; use rediss://"),
                    ));
                }
                redis::Client::build_with_tls(
                    self.url.as_str(),
                    redis::TlsCertificates {
                        client_tls: None,
                        root_cert: Some(pem),
                    },
                )
                .map_err(|e| {
                    Error::invalid(
                        "tls root certificate",
                        format!("it was refused ({e}); give PEM-encoded certificate(s)"),
                    )
                })?
            }
        };
        let round_trips = Arc::new(AtomicU64::new(0));

        // Fail fast and clearly on an unreachable server or bad credentials; the connection then
        // serves as the first dedicated (blocking) connection.
        let probe_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let probe = tokio::time::timeout(
            self.connect_timeout + self.response_timeout,
            client.get_multiplexed_async_connection_with_config(&probe_config),
        )
        .await
        .map_err(|_| timeout_error("connect"))
        .and_then(|r| r)
        .map_err(Error::redis(Phase::Connect))?;
        round_trips.fetch_add(1, Ordering::Relaxed);
        // A server that requires AUTH accepts the connection and refuses commands: ask once, so that
        // missing or wrong credentials are a connect error, not a surprise on the first acquire.
        let mut probe = probe;
        tokio::time::timeout(
            self.response_timeout,
            redis::cmd("PING").query_async::<()>(&mut probe),
        )
        .await
        .map_err(|_| timeout_error("PING"))
        .and_then(|r| r)
        .map_err(Error::redis(Phase::Connect))?;
        round_trips.fetch_add(1, Ordering::Relaxed);

        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(self.response_timeout))
            .set_connection_timeout(Some(self.connect_timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200));
        let manager = tokio::time::timeout(
            self.connect_timeout * 2 + self.response_timeout,
            redis::aio::ConnectionManager::new_with_config(client.clone(), manager_config),
        )
        .await
        .map_err(|_| timeout_error("connect"))
        .and_then(|r| r)
        .map_err(Error::redis(Phase::Connect))?;
        round_trips.fetch_add(1, Ordering::Relaxed);

        let shared = Counted {
            con: manager,
            count: round_trips.clone(),
        };
        let blocking = BlockingPool::new(client, self.connect_timeout, round_trips.clone());
        blocking.put(Counted {
            con: probe,
            count: round_trips.clone(),
        });
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(watchdog::run(rx, shared.clone(), self.response_timeout));
        tracing::debug!(url = %redacted_url, prefix = %self.key_prefix, "lease client connected");
        Ok(LeaseClient {
            inner: Arc::new(Inner {
                shared,
                blocking,
                prefix: self.key_prefix,
                round_trips,
                response_timeout: self.response_timeout,
                connect_timeout: self.connect_timeout,
                watchdog: tx,
                next_id: AtomicU64::new(1),
                contenders: Contenders::default(),
                last_opts: std::sync::Mutex::new(None),
                redacted_url,
            }),
        })
    }
}

/// Armed while an acquire request is in flight in the caller's task. Dropped armed (the caller was
/// cancelled before the reply), it sends release.lua with the attempt's token in the background, so
/// that a lock the abandoned request took is not left held for its TTL. Disarmed with `mem::forget`.
struct AbandonGuard<'a> {
    client: &'a LeaseClient,
    keys: &'a LeaseKeys,
    token: &'a str,
}

impl Drop for AbandonGuard<'_> {
    fn drop(&mut self) {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            // No runtime to send it from: the lock, if taken, expires after its TTL.
            return;
        };
        let (client, keys, token) = (
            self.client.clone(),
            self.keys.clone(),
            self.token.to_owned(),
        );
        rt.spawn(async move {
            // One retry: a release that fails twice leaves the lock to expire after its TTL.
            for _ in 0..2 {
                let mut con = client.shared();
                let r = client
                    .bounded(Phase::Release, scripts::release(&mut con, &keys, &token))
                    .await;
                match r {
                    Ok(taken) => {
                        tracing::debug!(taken, "abandoned acquire cleaned up");
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

/// One acquire attempt's outcome.
enum Attempt {
    /// Taken; `true` when the waiting marker covers this hold (its release will push a wake-up).
    Taken(Lease, bool),
    Busy(Option<Duration>),
}

impl LeaseClient {
    /// Starts a builder for the Redis at `url`.
    pub fn builder(url: impl Into<String>) -> LeaseClientBuilder {
        LeaseClientBuilder {
            url: url.into(),
            key_prefix: "leasehold".to_owned(),
            response_timeout: Duration::from_secs(2),
            connect_timeout: Duration::from_secs(2),
            tls_root_ca_pem: None,
        }
    }

    /// Connects with the default settings.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Requests this client (all its clones) has sent to Redis so far, counting a pipeline or script as
    /// one. For benchmarks and tests of round trips per acquisition. Opening a connection counts as one.
    pub fn round_trips(&self) -> u64 {
        self.inner.round_trips.load(Ordering::Relaxed)
    }

    /// The key prefix.
    pub fn key_prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// The Redis keys used for `name`.
    pub fn keys(&self, name: &str) -> Result<LeaseKeys> {
        LeaseKeys::new(&self.inner.prefix, name)
    }

    pub(crate) fn shared(&self) -> Shared {
        self.inner.shared.clone()
    }

    /// Runs `fut` (a Redis request on the shared connection) with an overall bound: the response
    /// timeout covers an established connection, this also covers a reconnect that hangs.
    pub(crate) async fn bounded<T>(
        &self,
        phase: Phase,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        let limit = self.inner.response_timeout * 2 + self.inner.connect_timeout * 2;
        tokio::time::timeout(limit, fut)
            .await
            .map_err(|_| timeout_error("overall bound"))
            .and_then(|r| r)
            .map_err(Error::redis(phase))
    }

    pub(crate) fn forget(&self, id: u64) {
        let _ = self.inner.watchdog.send(Command::Forget(id));
    }

    pub(crate) fn release_in_background(&self, state: Arc<LeaseState>) {
        let _ = self.inner.watchdog.send(Command::Release(state));
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

    fn make_lease(
        &self,
        name: &str,
        keys: &LeaseKeys,
        token: &str,
        fence: u64,
        opts: &LeaseOptions,
        sent_at: Instant,
    ) -> Lease {
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(LeaseState::new(
            id,
            name,
            keys,
            token,
            Fence::new(fence),
            self.shared_opts(opts),
            sent_at,
        ));
        let _ = self.inner.watchdog.send(Command::Watch(state.clone()));
        Lease::new(state, self.clone())
    }

    /// One acquire attempt: one round trip (the script, plus `WAIT` in the same pipeline when asked
    /// for replica acknowledgements).
    ///
    /// Cancel safe. Without replica acknowledgements the attempt runs in the caller's task: if the
    /// caller stops waiting before the reply, a guard sends a compare-and-delete release with the
    /// attempt's token on the same shared connection (so it reaches Redis after the acquire, if the
    /// acquire was sent at all), and a lock taken by the abandoned attempt is freed at once. With
    /// replica acknowledgements (a dedicated connection, then a possible fail-closed release) the
    /// attempt runs in its own task, and a lease it took is dropped there, which hands its release to
    /// the watchdog.
    ///
    /// `wait`: how long the caller will block on the wake list if told busy (zero: it will not).
    async fn attempt(
        &self,
        name: &str,
        keys: &LeaseKeys,
        opts: &LeaseOptions,
        wait: Duration,
    ) -> Result<Attempt> {
        if opts.replicas.is_none() {
            return self.attempt_here(name, keys, opts, wait).await;
        }
        let (this, name, keys, opts) = (self.clone(), name.to_owned(), keys.clone(), opts.clone());
        tokio::spawn(async move { this.attempt_here(&name, &keys, &opts, wait).await })
            .await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }

    async fn attempt_here(
        &self,
        name: &str,
        keys: &LeaseKeys,
        opts: &LeaseOptions,
        wait: Duration,
    ) -> Result<Attempt> {
        let token = new_token();
        let sent_at = Instant::now();
        let Some((numreplicas, wait_timeout, policy)) = opts.replicas else {
            let mut con = self.shared();
            let guard = AbandonGuard {
                client: self,
                keys,
                token: &token,
            };
            let reply = self
                .bounded(
                    Phase::Acquire,
                    scripts::acquire(&mut con, keys, &token, opts.ttl, wait),
                )
                .await;
            std::mem::forget(guard);
            let reply = reply?;
            return Ok(match reply {
                AcquireReply::Taken { fence, waiting } => Attempt::Taken(
                    self.make_lease(name, keys, &token, fence, opts, sent_at),
                    waiting,
                ),
                AcquireReply::Busy { pttl_ms } => {
                    Attempt::Busy(u64::try_from(pttl_ms).ok().map(Duration::from_millis))
                }
            });
        };

        // WAIT counts acknowledgements of this connection's own writes, and blocks it: run the
        // script and WAIT together on a dedicated connection.
        let mut con = self
            .inner
            .blocking
            .get()
            .await
            .map_err(Error::redis(Phase::Acquire))?;
        let limit = wait_timeout + self.inner.response_timeout * 2;
        let (reply, acked) = tokio::time::timeout(
            limit,
            scripts::acquire_and_wait(
                &mut con,
                keys,
                &token,
                opts.ttl,
                wait,
                numreplicas,
                wait_timeout,
            ),
        )
        .await
        .map_err(|_| timeout_error("acquire and WAIT"))
        .and_then(|r| r)
        .map_err(|e| {
            self.inner.blocking.clear();
            Error::redis(Phase::Acquire)(e)
        })?;
        self.inner.blocking.put(con);
        let (fence, waiting) = match reply {
            AcquireReply::Busy { pttl_ms } => {
                return Ok(Attempt::Busy(
                    u64::try_from(pttl_ms).ok().map(Duration::from_millis),
                ))
            }
            AcquireReply::Taken { fence, waiting } => (fence, waiting),
        };
        let lease = self.make_lease(name, keys, &token, fence, opts, sent_at);
        if acked >= i64::from(numreplicas) {
            return Ok(Attempt::Taken(lease, waiting));
        }
        match policy {
            ReplicaPolicy::FailClosed => {
                metrics::replica_shortfall("fail_closed");
                tracing::warn!(
                    lease = name,
                    acked,
                    wanted = numreplicas,
                    "lock write not replicated; releasing (fail-closed)"
                );
                // Best effort: if this release fails, the lease is handed to the background.
                let _ = lease.release().await;
                Err(Error::NotReplicated {
                    name: name.to_owned(),
                    acked,
                    wanted: i64::from(numreplicas),
                })
            }
            ReplicaPolicy::FailOpen => {
                metrics::replica_shortfall("fail_open");
                tracing::warn!(
                    lease = name,
                    acked,
                    wanted = numreplicas,
                    "lock write not replicated; keeping the lease (fail-open)"
                );
                Ok(Attempt::Taken(lease, waiting))
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

    /// Tries once: the lease, or [`crate::Error::Busy`] with how long the holder's lease still runs.
    /// One round trip. Cancel safe: if cancelled after the request was sent, the attempt completes in
    /// the background and a lease it took is released at once (the lock is not left to its TTL).
    #[tracing::instrument(level = "debug", skip(self, opts), fields(lease = name))]
    pub async fn try_acquire(&self, name: &str, opts: &LeaseOptions) -> Result<Lease> {
        let keys = self.keys(name)?;
        let started = Instant::now();
        let r = match self.attempt(name, &keys, opts, Duration::ZERO).await {
            Ok(Attempt::Taken(lease, _)) => Ok(lease),
            Ok(Attempt::Busy(remaining)) => {
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

    /// Waits up to `max_wait` for the lease (`Duration::ZERO` behaves like
    /// [`try_acquire`](Self::try_acquire)); [`crate::Error::WaitTimeout`] when the bound passes. Woken
    /// by releases, not by polling: tasks of this client waiting for the same name queue in FIFO order
    /// behind one contender, which blocks on the name's wake list (`BLPOP`, on a dedicated connection)
    /// for at most the holder's remaining TTL plus jitter.
    ///
    /// The bound is kept to within one request's response time (an acquire attempt already sent is
    /// awaited, not abandoned). Cancel safe: cancelling while queued or blocked is clean; cancelling
    /// during an attempt is as for [`try_acquire`](Self::try_acquire). One gap: a contender cancelled
    /// right after it popped a wake-up consumes it, and other waiters then notice the free lock only
    /// when their block times out (at most the previous holder's remaining TTL plus jitter).
    ///
    /// Transient Redis failures while waiting (a dropped connection, a restart) are retried within the
    /// bound after a short jittered pause; the last such error is returned if the bound passes.
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
        let keys = self.keys(name)?;
        let started = Instant::now();
        let r = self.wait_for(name, &keys, opts, started, max_wait).await;
        self.record_outcome(started, &r);
        r
    }

    async fn wait_for(
        &self,
        name: &str,
        keys: &LeaseKeys,
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
        // When the previous head of this queue got the lease, it is held here: block at once.
        let mut holder_remaining: Option<Option<Duration>> = head
            .held_here_until
            .take()
            .and_then(|t| t.checked_duration_since(Instant::now()))
            .map(Some);
        loop {
            if holder_remaining.is_none() {
                let left = end.saturating_duration_since(Instant::now());
                match self.attempt(name, keys, opts, left).await {
                    Ok(Attempt::Taken(lease, waiting)) => {
                        // The next head may skip asking only when this hold's release is sure to
                        // push a wake-up (the waiting marker covers it).
                        head.held_here_until = waiting.then(|| Instant::now() + opts.ttl);
                        return Ok(lease);
                    }
                    Ok(Attempt::Busy(remaining)) => {
                        metrics::contention();
                        holder_remaining = Some(remaining);
                    }
                    Err(e) if is_transient(&e) => {
                        self.back_off(end, e).await?;
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(timed_out());
            }
            let block = waiters::block_for(holder_remaining.take().flatten(), left);
            if block >= Duration::from_millis(1) {
                match self.wait_for_wake(&keys.wake, block).await {
                    Ok(()) => {}
                    Err(e) if is_transient(&e) => self.back_off(end, e).await?,
                    Err(e) => return Err(e),
                }
            }
        }
    }

    /// A Redis blip while waiting (a dropped connection, a restart) is retried within the wait bound
    /// after a jittered pause (50-150 ms); `last` is returned when no time is left.
    async fn back_off(&self, end: Instant, last: Error) -> Result<()> {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(last);
        }
        tracing::debug!(error = %last, "redis failed while waiting; retrying within the bound");
        let pause = Duration::from_millis(rand::random_range(50..=150));
        tokio::time::sleep(pause.min(left)).await;
        Ok(())
    }

    /// Blocks on the wake list for up to `block` on a dedicated connection. Returns when woken or
    /// when the time is up; the caller then asks again.
    async fn wait_for_wake(&self, wake_key: &str, block: Duration) -> Result<()> {
        let mut con = self
            .inner
            .blocking
            .get()
            .await
            .map_err(Error::redis(Phase::Wait))?;
        let secs = format!("{:.3}", block.as_secs_f64().max(0.001)); // never "0": that blocks forever
        let reply = tokio::time::timeout(
            block + self.inner.response_timeout,
            redis::cmd("BLPOP")
                .arg(wake_key)
                .arg(secs)
                .query_async::<Option<(String, String)>>(&mut con),
        )
        .await
        .map_err(|_| timeout_error("BLPOP"))
        .and_then(|r| r)
        .map_err(|e| {
            self.inner.blocking.clear();
            Error::redis(Phase::Wait)(e)
        })?;
        self.inner.blocking.put(con);
        tracing::trace!(woken = reply.is_some(), "wake list");
        Ok(())
    }

    /// Reads the state of `name` without touching it. One round trip.
    pub async fn inspect(&self, name: &str) -> Result<LeaseInfo> {
        let keys = self.keys(name)?;
        let mut infos = self.inspect_many(vec![(name.to_owned(), keys)]).await?;
        Ok(infos.remove(0))
    }

    async fn inspect_many(&self, names: Vec<(String, LeaseKeys)>) -> Result<Vec<LeaseInfo>> {
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(500) {
            let mut pipe = redis::pipe();
            for (_, keys) in chunk {
                pipe.cmd("PTTL").arg(&keys.lock).cmd("GET").arg(&keys.fence);
            }
            let mut con = self.shared();
            let values: Vec<redis::Value> = self
                .bounded(Phase::Inspect, pipe.query_async(&mut con))
                .await?;
            let mut it = values.into_iter();
            for (name, keys) in chunk {
                let pttl: i64 = it
                    .next()
                    .map(redis::from_redis_value)
                    .transpose()
                    .map_err(|e| Error::redis(Phase::Inspect)(e.into()))?
                    .unwrap_or(-2);
                let fence: Option<String> = it
                    .next()
                    .map(redis::from_redis_value)
                    .transpose()
                    .map_err(|e| Error::redis(Phase::Inspect)(e.into()))?
                    .flatten();
                out.push(LeaseInfo {
                    name: name.clone(),
                    key: keys.lock.clone(),
                    held: pttl != -2,
                    ttl_ms: u64::try_from(pttl).ok(),
                    fence: fence.and_then(|f| f.parse().ok()),
                });
            }
        }
        Ok(out)
    }

    /// Lists lease names under this client's prefix whose name matches the glob `pattern` (`*` for all).
    /// Uses `SCAN`, never `KEYS`. A name appears once it has been acquired (its fence key stays) or
    /// while someone holds its lock key.
    pub async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        if pattern.is_empty() {
            return Err(Error::invalid(
                "name pattern",
                "it is empty; use `*` to list all names",
            ));
        }
        super::keys::refuse_tag_breakers("name pattern", pattern)?;
        let tag_start = format!("{{{}:", self.inner.prefix);
        let matcher = format!("{}{pattern}}}:*", glob_escape(&tag_start));
        let mut names = BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let mut con = self.shared();
            let (next, keys): (u64, Vec<String>) = self
                .bounded(
                    Phase::Inspect,
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(&matcher)
                        .arg("COUNT")
                        .arg(1000)
                        .query_async(&mut con),
                )
                .await?;
            for key in keys {
                let Some(rest) = key.strip_prefix(&tag_start) else {
                    continue;
                };
                let name = rest
                    .strip_suffix("}:lock")
                    .or_else(|| rest.strip_suffix("}:fence"));
                if let Some(name) = name {
                    names.insert(name.to_owned());
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        let named = names
            .into_iter()
            .filter_map(|n| self.keys(&n).ok().map(|k| (n, k)))
            .collect();
        self.inspect_many(named).await
    }

    /// Operator's override, unsafe for the evicted holder by design: deletes the lock whoever holds it
    /// and advances the fence, so the evicted holder's renewal fails and its fenced writes are refused.
    pub async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        let keys = self.keys(name)?;
        let mut con = self.shared();
        let (evicted, fence) = self
            .bounded(Phase::Release, scripts::force_release(&mut con, &keys))
            .await?;
        tracing::warn!(lease = name, evicted, %fence, "lease force-released");
        Ok(ForcedRelease {
            evicted,
            fence: Fence::new(fence),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("redis://app:s3cret@127.0.0.1:6379/0"),
            "redis://app:***@127.0.0.1:6379/0"
        );
        assert_eq!(redact("rediss://:pw@h/"), "rediss://:***@h/");
        assert_eq!(redact("redis://h:1/"), "redis://h:1/");
    }

    #[test]
    fn glob_metacharacters_in_the_prefix_are_literal() {
        assert_eq!(glob_escape("{a*b?[c]}"), "{a\\*b\\?\\[c\\]}");
    }

    #[test]
    fn tokens_are_128_bit_hex_and_unique() {
        let a = new_token();
        let b = new_token();
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
