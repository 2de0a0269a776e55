//! The MariaDB/MySQL store (`mysql://`, `mariadb://`): the lease in the database you already have. A
//! lease is a row of `leasehold_leases` (created by [`Database::migrate`](crate::db::Database::migrate)
//! or `leasehold migrate`) holding the holder's token and its expiry by the database clock.
//!
//! Promise: expiry is judged by the database server's clock alone (`UTC_TIMESTAMP(6)`), never a
//! client's. The fence is minted under the name's row lock as `max(stored + 1, server µs)`, so it is
//! larger than every fence issued for the name before, also after the row was swept, after a crash
//! that lost the last commits (`innodb_flush_log_at_trx_commit` other than 1) and after a restore,
//! as long as the server's clock did not step back by more than the time passed. Waiters block on a
//! named lock the holder's wake session holds ([`wake`]) instead of polling. Idle rows are deleted
//! after the retention ([`sweep`]).
//! Limit: what the server committed is what it promises: a failover to an asynchronous replica that
//! missed the last commits loses those leases (their holders are told at their next renewal), and
//! fences then rest on the new server's clock being ahead. A forward jump of the server's clock
//! expires leases early.
//!
//! Layout (the floor plan of every store): `connect` (URL, pool, the check at connect), `errors`
//! (the driver's errors in the crate's terms), `sql/` (one `.sql` file per statement), `wake` (waiting
//! on named locks), `sweep` (idle rows), `inspect` (status and list).

mod connect;
mod errors;
mod inspect;
mod sweep;
mod wake;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use sqlx::{MySqlConnection, MySqlPool};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::errors::{classify, is_stale_connection};
use self::wake::{lock_name, Wake};
use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::{
    Attempt, ForcedRelease, Grant, Held, LeaseInfo, Request, Settings, Store, StoreKind, StoreMeta,
};

/// The table the leases live in, for messages and status output.
const TABLE: &str = "leasehold_leases";

/// Longest prefix and name the table's key columns take (`VARCHAR(255)`, bytes checked here).
const MAX_KEY_LEN: usize = 255;

/// Leases in one MariaDB/MySQL database. Shared as `Arc<dyn Store>`.
pub(crate) struct MySqlStore {
    /// What every call needs, shared with the tasks acquires run in.
    core: Arc<Core>,
    /// Stops the sweeper when the store is dropped.
    sweeper: CancellationToken,
}

/// The connections and settings every statement goes through.
struct Core {
    /// Connections for the lease statements.
    pool: MySqlPool,
    /// The wake session (the named locks of the leases held here) and the waiters' sessions.
    wake: Wake,
    /// Namespace of the names (the `prefix` column).
    prefix: Arc<str>,
    /// Bound on one statement's reply; the base of every call's overall bound.
    response_timeout: Duration,
    /// Bound on opening a connection.
    connect_timeout: Duration,
    /// Its kind, the URL without its password, and the statements sent.
    meta: StoreMeta,
}

