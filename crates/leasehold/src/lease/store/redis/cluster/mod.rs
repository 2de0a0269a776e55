//! A Redis Cluster: every request goes to the master that serves its key's hash slot.
//!
//! Promise: each command is sent to the master of its first key's slot (all keys of one lease share
//! the hash tag `{prefix:name}`, so a lease's scripts touch one slot); `MOVED` is followed and the
//! slot map learnt again, `ASK` (a slot being migrated) is followed with `ASKING`, `TRYAGAIN` and
//! `CLUSTERDOWN` are waited out, and a broken connection (a master killed, its replica being
//! promoted) makes it learn the slots again and send once more, until the time bound of the request.
//! A pipeline is split into one pipeline per master, sent at once, and put back in order; a command
//! the master refused with a redirect is sent again on its own. `SCRIPT LOAD` goes to every master.
//! Every resend may run a script twice; each lease script has the effect of running once when run
//! twice.
//!
//! Limit: Redis Cluster replication is asynchronous: a write the master acknowledged but had not sent
//! to its replica is gone once that replica is promoted, and a lease taken by it with it (its next
//! renewal finds no lock and its holder's lost signal fires). `WAIT` narrows the window and does not
//! close it. While a slot's master is down and not yet replaced (`cluster-node-timeout` plus the
//! election), requests for its slots fail. Reads go to masters only.
//!
//! Layout: this file keeps the connection (seeds, one connection per node, learning the slots);
//! `routing` the slot map and a pipeline's grouping by master; `request` the sending (redirects,
//! resends, split pipelines).

mod request;
mod routing;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};
use tokio::time::Instant;

use self::routing::{parse_slots, SlotMap};
use super::node::{self, io_error, is_connection_failure, key_slot};
use super::topology::ClusterUrl;
use crate::error::{Error, Phase, Result};

/// A handle on one Redis Cluster. Cheap to clone; clones share the slot map and the connections.
#[derive(Clone)]
pub(crate) struct ClusterConn {
    inner: Arc<Inner>,
}

struct Inner {
    /// The seed nodes and the credentials every node takes.
    url: ClusterUrl,
    /// Which master serves which slots, as last learnt.
    map: RwLock<SlotMap>,
    /// One multiplexed connection per node in use, opened on first use.
    nodes: Mutex<HashMap<String, MultiplexedConnection>>,
    /// When the slot map was last learnt; held while learning it, so concurrent requests that saw
    /// the same redirect learn it once.
    learnt_at: tokio::sync::Mutex<Option<Instant>>,
    /// Requests sent beyond the one the caller counts (split pipelines, resends, slot lookups).
    count: Arc<AtomicU64>,
    /// Bound on opening a connection.
    connect_timeout: Duration,
    /// Bound on one reply.
    response_timeout: Duration,
}

impl std::fmt::Debug for ClusterConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterConn")
            .field("seeds", &self.inner.url.seeds)
            .field(
                "masters",
                &self
                    .inner
                    .map
                    .read()
                    .map(|m| m.masters())
                    .unwrap_or_default(),
            )
            .finish()
    }
}

impl ClusterConn {
    /// Learns the slot map from the first seed node that answers. A seed that is not a cluster
    /// node (cluster support disabled, or a sentinel) is bad input; no seed answering is a connect
    /// failure.
    pub(crate) async fn connect(
        url: ClusterUrl,
        connect_timeout: Duration,
        response_timeout: Duration,
        count: Arc<AtomicU64>,
    ) -> Result<Self> {
        let conn = ClusterConn {
            inner: Arc::new(Inner {
                url,
                map: RwLock::new(SlotMap::default()),
                nodes: Mutex::new(HashMap::new()),
                learnt_at: tokio::sync::Mutex::new(None),
                count,
                connect_timeout,
                response_timeout,
            }),
        };
        conn.learn_from_seeds().await?;
        Ok(conn)
    }

    /// The first slot map a seed gives, in the seeds' order. A seed that is not a cluster node
    /// (cluster support disabled, or a sentinel) is bad input; no seed answering is a connect
    /// failure, told as refused credentials when a seed refused them.
    async fn learn_from_seeds(&self) -> Result<()> {
        let mut failures = Vec::new();
        let mut refused = None;
        for seed in self.inner.url.seeds.clone() {
            match self.slots_from(&seed).await {
                Ok(map) if map.ranges.is_empty() => {
                    failures.push(format!("{seed}: serves no slots (a cluster being formed?)"))
                }
                Ok(map) => {
                    if map.covered() < 16384 {
                        tracing::warn!(
                            seed,
                            covered = map.covered(),
                            "the cluster serves only part of the slots; leases in the others fail"
                        );
                    }
                    *self.inner.map.write().expect("slot map lock") = map;
                    *self.inner.learnt_at.lock().await = Some(Instant::now());
                    tracing::debug!(seed, "redis cluster slots learnt");
                    return Ok(());
                }
                Err(e) if not_a_cluster(&e) => {
                    return Err(Error::invalid(
                        "store url",
                        format!(
                            "{seed} is not a Redis Cluster node (it says: {}); use redis://{seed} for a single server, or list cluster nodes in the redis-cluster:// URL",
                            e.detail().unwrap_or("no cluster support")
                        ),
                    ))
                }
                Err(e) => {
                    failures.push(format!("{seed}: {e}"));
                    if super::errors::is_credentials_refused(&e) {
                        refused.get_or_insert((seed, e));
                    }
                }
            }
        }
        // No seed answered; one refused our credentials: that, not an outage, is what to fix.
        if let Some((seed, e)) = refused {
            return Err(super::errors::refused_credentials(
                Phase::Connect,
                &format!("cluster node {seed}"),
                &e,
                "give the user and password every cluster node expects in the URL \
                 (redis-cluster://user:password@host:port,host:port, or :password@ for the \
                 default user)",
            ));
        }
        Err(super::errors::from_redis(
            Phase::Connect,
            io_error("no cluster seed node answered", failures.join("; ")),
        ))
    }

