//! The primary of a Sentinel-managed Redis, followed across failovers.
//!
//! Promise: requests go to the node the sentinels name as primary, and only once that node itself
//! answers `ROLE` with `master`. The primary is looked up again whenever a sentinel announces
//! `+switch-master` for it, a request is refused with `READONLY` (the node was demoted) or the
//! connection to it breaks. Looking up asks every sentinel at once and takes, among the first
//! majority to answer, the address with the highest configuration epoch, so one sentinel that missed
//! the failover does not send us back. It never reconnects blindly to the old address, so a demoted
//! primary that comes back gets no writes from here. A request that failed that way is sent once
//! more, to the primary found (every lease script has the effect of running once when run twice).
//!
//! Limit: Sentinel replication is asynchronous. A write the old primary acknowledged but had not
//! sent to the replica is gone once the replica is promoted: a lease it took is lost (its next
//! renewal finds no lock and the holder's lost signal fires), and someone else may take the name
//! before the holder hears of it; the fence, minted from the new primary's clock, is higher than the
//! lost one. Between the primary's death and the promotion (`down-after-milliseconds` plus the
//! election) requests fail. While the old primary is cut off from the sentinels but still reachable
//! from here it keeps accepting writes until they demote it (bounded by `min-replicas-to-write` on
//! the server, if set), and the subscription to `+switch-master` is only as live as the sentinel it
//! listens to (pinged every second, replaced when silent).
//!
//! Layout: this file finds the primary and sends to it; `watch` follows `+switch-master`.

mod watch;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio_util::sync::{CancellationToken, DropGuard};

use super::node::{self, io_error, is_blocking, is_connection_failure, is_readonly, server_error};
use super::topology::SentinelUrl;
use crate::error::{Error, Phase, Result};

/// A handle on the current primary of one Sentinel-monitored master. Cheap to clone; clones share
/// the connection, the lookup and the subscription.
#[derive(Clone)]
pub(crate) struct SentinelConn {
    inner: Arc<Inner>,
}

struct Inner {
    /// The sentinels, the master name and both sides' credentials.
    url: SentinelUrl,
    /// The primary in use; `None` once it failed us, until the next lookup.
    current: Mutex<Option<Primary>>,
    /// One lookup at a time: concurrent requests that find no primary wait for the same lookup.
    /// Holds the last failed lookup (when it ended, and why), which the requests that waited for it
    /// share instead of each looking up again in turn.
    resolving: tokio::sync::Mutex<Option<(tokio::time::Instant, RedisError)>>,
    /// Numbers each primary connection, so that a failure seen on an old one does not discard a
    /// newer one.
    next_generation: AtomicU64,
    /// Requests sent (lookups and resent requests included), shared with the store's counter.
    count: Arc<AtomicU64>,
    /// Bound on opening a connection.
    connect_timeout: Duration,
    /// Bound on one reply.
    response_timeout: Duration,
    /// Stops the subscription task when the last handle goes.
    _stop: DropGuard,
}

/// The primary found by one lookup.
#[derive(Clone)]
struct Primary {
    /// `host:port` as the sentinels report it (shared: cloned with every request).
    addr: Arc<str>,
    /// A multiplexed connection to it, with the response timeout.
    con: MultiplexedConnection,
    /// Which lookup found it.
    generation: u64,
}

/// What one sentinel said about the master.
enum Answer {
    /// It monitors it: where the primary is, and the epoch of that configuration.
    Found { addr: String, epoch: u64 },
    /// It answered, and monitors no master by that name.
    Unknown,
    /// It answered, but as a plain Redis server, not as a sentinel.
    NotSentinel,
    /// It could not be asked.
    Failed(RedisError),
}

/// The primary at `addr` could not be connected to or asked its role: refused credentials are told
/// apart from a node that cannot be reached.
fn primary_refused(addr: &str, e: RedisError) -> LookupError {
    if super::errors::is_credentials_refused(&e) {
        LookupError::Refused {
            at: addr.to_owned(),
            sentinel: false,
            source: e,
        }
    } else {
        LookupError::Unavailable(io_error(
            "the primary the sentinels name cannot be reached",
            format!("{addr}: {e}"),
        ))
    }
}

/// Why no primary could be found.
enum LookupError {
    /// Every sentinel that answered knows no master by that name.
    UnknownMaster,
    /// What answered was not a sentinel.
    NotSentinels(String),
    /// Sentinels or the primary could not be reached, or the node named is not primary (yet).
    Unavailable(RedisError),
    /// A sentinel (when no sentinel named a primary) or the primary refused our credentials.
    Refused {
        /// `host:port` of the node that refused.
        at: String,
        /// Whether it was a sentinel (its credentials are the URL's `sentinel_user` and
        /// `sentinel_password`) or the primary (the URL's user-info).
        sentinel: bool,
        /// Its refusal.
        source: RedisError,
    },
}

