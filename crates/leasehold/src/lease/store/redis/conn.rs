//! Connections to Redis, whatever its topology: the shared handle every non-blocking request goes
//! through ([`Shared`]: one server, where single requests go on direct connections while some are
//! free (`direct.rs`), the primary Sentinel names now, or the master of each key's slot in a
//! cluster), dedicated connections for blocking commands (`BLPOP`, `WAIT`) on
//! the node that holds the key ([`BlockingPool::get_for`]; direct ones to one server, as
//! `direct.rs` says), and the round-trip counter. Every
//! connection has connect and response timeouts, so a stopped server never hangs a call forever.
//!
//! Promise: a blocking command never runs on the shared handle, so it stalls nothing else; it runs
//! on a dedicated connection to the node that holds its key now (the one server, the primary
//! Sentinel names, the master of the slot); a dedicated connection goes back to the pool only after
//! its command completed normally (after a timeout, an error or a cancellation it is dropped, since
//! a reply may still be due). Every request sent (a command, a pipeline or a script call) counts as
//! one round trip.
//!
//! Limit: a timeout says nothing about whether the server executed the command; callers must treat
//! an acquire that timed out as "maybe taken" (it then expires after one TTL, unrenewed). A request
//! sent again after a broken connection or a redirect may run twice; every lease script has the
//! effect of running once when run twice.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, ServerErrorKind, Value};

use super::cluster::ClusterConn;
use super::direct::{DirectConn, DirectPool, Take, Target};
use super::node::{self, is_blocking, is_connection_failure, server_error};
use super::sentinel::SentinelConn;

/// A connection that counts every request it sends (a command, a pipeline or a script call is one).
#[derive(Clone)]
pub(crate) struct Counted<C> {
    pub(crate) con: C,
    pub(crate) count: Arc<AtomicU64>,
}

impl<C> std::fmt::Debug for Counted<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counted")
            .field("count", &self.count.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for Counted<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.con.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.con.req_packed_commands(pipeline, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }
}

/// Where a shared request goes.
#[derive(Clone)]
pub(crate) enum Route {
    /// One server, reconnected to in place.
    Standalone(Reconnecting),
    /// One server: single requests on direct connections while there are some, the rest on its
    /// reconnecting multiplexed connection (`direct.rs`).
    Direct(DirectRoute),
    /// The primary the sentinels name now, followed across failovers.
    Sentinel(SentinelConn),
    /// The master serving each command's key.
    Cluster(ClusterConn),
    /// One node of a cluster, for commands that must visit each master (`SCAN`).
    Node(MultiplexedConnection),
}

impl ConnectionLike for Route {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Route::Standalone(c) => c.req_packed_command(cmd),
            Route::Direct(c) => c.req_packed_command(cmd),
            Route::Sentinel(c) => c.req_packed_command(cmd),
            Route::Cluster(c) => c.req_packed_command(cmd),
            Route::Node(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Route::Standalone(c) => c.req_packed_commands(pipeline, offset, count),
            Route::Direct(c) => c.manager.req_packed_commands(pipeline, offset, count),
            Route::Sentinel(c) => c.req_packed_commands(pipeline, offset, count),
            Route::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
            Route::Node(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Route::Standalone(c) => c.get_db(),
            Route::Direct(c) => c.manager.get_db(),
            Route::Sentinel(c) => c.get_db(),
            Route::Cluster(c) => c.get_db(),
            Route::Node(c) => c.get_db(),
        }
    }
}

/// One server's shared connection with direct connections beside it.
#[derive(Clone)]
pub(crate) struct DirectRoute {
    /// The direct connections.
    pub(crate) pool: Arc<DirectPool>,
    /// The multiplexed connection: pipelines, and single requests when no direct one is free.
    pub(crate) manager: Reconnecting,
}

