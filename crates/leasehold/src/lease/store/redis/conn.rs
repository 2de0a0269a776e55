//! Connections to Redis: the shared multiplexed connection (reconnecting, with response and connect
//! timeouts so a stopped server never hangs a call forever), a small pool of dedicated connections for
//! blocking commands (`BLPOP`, `WAIT`), and the round-trip counter.
//!
//! Limit: a timeout says nothing about whether the server executed the command; callers must treat
//! an acquire that timed out as "maybe taken" (it then expires after one TTL, unrenewed).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::{ConnectionLike, ConnectionManager, MultiplexedConnection};
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisFuture, Value};

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

/// Dedicated connections for commands that block their connection (`BLPOP`, `WAIT`); they never sit
/// on the shared multiplexed connection, where they would stall every other request.
pub(crate) struct BlockingPool {
    client: redis::Client,
    connect_timeout: Duration,
    idle: Mutex<Vec<MultiplexedConnection>>,
    count: Arc<AtomicU64>,
}

impl std::fmt::Debug for BlockingPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BlockingPool")
            .field("idle", &self.idle.lock().map(|v| v.len()).unwrap_or(0))
            .finish_non_exhaustive()
    }
}

/// Idle dedicated connections kept for reuse.
const MAX_IDLE_BLOCKING: usize = 16;

impl BlockingPool {
    pub(crate) fn new(
        client: redis::Client,
        connect_timeout: Duration,
        count: Arc<AtomicU64>,
    ) -> Self {
        BlockingPool {
            client,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
            count,
        }
    }

    /// An idle dedicated connection, or a new one (its set-up is counted as one round trip). The
    /// caller bounds each blocking command with its own timeout; on that timeout (or any error, or
    /// cancellation) the connection is dropped rather than returned, since a reply may still be due.
    pub(crate) async fn get(&self) -> redis::RedisResult<Counted<MultiplexedConnection>> {
        if let Some(con) = self.idle.lock().expect("pool lock").pop() {
            return Ok(Counted {
                con,
                count: self.count.clone(),
            });
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let con = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await?;
        Ok(Counted {
            con,
            count: self.count.clone(),
        })
    }

    /// Drops every idle connection: after one failed, the others (opened to the same server,
    /// perhaps before it restarted) are suspect too.
    pub(crate) fn clear(&self) {
        self.idle.lock().expect("pool lock").clear();
    }

    /// Returns a connection whose last command completed normally.
    pub(crate) fn put(&self, con: Counted<MultiplexedConnection>) {
        let mut idle = self.idle.lock().expect("pool lock");
        if idle.len() < MAX_IDLE_BLOCKING {
            idle.push(con.con);
        }
    }
}

/// The shared connection, counted.
pub(crate) type Shared = Counted<ConnectionManager>;