impl std::fmt::Debug for SentinelConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let current = self
            .inner
            .current
            .lock()
            .ok()
            .and_then(|c| c.as_ref().map(|p| p.addr.to_string()));
        f.debug_struct("SentinelConn")
            .field("master", &self.inner.url.master)
            .field("sentinels", &self.inner.url.sentinels)
            .field("primary", &current)
            .finish()
    }
}

impl SentinelConn {
    /// Finds the primary (a clear error when the master name is unknown, what answered is not a
    /// sentinel, or nothing answers) and starts following `+switch-master`.
    pub(crate) async fn connect(
        url: SentinelUrl,
        connect_timeout: Duration,
        response_timeout: Duration,
        count: Arc<AtomicU64>,
    ) -> Result<Self> {
        let stop = CancellationToken::new();
        let conn = SentinelConn {
            inner: Arc::new(Inner {
                url,
                current: Mutex::new(None),
                resolving: tokio::sync::Mutex::new(None),
                next_generation: AtomicU64::new(1),
                count,
                connect_timeout,
                response_timeout,
                _stop: stop.clone().drop_guard(),
            }),
        };
        let primary = conn.lookup().await.map_err(|e| conn.connect_error(e))?;
        tracing::debug!(master = %conn.inner.url.master, primary = %primary.addr, "sentinel primary found");
        *conn.inner.current.lock().expect("primary lock") = Some(primary);
        tokio::spawn(watch::watch(Arc::downgrade(&conn.inner), stop));
        Ok(conn)
    }

    /// The primary's address and a client for it (for dedicated connections), looking it up if
    /// none is known.
    pub(crate) async fn primary_addr(&self) -> RedisResult<String> {
        Ok(self.primary().await?.addr.to_string())
    }

    /// A client for the data node at `addr`.
    pub(crate) fn data_client(&self, addr: &str) -> RedisResult<redis::Client> {
        self.inner.url.data.client(addr)
    }

    /// A request on a connection to `addr` failed in a way that says the primary moved (or may
    /// have): look it up again before the next request.
    pub(crate) fn forget_addr(&self, addr: &str, why: &str) {
        let mut current = self.inner.current.lock().expect("primary lock");
        if current.as_ref().is_some_and(|p| &*p.addr == addr) {
            tracing::debug!(primary = addr, why, "looking the sentinel primary up again");
            *current = None;
        }
    }

    fn forget(&self, generation: u64, why: &str) {
        let mut current = self.inner.current.lock().expect("primary lock");
        if current.as_ref().is_some_and(|p| p.generation == generation) {
            tracing::debug!(why, "looking the sentinel primary up again");
            *current = None;
        }
    }

    fn current(&self) -> Option<Primary> {
        self.inner.current.lock().expect("primary lock").clone()
    }

    async fn primary(&self) -> RedisResult<Primary> {
        if let Some(p) = self.current() {
            return Ok(p);
        }
        let asked = tokio::time::Instant::now();
        let mut last_failure = self.inner.resolving.lock().await;
        if let Some(p) = self.current() {
            return Ok(p);
        }
        if let Some((at, e)) = &*last_failure {
            if *at >= asked {
                return Err(e.clone());
            }
        }
        let p = self.lookup().await.map_err(|e| match e {
            LookupError::Unavailable(e) | LookupError::Refused { source: e, .. } => e,
            LookupError::UnknownMaster => io_error(
                "sentinels no longer know the master",
                format!(
                    "no sentinel monitors a master named `{}` any more",
                    self.inner.url.master
                ),
            ),
            LookupError::NotSentinels(which) => io_error(
                "not a sentinel",
                format!("{which} answered as a Redis server, not as a sentinel"),
            ),
        });
        let p = match p {
            Ok(p) => p,
            Err(e) => {
                *last_failure = Some((tokio::time::Instant::now(), e.clone()));
                return Err(e);
            }
        };
        tracing::info!(master = %self.inner.url.master, primary = %p.addr, "following the sentinels: primary is now {}", p.addr);
        *self.inner.current.lock().expect("primary lock") = Some(p.clone());
        Ok(p)
    }

    /// Asks every sentinel, picks the primary, connects and checks its role.
    async fn lookup(&self) -> std::result::Result<Primary, LookupError> {
        let addr = self.elected().await?;
        self.open_primary(addr).await
    }