impl DirectRoute {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let con = match self.pool.take() {
                Take::Idle(con) => con,
                Take::Open(place) => match self.pool.open(place).await {
                    Ok(con) => con,
                    // The multiplexed connection says what is wrong, or gets through.
                    Err(_) => return self.manager.req_packed_command(cmd).await,
                },
                Take::Full => return self.manager.req_packed_command(cmd).await,
            };
            let r = self.pool.request(con, cmd).await;
            if r.as_ref().is_err_and(is_connection_failure) {
                // Opened to the same server, perhaps before it restarted: suspect too.
                self.pool.clear();
            }
            r
        })
    }
}

/// One server's multiplexed connection, reconnected to in place. On the one-server store, a
/// request that finds the connection dropped (the server closed it while it sat idle, by its
/// `timeout`, or restarted) is sent once more, on the connection the manager opens again, and
/// counted again: the manager learns of a close only from the request that meets it, and would
/// fail that request.
///
/// Limit: the request may have run before the connection dropped, so it may run twice; only
/// requests with the effect of running once when run twice go on a shared connection (the lease
/// scripts, reads, `PUBLISH`). A timeout is not a drop: it is never sent again here. A Redlock
/// master's connection sends nothing again; after an idle spell it checks the connection first
/// ([`Reconnecting::probing`]).
#[derive(Clone)]
pub(crate) struct Reconnecting {
    /// The connection and its reconnects.
    manager: ConnectionManager,
    /// What a dropped connection costs.
    on_drop: OnDrop,
}

/// How a [`Reconnecting`] connection meets a close it has not seen yet.
#[derive(Clone)]
enum OnDrop {
    /// The request that found it dropped is sent again, once, and counted again in the store's
    /// requests.
    Resend(Arc<AtomicU64>),
    /// Nothing is sent again; a request after an idle spell is preceded by a `PING` (see
    /// [`Reconnecting::probing`]), counted in the store's requests.
    Probe(Arc<Idle>, Arc<AtomicU64>),
}

/// When a connection last sent something, to tell an idle spell.
#[derive(Debug)]
struct Idle {
    /// What `last` counts from.
    origin: std::time::Instant,
    /// When the last request started, in ms since `origin`.
    last: AtomicU64,
}

/// The shortest idle spell after which a server may have closed a connection: Redis's `timeout`
/// is a whole number of seconds, 1 the least, and it closes a connection idle for longer than that.
/// Measured from when the last request was sent, which the server read no earlier.
const MAY_BE_CLOSED_AFTER: Duration = Duration::from_secs(1);

impl Idle {
    /// Marks a request starting now; whether the connection had been idle long enough before it
    /// that the server may have closed it.
    fn restart(&self) -> bool {
        let now = self.origin.elapsed().as_millis() as u64;
        let last = self.last.swap(now, Ordering::Relaxed);
        now.saturating_sub(last) >= MAY_BE_CLOSED_AFTER.as_millis() as u64
    }
}

impl Reconnecting {
    /// The one server's connection: a request that found it dropped is sent again once.
    pub(crate) fn resending(manager: ConnectionManager, count: Arc<AtomicU64>) -> Self {
        Reconnecting {
            manager,
            on_drop: OnDrop::Resend(count),
        }
    }

    /// A Redlock master's connection: a request is sent once, and one that found the connection
    /// dropped fails at once, so that the quorum goes on without that master (sent again, it could
    /// reach the master only after it came back, and hold the name there after its holder released
    /// it on the others). So that a close the server made while the connection sat idle (its
    /// `timeout`) fails nothing, a request after an idle spell of [`MAY_BE_CLOSED_AFTER`] goes after
    /// a `PING`: one that finds the connection dropped is sent again on the connection the manager
    /// opens anew, and the request goes only once a `PING` was answered there (any reply, an
    /// error reply included, says the connection carries requests). A master that does not answer
    /// fails the request as before, without it having been sent.
    pub(crate) fn probing(manager: ConnectionManager, count: Arc<AtomicU64>) -> Self {
        Reconnecting {
            manager,
            on_drop: OnDrop::Probe(
                Arc::new(Idle {
                    origin: std::time::Instant::now(),
                    last: AtomicU64::new(0),
                }),
                count,
            ),
        }
    }

