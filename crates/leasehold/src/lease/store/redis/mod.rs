//! The Redis store: a lease is a key holding the holder's token with a TTL (`SET NX PX`, like
//! redis-py's `Lock` and every other `SET NX PX` lock, so they exclude each other), renewed by
//! compare-and-expire, and released by compare-and-delete that hands the lock straight to the next
//! waiter of a FIFO queue kept beside it.
//!
//! Promise: one server (or primary) judges expiry by its own clock; the fence is
//! `max(stored + 1, server time in µs)`, so it keeps increasing even when the server lost the keys
//! (restart without persistence, failover to a replica that missed the write, the fence key's
//! retention passed) as long as the server's clock has not stepped back by more than that took.
//! Waiters queue in Redis in arrival order: a waiting acquire joins the queue and blocks on a wake
//! list of its own (`BLPOP`, on a dedicated connection, never the shared one) in one round trip; the
//! release sets the lock to the first live waiter's token and pushes its fence to that list, so the
//! waiter holds the lease when its `BLPOP` returns. Nobody jumps a non-empty queue. A waiter refreshes
//! its place at least every half second; one that stops is skipped, and a lock handed to
//! a waiter that died meanwhile is free again after one second (the hand-over TTL).
//! Limit: a failover before the lock write reached the replica gives two holders; `WAIT` after
//! acquire ([`crate::ReplicaPolicy`]) narrows that window and never closes it. Locks
//! taken by other `SET NX PX` clients exclude and are excluded, but do not queue: they may take a free
//! lock before a waiter whose refresh has not come yet.
//!
//! Layout: `keys` (hash-tagged key names), `scripts` (one `.lua` file per script, a shared prelude,
//! each behind one function that prepares its call), `conn` (the shared connection, dedicated
//! connections for blocking commands on the key's node, round-trip counting), `topology` (the URL
//! forms), `standalone` (one server), `sentinel` (the primary, followed across failovers), `cluster`
//! (slot routing, redirects, pipelines split per master), `node` (reaching one node; what the
//! topologies share).

mod cluster;
pub(super) mod conn;
pub mod keys;
mod node;
mod scripts;
mod sentinel;
mod standalone;
mod topology;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use self::cluster::ClusterConn;
use self::conn::{BlockingPool, Counted, Dedicated, Nodes, Route, Shared};
use self::keys::LeaseKeys;
use self::scripts::{AcquireReply, Ask, HandOver, Tuning};
use self::sentinel::SentinelConn;
use self::topology::Topology;
use super::{
    Attempt, ForcedRelease, Grant, Held, HolderInfo, LeaseInfo, Request, Settings, Store,
    StoreKind, Turn,
};
use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::{metrics, ReplicaPolicy};

/// Most scripts sent in one pipeline; a larger batch goes out as several pipelines in a row, so the
/// request and reply buffers stay small however many leases are held.
const CHUNK: usize = 1_000;

/// Leases in one Redis server or primary. Cheap to clone (clones share the connections).
#[derive(Clone)]
pub(crate) struct RedisStore {
    /// The multiplexed, reconnecting connection every non-blocking request goes through.
    shared: Shared,
    /// Dedicated connections for `BLPOP` (waiting) and `WAIT` (replica acknowledgements).
    blocking: Arc<BlockingPool>,
    /// Key prefix: keys are `{<prefix>:<name>}:lock` etc.
    prefix: Arc<str>,
    /// Requests sent (shared with `shared` and `blocking`).
    round_trips: Arc<AtomicU64>,
    /// Bound on one request's reply; also the base of every call's overall bound.
    response_timeout: Duration,
    /// Bound on opening a connection.
    connect_timeout: Duration,
    /// The queue protocol's timings and the fence retention.
    tuning: Tuning,
    /// The URL without its password.
    location: Arc<str>,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.location)
            .field("prefix", &self.prefix)
            .field("round_trips", &self.round_trips.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
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

/// `fut` with a time bound; running out of time is [`Error::Timeout`] for `phase`.
async fn within<T>(
    phase: Phase,
    limit: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(Error::redis(phase)),
        Err(_) => Err(Error::Timeout {
            phase,
            after: limit,
        }),
    }
}

fn ms_reply(pttl_ms: i64) -> Option<Duration> {
    u64::try_from(pttl_ms).ok().map(Duration::from_millis)
}