    /// The primary's address, as the sentinels name it: among the first majority to answer, the
    /// one with the highest configuration epoch.
    async fn elected(&self) -> std::result::Result<String, LookupError> {
        let inner = &self.inner;
        let sentinels = &inner.url.sentinels;
        let majority = sentinels.len() / 2 + 1;
        let mut asking: FuturesUnordered<_> = sentinels
            .iter()
            .map(|s| async move { (s, self.ask(s).await) })
            .collect();
        let mut found: Vec<(String, u64)> = Vec::new();
        let (mut unknown, mut not_sentinel, mut failures) = (0, Vec::new(), Vec::new());
        let mut refused = None;
        while let Some((sentinel, answer)) = asking.next().await {
            match answer {
                Answer::Found { addr, epoch } => found.push((addr, epoch)),
                Answer::Unknown => unknown += 1,
                Answer::NotSentinel => not_sentinel.push(sentinel.clone()),
                Answer::Failed(e) => {
                    failures.push(format!("{sentinel}: {e}"));
                    if super::errors::is_credentials_refused(&e) {
                        refused.get_or_insert((sentinel.clone(), e));
                    }
                }
            }
            if found.len() >= majority {
                break;
            }
        }
        drop(asking);
        let Some((addr, _)) = found.into_iter().max_by_key(|(_, epoch)| *epoch) else {
            if unknown > 0 && not_sentinel.is_empty() {
                return Err(LookupError::UnknownMaster);
            }
            if !not_sentinel.is_empty() && unknown == 0 && failures.is_empty() {
                return Err(LookupError::NotSentinels(not_sentinel.join(", ")));
            }
            if let Some((at, source)) = refused {
                return Err(LookupError::Refused {
                    at,
                    sentinel: true,
                    source,
                });
            }
            let mut why = failures;
            why.extend(not_sentinel.iter().map(|s| format!("{s}: not a sentinel")));
            return Err(LookupError::Unavailable(io_error(
                "no sentinel answered",
                format!(
                    "asked {} sentinel(s) for master `{}`: {}",
                    sentinels.len(),
                    inner.url.master,
                    why.join("; ")
                ),
            )));
        };
        Ok(addr)
    }