impl std::fmt::Debug for MySqlStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MySqlStore")
            .field("url", &self.core.meta.location())
            .field("prefix", &self.core.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for MySqlStore {
    fn drop(&mut self) {
        self.sweeper.cancel();
    }
}

/// The row of a name as the transaction that locked it read it (`sql/locked_row.sql`).
struct Locked {
    token: Option<String>,
    fence: i64,
    live: bool,
    remaining_us: Option<i64>,
    now_us: i64,
}

/// The columns of `sql/locked_row.sql`, in order.
type LockedRow = (Option<String>, i64, bool, Option<i64>, i64);

impl From<LockedRow> for Locked {
    fn from((token, fence, live, remaining_us, now_us): LockedRow) -> Self {
        Locked {
            token,
            fence,
            live,
            remaining_us,
            now_us,
        }
    }
}

impl Locked {
    /// The fence the next holder gets: above the stored one, and floored by the server clock so
    /// that it stays above every fence issued before the row was deleted.
    fn next_fence(&self) -> i64 {
        self.fence.saturating_add(1).max(self.now_us)
    }
}

fn fence_of(phase: Phase, value: i64) -> Result<Fence> {
    u64::try_from(value).map(Fence::new).map_err(|_| {
        errors::from_sqlx(
            phase,
            sqlx::Error::Protocol(format!("a lease statement returned fence {value}")),
        )
    })
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

fn key(prefix: &str, name: &str) -> String {
    format!("{TABLE}[prefix={prefix}, name={name}]")
}

impl MySqlStore {
    /// Connects and checks the schema once (see [`connect::connect`]). The store does not create
    /// its table: `leasehold migrate` (or `Database::migrate()`) does, once.
    pub(crate) async fn connect(url: &crate::url::StoreUrl, settings: Settings) -> Result<Self> {
        connect::connect(url, settings).await
    }
}

impl Core {
    /// Overall bound of one call: a statement (or a short transaction) on a connection that turns
    /// out stale, a reconnect, and the call again.
    fn limit(&self) -> Duration {
        self.response_timeout * 4 + self.connect_timeout * 2
    }

    /// One statement `sql` that changes the row of `name` only while it holds `token` (bound after
    /// `first` and the prefix), run as [`Self::run`] runs it: whether it did.
    async fn while_held<A>(
        &self,
        phase: Phase,
        sql: &'static str,
        first: A,
        name: &str,
        token: &str,
    ) -> Result<bool>
    where
        A: for<'q> sqlx::Encode<'q, sqlx::MySql>
            + sqlx::Type<sqlx::MySql>
            + Clone
            + Send
            + Sync
            + 'static,
    {
        self.run(phase, 1, |conn| {
            let (first, prefix, name, token) = (
                first.clone(),
                self.prefix.clone(),
                name.to_owned(),
                token.to_owned(),
            );
            Box::pin(async move {
                let r = sqlx::query(sql)
                    .bind(first)
                    .bind(&*prefix)
                    .bind(&name)
                    .bind(&token)
                    .execute(conn)
                    .await?;
                Ok(r.rows_affected() == 1)
            })
        })
        .await
    }

    /// Runs `call` on a pooled connection within [`Self::limit`]. A connection that turns out dead
    /// (the server restarted) is dropped and the call run once more on a new one: every lease call
    /// has the same effect run twice.
    async fn run<T: Send>(
        &self,
        phase: Phase,
        statements: u64,
        call: impl for<'c> Fn(&'c mut MySqlConnection) -> BoxFuture<'c, sqlx::Result<T>> + Send + Sync,
    ) -> Result<T> {
        let attempt = async {
            let mut conn = self.pool.acquire().await?;
            self.meta.count(statements);
            match call(&mut conn).await {
                Err(e) if is_stale_connection(&e) => {
                    conn.detach();
                    tracing::debug!(error = %e, "a pooled connection was dead; retrying on a new one");
                    let mut conn = self.pool.acquire().await?;
                    self.meta.count(statements);
                    call(&mut conn).await
                }
                other => other,
            }
        };
        let limit = self.limit();
        match tokio::time::timeout(limit, attempt).await {
            Ok(r) => r.map_err(|e| match e {
                sqlx::Error::PoolTimedOut => Error::Timeout {
                    phase,
                    after: self.connect_timeout,
                },
                e => classify(phase, self.meta.location())(e),
            }),
            Err(_) => Err(Error::Timeout {
                phase,
                after: limit,
            }),
        }
    }

    /// One transaction: lock the name's row, read it, take it if it is free (or already ours: a
    /// retried acquire gets the same fence).
    async fn acquire(&self, name: &str, token: &str, ttl: Duration) -> Result<Attempt> {
        let sent_at = Instant::now();
        let ttl_us = micros(ttl);
        let outcome = self
            .run(Phase::Acquire, 5, |conn| {
                let (prefix, name, token) =
                    (self.prefix.clone(), name.to_owned(), token.to_owned());
                Box::pin(async move {
                    let (prefix, name, token) = (&*prefix, name.as_str(), token.as_str());
                    let mut tx = sqlx::Connection::begin(conn).await?;
                    let row = lock_row(&mut tx, prefix, name).await?;
                    if row.live && row.token.as_deref() != Some(token) {
                        tx.commit().await?;
                        return Ok(Err(row.remaining_us));
                    }
                    let fence = if row.live {
                        row.fence
                    } else {
                        row.next_fence()
                    };
                    sqlx::query(include_str!("sql/take.sql"))
                        .bind(token)
                        .bind(fence)
                        .bind(ttl_us)
                        .bind(prefix)
                        .bind(name)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok(Ok(fence))
                })
            })
            .await?;
        match outcome {
            Ok(fence) => Ok(Attempt::Taken(Grant {
                fence: fence_of(Phase::Acquire, fence)?,
                since: sent_at,
                ttl,
                wakes_next: false,
            })),
            Err(remaining_us) => Ok(Attempt::Busy {
                remaining: remaining_us
                    .and_then(|us| u64::try_from(us).ok())
                    .filter(|us| *us > 0)
                    .map(Duration::from_micros),
            }),
        }
    }

    /// Compare-and-free, then whether the last release was ours (a retry of a release whose
    /// answer was lost says released too); then frees the wake lock, waking waiters.
    async fn release(&self, name: &str, token: &str) -> Result<bool> {
        let released = self
            .run(Phase::Release, 2, |conn| {
                let (prefix, name, token) =
                    (self.prefix.clone(), name.to_owned(), token.to_owned());
                Box::pin(async move {
                    let (prefix, name, token) = (&*prefix, name.as_str(), token.as_str());
                    let live = sqlx::query(include_str!("sql/release_live.sql"))
                        .bind(prefix)
                        .bind(name)
                        .bind(token)
                        .execute(&mut *conn)
                        .await?;
                    if live.rows_affected() == 1 {
                        return Ok(true);
                    }
                    sqlx::query(include_str!("sql/release.sql"))
                        .bind(prefix)
                        .bind(name)
                        .bind(token)
                        .execute(&mut *conn)
                        .await?;
                    let last: Option<Option<String>> =
                        sqlx::query_scalar(include_str!("sql/released.sql"))
                            .bind(prefix)
                            .bind(name)
                            .fetch_optional(&mut *conn)
                            .await?;
                    Ok(last.flatten().as_deref() == Some(token))
                })
            })
            .await?;
        self.wake
            .free(&lock_name(&self.prefix, name), self.response_timeout)
            .await;
        Ok(released)
    }

    async fn renew(&self, name: &str, token: &str, ttl: Duration) -> Result<bool> {
        let sql = include_str!("sql/renew.sql");
        self.while_held(Phase::Renew, sql, micros(ttl), name, token)
            .await
    }

    /// One statement: the note, if the row still holds `token`.
    async fn write_note(&self, name: &str, token: &str, note: &[u8]) -> Result<bool> {
        let sql = include_str!("sql/write_note.sql");
        self.while_held(Phase::Note, sql, note.to_vec(), name, token)
            .await
    }

    /// One statement.
    async fn read_note(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.run(Phase::Inspect, 1, |conn| {
            let (prefix, name) = (self.prefix.clone(), name.to_owned());
            Box::pin(async move {
                let row: Option<(Option<Vec<u8>>,)> =
                    sqlx::query_as(include_str!("sql/read_note.sql"))
                        .bind(&*prefix)
                        .bind(&name)
                        .fetch_optional(conn)
                        .await?;
                Ok(row.and_then(|(note,)| note))
            })
        })
        .await
    }

    /// One statement: `NOW(3)` as milliseconds since the epoch.
    async fn wall_clock_ms(&self) -> Result<Option<i64>> {
        self.run(Phase::Inspect, 1, |conn| {
            Box::pin(async move {
                let (ms,): (i64,) =
                    sqlx::query_as("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)")
                        .fetch_one(conn)
                        .await?;
                Ok(Some(ms))
            })
        })
        .await
    }

    /// The operator's override, in one transaction under the row's lock.
    async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        let (evicted, fence) = self
            .run(Phase::Release, 5, |conn| {
                let (prefix, name) = (self.prefix.clone(), name.to_owned());
                Box::pin(async move {
                    let (prefix, name) = (&*prefix, name.as_str());
                    let mut tx = sqlx::Connection::begin(conn).await?;
                    let row = lock_row(&mut tx, prefix, name).await?;
                    let fence = row.next_fence();
                    sqlx::query(include_str!("sql/force.sql"))
                        .bind(fence)
                        .bind(prefix)
                        .bind(name)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    Ok((row.live, fence))
                })
            })
            .await?;
        Ok(ForcedRelease {
            evicted,
            fence: fence_of(Phase::Release, fence)?,
        })
    }
}

