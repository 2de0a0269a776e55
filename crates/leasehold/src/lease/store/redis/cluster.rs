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

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, ServerErrorKind, Value};
use tokio::time::Instant;

use super::node::{self, first_key, io_error, is_blocking, is_connection_failure, key_slot};
use super::topology::ClusterUrl;
use crate::error::{Error, Phase, Result};

/// First pause before sending again after a failure; doubles each time up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// Longest pause between two sends of one request.
const MAX_PAUSE: Duration = Duration::from_millis(400);
/// Most sends of one request (the time bound usually ends it first).
const MAX_SENDS: u32 = 16;

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

/// Slot ranges and the address of the master serving each, sorted by first slot.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct SlotMap {
    ranges: Vec<(u16, u16, String)>,
}

impl SlotMap {
    fn master_of(&self, slot: u16) -> Option<&str> {
        let i = self.ranges.partition_point(|(start, _, _)| *start <= slot);
        let (start, end, addr) = self.ranges.get(i.checked_sub(1)?)?;
        (*start..=*end).contains(&slot).then_some(addr.as_str())
    }

    fn masters(&self) -> Vec<String> {
        let mut masters: Vec<String> = self.ranges.iter().map(|(_, _, a)| a.clone()).collect();
        masters.sort();
        masters.dedup();
        masters
    }

    fn covered(&self) -> usize {
        self.ranges
            .iter()
            .map(|(s, e, _)| usize::from(*e - *s) + 1)
            .sum()
    }
}

/// What a reply asks of the sender.
enum Next {
    /// It is the answer (an error that is not about routing included).
    Done,
    /// Send to this node; `true` with `ASKING` first.
    Redirect(String, bool),
    /// Wait a little, learn the slots again, send again.
    Retry,
}