    /// Connects to the primary at `addr` and checks that it says it is one (`ROLE`).
    async fn open_primary(&self, addr: String) -> std::result::Result<Primary, LookupError> {
        let inner = &self.inner;
        let mut con = node::open(
            &inner.url.data,
            &addr,
            inner.connect_timeout,
            Some(inner.response_timeout),
        )
        .await
        .map_err(|e| primary_refused(&addr, e))?;
        inner.count.fetch_add(1, Ordering::Relaxed);
        let role: Value = redis::cmd("ROLE")
            .query_async(&mut con)
            .await
            .map_err(|e| primary_refused(&addr, e))?;
        inner.count.fetch_add(1, Ordering::Relaxed);
        let role = match role {
            Value::Array(items) => items
                .into_iter()
                .next()
                .and_then(|v| redis::from_redis_value::<String>(v).ok()),
            _ => None,
        };
        if role.as_deref() != Some("master") {
            return Err(LookupError::Unavailable(io_error(
                "the node the sentinels name is not primary (a failover is under way?)",
                format!(
                    "{addr} says its role is {}",
                    role.as_deref().unwrap_or("unknown")
                ),
            )));
        }
        Ok(Primary {
            addr: addr.into(),
            con,
            generation: inner.next_generation.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// `SENTINEL MASTER <name>` on one sentinel, bounded in time.
    async fn ask(&self, sentinel: &str) -> Answer {
        let inner = &self.inner;
        let asked = async {
            let mut con = node::open(
                &inner.url.sentinel,
                sentinel,
                inner.connect_timeout,
                Some(inner.response_timeout),
            )
            .await?;
            inner.count.fetch_add(1, Ordering::Relaxed);
            let reply = redis::cmd("SENTINEL")
                .arg("MASTER")
                .arg(&inner.url.master)
                .query_async::<HashMap<String, String>>(&mut con)
                .await;
            inner.count.fetch_add(1, Ordering::Relaxed);
            reply
        };
        let bound = inner.connect_timeout + inner.response_timeout * 2;
        match tokio::time::timeout(bound, asked).await {
            Err(_) => Answer::Failed(io_error(
                "the sentinel did not answer in time",
                format!("no answer within {} ms", bound.as_millis()),
            )),
            Ok(Ok(master)) => {
                let ip = master.get("ip").cloned().unwrap_or_default();
                let port = master.get("port").and_then(|p| p.parse::<u16>().ok());
                let epoch = master
                    .get("config-epoch")
                    .and_then(|e| e.parse().ok())
                    .unwrap_or(0);
                match port {
                    Some(port) if !ip.is_empty() => Answer::Found {
                        addr: node::addr(&ip, port),
                        epoch,
                    },
                    _ => Answer::Failed(io_error(
                        "the sentinel gave no address",
                        "SENTINEL MASTER lacked ip or port".to_owned(),
                    )),
                }
            }
            Ok(Err(e)) => {
                let detail = e.detail().unwrap_or("").to_ascii_lowercase();
                if detail.contains("no such master") {
                    Answer::Unknown
                } else if detail.contains("unknown command")
                    || detail.contains("unknown subcommand")
                {
                    Answer::NotSentinel
                } else {
                    Answer::Failed(e)
                }
            }
        }
    }

    fn connect_error(&self, e: LookupError) -> Error {
        let url = &self.inner.url;
        match e {
            LookupError::UnknownMaster => Error::invalid(
                "sentinel master name",
                format!(
                    "no sentinel at {} monitors a master named `{}`; check the #name at the end of the URL (`SENTINEL MASTERS` on a sentinel lists the names)",
                    url.sentinels.join(","),
                    url.master
                ),
            ),
            LookupError::NotSentinels(which) => Error::invalid(
                "store url",
                format!(
                    "{which} answered as a Redis server, not as a sentinel; list the sentinels (port {} by default) in a redis-sentinel:// URL, or use redis://host:port for one server",
                    super::topology::SENTINEL_PORT
                ),
            ),
            LookupError::Unavailable(source) => super::errors::from_redis(Phase::Connect, source),
            LookupError::Refused {
                at,
                sentinel: true,
                source,
            } => super::errors::refused_credentials(
                Phase::Connect,
                &format!("sentinel {at} (master `{}`)", url.master),
                &source,
                "give the sentinels' own credentials in the URL's query \
                 (?sentinel_password=...&sentinel_user=... for an ACL user); the URL's user-info is \
                 for the data nodes",
            ),
            LookupError::Refused { at, source, .. } => super::errors::refused_credentials(
                Phase::Connect,
                &format!("primary {at} (master `{}`, named by the sentinels)", url.master),
                &source,
                "give the data nodes' user and password as the URL's user-info \
                 (redis-sentinel://user:password@host,host#master, or :password@ for the default \
                 user); the sentinels' own go in ?sentinel_password=...",
            ),
        }
    }

    /// Sends `op` to the primary; once more to the primary looked up again if it failed because the
    /// primary moved (`READONLY`, a broken connection).
    async fn send<'a, T, F>(&self, resend: bool, op: F) -> RedisResult<T>
    where
        F: Fn(MultiplexedConnection) -> RedisFuture<'a, T>,
        T: Refusal,
    {
        let mut attempt = 0;
        loop {
            let p = self.primary().await?;
            if attempt > 0 {
                self.inner.count.fetch_add(1, Ordering::Relaxed);
            }
            attempt += 1;
            let last = attempt == 2 || !resend;
            match op(p.con.clone()).await {
                Ok(v) if v.is_readonly() => {
                    self.forget(p.generation, "READONLY");
                    if last {
                        return Ok(v);
                    }
                }
                Ok(v) => return Ok(v),
                Err(e) if is_readonly(&e) || is_connection_failure(&e) => {
                    self.forget(p.generation, "the connection failed");
                    if last {
                        return Err(e);
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A reply that says the node refused a write because it is a replica now.
trait Refusal {
    fn is_readonly(&self) -> bool;
}

impl Refusal for Value {
    fn is_readonly(&self) -> bool {
        server_error(self).is_some_and(|e| is_readonly(&e))
    }
}

impl Refusal for Vec<Value> {
    fn is_readonly(&self) -> bool {
        self.iter().any(Refusal::is_readonly)
    }
}

impl ConnectionLike for SentinelConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        let resend = !is_blocking(cmd);
        Box::pin(async move {
            self.send(resend, move |mut con| {
                Box::pin(async move { con.send_packed_command(cmd).await })
            })
            .await
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        let resend = !pipeline.cmd_iter().any(is_blocking);
        Box::pin(async move {
            self.send(resend, move |mut con| {
                Box::pin(async move { con.send_packed_commands(pipeline, offset, count).await })
            })
            .await
        })
    }

    fn get_db(&self) -> i64 {
        self.inner.url.data.db
    }
}