    /// The masters serving slots now, `host:port`.
    pub(crate) fn masters(&self) -> Vec<String> {
        self.inner.map.read().expect("slot map lock").masters()
    }

    /// The master serving `key`'s slot (learning the slots again if none is known for it).
    pub(crate) async fn master_for(&self, key: &[u8]) -> RedisResult<String> {
        let slot = key_slot(key);
        if let Some(addr) = self.lookup(slot) {
            return Ok(addr);
        }
        self.learn().await?;
        self.lookup(slot).ok_or_else(|| {
            io_error(
                "no master serves the slot",
                format!("slot {slot} has no master in the cluster's slot map"),
            )
        })
    }

    /// A client for the node at `addr`.
    pub(crate) fn client(&self, addr: &str) -> RedisResult<redis::Client> {
        self.inner.url.auth.client(addr)
    }

    /// The shared connection to `addr`, opened if needed.
    pub(crate) async fn node(&self, addr: &str) -> RedisResult<MultiplexedConnection> {
        if let Some(c) = self.inner.nodes.lock().expect("nodes lock").get(addr) {
            return Ok(c.clone());
        }
        let con = node::open(
            &self.inner.url.auth,
            addr,
            self.inner.connect_timeout,
            Some(self.inner.response_timeout),
        )
        .await?;
        self.inner.count.fetch_add(1, Ordering::Relaxed);
        Ok(self
            .inner
            .nodes
            .lock()
            .expect("nodes lock")
            .entry(addr.to_owned())
            .or_insert(con)
            .clone())
    }

    /// A request to `addr` failed or was redirected: forget its connection if it broke, and learn
    /// the slots again, in the background.
    pub(crate) fn note_failure(&self, addr: &str, broken: bool) {
        if broken {
            self.forget_node(addr);
        }
        let this = self.clone();
        tokio::spawn(async move {
            let _ = this.learn().await;
        });
    }

    /// Drops the connection to `addr` (it broke): the next request to it opens another.
    fn forget_node(&self, addr: &str) {
        self.inner.nodes.lock().expect("nodes lock").remove(addr);
    }

    fn lookup(&self, slot: u16) -> Option<String> {
        self.inner
            .map
            .read()
            .expect("slot map lock")
            .master_of(slot)
            .map(str::to_owned)
    }

    /// Learns the slot map again from a known master or, failing that, a seed. Requests that
    /// noticed a change at the same time share one lookup.
    async fn learn(&self) -> RedisResult<()> {
        let noticed = Instant::now();
        let mut learnt_at = self.inner.learnt_at.lock().await;
        if learnt_at.is_some_and(|t| t >= noticed) {
            return Ok(());
        }
        let mut candidates = self.masters();
        for seed in &self.inner.url.seeds {
            if !candidates.contains(seed) {
                candidates.push(seed.clone());
            }
        }
        let mut last = io_error("no cluster node answered", "no node to ask".to_owned());
        for addr in candidates {
            match tokio::time::timeout(
                self.inner.connect_timeout + self.inner.response_timeout,
                self.slots_from(&addr),
            )
            .await
            {
                Ok(Ok(map)) if !map.ranges.is_empty() => {
                    let mut current = self.inner.map.write().expect("slot map lock");
                    if *current != map {
                        tracing::debug!(from = addr, "redis cluster slot map changed");
                        *current = map;
                    }
                    *learnt_at = Some(Instant::now());
                    return Ok(());
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    if is_connection_failure(&e) {
                        self.forget_node(&addr);
                    }
                    last = e;
                }
                Err(_) => {
                    last = io_error(
                        "no cluster node answered in time",
                        format!("{addr} did not answer CLUSTER SLOTS"),
                    )
                }
            }
        }
        Err(last)
    }

    /// `CLUSTER SLOTS` from `addr`, masters only.
    async fn slots_from(&self, addr: &str) -> RedisResult<SlotMap> {
        let mut con = self.node(addr).await?;
        self.inner.count.fetch_add(1, Ordering::Relaxed);
        let reply: Value = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut con)
            .await?;
        let asked_host = addr
            .rsplit_once(':')
            .map(|(h, _)| h.trim_start_matches('[').trim_end_matches(']'))
            .unwrap_or(addr);
        parse_slots(reply, asked_host)
    }
}

impl ConnectionLike for ClusterConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(self.send(cmd))
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(self.send_pipeline(pipeline, offset, count))
    }

    fn get_db(&self) -> i64 {
        0
    }
}

/// The error a standalone server (or a sentinel) gives to `CLUSTER SLOTS`.
fn not_a_cluster(e: &RedisError) -> bool {
    let detail = e.detail().unwrap_or("").to_ascii_lowercase();
    detail.contains("cluster support disabled") || detail.contains("unknown command")
}

#[cfg(test)]
mod tests;
