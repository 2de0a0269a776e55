//! Waiting without polling: MariaDB has no `NOTIFY`, but it has named locks (`GET_LOCK`), which a
//! session holds until it releases them or ends, and which another session can block on.
//!
//! Promise: while this client holds a lease, its *wake session* (one connection per client) holds the
//! name's wake lock; the release frees the row first and then the wake lock, so a waiter blocked in
//! `GET_LOCK` on its own connection returns at once and asks again. A holder that crashes or loses
//! its connection frees its wake locks with its session, which wakes its waiters too (they then find
//! the lease busy or expired by the row). Limit: the lock is only a wake-up, never the lease: who
//! holds is decided by the row alone. A wake lock found free while the lease is busy (the holder's
//! wake session was lost, a holder that does not take wake locks, a server restart) makes waiters
//! fall back to waking at the holder's expiry, as a lost notification does on PostgreSQL. Named locks
//! are per server: behind a Galera cluster or a proxy that spreads sessions over servers, waiters
//! wake only at expiry.

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::mysql::{MySqlConnectOptions, MySqlConnection};
use sqlx::Connection;
use tokio::time::Instant;

/// A wait that returns sooner than this found the wake lock free.
const FREE_LOCK: Duration = Duration::from_millis(2);

/// The wake lock's name for a lease: a hash, because lock names are limited to 64 characters.
pub(super) fn lock_name(prefix: &str, name: &str) -> String {
    let mut h = Sha256::new();
    h.update((prefix.len() as u64).to_be_bytes());
    h.update(prefix.as_bytes());
    h.update(name.as_bytes());
    let digest = hex::encode(h.finalize());
    format!("leasehold:{}", &digest[..48])
}

/// The wake session and the idle connections waiters block on.
pub(super) struct Wake {
    /// Where to open sessions.
    options: MySqlConnectOptions,
    /// Bound on opening one.
    connect_timeout: Duration,
    /// The session holding the wake locks of the leases this client holds; `None` until the first
    /// acquire, or after it failed (the next acquire opens a new one).
    holder: tokio::sync::Mutex<Option<MySqlConnection>>,
    /// Idle waiting sessions, reused for the next wait.
    idle: Mutex<Vec<MySqlConnection>>,
    /// Names whose wake lock was found free while the lease was busy: the next wait on them sleeps
    /// instead of spinning.
    unguarded: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wake").finish_non_exhaustive()
    }
}

impl Wake {
    pub(super) fn new(options: MySqlConnectOptions, connect_timeout: Duration) -> Self {
        Wake {
            options,
            connect_timeout,
            holder: tokio::sync::Mutex::new(None),
            idle: Mutex::new(Vec::new()),
            unguarded: Mutex::new(HashSet::new()),
        }
    }

    async fn open(&self) -> Option<MySqlConnection> {
        let open = MySqlConnection::connect_with(&self.options);
        match tokio::time::timeout(self.connect_timeout, open).await {
            Ok(Ok(conn)) => Some(conn),
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "mariadb wake session could not connect");
                None
            }
            Err(_) => None,
        }
    }

    /// Takes the wake lock of a lease this client now holds; whether it did. Best effort: without
    /// it, waiters wake at the lease's expiry instead.
    pub(super) async fn hold(&self, lock: &str, bound: Duration) -> bool {
        let mut session = self.holder.lock().await;
        if session.is_none() {
            *session = self.open().await;
        }
        let Some(conn) = session.as_mut() else {
            return false;
        };
        // A waiter owns the lock for a moment after each release (it takes and frees it); wait for
        // that, not for a waiter blocked in its own GET_LOCK (which this request queues behind).
        let take = sqlx::query_scalar::<_, Option<i64>>("SELECT GET_LOCK(?, 0.2)")
            .bind(lock)
            .fetch_one(&mut *conn);
        match tokio::time::timeout(bound, take).await {
            Ok(Ok(Some(1))) => true,
            Ok(Ok(_)) => false,
            _ => {
                // Failed or cut off mid-request: the session's state is unknown; end it (which frees
                // whatever it held).
                *session = None;
                false
            }
        }
    }

    /// Frees the wake lock of a lease this client held (after the row was freed), waking its
    /// waiters.
    pub(super) async fn free(&self, lock: &str, bound: Duration) {
        let mut session = self.holder.lock().await;
        let Some(conn) = session.as_mut() else {
            return;
        };
        let free = sqlx::query("DO RELEASE_LOCK(?)")
            .bind(lock)
            .execute(&mut *conn);
        if !matches!(tokio::time::timeout(bound, free).await, Ok(Ok(_))) {
            *session = None;
        }
    }

    /// Blocks on the wake lock of a busy lease for at most `block`, on a session of this wait's own,
    /// and frees it at once when it gets it. Returns early when the holder frees it (or its session
    /// ends); sleeps out `block` when the lock was free twice in a row while the lease was busy.
    pub(super) async fn wait(&self, lock: &str, block: Duration) {
        if self
            .unguarded
            .lock()
            .map(|u| u.contains(lock))
            .unwrap_or(false)
        {
            self.set_unguarded(lock, false);
            tokio::time::sleep(block).await;
            return;
        }
        let started = Instant::now();
        let Some(mut conn) = self.take_idle().await else {
            tokio::time::sleep(block).await;
            return;
        };
        let secs = block.as_secs_f64();
        let got = sqlx::query_scalar::<_, Option<i64>>("SELECT GET_LOCK(?, ?)")
            .bind(lock)
            .bind(secs)
            .fetch_one(&mut conn)
            .await;
        // Dropped before here (the caller cancelled), the connection closes and the server ends its
        // session, which frees the lock if the wait got it.
        match got {
            Ok(Some(1)) => {
                let freed = sqlx::query("DO RELEASE_LOCK(?)")
                    .bind(lock)
                    .execute(&mut conn)
                    .await;
                if freed.is_ok() {
                    self.put_idle(conn);
                }
                self.set_unguarded(lock, started.elapsed() < FREE_LOCK);
            }
            Ok(_) => self.put_idle(conn),
            Err(e) => {
                tracing::debug!(error = %e, "mariadb wait failed; waking at the holder's expiry");
                tokio::time::sleep(block.saturating_sub(started.elapsed())).await;
            }
        }
    }

    /// The lease was taken: a wait on it later starts afresh.
    pub(super) fn clear(&self, lock: &str) {
        self.set_unguarded(lock, false);
    }

    fn set_unguarded(&self, lock: &str, free: bool) {
        if let Ok(mut u) = self.unguarded.lock() {
            if free {
                u.insert(lock.to_owned());
            } else {
                u.remove(lock);
            }
        }
    }

    async fn take_idle(&self) -> Option<MySqlConnection> {
        let idle = self.idle.lock().ok().and_then(|mut i| i.pop());
        match idle {
            Some(conn) => Some(conn),
            None => self.open().await,
        }
    }

    fn put_idle(&self, conn: MySqlConnection) {
        if let Ok(mut idle) = self.idle.lock() {
            if idle.len() < 8 {
                idle.push(conn);
            }
        }
    }
}