    fn again(&self, e: &redis::RedisError) -> bool {
        match &self.on_drop {
            OnDrop::Resend(count) if e.is_connection_dropped() => {
                count.fetch_add(1, Ordering::Relaxed);
                true
            }
            _ => false,
        }
    }

    /// After an idle spell on a probing connection, the `PING`s described at [`Self::probing`]:
    /// `Ok` when the request may go.
    async fn ready(&mut self) -> RedisResult<()> {
        let OnDrop::Probe(idle, count) = &self.on_drop else {
            return Ok(());
        };
        if !idle.restart() {
            return Ok(());
        }
        let count = count.clone();
        let ping = redis::cmd("PING");
        let answered = |r: RedisResult<Value>| match r {
            Ok(_) => Ok(()),
            // A reply the server made (a user not allowed `PING`, say): the connection works.
            Err(e)
                if matches!(
                    e.kind(),
                    redis::ErrorKind::Server(_) | redis::ErrorKind::Extension
                ) =>
            {
                Ok(())
            }
            Err(e) => Err(e),
        };
        count.fetch_add(1, Ordering::Relaxed);
        match answered(self.manager.send_packed_command(&ping).await) {
            Err(e) if e.is_connection_dropped() => {
                count.fetch_add(1, Ordering::Relaxed);
                answered(self.manager.send_packed_command(&ping).await)
            }
            r => r,
        }
    }
}

