//! The Redis store: a lease is a key holding the holder's token with a TTL (`SET NX PX`, like
//! redis-py's `Lock` and every other `SET NX PX` lock, so they exclude each other), released and
//! renewed by compare-and-delete and compare-and-expire scripts.
//!
//! Promise: one server (or primary) judges expiry by its own clock; the fence is
//! `max(stored + 1, server time in µs)`, so it keeps increasing even when the server lost the keys
//! (restart without persistence, failover to a replica that missed the write) as long as the new
//! server's clock is not behind the old one's by more than the outage took. Waiters block on a wake
//! list (`BLPOP`) on a dedicated connection, never on the shared one.
//! Limit: a failover before the lock write reached the replica gives two holders; `WAIT` after
//! acquire ([`ReplicaPolicy`]) narrows that window and never closes it.
//!
//! Layout: `keys` (hash-tagged key names), `scripts` (one `.lua` file per script, each behind one
//! function that prepares its call), `conn` (the shared connection, dedicated connections for
//! blocking commands, round-trip counting).

mod conn;
pub mod keys;
mod scripts;

use std::collections::BTreeSet;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::ConnectionManagerConfig;
use redis::AsyncConnectionConfig;
use tokio::time::Instant;

use self::conn::{BlockingPool, Counted, Shared};
use self::keys::LeaseKeys;
use self::scripts::AcquireReply;
use super::{
    Attempt, ForcedRelease, Grant, Held, LeaseInfo, Request, Settings, Store, StoreKind, Turn,
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

impl RedisStore {
    /// Connects (AUTH/ACL and TLS from the URL: `redis://user:pass@host:port/db`, `rediss://...`).
    /// A malformed URL is [`Error::Invalid`]; an unreachable server, missing or wrong credentials are
    /// [`Error::Redis`] or [`Error::Timeout`] with [`Phase::Connect`] (the server is asked `PING`).
    pub(crate) async fn connect(url: &str, settings: Settings) -> Result<Self> {
        let location = crate::url::redact(url);
        let tls = url.starts_with("rediss://");
        let client = redis::Client::open(url).map_err(|e| {
            Error::invalid(
                "redis url",
                format!(
                    "`{location}` was refused ({}); use redis://[user:password@]host[:port][/db] or rediss://... for TLS",
                    e.detail().unwrap_or("malformed")
                ),
            )
        })?;
        if tls {
            // rustls needs one process-wide crypto provider; an application may have installed its
            // own already, which is fine.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let client = match settings.tls_root_ca_pem {
            None => client,
            Some(pem) => {
                if !tls {
                    return Err(Error::invalid(
                        "tls root certificate",
                        format!(
                            "it was given for `{location}`, which is not a TLS URL; use rediss://"
                        ),
                    ));
                }
                redis::Client::build_with_tls(
                    url,
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
        let (connect_timeout, response_timeout) =
            (settings.connect_timeout, settings.response_timeout);

        // Fail fast and clearly on an unreachable server or bad credentials; the connection then
        // serves as the first dedicated (blocking) connection.
        let probe_config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None);
        let mut probe = within(
            Phase::Connect,
            connect_timeout + response_timeout,
            client.get_multiplexed_async_connection_with_config(&probe_config),
        )
        .await?;
        round_trips.fetch_add(1, Ordering::Relaxed);
        // A server that requires AUTH accepts the connection and refuses commands: ask once, so that
        // missing or wrong credentials are a connect error, not a surprise on the first acquire.
        within(
            Phase::Connect,
            response_timeout,
            redis::cmd("PING").query_async::<()>(&mut probe),
        )
        .await?;
        round_trips.fetch_add(1, Ordering::Relaxed);

        let manager_config = ConnectionManagerConfig::new()
            .set_response_timeout(Some(response_timeout))
            .set_connection_timeout(Some(connect_timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(200));
        let manager = within(
            Phase::Connect,
            connect_timeout * 2 + response_timeout,
            redis::aio::ConnectionManager::new_with_config(client.clone(), manager_config),
        )
        .await?;
        round_trips.fetch_add(1, Ordering::Relaxed);

        let shared = Counted {
            con: manager,
            count: round_trips.clone(),
        };
        let blocking = Arc::new(BlockingPool::new(
            client,
            connect_timeout,
            round_trips.clone(),
        ));
        blocking.put(Counted {
            con: probe,
            count: round_trips.clone(),
        });
        tracing::debug!(url = %location, prefix = %settings.prefix, "redis lease store connected");
        Ok(RedisStore {
            shared,
            blocking,
            prefix: settings.prefix.into(),
            round_trips,
            response_timeout,
            connect_timeout,
            location: location.into(),
        })
    }

    fn keys(&self, name: &str) -> LeaseKeys {
        LeaseKeys::for_checked(&self.prefix, name)
    }

    /// Overall bound of one request on the shared connection: the response timeout covers an
    /// established connection, this also covers a reconnect that hangs.
    fn limit(&self) -> Duration {
        self.response_timeout * 2 + self.connect_timeout * 2
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
        let keys = self.keys(req.name);
        let sent_at = Instant::now();
        let mut con = self
            .blocking
            .get()
            .await
            .map_err(Error::redis(Phase::Acquire))?;
        let inv = scripts::acquire(&keys, req.token, req.opts.ttl, req.wait);
        let mut wait_cmd = redis::cmd("WAIT");
        wait_cmd
            .arg(numreplicas)
            .arg(wait_timeout.as_millis().max(1) as u64);
        let limit = wait_timeout + self.response_timeout * 2;
        let replies = within(
            Phase::Acquire,
            limit,
            scripts::pipeline(&mut con, std::slice::from_ref(&inv), Some(&wait_cmd)),
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
        let (fence, waiting) = match reply {
            AcquireReply::Busy { pttl_ms } => {
                return Ok(Attempt::Busy {
                    remaining: ms_reply(pttl_ms),
                })
            }
            AcquireReply::Taken { fence, waiting } => (fence, waiting),
        };
        let grant = Grant {
            fence: Fence::new(fence),
            since: sent_at,
            ttl: req.opts.ttl,
            wakes_next: waiting,
        };
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

    async fn inspect_keys(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(500) {
            let keys: Vec<LeaseKeys> = chunk.iter().map(|n| self.keys(n)).collect();
            let mut pipe = redis::pipe();
            for k in &keys {
                pipe.cmd("PTTL").arg(&k.lock).cmd("GET").arg(&k.fence);
            }
            let mut con = self.shared.clone();
            let values: Vec<redis::Value> =
                within(Phase::Inspect, self.limit(), pipe.query_async(&mut con)).await?;
            let mut it = values.into_iter();
            for (name, keys) in chunk.iter().zip(keys) {
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
                    name: (*name).to_owned(),
                    key: keys.lock,
                    held: pttl != -2,
                    ttl_ms: u64::try_from(pttl).ok(),
                    fence: fence.and_then(|f| f.parse().ok()),
                });
            }
        }
        Ok(out)
    }
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

    fn key_of(&self, name: &str) -> String {
        self.keys(name).lock
    }

    /// One round trip (the script; with a replica wait, `WAIT` rides in the same pipeline). Sent on
    /// the shared connection, so an abandon sent after it on the same connection reaches Redis after
    /// it.
    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt> {
        if let Some(replicas) = req.opts.replicas {
            return self.acquire_replicated(req, replicas).await;
        }
        let keys = self.keys(req.name);
        let sent_at = Instant::now();
        let inv = scripts::acquire(&keys, req.token, req.opts.ttl, req.wait);
        let mut con = self.shared.clone();
        let reply: redis::Value = within(
            Phase::Acquire,
            self.limit(),
            scripts::invoke(&mut con, &inv),
        )
        .await?;
        Ok(
            match AcquireReply::from_value(Ok(reply)).map_err(Error::redis(Phase::Acquire))? {
                AcquireReply::Taken { fence, waiting } => Attempt::Taken(Grant {
                    fence: Fence::new(fence),
                    since: sent_at,
                    ttl: req.opts.ttl,
                    wakes_next: waiting,
                }),
                AcquireReply::Busy { pttl_ms } => Attempt::Busy {
                    remaining: ms_reply(pttl_ms),
                },
            },
        )
    }

    /// `BLPOP` of the name's wake list on a dedicated connection, for at most `block`.
    async fn wait_turn(&self, req: &Request<'_>, block: Duration) -> Result<Turn> {
        let wake = self.keys(req.name).wake;
        let mut con = self
            .blocking
            .get()
            .await
            .map_err(Error::redis(Phase::Wait))?;
        let secs = format!("{:.3}", block.as_secs_f64().max(0.001)); // never "0": that blocks forever
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(&wake).arg(secs);
        let reply = within(
            Phase::Wait,
            block + self.response_timeout,
            cmd.query_async::<Option<(String, String)>>(&mut con),
        )
        .await
        .inspect_err(|_| self.blocking.clear())?;
        self.blocking.put(con);
        tracing::trace!(woken = reply.is_some(), "wake list");
        Ok(Turn::AskAgain)
    }

    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let invs = held
            .iter()
            .map(|h| scripts::renew(&self.keys(h.name).lock, h.token, h.opts.ttl))
            .collect();
        self.flags(Phase::Renew, invs).await
    }

    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let invs = held
            .iter()
            .map(|h| scripts::release(&self.keys(h.name), h.token))
            .collect();
        self.flags(Phase::Release, invs).await
    }

    async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        let inv = scripts::force_release(&self.keys(name));
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

    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        self.inspect_keys(names).await
    }

    /// `SCAN`, never `KEYS`. A name appears once it has been acquired (its fence key stays) or while
    /// someone holds its lock key.
    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        let tag_start = format!("{{{}:", self.prefix);
        let matcher = format!("{}{pattern}}}:*", glob_escape(&tag_start));
        let mut names = BTreeSet::new();
        let mut cursor: u64 = 0;
        loop {
            let mut con = self.shared.clone();
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
                    .or_else(|| rest.strip_suffix("}:fence"));
                if let Some(name) = name.filter(|n| crate::lease::names::validate_name(n).is_ok()) {
                    names.insert(name.to_owned());
                }
            }
            cursor = next;
            if cursor == 0 {
                break;
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
}