/// Makes sure the name's row exists and locks it, then reads it: two statements in the caller's
/// transaction.
async fn lock_row(conn: &mut MySqlConnection, prefix: &str, name: &str) -> sqlx::Result<Locked> {
    sqlx::query(include_str!("sql/ensure_row.sql"))
        .bind(prefix)
        .bind(name)
        .execute(&mut *conn)
        .await?;
    sqlx::query_as::<_, LockedRow>(include_str!("sql/locked_row.sql"))
        .bind(prefix)
        .bind(name)
        .fetch_one(conn)
        .await
        .map(Locked::from)
}

impl StoreKind {
    /// A table in a MariaDB or MySQL database (`mysql://`, `mariadb://`).
    pub const MYSQL: StoreKind = StoreKind::new("mysql");
}

#[async_trait]
impl Store for MySqlStore {
    fn meta(&self) -> &StoreMeta {
        &self.core.meta
    }

    fn check_name(&self, name: &str) -> Result<()> {
        crate::lease::names::validate_name(name)?;
        if name.len() > MAX_KEY_LEN {
            return Err(Error::invalid(
                "lease name",
                format!(
                    "it is {} bytes long; the MariaDB store takes at most {MAX_KEY_LEN}",
                    name.len()
                ),
            ));
        }
        Ok(())
    }