impl ConnectionLike for Reconnecting {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            self.ready().await?;
            match self.manager.send_packed_command(cmd).await {
                Err(e) if self.again(&e) => self.manager.send_packed_command(cmd).await,
                r => r,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.ready().await?;
            match self
                .manager
                .send_packed_commands(pipeline, offset, count)
                .await
            {
                Err(e) if self.again(&e) => {
                    self.manager
                        .send_packed_commands(pipeline, offset, count)
                        .await
                }
                r => r,
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.manager.get_db()
    }
}

/// How every single-server shared connection (one server, each Redlock master) reconnects: the
/// response and connect timeouts of `settings`, one retry, 20-200 ms between attempts.
pub(crate) fn manager_config(
    settings: &crate::lease::store::contract::Settings,
) -> redis::aio::ConnectionManagerConfig {
    redis::aio::ConnectionManagerConfig::new()
        .set_response_timeout(Some(settings.response_timeout))
        .set_connection_timeout(Some(settings.connect_timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(20))
        .set_max_delay(Duration::from_millis(200))
}

/// The shared connection, counted.
pub(crate) type Shared = Counted<Route>;

impl Shared {
    /// One handle per master, for commands that must visit each (`SCAN`): this one for a single
    /// server or a Sentinel-managed primary, one per master for a cluster.
    pub(crate) async fn masters(&self) -> RedisResult<Vec<Shared>> {
        let Route::Cluster(cluster) = &self.con else {
            return Ok(vec![self.clone()]);
        };
        let mut out = Vec::new();
        for addr in cluster.masters() {
            let con = cluster.node(&addr).await?;
            out.push(Counted {
                con: Route::Node(con),
                count: self.count.clone(),
            });
        }
        Ok(out)
    }

    /// Each data node with its name for messages: `location` for a single server, the primary's
    /// address for Sentinel, each master's address for a cluster.
    pub(crate) async fn masters_named(&self, location: &str) -> RedisResult<Vec<(String, Shared)>> {
        match &self.con {
            Route::Cluster(cluster) => {
                let mut out = Vec::new();
                for addr in cluster.masters() {
                    let con = cluster.node(&addr).await?;
                    let con = Counted {
                        con: Route::Node(con),
                        count: self.count.clone(),
                    };
                    out.push((addr, con));
                }
                Ok(out)
            }
            Route::Sentinel(s) => Ok(vec![(
                format!("{} (the Sentinel primary)", s.primary_addr().await?),
                self.clone(),
            )]),
            _ => Ok(vec![(location.to_owned(), self.clone())]),
        }
    }
}

/// How the dedicated connections find the node a key lives on.
#[derive(Clone)]
pub(crate) enum Nodes {
    /// The one server (its connections carry an empty address).
    Standalone {
        /// Its client (URL, credentials, TLS); boxed, it is large beside the other handles.
        client: Box<redis::Client>,
        /// Where direct dedicated connections go, when they can be direct (`direct.rs`; plain
        /// TCP, RESP2, not `multiplexed_only`); else they are multiplexed connections.
        direct: Option<Arc<Target>>,
    },
    /// Whatever primary the sentinels name now.
    Sentinel(SentinelConn),
    /// The master of the key's slot.
    Cluster(ClusterConn),
}

impl Nodes {
    /// The address of the node that holds `key` now (empty for the one server); [`client_at`]
    /// makes a client for it when a connection must be opened.
    ///
    /// [`client_at`]: Self::client_at
    async fn addr_for(&self, key: &[u8]) -> RedisResult<String> {
        match self {
            Nodes::Standalone { .. } => Ok(String::new()),
            Nodes::Sentinel(s) => s.primary_addr().await,
            Nodes::Cluster(c) => c.master_for(key).await,
        }
    }

    /// A client for a data node that hears every `PUBLISH` of the deployment: the one server, the
    /// primary, a master of a cluster (which broadcasts every `PUBLISH` to all its nodes).
    pub(crate) async fn client_for_any(&self) -> RedisResult<redis::Client> {
        let addr = self.addr_for(b"").await?;
        self.client_at(&addr)
    }

    /// A client for the node at `addr` (a redirect's target).
    fn client_at(&self, addr: &str) -> RedisResult<redis::Client> {
        match self {
            Nodes::Standalone { client, .. } => Ok((**client).clone()),
            Nodes::Sentinel(s) => s.data_client(addr),
            Nodes::Cluster(c) => c.client(addr),
        }
    }

    /// A request on a dedicated connection to `addr` failed (`broken`: the connection itself) or
    /// was sent elsewhere: let the topology look again.
    fn failed(&self, addr: &str, why: &str, broken: bool) {
        match self {
            Nodes::Standalone { .. } => {}
            Nodes::Sentinel(s) => s.forget_addr(addr, why),
            Nodes::Cluster(c) => c.note_failure(addr, broken),
        }
    }
}

/// Dedicated connections for commands that block their connection (`BLPOP`, `WAIT`); they never sit
/// on the shared multiplexed connection, where they would stall every other request. Each is opened
/// to the node that holds the key it is asked for.
pub(crate) struct BlockingPool {
    /// Where keys live (shared with the connections it hands out).
    nodes: Arc<Nodes>,
    /// Bound on opening a connection.
    connect_timeout: Duration,
    /// Idle connections and the address of their node, oldest first.
    idle: Mutex<Vec<(String, DedicatedCon)>>,
    /// Direct dedicated connections open (counted for their drop; not bounded: one per wait).
    direct_open: Arc<AtomicUsize>,
    /// Requests sent, shared with the store.
    count: Arc<AtomicU64>,
}

impl std::fmt::Debug for BlockingPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingPool")
            .field("idle", &self.idle.lock().map(|v| v.len()).unwrap_or(0))
            .finish_non_exhaustive()
    }
}

/// Idle dedicated connections kept for reuse (all nodes together).
const MAX_IDLE_BLOCKING: usize = 16;

impl BlockingPool {
    pub(crate) fn new(nodes: Nodes, connect_timeout: Duration, count: Arc<AtomicU64>) -> Self {
        BlockingPool {
            nodes: Arc::new(nodes),
            connect_timeout,
            idle: Mutex::new(Vec::new()),
            direct_open: Arc::default(),
            count,
        }
    }