/// The `since` of a lease handed over while its waiter blocked: a local instant no later than the
/// hand-over. The waiter's acquire ran at server time `queued_us`, after the pipeline left at `sent`;
/// the hand-over ran at server time `handed_us`, after that. Counting the server's interval from
/// `sent` therefore lands no later than the hand-over, as long as the two clocks run at the same rate
/// (the drift allowance covers rates) and the server's clock did not step forward in between (a step
/// forward of J makes it J late; Redis's own expiry is J early after such a step anyway). It is never
/// later than `received`, when the grant was already in hand.
fn handed_since(sent: Instant, received: Instant, queued_us: i64, handed_us: i64) -> Instant {
    let between = Duration::from_micros(u64::try_from(handed_us - queued_us).unwrap_or(0));
    sent + between.min(received.saturating_duration_since(sent))
}

impl RedisStore {
    /// Connects (AUTH/ACL and TLS from the URL: `redis://user:pass@host:port/db`, `rediss://...`).
    /// A malformed URL is [`Error::Invalid`]; an unreachable server, missing or wrong credentials are
    /// [`Error::Redis`] or [`Error::Timeout`] with [`Phase::Connect`] (the server is asked `PING`).
    pub(crate) async fn connect(url: &str, settings: Settings) -> Result<Self> {
        let location = crate::url::redact(url);
        let round_trips = Arc::new(AtomicU64::new(0));
        let (connect_timeout, response_timeout, retention) = (
            settings.connect_timeout,
            settings.response_timeout,
            settings.retention,
        );
        let topology = topology::parse(url, settings.tls_root_ca_pem.as_deref())?;
        if url.starts_with("rediss") {
            // rustls needs one process-wide crypto provider; an application may have installed its
            // own already, which is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut first_dedicated = None;
        let (shared, blocking) = match topology {
            Topology::Standalone => {
                let (shared, nodes, mut probe) =
                    standalone::connect(url, &location, &settings, round_trips.clone()).await?;
                // The server's script cache is shared by every connection: load it once here, so
                // that the first pipelined acquire + BLPOP is not answered NOSCRIPT (its BLPOP would
                // block for nothing before the retry). A dedicated connection made later, perhaps
                // after a restart, loads again.
                within(
                    Phase::Connect,
                    response_timeout,
                    scripts::load_all(&mut probe),
                )
                .await?;
                round_trips.fetch_add(1, Ordering::Relaxed);
                first_dedicated = Some(probe);
                (shared, nodes)
            }
            Topology::Sentinel(sentinel) => {
                let conn = SentinelConn::connect(
                    sentinel,
                    connect_timeout,
                    response_timeout,
                    round_trips.clone(),
                )
                .await?;
                (Route::Sentinel(conn.clone()), Nodes::Sentinel(conn))
            }
            Topology::Cluster(cluster) => {
                let conn = ClusterConn::connect(
                    cluster,
                    connect_timeout,
                    response_timeout,
                    round_trips.clone(),
                )
                .await?;
                (Route::Cluster(conn.clone()), Nodes::Cluster(conn))
            }
        };
        let blocking = Arc::new(BlockingPool::new(
            blocking,
            connect_timeout,
            round_trips.clone(),
        ));
        if let Some(probe) = first_dedicated {
            blocking.put_idle(String::new(), probe);
        }
        tracing::debug!(url = %location, prefix = %settings.prefix, "redis lease store connected");
        Ok(RedisStore {
            shared: Counted {
                con: shared,
                count: round_trips.clone(),
            },
            blocking,
            prefix: settings.prefix.into(),
            round_trips,
            response_timeout,
            connect_timeout,
            tuning: Tuning::with_retention(retention),
            location: location.into(),
        })
    }

    fn keys(&self, name: &str) -> LeaseKeys {
        LeaseKeys::for_checked(&self.prefix, name)
    }

    fn lock_key(&self, name: &str) -> String {
        keys::lock_key(&self.prefix, name)
    }

    /// Overall bound of one request on the shared connection: the response timeout covers an
    /// established connection, this also covers a reconnect that hangs.
    fn limit(&self) -> Duration {
        self.response_timeout * 2 + self.connect_timeout * 2
    }

    /// A dedicated connection for a blocking command; a new one first loads every script (one round
    /// trip), so that a pipelined acquire + `BLPOP` on it is not answered `NOSCRIPT` after a server
    /// restart, which would leave the `BLPOP` blocking for nothing before the retry.
    async fn dedicated(&self, phase: Phase, key: &str) -> Result<Dedicated> {
        let mut con = self
            .blocking
            .get_for(key)
            .await
            .map_err(Error::redis(phase))?;
        if con.is_fresh() {
            within(phase, self.response_timeout, scripts::load_all(&mut con)).await?;
        }
        Ok(con)
    }

    /// acquire.lua and `WAIT numreplicas timeout` in one pipeline on a dedicated connection (WAIT
    /// counts the acknowledgements of its own connection's writes, and blocks it), then the replica
    /// policy. Runs in a task of its own, so that a caller cancelled mid-way cannot leave a lease it
    /// took behind: the task finishes and releases it.
    async fn acquire_replicated(
        &self,
        req: &Request<'_>,
        replicas: (u32, Duration, ReplicaPolicy),
    ) -> Result<Attempt> {
        let (this, name, token, opts, wait) = (
            self.clone(),
            req.name.to_owned(),
            req.token.to_owned(),
            req.opts.clone(),
            req.wait,
        );
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let req = Request {
                name: &name,
                token: &token,
                opts: &opts,
                wait,
            };
            let r = this.acquire_replicated_here(&req, replicas).await;
            if let Err(Ok(Attempt::Taken(_))) = tx.send(r) {
                // Nobody is waiting for it any more.
                let _ = this.abandon(&req).await;
            }
        });
        rx.await.unwrap_or_else(|_| {
            Err(Error::invalid(
                "acquire",
                "the acquiring task ended without an answer (runtime shutting down?)",
            ))
        })
    }

    async fn acquire_replicated_here(
        &self,
        req: &Request<'_>,
        (numreplicas, wait_timeout, policy): (u32, Duration, ReplicaPolicy),
    ) -> Result<Attempt> {
        let sent_at = Instant::now();
        let lock_key = self.lock_key(req.name);
        let mut con = self.dedicated(Phase::Acquire, &lock_key).await?;
        let inv = scripts::acquire(&lock_key, req.token, ask(req), Duration::ZERO, &self.tuning);
        let limit = wait_timeout + self.response_timeout * 2;
        let replies = within(
            Phase::Acquire,
            limit,
            scripts::pipeline(
                &mut con,
                std::slice::from_ref(&inv),
                Some(&wait_cmd(numreplicas, wait_timeout)),
            ),
        )
        .await
        .inspect_err(|_| self.blocking.clear())?;
        self.blocking.put(con);
        let mut replies = replies.into_iter();
        let reply = AcquireReply::from_value(replies.next().unwrap_or(Ok(redis::Value::Nil)))
            .map_err(Error::redis(Phase::Acquire))?;
        let acked: i64 = replies
            .next()
            .unwrap_or(Ok(redis::Value::Int(0)))
            .and_then(|v| redis::from_redis_value(v).map_err(Into::into))
            .map_err(Error::redis(Phase::Replicate))?;
        let grant = match reply {
            AcquireReply::Busy { pttl_ms, .. } => {
                return Ok(Attempt::Busy {
                    remaining: ms_reply(pttl_ms),
                })
            }
            AcquireReply::GivenUp => return Err(given_up()),
            AcquireReply::PermitsInUse { permits } => return Err(permits_in_use(req, permits)),
            AcquireReply::Taken { fence, ttl_ms, .. } => Grant {
                fence: Fence::new(fence),
                since: sent_at,
                ttl: granted_ttl(ttl_ms, req),
                wakes_next: false,
            },
        };
        self.replica_outcome(req, grant, acked, (numreplicas, policy))
            .await
    }

    /// Applies the replica policy to a lease taken with `acked` acknowledgements.
    async fn replica_outcome(
        &self,
        req: &Request<'_>,
        grant: Grant,
        acked: i64,
        (numreplicas, policy): (u32, ReplicaPolicy),
    ) -> Result<Attempt> {
        if acked >= i64::from(numreplicas) {
            return Ok(Attempt::Taken(grant));
        }
        match policy {
            ReplicaPolicy::FailClosed => {
                metrics::replica_shortfall("fail_closed");
                tracing::warn!(
                    lease = req.name,
                    acked,
                    wanted = numreplicas,
                    "lock write not replicated; releasing (fail-closed)"
                );
                // Best effort: if this release fails, the lock expires after its TTL.
                let _ = self.abandon(req).await;
                Err(Error::NotReplicated {
                    name: req.name.to_owned(),
                    acked,
                    wanted: i64::from(numreplicas),
                })
            }
            ReplicaPolicy::FailOpen => {
                metrics::replica_shortfall("fail_open");
                tracing::warn!(
                    lease = req.name,
                    acked,
                    wanted = numreplicas,
                    "lock write not replicated; keeping the lease (fail-open)"
                );
                Ok(Attempt::Taken(grant))
            }
        }
    }

    /// Sends one script per item in pipelines of at most [`CHUNK`]; per item the 0/1 flag.
    async fn flags(
        &self,
        phase: Phase,
        invs: Vec<redis::ScriptInvocation<'static>>,
    ) -> Result<Vec<Result<bool>>> {
        let mut out = Vec::with_capacity(invs.len());
        for chunk in invs.chunks(CHUNK) {
            let mut con = self.shared.clone();
            let replies = within(
                phase,
                self.limit(),
                scripts::pipeline(&mut con, chunk, None),
            )
            .await?;
            out.extend(
                replies
                    .into_iter()
                    .map(|v| scripts::flag(v).map_err(Error::redis(phase))),
            );
        }
        Ok(out)
    }

    /// force_release.lua for every holder (`None`) or the one holding `holder`.
    async fn forced_release(&self, name: &str, holder: Option<&str>) -> Result<ForcedRelease> {
        let op = super::new_token();
        let inv = scripts::force_release(&self.lock_key(name), &op, holder, &self.tuning);
        let mut con = self.shared.clone();
        let (evicted, fence): (i64, i64) = within(
            Phase::Release,
            self.limit(),
            scripts::invoke(&mut con, &inv),
        )
        .await?;
        let fence = u64::try_from(fence).map_err(|_| {
            Error::redis(Phase::Release)(scripts::bad_reply("force_release", "negative fence"))
        })?;
        Ok(ForcedRelease {
            evicted: evicted == 1,
            fence: Fence::new(fence),
        })
    }

    /// Reads each name's lock, fence, queue length and semaphore holders in one pipeline per 200
    /// names (with the server's time, to tell live permits from expired ones). Only reads.
    async fn inspect_keys(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        /// Commands per name in the pipeline below.
        const PER_NAME: usize = 7;
        let mut out = Vec::with_capacity(names.len());
        let bad = |e: redis::RedisError| Error::redis(Phase::Inspect)(e);
        for chunk in names.chunks(200) {
            let keys: Vec<LeaseKeys> = chunk.iter().map(|n| self.keys(n)).collect();
            let mut pipe = redis::pipe();
            pipe.cmd("TIME");
            for k in &keys {
                pipe.cmd("PTTL")
                    .arg(&k.lock)
                    .cmd("GET")
                    .arg(&k.lock)
                    .cmd("GET")
                    .arg(&k.fence)
                    .cmd("ZCARD")
                    .arg(&k.queue)
                    .cmd("GET")
                    .arg(&k.permits)
                    .cmd("ZRANGE")
                    .arg(&k.holders)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .cmd("HGETALL")
                    .arg(&k.held);
            }
            let mut con = self.shared.clone();
            let values: Vec<redis::Value> =
                within(Phase::Inspect, self.limit(), pipe.query_async(&mut con)).await?;
            if values.len() != 1 + PER_NAME * keys.len() {
                return Err(bad(scripts::bad_reply("inspect", "short pipeline reply")));
            }
            let mut it = values.into_iter();
            let (secs, micros): (i64, i64) =
                redis::from_redis_value(it.next().unwrap_or(redis::Value::Nil))
                    .map_err(|e| bad(e.into()))?;
            let now_ms = secs * 1000 + micros / 1000;
            for (name, keys) in chunk.iter().zip(keys) {
                let mut next = || it.next().unwrap_or(redis::Value::Nil);
                let pttl: i64 = redis::from_redis_value(next()).map_err(|e| bad(e.into()))?;
                let token: Option<String> =
                    redis::from_redis_value(next()).map_err(|e| bad(e.into()))?;
                let fence: Option<String> =
                    redis::from_redis_value(next()).map_err(|e| bad(e.into()))?;
                let waiting: u64 = redis::from_redis_value(next()).map_err(|e| bad(e.into()))?;
                let permits: Option<u32> =
                    redis::from_redis_value(next()).map_err(|e| bad(e.into()))?;
                let by_expiry: Vec<(String, f64)> =
                    redis::from_redis_value(next()).map_err(|e| bad(e.into()))?;
                let fences: std::collections::HashMap<String, u64> =
                    redis::from_redis_value(next()).map_err(|e| bad(e.into()))?;
                let mut info = LeaseInfo::free(name, keys.lock);
                info.fence = fence.and_then(|f| f.parse().ok());
                info.waiting = waiting;
                match (token, permits) {
                    (Some(token), _) => {
                        info.ttl_ms = u64::try_from(pttl).ok();
                        info.holders.push(HolderInfo {
                            token,
                            ttl_ms: info.ttl_ms,
                            fence: None,
                        });
                    }
                    (None, Some(n)) if n > 1 => {
                        info.permits = n;
                        info.holders = by_expiry
                            .into_iter()
                            .map(|(token, until)| (token, until as i64))
                            .filter(|(_, until)| *until > now_ms)
                            .map(|(token, until)| HolderInfo {
                                fence: fences.get(&token).copied().map(Fence::new),
                                ttl_ms: u64::try_from(until - now_ms).ok(),
                                token,
                            })
                            .collect();
                        info.ttl_ms = info.holders.first().and_then(|h| h.ttl_ms);
                    }
                    (None, _) => {}
                }
                info.held = !info.holders.is_empty();
                out.push(info);
            }
        }
        Ok(out)
    }
}