    fn key_of(&self, name: &str) -> String {
        key(&self.core.prefix, name)
    }

    /// One transaction, run in a task of its own: a caller cancelled while it is in flight cannot
    /// cut it off half-way; the task finishes, and releases what it took when nobody waits for the
    /// answer any more. A lease taken is followed by its wake lock.
    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt> {
        if req.opts.replicas.is_some() {
            return Err(Error::invalid(
                "replica wait",
                "it applies to Redis only; with MariaDB, use semi-synchronous replication \
                 (rpl_semi_sync_master_enabled) so that a commit waits for a replica",
            ));
        }
        let (core, name, token) = (self.core.clone(), req.name.to_owned(), req.token.to_owned());
        let ttl = req.opts.ttl;
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let mut r = core.acquire(&name, &token, ttl).await;
            if let Ok(Attempt::Taken(grant)) = &mut r {
                let lock = lock_name(&core.prefix, &name);
                core.wake.clear(&lock);
                grant.wakes_next = core.wake.hold(&lock, core.response_timeout).await;
            }
            if let Err(Ok(Attempt::Taken(_))) = tx.send(r) {
                // The caller is gone: release what it will never hold.
                let _ = core.release(&name, &token).await;
            }
        });
        rx.await.unwrap_or_else(|_| {
            Err(Error::invalid(
                "acquire",
                "the acquiring task ended without an answer (runtime shutting down?)",
            ))
        })
    }

    /// Blocks on the name's wake lock (see [`wake`]) for at most `block`.
    async fn wait_turn(&self, req: &Request<'_>, block: Duration) -> Result<super::Turn> {
        let lock = lock_name(&self.core.prefix, req.name);
        self.core.wake.wait(&lock, block).await;
        Ok(super::Turn::AskAgain)
    }

    /// One statement per lease.
    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let mut out = Vec::with_capacity(held.len());
        for h in held {
            let renewed = self.core.renew(h.name, h.token, h.opts.ttl).await?;
            if !renewed {
                // Not ours any more: its waiters should not wait on our wake lock.
                let lock = lock_name(&self.core.prefix, h.name);
                self.core.wake.free(&lock, self.core.response_timeout).await;
            }
            out.push(Ok(renewed));
        }
        Ok(out)
    }

    /// Two statements per lease, and the wake lock freed.
    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let mut out = Vec::with_capacity(held.len());
        for h in held {
            out.push(Ok(self.core.release(h.name, h.token).await?));
        }
        Ok(out)
    }

    async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        self.core.force_release(name).await
    }

    async fn write_note(&self, held: &Held<'_>, note: &[u8]) -> Result<bool> {
        self.core.write_note(held.name, held.token, note).await
    }

    async fn read_note(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.core.read_note(name).await
    }

    async fn wall_clock_ms(&self) -> Result<Option<i64>> {
        self.core.wall_clock_ms().await
    }

    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        inspect::inspect(&self.core, names).await
    }

    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        inspect::list(&self.core, pattern).await
    }
}