    /// Where keys live (for a pub/sub session of the store's own).
    pub(crate) fn nodes(&self) -> Arc<Nodes> {
        self.nodes.clone()
    }

    /// An idle dedicated connection to the node that holds `key` (the primary; in a cluster the
    /// master of its slot), or a new one (its set-up is counted as one round trip). The caller
    /// bounds each blocking command with its own timeout; on that timeout (or any error, or
    /// cancellation) the connection is dropped rather than returned, since a reply may still be due.
    pub(crate) async fn get_for(&self, key: &str) -> RedisResult<Dedicated> {
        let addr = self.nodes.addr_for(key.as_bytes()).await?;
        let reused = {
            let mut idle = self.idle.lock().expect("pool lock");
            loop {
                let Some(i) = idle.iter().rposition(|(a, _)| *a == addr) else {
                    break None;
                };
                let con = idle.remove(i).1;
                // A direct one the server closed while it sat idle is seen here, at no cost.
                if con.still_open() {
                    break Some(con);
                }
            }
        };
        let fresh = reused.is_none();
        let con = match reused {
            Some(con) => con,
            None => self.open(&addr).await.inspect_err(|e| {
                if is_connection_failure(e) {
                    self.nodes
                        .failed(&addr, "a dedicated connection failed", true);
                }
            })?,
        };
        Ok(Dedicated {
            addr,
            con,
            nodes: self.nodes.clone(),
            connect_timeout: self.connect_timeout,
            count: self.count.clone(),
            fresh,
        })
    }

    /// A new connection to the node at `addr`: direct to the one server when it can be.
    async fn open(&self, addr: &str) -> RedisResult<DedicatedCon> {
        self.count.fetch_add(1, Ordering::Relaxed);
        if let Nodes::Standalone {
            direct: Some(target),
            ..
        } = &*self.nodes
        {
            // Opened for a request: its `is_fresh` has the scripts loaded on it first.
            return Ok(DedicatedCon::Direct(
                target.connect(self.direct_open.clone()).await?,
            ));
        }
        let client = self.nodes.client_at(addr)?;
        open_dedicated(&client, self.connect_timeout).await
    }

    /// Opens a connection to the one server (or the node of the empty key) and keeps it idle (one
    /// round trip counted).
    pub(crate) async fn open_idle(&self) -> RedisResult<()> {
        let addr = self.nodes.addr_for(b"").await?;
        let con = self.open(&addr).await?;
        self.put_idle(addr, con);
        Ok(())
    }

    /// Whether the connections it opens are direct (one server, plain TCP, RESP2).
    pub(crate) fn opens_direct(&self) -> bool {
        matches!(
            &*self.nodes,
            Nodes::Standalone {
                direct: Some(_),
                ..
            }
        )
    }

    /// Drops every idle connection: after one failed, the others (opened to the same server,
    /// perhaps before it restarted or was demoted) are suspect too.
    pub(crate) fn clear(&self) {
        self.idle.lock().expect("pool lock").clear();
    }

    /// Keeps `con`, a connection to the node at `addr` without a response timeout, for reuse.
    pub(crate) fn put_idle(&self, addr: String, con: impl Into<DedicatedCon>) {
        let con = con.into();
        let mut idle = self.idle.lock().expect("pool lock");
        idle.push((addr, con));
        if idle.len() > MAX_IDLE_BLOCKING {
            idle.remove(0);
        }
    }

    /// Returns a connection whose last command completed normally.
    pub(crate) fn put(&self, con: Dedicated) {
        self.put_idle(con.addr, con.con);
    }
}

async fn open_dedicated(
    client: &redis::Client,
    connect_timeout: Duration,
) -> RedisResult<DedicatedCon> {
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(None);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map(DedicatedCon::Multiplexed)
}