fn next_step(v: &Value) -> Next {
    let Some(e) = node::server_error(v) else {
        return Next::Done;
    };
    match e.kind() {
        redis::ErrorKind::Server(ServerErrorKind::Moved) => match e.redirect_node() {
            Some((addr, _)) => Next::Redirect(addr.to_owned(), false),
            None => Next::Retry,
        },
        redis::ErrorKind::Server(ServerErrorKind::Ask) => match e.redirect_node() {
            Some((addr, _)) => Next::Redirect(addr.to_owned(), true),
            None => Next::Retry,
        },
        redis::ErrorKind::Server(
            ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => Next::Retry,
        _ if super::errors::is_slot_moving(&e) => Next::Retry,
        _ => Next::Done,
    }
}

fn is_script_load(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter();
    matches!(
        (args.next(), args.next()),
        (Some(redis::Arg::Simple(a)), Some(redis::Arg::Simple(b)))
            if a.eq_ignore_ascii_case(b"SCRIPT") && b.eq_ignore_ascii_case(b"LOAD")
    )
}

fn pause_after(sends: u32) -> Duration {
    FIRST_PAUSE
        .saturating_mul(1 << sends.min(10))
        .min(MAX_PAUSE)
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
        let mut failures = Vec::new();
        let mut refused = None;
        for seed in conn.inner.url.seeds.clone() {
            match conn.slots_from(&seed).await {
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
                    *conn.inner.map.write().expect("slot map lock") = map;
                    *conn.inner.learnt_at.lock().await = Some(Instant::now());
                    tracing::debug!(seed, "redis cluster slots learnt");
                    return Ok(conn);
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
            self.inner.nodes.lock().expect("nodes lock").remove(addr);
        }
        let this = self.clone();
        tokio::spawn(async move {
            let _ = this.learn().await;
        });
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
                        self.inner.nodes.lock().expect("nodes lock").remove(&addr);
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

    /// Sends one command where it belongs, following redirects and waiting out failovers until the
    /// sends or the time run out.
    async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        if is_script_load(cmd) {
            return self.on_every_master(cmd).await;
        }
        let key = first_key(cmd);
        let resend = !is_blocking(cmd);
        let started = Instant::now();
        let bound = self.inner.connect_timeout + self.inner.response_timeout * 2;
        let mut redirect: Option<(String, bool)> = None;
        let mut last: RedisResult<Value> = Err(io_error(
            "nothing was sent",
            "no master to send to".to_owned(),
        ));
        for sends in 0..MAX_SENDS {
            if sends > 0 {
                if !resend || started.elapsed() >= bound {
                    break;
                }
                self.inner.count.fetch_add(1, Ordering::Relaxed);
            }
            let (addr, asking) = match redirect.take() {
                Some(r) => r,
                None => match &key {
                    Some(k) => match self.master_for(k).await {
                        Ok(a) => (a, false),
                        Err(e) => {
                            last = Err(e);
                            tokio::time::sleep(pause_after(sends)).await;
                            continue;
                        }
                    },
                    None => match self.masters().into_iter().next() {
                        Some(a) => (a, false),
                        None => return last,
                    },
                },
            };
            let reply = match self.node(&addr).await {
                Ok(mut con) if asking => {
                    let mut pipe = redis::pipe();
                    pipe.cmd("ASKING").add_command(cmd.clone());
                    con.send_packed_commands(&pipe, 0, 2)
                        .await
                        .map(|mut v| v.pop().unwrap_or(Value::Nil))
                }
                Ok(mut con) => con.send_packed_command(cmd).await,
                Err(e) => Err(e),
            };
            match reply {
                Ok(v) => match next_step(&v) {
                    Next::Done => return Ok(v),
                    Next::Redirect(to, asking) => {
                        if !asking {
                            self.note_failure(&addr, false);
                        }
                        redirect = Some((to, asking));
                        last = Ok(v);
                    }
                    Next::Retry => {
                        last = Ok(v);
                        tokio::time::sleep(pause_after(sends)).await;
                        let _ = self.learn().await;
                    }
                },
                Err(e) if is_connection_failure(&e) => {
                    self.inner.nodes.lock().expect("nodes lock").remove(&addr);
                    last = Err(e);
                    tokio::time::sleep(pause_after(sends)).await;
                    let _ = self.learn().await;
                }
                Err(e) => return Err(e),
            }
        }
        last
    }

    /// `SCRIPT LOAD` (and the like) on every master: a script must be known wherever a key may be.
    async fn on_every_master(&self, cmd: &Cmd) -> RedisResult<Value> {
        let masters = self.masters();
        let replies = futures::future::join_all(masters.iter().map(|addr| async move {
            let mut con = self.node(addr).await?;
            con.send_packed_command(cmd).await
        }))
        .await;
        self.inner
            .count
            .fetch_add(masters.len().saturating_sub(1) as u64, Ordering::Relaxed);
        let mut first = None;
        for r in replies {
            let v = r?;
            if let Some(e) = node::server_error(&v) {
                return Err(e);
            }
            first.get_or_insert(v);
        }
        Ok(first.unwrap_or(Value::Nil))
    }

    /// One pipeline per master, at once. Commands a master sent elsewhere (`MOVED`), could not run
    /// yet (`TRYAGAIN`, `CLUSTERDOWN`) or lost with a broken connection go out again, grouped by
    /// master after the slots are learnt again, until the sends or the time run out; a command sent
    /// to a slot being migrated (`ASK`) goes on its own, with `ASKING`. Replies in the pipeline's
    /// order.
    async fn send_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let cmds: Vec<&Cmd> = pipeline.cmd_iter().collect();
        if pipeline.is_transaction() {
            // MULTI/EXEC must go to one node as it is; the lease store sends none.
            let addr = match cmds.iter().find_map(|c| first_key(c)) {
                Some(k) => self.master_for(&k).await?,
                None => self.masters().into_iter().next().ok_or_else(|| {
                    io_error("no master known", "the slot map is empty".to_owned())
                })?,
            };
            let mut con = self.node(&addr).await?;
            return con.send_packed_commands(pipeline, offset, count).await;
        }
        let cmds = &cmds;
        let mut out: Vec<Option<RedisResult<Value>>> = vec![None; cmds.len()];
        let mut alone: Vec<usize> = Vec::new();
        let mut pending: Vec<usize> = Vec::new();
        for (i, cmd) in cmds.iter().enumerate() {
            if is_script_load(cmd) {
                alone.push(i);
            } else {
                pending.push(i);
            }
        }
        let started = Instant::now();
        let bound = self.inner.connect_timeout + self.inner.response_timeout * 2;
        let mut rounds = 0u32;
        let mut first_request = true;
        while !pending.is_empty() {
            if rounds > 0 {
                if rounds >= MAX_SENDS || started.elapsed() >= bound {
                    break;
                }
                tokio::time::sleep(pause_after(rounds - 1)).await;
                let _ = self.learn().await;
            }
            rounds += 1;
            let (groups, unrouted) = self.group_by_master(cmds, &pending);
            alone.extend(unrouted);
            let requests = groups.len() as u64;
            // The caller counted one request.
            self.inner.count.fetch_add(
                requests.saturating_sub(u64::from(first_request)),
                Ordering::Relaxed,
            );
            first_request &= requests == 0;
            let sent = futures::future::join_all(groups.iter().map(|(addr, idx)| async move {
                let mut sub = redis::pipe();
                for &i in idx {
                    sub.add_command(cmds[i].clone());
                }
                match self.node(addr).await {
                    Ok(mut con) => con.send_packed_commands(&sub, 0, idx.len()).await,
                    Err(e) => Err(e),
                }
            }))
            .await;
            pending.clear();
            for ((addr, idx), reply) in groups.iter().zip(sent) {
                match reply {
                    Ok(values) if values.len() == idx.len() => {
                        for (&i, v) in idx.iter().zip(values) {
                            match next_step(&v) {
                                Next::Done => out[i] = Some(Ok(v)),
                                Next::Redirect(_, true) => alone.push(i),
                                Next::Redirect(_, false) | Next::Retry => {
                                    out[i] = Some(Ok(v));
                                    pending.push(i);
                                }
                            }
                        }
                    }
                    Ok(_) => pending.extend(idx),
                    Err(e) if is_connection_failure(&e) => {
                        self.inner.nodes.lock().expect("nodes lock").remove(addr);
                        for &i in idx {
                            out[i] = Some(Err(e.clone()));
                        }
                        pending.extend(idx);
                    }
                    Err(e) => return Err(e),
                }
            }
            pending.sort_unstable();
        }
        // Alone: `SCRIPT LOAD` (every master), commands whose slot has no known master, and
        // commands sent to a slot being migrated; `send` follows them wherever they must go.
        self.inner.count.fetch_add(
            (alone.len() as u64).saturating_sub(u64::from(first_request)),
            Ordering::Relaxed,
        );
        let resent = futures::future::join_all(alone.iter().map(|&i| self.send(cmds[i]))).await;
        for (&i, reply) in alone.iter().zip(resent) {
            out[i] = Some(reply);
        }
        out.into_iter()
            .skip(offset)
            .take(count)
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(io_error(
                        "not sent",
                        "the request's time bound ran out".to_owned(),
                    ))
                })
            })
            .collect()
    }

    /// `pending` (indexes into `cmds`) grouped by the master of each command's slot, in order; and
    /// those whose slot has no known master. A command without a key goes with the one before it.
    fn group_by_master(
        &self,
        cmds: &[&Cmd],
        pending: &[usize],
    ) -> (Vec<(String, Vec<usize>)>, Vec<usize>) {
        let map = self.inner.map.read().expect("slot map lock");
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        let mut unrouted = Vec::new();
        let mut previous: Option<String> = None;
        for &i in pending {
            let addr = match first_key(cmds[i]) {
                Some(k) => map.master_of(key_slot(&k)).map(str::to_owned),
                None => previous.clone(),
            };
            match addr {
                Some(a) => {
                    match groups.iter_mut().find(|(g, _)| *g == a) {
                        Some((_, idx)) => idx.push(i),
                        None => groups.push((a.clone(), vec![i])),
                    }
                    previous = Some(a);
                }
                None => unrouted.push(i),
            }
        }
        (groups, unrouted)
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

/// `CLUSTER SLOTS`: `[[start, end, [host, port, id, …], replicas…], …]`; an empty host means "the
/// node you asked".
fn parse_slots(reply: Value, asked_host: &str) -> RedisResult<SlotMap> {
    let bad = |what: &str| {
        RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "unexpected CLUSTER SLOTS reply",
            what.to_owned(),
        ))
    };
    let Value::Array(entries) = reply else {
        return Err(bad("not an array"));
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return Err(bad("an entry is not an array"));
        };
        let mut fields = fields.into_iter();
        let start: u16 = redis::from_redis_value(fields.next().ok_or_else(|| bad("no start"))?)
            .map_err(|_| bad("start slot"))?;
        let end: u16 = redis::from_redis_value(fields.next().ok_or_else(|| bad("no end"))?)
            .map_err(|_| bad("end slot"))?;
        let Some(Value::Array(master)) = fields.next() else {
            return Err(bad("no master"));
        };
        let mut master = master.into_iter();
        let host: String = redis::from_redis_value(master.next().ok_or_else(|| bad("no host"))?)
            .map_err(|_| bad("host"))?;
        let port: u16 = redis::from_redis_value(master.next().ok_or_else(|| bad("no port"))?)
            .map_err(|_| bad("port"))?;
        let host = if host.is_empty() || host == "?" {
            asked_host.to_owned()
        } else {
            host
        };
        ranges.push((start, end, node::addr(&host, port)));
    }
    ranges.sort();
    Ok(SlotMap { ranges })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_map_finds_each_slots_master() {
        let map = SlotMap {
            ranges: vec![
                (0, 5460, "a:1".into()),
                (5461, 10922, "b:1".into()),
                (10923, 16383, "c:1".into()),
            ],
        };
        assert_eq!(map.master_of(0), Some("a:1"));
        assert_eq!(map.master_of(5460), Some("a:1"));
        assert_eq!(map.master_of(5461), Some("b:1"));
        assert_eq!(map.master_of(16383), Some("c:1"));
        assert_eq!(map.covered(), 16384);
        assert_eq!(map.masters(), ["a:1", "b:1", "c:1"]);
        let holes = SlotMap {
            ranges: vec![(10, 20, "a:1".into())],
        };
        assert_eq!(holes.master_of(9), None);
        assert_eq!(holes.master_of(21), None);
        assert_eq!(holes.master_of(15), Some("a:1"));
    }

    #[test]
    fn cluster_slots_replies_are_read() {
        let entry = |s: i64, e: i64, host: &str, port: i64| {
            Value::Array(vec![
                Value::Int(s),
                Value::Int(e),
                Value::Array(vec![
                    Value::BulkString(host.as_bytes().to_vec()),
                    Value::Int(port),
                    Value::BulkString(b"id".to_vec()),
                ]),
                Value::Array(vec![Value::BulkString(b"10.0.0.9".to_vec()), Value::Int(1)]),
            ])
        };
        let map = parse_slots(
            Value::Array(vec![
                entry(100, 200, "", 7001),
                entry(0, 99, "10.0.0.1", 7000),
            ]),
            "seed",
        )
        .unwrap();
        assert_eq!(
            map.ranges,
            [
                (0, 99, "10.0.0.1:7000".into()),
                (100, 200, "seed:7001".into())
            ]
        );
        assert!(parse_slots(Value::Int(1), "x").is_err());
    }

    /// Against a real cluster: what the client retries after a reconnect, run twice for real on
    /// each master; and a batch of renewals costs one pipeline per master.
    mod live {
        use std::time::Duration;

        use super::super::super::keys::LeaseKeys;
        use super::super::super::scripts::{self, AcquireReply};
        use super::super::super::RedisStore;
        use super::*;
        use crate::lease::store::{Held, Request, Settings, Store};
        use crate::lease::LeaseOptions;
        use leasehold_testkit::RedisCluster;

        const SEC: Duration = Duration::from_secs(1);

        fn start() -> RedisCluster {
            tokio::task::block_in_place(|| RedisCluster::start().expect("start a redis cluster"))
        }

        fn settings() -> Settings {
            Settings {
                prefix: "t".into(),
                response_timeout: SEC,
                connect_timeout: SEC,
                tls_root_ca_pem: None,
                retention: crate::lease::store::DEFAULT_RETENTION,
                allow_eviction: false,
            }
        }

        /// Names whose keys land on each of the three masters.
        fn names_on_every_master(cluster: &RedisCluster) -> Vec<String> {
            let mut by_master = std::collections::BTreeMap::new();
            for i in 0.. {
                let name = format!("n{i}");
                let m = cluster
                    .master_of_key(LeaseKeys::new("t", &name).unwrap().lock)
                    .unwrap();
                by_master.entry(m).or_insert(name);
                if by_master.len() == 3 {
                    break;
                }
            }
            by_master.into_values().collect()
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn every_script_run_twice_on_each_master_has_the_effect_of_running_once() {
            let cluster = start();
            let super::super::super::topology::Topology::Cluster(url) =
                super::super::super::topology::parse(
                    &crate::url::StoreUrl::parse(&cluster.seed_url()).unwrap(),
                    None,
                )
                .unwrap()
            else {
                panic!("a cluster URL")
            };
            let mut con = ClusterConn::connect(url, SEC, SEC, Arc::new(AtomicU64::new(0)))
                .await
                .unwrap();
            for name in names_on_every_master(&cluster) {
                let k = LeaseKeys::new("t", &name).unwrap();
                let t = scripts::Tuning::default();
                let ask = scripts::Ask {
                    ttl: 30 * SEC,
                    first_ttl: SEC,
                    permits: 1,
                };
                let acquire = || scripts::acquire(&k.lock, "a", ask, Duration::ZERO, &t);
                let first = AcquireReply::from_value(scripts::invoke(&mut con, &acquire()).await);
                let again = AcquireReply::from_value(scripts::invoke(&mut con, &acquire()).await);
                let first = first.unwrap();
                assert!(matches!(first, AcquireReply::Taken { .. }), "{first:?}");
                // The same lease and fence; only the server clock reading moves on.
                let (
                    AcquireReply::Taken {
                        fence: f1,
                        ttl_ms: t1,
                        ..
                    },
                    AcquireReply::Taken {
                        fence: f2,
                        ttl_ms: t2,
                        ..
                    },
                ) = (&first, &again.unwrap())
                else {
                    panic!("{name}: the second run did not return the lease")
                };
                assert_eq!(f1, f2, "{name}: same lease and fence");
                assert!(
                    t1.abs_diff(*t2) < 1_000,
                    "{name}: same lease: {t1} vs {t2} ms"
                );
                for _ in 0..2 {
                    let v: Value =
                        scripts::invoke(&mut con, &scripts::renew(&k.lock, "a", 30 * SEC, 1))
                            .await
                            .unwrap();
                    assert!(scripts::flag(Ok(v)).unwrap(), "{name}: renewed");
                }
                for _ in 0..2 {
                    let v: Value =
                        scripts::invoke(&mut con, &scripts::release(&k.lock, "a", 1, &t))
                            .await
                            .unwrap();
                    assert!(
                        scripts::flag(Ok(v)).unwrap(),
                        "{name}: a retried release says released"
                    );
                }
                // A retried forced release carries the same request id: it evicts nobody new.
                let forced = scripts::force_release(&k.lock, "op-1", None, &t);
                let (e1, f1): (i64, i64) = scripts::invoke(&mut con, &forced).await.unwrap();
                let (e2, f2): (i64, i64) = scripts::invoke(&mut con, &forced).await.unwrap();
                assert!(
                    e1 == 0 && e2 == 0 && f2 >= f1,
                    "{name}: nothing to evict, the fence never down"
                );
                let next = AcquireReply::from_value(
                    scripts::invoke(
                        &mut con,
                        &scripts::acquire(&k.lock, "b", ask, Duration::ZERO, &t),
                    )
                    .await,
                )
                .unwrap();
                match (first, next) {
                    (
                        AcquireReply::Taken { fence: a, .. },
                        AcquireReply::Taken { fence: b, .. },
                    ) => {
                        assert!(b > a, "{name}")
                    }
                    other => panic!("{other:?}"),
                }
            }
        }

        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn a_batch_of_renewals_is_one_pipeline_per_master() {
            let cluster = start();
            let store = RedisStore::connect(
                &crate::url::StoreUrl::parse(&cluster.seed_url()).unwrap(),
                settings(),
            )
            .await
            .unwrap();
            let opts = LeaseOptions::with_ttl(30 * SEC).unwrap();
            let names: Vec<String> = (0..90).map(|i| format!("batch-{i}")).collect();
            let tokens: Vec<String> = (0..90).map(|i| format!("{i:032x}")).collect();
            for (name, token) in names.iter().zip(&tokens) {
                let req = Request {
                    name,
                    token,
                    opts: &opts,
                    wait: Duration::ZERO,
                };
                assert!(matches!(
                    store.acquire(&req).await.unwrap(),
                    crate::lease::store::Attempt::Taken(_)
                ));
            }
            let held: Vec<Held<'_>> = names
                .iter()
                .zip(&tokens)
                .map(|(name, token)| Held {
                    name,
                    token,
                    opts: &opts,
                })
                .collect();
            // The first batch finds the scripts missing on each master and loads them all.
            store.renew(&held).await.unwrap();
            let before = store.round_trips();
            let renewed = store.renew(&held).await.unwrap();
            assert_eq!(store.round_trips() - before, 3, "one pipeline per master");
            assert!(renewed.iter().all(|r| matches!(r, Ok(true))), "{renewed:?}");
            let names_only: Vec<&str> = names.iter().map(String::as_str).collect();
            let infos = store.inspect(&names_only).await.unwrap();
            assert!(infos
                .iter()
                .all(|i| i.held && i.ttl_ms.unwrap_or(0) > 29_000));
            let before = store.round_trips();
            let released = store.release(&held).await.unwrap();
            assert_eq!(store.round_trips() - before, 3);
            assert!(released.iter().all(|r| matches!(r, Ok(true))));
            let infos = store.inspect(&names_only).await.unwrap();
            assert!(infos.iter().all(|i| !i.held));
        }
    }
}