/// `WAIT numreplicas timeout`.
fn wait_cmd(numreplicas: u32, timeout: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(numreplicas).arg(
        u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
    );
    cmd
}

/// The TTL a taken lock has, as acquire.lua reported it (a lock set without expiry by someone else's
/// hand counts as the TTL asked for).
fn granted_ttl(ttl_ms: i64, req: &Request<'_>) -> Duration {
    ms_reply(ttl_ms).unwrap_or(req.opts.ttl)
}

/// What the acquire scripts are asked for.
fn ask(req: &Request<'_>) -> Ask {
    Ask {
        ttl: req.opts.ttl,
        first_ttl: req.opts.handoff_ttl,
        permits: req.opts.permits,
    }
}

fn permits_in_use(req: &Request<'_>, in_use: u32) -> Error {
    Error::PermitsInUse {
        name: req.name.to_owned(),
        asked: req.opts.permits,
        in_use,
    }
}

/// acquire.lua says the caller gave up on this token: it abandoned the request and then went on with
/// it, which the client never does.
fn given_up() -> Error {
    Error::redis(Phase::Acquire)(scripts::bad_reply(
        "acquire",
        "this acquire was already given up (abandoned); start a new one",
    ))
}

#[async_trait]
impl Store for RedisStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Redis
    }

    fn location(&self) -> &str {
        &self.location
    }

    fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    fn queues_waiters(&self) -> bool {
        true
    }

    fn key_of(&self, name: &str) -> String {
        self.lock_key(name)
    }

    /// One round trip (the script; with a replica wait, `WAIT` rides in the same pipeline). Sent on
    /// the shared connection, so an abandon sent after it on the same connection reaches Redis after
    /// it. Never queues: a caller that waits goes through [`Store::acquire_or_wait`].
    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt> {
        if let Some(replicas) = req.opts.replicas {
            return self.acquire_replicated(req, replicas).await;
        }
        let sent_at = Instant::now();
        let inv = scripts::acquire(
            &self.lock_key(req.name),
            req.token,
            ask(req),
            Duration::ZERO,
            &self.tuning,
        );
        let mut con = self.shared.clone();
        let reply: redis::Value = within(
            Phase::Acquire,
            self.limit(),
            scripts::invoke(&mut con, &inv),
        )
        .await?;
        match AcquireReply::from_value(Ok(reply)).map_err(Error::redis(Phase::Acquire))? {
            AcquireReply::Taken { fence, ttl_ms, .. } => Ok(Attempt::Taken(Grant {
                fence: Fence::new(fence),
                since: sent_at,
                ttl: granted_ttl(ttl_ms, req),
                wakes_next: false,
            })),
            AcquireReply::Busy { pttl_ms, .. } => Ok(Attempt::Busy {
                remaining: ms_reply(pttl_ms),
            }),
            AcquireReply::GivenUp => Err(given_up()),
            AcquireReply::PermitsInUse { permits } => Err(permits_in_use(req, permits)),
        }
    }

    /// One round trip on a dedicated connection: acquire.lua (take it, or join the queue / refresh
    /// our place) and a `BLPOP` of our own wake list for at most `block` (and at most the refresh
    /// period), pipelined. Taken by the script: the `BLPOP` pops the grant the script left and returns
    /// at once. Queued: it returns when a release hands us the lock (we hold it; nothing more to send)
    /// or when the block ends (busy: the next call refreshes our place). With a replica wait, `WAIT`
    /// follows on the same connection once the lease is ours.
    async fn acquire_or_wait(&self, req: &Request<'_>, block: Duration) -> Result<Attempt> {
        let block = block
            .min(self.tuning.wait_refresh)
            .max(Duration::from_millis(1));
        let inv = scripts::acquire(
            &self.lock_key(req.name),
            req.token,
            ask(req),
            block,
            &self.tuning,
        );
        let mut blpop = redis::cmd("BLPOP");
        blpop
            .arg(keys::wake_key(&self.prefix, req.name, req.token))
            // Never "0", which blocks forever.
            .arg(format!("{:.3}", block.as_secs_f64().max(0.001)));
        let mut con = self
            .dedicated(Phase::Acquire, &self.lock_key(req.name))
            .await?;
        let sent = Instant::now();
        let replies = within(
            Phase::Acquire,
            block + self.response_timeout * 2,
            scripts::pipeline(&mut con, std::slice::from_ref(&inv), Some(&blpop)),
        )
        .await
        .inspect_err(|_| self.blocking.clear())?;
        let received = Instant::now();
        let mut replies = replies.into_iter();
        let reply = AcquireReply::from_value(replies.next().unwrap_or(Ok(redis::Value::Nil)))
            .map_err(Error::redis(Phase::Acquire))?;
        let popped: Option<(String, String)> = replies
            .next()
            .unwrap_or(Ok(redis::Value::Nil))
            .and_then(|v| redis::from_redis_value(v).map_err(Into::into))
            .map_err(Error::redis(Phase::Wait))?;
        let grant = match reply {
            AcquireReply::Taken { fence, ttl_ms, .. } => Grant {
                fence: Fence::new(fence),
                since: sent,
                ttl: granted_ttl(ttl_ms, req),
                wakes_next: false,
            },
            AcquireReply::Busy {
                pttl_ms,
                server_us: queued_us,
            } => match popped {
                None => {
                    self.blocking.put(con);
                    // The holder's TTL was read before the block: what is left of it now.
                    let blocked = received.saturating_duration_since(sent);
                    return Ok(Attempt::Busy {
                        remaining: ms_reply(pttl_ms).map(|r| r.saturating_sub(blocked)),
                    });
                }
                Some((_, grant)) => {
                    let h = HandOver::parse(&grant).map_err(Error::redis(Phase::Wait))?;
                    tracing::trace!(lease = req.name, fence = h.fence, "handed over");
                    Grant {
                        fence: Fence::new(h.fence),
                        since: handed_since(sent, received, queued_us, h.at_us),
                        ttl: granted_ttl(h.ttl_ms, req),
                        wakes_next: false,
                    }
                }
            },
            AcquireReply::GivenUp => {
                self.blocking.put(con);
                return Err(given_up());
            }
            AcquireReply::PermitsInUse { permits } => {
                self.blocking.put(con);
                return Err(permits_in_use(req, permits));
            }
        };
        let Some((numreplicas, wait_timeout, policy)) = req.opts.replicas else {
            self.blocking.put(con);
            return Ok(Attempt::Taken(grant));
        };
        // The lock write was the releaser's (a hand-over) or ours; `WAIT` on this connection covers
        // both, since the `BLPOP` that took our grant is itself a write that came after it.
        let acked: i64 = within(
            Phase::Replicate,
            wait_timeout + self.response_timeout * 2,
            wait_cmd(numreplicas, wait_timeout).query_async(&mut con),
        )
        .await
        .inspect_err(|_| self.blocking.clear())?;
        self.blocking.put(con);
        self.replica_outcome(req, grant, acked, (numreplicas, policy))
            .await
    }

    /// The same request as [`Store::acquire_or_wait`]: for this store, waiting is joining the queue.
    async fn wait_turn(&self, req: &Request<'_>, block: Duration) -> Result<Turn> {
        Ok(match self.acquire_or_wait(req, block).await? {
            Attempt::Taken(grant) => Turn::Taken(grant),
            Attempt::Busy { .. } => Turn::AskAgain,
        })
    }

    /// abandon.lua on the shared connection: leave the queue, refuse this token from now on (an
    /// acquire still on its way on a dedicated connection then does nothing), release and hand on a
    /// lock taken or handed over meanwhile.
    async fn abandon(&self, req: &Request<'_>) -> Result<()> {
        let inv = scripts::abandon(&self.lock_key(req.name), req.token, &self.tuning);
        let mut con = self.shared.clone();
        let released: i64 = within(
            Phase::Release,
            self.limit(),
            scripts::invoke(&mut con, &inv),
        )
        .await?;
        tracing::debug!(lease = req.name, released, "abandoned");
        Ok(())
    }

    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let invs = held
            .iter()
            .map(|h| scripts::renew(&self.lock_key(h.name), h.token, h.opts.ttl, h.opts.permits))
            .collect();
        self.flags(Phase::Renew, invs).await
    }

    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let invs = held
            .iter()
            .map(|h| {
                scripts::release(
                    &self.lock_key(h.name),
                    h.token,
                    h.opts.permits,
                    &self.tuning,
                )
            })
            .collect();
        self.flags(Phase::Release, invs).await
    }

    async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        self.forced_release(name, None).await
    }

    async fn force_release_holder(&self, name: &str, token: &str) -> Result<ForcedRelease> {
        self.forced_release(name, Some(token)).await
    }

    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        self.inspect_keys(names).await
    }

    /// `SCAN`, never `KEYS`, on every master of a cluster. A name appears once it has been acquired
    /// (while its fence key lasts) or while someone holds it (its lock key, or a semaphore's holders).
    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        let tag_start = format!("{{{}:", self.prefix);
        let matcher = format!("{}{pattern}}}:*", glob_escape(&tag_start));
        let mut names = BTreeSet::new();
        // A cluster keeps each name on the master of its slot: scan every master.
        let masters = within(Phase::Inspect, self.limit(), self.shared.masters()).await?;
        for mut con in masters {
            let mut cursor: u64 = 0;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(&matcher)
                    .arg("COUNT")
                    .arg(1000);
                let (next, keys): (u64, Vec<String>) =
                    within(Phase::Inspect, self.limit(), cmd.query_async(&mut con)).await?;
                for key in keys {
                    let Some(rest) = key.strip_prefix(&tag_start) else {
                        continue;
                    };
                    let name = rest
                        .strip_suffix("}:lock")
                        .or_else(|| rest.strip_suffix("}:fence"))
                        .or_else(|| rest.strip_suffix("}:holders"));
                    if let Some(name) =
                        name.filter(|n| crate::lease::names::validate_name(n).is_ok())
                    {
                        names.insert(name.to_owned());
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.inspect_keys(&names).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_metacharacters_in_the_prefix_are_literal() {
        assert_eq!(glob_escape("{a*b?[c]}"), "{a\\*b\\?\\[c\\]}");
    }

    #[test]
    fn a_handed_lease_counts_from_no_later_than_the_hand_over() {
        let sent = Instant::now();
        let ms = Duration::from_millis;
        let received = sent + ms(300);
        // Handed over 200 ms (server time) after the acquire ran: 200 ms after the send at the latest.
        assert_eq!(
            handed_since(sent, received, 1_000_000, 1_200_000),
            sent + ms(200)
        );
        // A server clock that stepped back between the two, or garbage: never before the send.
        assert_eq!(handed_since(sent, received, 1_200_000, 1_000_000), sent);
        // Never after the grant was in hand.
        assert_eq!(handed_since(sent, received, 0, 9_000_000), received);
    }
}