/// A dedicated connection: a multiplexed connection of its own, or (one server, plain TCP, RESP2)
/// a direct one, whose caller reads the reply itself (`direct.rs`). Neither has a response
/// timeout: the caller bounds each command.
pub(crate) enum DedicatedCon {
    /// A multiplexed connection used by one caller at a time.
    Multiplexed(MultiplexedConnection),
    /// A direct connection.
    Direct(DirectConn),
}

impl From<MultiplexedConnection> for DedicatedCon {
    fn from(con: MultiplexedConnection) -> Self {
        DedicatedCon::Multiplexed(con)
    }
}

impl DedicatedCon {
    /// Whether the server has not closed it, as far as can be told without a request (a
    /// multiplexed connection is taken to be open: a request on it finds out).
    fn still_open(&self) -> bool {
        match self {
            DedicatedCon::Multiplexed(_) => true,
            DedicatedCon::Direct(con) => con.still_open(),
        }
    }

    async fn send_packed_command(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        match self {
            DedicatedCon::Multiplexed(con) => con.send_packed_command(cmd).await,
            DedicatedCon::Direct(con) => con.request(cmd).await,
        }
    }

    async fn send_packed_commands(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        match self {
            DedicatedCon::Multiplexed(con) => {
                con.send_packed_commands(pipeline, offset, count).await
            }
            DedicatedCon::Direct(con) => con.pipeline(pipeline, offset, count).await,
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            DedicatedCon::Multiplexed(con) => con.get_db(),
            // The database the URL names, selected when it was opened.
            DedicatedCon::Direct(con) => con.db(),
        }
    }
}

/// A dedicated connection to the node that held a key when it was taken from the pool. A request
/// that is not blocking follows the topology once if the node answers that the key moved (`MOVED`,
/// `ASK` in a cluster) or that it is no longer primary (`READONLY`): it is sent again, whole, to the
/// node that holds the key now (a script and the `WAIT` after it stay together). A blocking command
/// is not sent again (it would spend its caller's bound twice): its error goes back, and the caller's
/// next `get_for` finds the right node.
pub(crate) struct Dedicated {
    /// The node's address (empty for a single server).
    addr: String,
    /// The connection, without a response timeout (callers bound each command).
    con: DedicatedCon,
    /// Where keys live (the pool's).
    nodes: Arc<Nodes>,
    /// Bound on opening a connection to a redirect's target.
    connect_timeout: Duration,
    /// Requests sent, shared with the store.
    count: Arc<AtomicU64>,
    /// Opened for this request (not taken from the idle list): the server may lack our scripts.
    fresh: bool,
}

impl Dedicated {
    /// Whether the connection was opened for this request rather than reused.
    pub(crate) fn is_fresh(&self) -> bool {
        self.fresh
    }
}

impl std::fmt::Debug for Dedicated {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dedicated")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// Where a refused request should go instead, if anywhere.
enum Elsewhere {
    /// To the node at this address, with `ASKING` first when `true`.
    Node(String, bool),
    /// To whatever primary the sentinels name now.
    Primary,
}

fn elsewhere(v: &Value) -> Option<Elsewhere> {
    let e = server_error(v)?;
    match e.kind() {
        redis::ErrorKind::Server(ServerErrorKind::Moved) => e
            .redirect_node()
            .map(|(addr, _)| Elsewhere::Node(addr.to_owned(), false)),
        redis::ErrorKind::Server(ServerErrorKind::Ask) => e
            .redirect_node()
            .map(|(addr, _)| Elsewhere::Node(addr.to_owned(), true)),
        redis::ErrorKind::Server(ServerErrorKind::ReadOnly) => Some(Elsewhere::Primary),
        _ => None,
    }
}

impl Dedicated {
    /// Moves this connection to where a refused request should go; `Some(true)` when `ASKING`
    /// must precede it. `None`: nowhere else to go.
    async fn follow(&mut self, to: Elsewhere) -> Option<bool> {
        let (addr, asking) = match to {
            Elsewhere::Node(addr, asking) => {
                if !asking {
                    self.nodes.failed(&self.addr, "MOVED", false);
                }
                (addr, asking)
            }
            Elsewhere::Primary => {
                self.nodes.failed(&self.addr, "READONLY", false);
                let Nodes::Sentinel(s) = &*self.nodes else {
                    return None;
                };
                (s.primary_addr().await.ok()?, false)
            }
        };
        let client = self.nodes.client_at(&addr).ok()?;
        self.count.fetch_add(1, Ordering::Relaxed);
        let con = open_dedicated(&client, self.connect_timeout).await.ok()?;
        self.addr = addr;
        self.con = con;
        Some(asking)
    }

