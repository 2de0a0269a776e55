//! Connections to PostgreSQL for the lease statements: a few plain connections handed out one call at
//! a time, and the round-trip counter.
//!
//! Why not sqlx's pool: it pings every connection it takes back (and, by default, every connection it
//! hands out), a round trip per statement on top of the statement; a lease store sends one statement
//! per call and wants it to cost one round trip. Here a connection whose call finished goes back to
//! the idle list as it is; one whose call was cancelled or failed on the wire is closed, since its
//! state is unknown.
//!
//! Promise: at most [`MAX_CONNECTIONS`] connections are open at once per store (a call waits for
//! one, within its own time bound); a connection is reused only after its call read the whole
//! reply, so no call ever meets another's half-read answer; an idle one unused for two minutes is
//! closed rather than reused; every statement sent and every connection opened counts as a round
//! trip.
//!
//! Limit: a connection that went stale while idle (the server restarted, a middlebox dropped it) is
//! found out by the call that uses it; [`Conns::is_stale`] tells the caller it may retry once on a
//! fresh connection, which every lease statement allows (each has the same effect run twice).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use crate::lease::store::contract::StoreMeta;

/// Connections open at once per store, busy or idle. A lease client sends one statement per call and
/// batches renewals, so a few suffice; the bound keeps many clients from exhausting the server's
/// `max_connections`.
pub(super) const MAX_CONNECTIONS: usize = 4;

/// An idle connection unused for this long is closed rather than reused: a firewall or NAT may have
/// dropped it silently, and finding that out costs the next call its whole timeout.
const MAX_IDLE: Duration = Duration::from_secs(120);

/// The store's connections.
pub(super) struct Conns {
    /// How to open one (from the store URL).
    options: PgConnectOptions,
    /// Bound on opening one, authentication included.
    connect_timeout: Duration,
    /// Connections not in use, with the instant they were last used.
    idle: Mutex<Vec<(PgConnection, Instant)>>,
    /// One permit per connection in use or idle-to-be: at most [`MAX_CONNECTIONS`] open at once.
    permits: Arc<Semaphore>,
    /// The store's count of statements sent and connections opened.
    meta: StoreMeta,
}

impl std::fmt::Debug for Conns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Conns")
            .field("idle", &self.idle.lock().map(|v| v.len()).unwrap_or(0))
            .field("round_trips", &self.meta.round_trips())
            .finish_non_exhaustive()
    }
}

/// A connection lent to one call. Give it back with [`Lent::done`] once the call's reply was read;
/// dropped instead (the call was cancelled, timed out or failed on the wire), it is closed.
pub(super) struct Lent<'a> {
    conn: Option<PgConnection>,
    /// Whether it came from the idle list (and may therefore be stale) rather than fresh.
    pub(super) reused: bool,
    home: &'a Conns,
    _permit: OwnedSemaphorePermit,
}

impl Lent<'_> {
    /// The connection, counting one round trip for the statement about to be sent on it.
    pub(super) fn for_statement(&mut self) -> &mut PgConnection {
        self.home.meta.count(1);
        self.conn
            .as_mut()
            .expect("a lent connection is present until done")
    }

    /// The call finished and its reply was read: the connection is reusable.
    pub(super) fn done(mut self) {
        if let Some(conn) = self.conn.take() {
            let mut idle = lock(&self.home.idle);
            idle.push((conn, Instant::now()));
        }
    }
}

impl Conns {
    pub(super) fn new(
        options: PgConnectOptions,
        connect_timeout: Duration,
        meta: StoreMeta,
    ) -> Self {
        Conns {
            options,
            connect_timeout,
            idle: Mutex::new(Vec::new()),
            permits: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            meta,
        }
    }

    /// A connection: an idle one if there is one fresh enough, else a new one. Waits for a permit
    /// while [`MAX_CONNECTIONS`] calls are in flight (the caller's own time bound covers the wait).
    pub(super) async fn get(&self, fresh: bool) -> Result<Lent<'_>, sqlx::Error> {
        let permit = self
            .permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| sqlx::Error::PoolClosed)?;
        if !fresh {
            let reusable = {
                let mut idle = lock(&self.idle);
                let now = Instant::now();
                // Too old to trust: closed by dropping (no goodbye needed, the server notices EOF).
                idle.retain(|(_, used)| now.duration_since(*used) < MAX_IDLE);
                idle.pop()
            };
            if let Some((conn, _)) = reusable {
                return Ok(Lent {
                    conn: Some(conn),
                    reused: true,
                    home: self,
                    _permit: permit,
                });
            }
        }
        let conn = self.open().await?;
        Ok(Lent {
            conn: Some(conn),
            reused: false,
            home: self,
            _permit: permit,
        })
    }

    /// Opens one connection, within the connect timeout.
    pub(super) async fn open(&self) -> Result<PgConnection, sqlx::Error> {
        self.meta.count(1);
        match tokio::time::timeout(
            self.connect_timeout,
            PgConnection::connect_with(&self.options),
        )
        .await
        {
            Ok(r) => r,
            Err(_) => Err(sqlx::Error::PoolTimedOut),
        }
    }

    /// Hands a connection opened with [`Conns::open`] to the idle list.
    pub(super) fn put(&self, conn: PgConnection) {
        lock(&self.idle).push((conn, Instant::now()));
    }

    /// Whether `e`, met on a connection that sat idle, says the connection was dead before the call
    /// (the server restarted or closed it): the call may be retried once on a fresh connection.
    pub(super) fn is_stale(e: &sqlx::Error) -> bool {
        match e {
            sqlx::Error::Io(_) | sqlx::Error::Protocol(_) => true,
            // 57P01 admin_shutdown (the server is stopping or stopped), 57P02 crash_shutdown,
            // 57P03 cannot_connect_now; class 08: connection exceptions.
            sqlx::Error::Database(db) => db
                .code()
                .is_some_and(|c| c.starts_with("57P") || c.starts_with("08")),
            _ => false,
        }
    }

    /// Closes every idle connection (the store is going away, or they went stale together).
    pub(super) fn clear(&self) {
        lock(&self.idle).clear();
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        // Not given back: its call did not finish cleanly; dropping the connection closes it.
        drop(self.conn.take());
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing here leaves the list half-changed if a holder panics.
    m.lock().unwrap_or_else(|p| p.into_inner())
}