    fn note(&self, r: &RedisResult<impl Sized>) {
        if let Err(e) = r {
            if is_connection_failure(e) {
                self.nodes
                    .failed(&self.addr, "a dedicated connection failed", true);
            }
        }
    }
}

impl Dedicated {
    /// Sends `cmd` (one request counted) and notes whether the connection still works.
    async fn send_cmd(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.count.fetch_add(1, Ordering::Relaxed);
        let r = self.con.send_packed_command(cmd).await;
        self.note(&r);
        r
    }

    /// Sends `count` commands of `pipeline` from `offset` (one request counted) and notes whether
    /// the connection still works.
    async fn send_pipe(
        &mut self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.count.fetch_add(1, Ordering::Relaxed);
        let r = self.con.send_packed_commands(pipeline, offset, count).await;
        self.note(&r);
        r
    }
}

impl ConnectionLike for Dedicated {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let first = self.send_cmd(cmd).await;
            let Ok(v) = &first else { return first };
            let Some(to) = elsewhere(v).filter(|_| !is_blocking(cmd)) else {
                if elsewhere(v).is_some() {
                    // The caller will ask again; make sure it asks the right node.
                    self.nodes.failed(&self.addr, "redirected", false);
                }
                return first;
            };
            match self.follow(to).await {
                None => first,
                Some(true) => {
                    let mut pipe = redis::pipe();
                    pipe.cmd("ASKING").add_command(cmd.clone());
                    let r = self.send_pipe(&pipe, 0, 2).await;
                    r.map(|mut v| v.pop().unwrap_or(Value::Nil))
                }
                Some(false) => self.send_cmd(cmd).await,
            }
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let first = self.send_pipe(pipeline, offset, count).await;
            let Ok(values) = &first else { return first };
            let Some(to) = values.iter().find_map(elsewhere) else {
                return first;
            };
            if pipeline.is_transaction()
                || (pipeline.cmd_iter().any(is_blocking) && !has_wait_tail(pipeline))
            {
                self.nodes.failed(&self.addr, "redirected", false);
                return first;
            }
            match self.follow(to).await {
                None => first,
                Some(false) => self.send_pipe(pipeline, offset, count).await,
                Some(true) => {
                    // ASKING holds for the next command only: one before each.
                    let mut asking = redis::pipe();
                    for cmd in pipeline.cmd_iter() {
                        asking.cmd("ASKING").add_command(cmd.clone());
                    }
                    let n = pipeline.cmd_iter().count();
                    let r = self.send_pipe(&asking, 0, 2 * n).await;
                    r.map(|v| {
                        v.into_iter()
                            .skip(1)
                            .step_by(2)
                            .skip(offset)
                            .take(count)
                            .collect()
                    })
                }
            }
        })
    }

    fn get_db(&self) -> i64 {
        self.con.get_db()
    }
}

/// A pipeline whose only blocking command is a `WAIT` at its end: it asks about the writes before
/// it, so it is sent again with them (a `WAIT` that found the node refusing those writes returned
/// at once).
fn has_wait_tail(pipeline: &Pipeline) -> bool {
    let cmds: Vec<&Cmd> = pipeline.cmd_iter().collect();
    match cmds.split_last() {
        Some((last, rest)) => {
            node::command_name(last) == b"WAIT" && !rest.iter().any(|c| is_blocking(c))
        }
        None => false,
    }
}
