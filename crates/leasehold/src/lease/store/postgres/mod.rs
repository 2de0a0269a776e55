//! The PostgreSQL store: the lease in the database you already have. A lease is a row of
//! `leasehold_leases` (created by [`Database::migrate`](crate::db::Database::migrate)) holding the
//! holder's token and its expiry by the database clock; each call is one SQL statement.
//!
//! Promise: expiry is judged by the database server's clock alone (`clock_timestamp()`), never a
//! client's; the fence comes from one sequence, drawn under the name's advisory lock, so it is larger
//! than every fence issued for the name before, also after a restart or crash of PostgreSQL (the
//! sequence skips ahead, never back) and after the name's row was deleted. A release notifies
//! (`NOTIFY`) when someone waits, and waiters `LISTEN` on a session of their own instead of polling;
//! observers of an election hear its changes on another channel of the same session.
//! Idle rows (released or expired) are deleted after the idle retention.
//! Limit: what PostgreSQL has committed is what it promises: a restore from a backup or a failover
//! to an asynchronous standby that missed the last commits can hand out a fence again (or lose a
//! held lease). A forward jump of the database server's clock expires leases early. A lost
//! notification costs a waiter at most the holder's remaining time.
//!
//! Layout: `statements` (one `.sql` file per statement under `sql/`, each behind one function),
//! `conn` (a few plain connections, one round trip per call), `listen` (the listening session and
//! the per-name wake-ups), `sweep` (deleting idle rows).

mod conn;
mod connect;
mod errors;
mod inspect;
mod listen;
mod statements;
mod sweep;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::query::QueryAs;
use sqlx::{FromRow, Postgres};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use self::conn::Conns;
use self::errors::{from_sqlx, pg_error};
use self::listen::Listener;
use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::{
    Attempt, Changes, ForcedRelease, Grant, Held, LeaseInfo, Request, Store, StoreKind, StoreMeta,
    Turn,
};

/// The table the leases live in, for messages and status output.
const TABLE: &str = "leasehold_leases";

/// Longest key prefix accepted: prefix and name travel together in a notification, whose payload
/// PostgreSQL limits to 8000 bytes.
const MAX_PREFIX_LEN: usize = 256;

/// Names inspected by one statement.
const INSPECT_CHUNK: usize = 1_000;

/// Leases in one PostgreSQL database (the schema the URL's `search_path` names, `public` by
/// default). Shared as `Arc<dyn Store>`.
pub(crate) struct PostgresStore {
    /// What every call needs, shared with the tasks acquires run in.
    core: Arc<Core>,
    /// The listening session and the wake-ups of this process's waiters.
    listener: Listener,
    /// Stops the sweeper when the store is dropped.
    sweeper: CancellationToken,
}

/// The connections and settings every statement goes through.
struct Core {
    /// Connections for the lease statements.
    conns: Conns,
    /// Namespace of the names (the `prefix` column).
    prefix: Arc<str>,
    /// Bound on one statement's reply; the base of every call's overall bound.
    response_timeout: Duration,
    /// Bound on opening a connection.
    connect_timeout: Duration,
    /// Its kind, the URL without its password, and the statements sent (counted by `conns`).
    meta: StoreMeta,
}

impl std::fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.core.meta.location())
            .field("prefix", &self.core.prefix)
            .field("conns", &self.core.conns)
            .finish_non_exhaustive()
    }
}

impl Drop for PostgresStore {
    fn drop(&mut self) {
        self.sweeper.cancel();
        self.core.conns.clear();
    }
}

fn fence_of(phase: Phase, value: i64) -> Result<Fence> {
    u64::try_from(value).map(Fence::new).map_err(|_| {
        from_sqlx(
            phase,
            sqlx::Error::Protocol(format!("a lease statement returned fence {value}")),
        )
    })
}

fn remaining(ms: Option<i64>) -> Option<Duration> {
    ms.and_then(|m| u64::try_from(m).ok())
        .filter(|m| *m > 0)
        .map(Duration::from_millis)
}

fn key(prefix: &str, name: &str) -> String {
    format!("{TABLE}[prefix={prefix}, name={name}]")
}

impl Core {
    /// Overall bound of one call: a statement on a connection that turns out stale, a reconnect,
    /// and the statement again.
    fn limit(&self) -> Duration {
        self.response_timeout * 2 + self.connect_timeout * 2
    }

    /// Runs the statement `make` builds and reads every row, within [`Self::limit`]. A connection
    /// that had sat idle and turns out dead is replaced and the statement sent once more (every
    /// lease statement has the same effect run twice).
    async fn fetch_all<R>(
        &self,
        phase: Phase,
        make: impl Fn() -> QueryAs<'static, Postgres, R, PgArguments> + Send,
    ) -> Result<Vec<R>>
    where
        R: for<'r> FromRow<'r, PgRow> + Send + Unpin,
    {
        let call = async {
            let mut lent = self.conns.get(false).await?;
            let first = make().fetch_all(lent.for_statement()).await;
            match first {
                Ok(rows) => {
                    lent.done();
                    Ok(rows)
                }
                Err(e) if lent.reused && Conns::is_stale(&e) => {
                    drop(lent);
                    // The others idle since the same restart are dead too.
                    self.conns.clear();
                    tracing::debug!(error = %e, "a pooled connection was dead; retrying on a new one");
                    let mut lent = self.conns.get(true).await?;
                    let rows = make().fetch_all(lent.for_statement()).await;
                    if rows.is_ok() || matches!(rows, Err(sqlx::Error::Database(_))) {
                        lent.done();
                    }
                    rows
                }
                Err(e) => {
                    // The server answered with an error: the connection itself is fine.
                    if matches!(e, sqlx::Error::Database(_)) {
                        lent.done();
                    }
                    Err(e)
                }
            }
        };
        let limit = self.limit();
        match tokio::time::timeout(limit, call).await {
            Ok(r) => r.map_err(|e| match e {
                sqlx::Error::PoolTimedOut => Error::Timeout {
                    phase,
                    after: self.connect_timeout,
                },
                e => pg_error(phase, self.meta.location())(e),
            }),
            Err(_) => Err(Error::Timeout {
                phase,
                after: limit,
            }),
        }
    }

    /// acquire.sql, one statement.
    async fn acquire(
        &self,
        name: String,
        token: String,
        ttl: Duration,
        wait: Duration,
    ) -> Result<Attempt> {
        let prefix = self.prefix.to_string();
        let sent_at = Instant::now();
        let rows = self
            .fetch_all(Phase::Acquire, || {
                statements::acquire(prefix.clone(), name.clone(), token.clone(), ttl, wait)
            })
            .await?;
        Ok(match rows.first() {
            Some(&(true, fence, waiting, _)) => Attempt::Taken(Grant {
                fence: fence_of(Phase::Acquire, fence)?,
                since: sent_at,
                ttl,
                wakes_next: waiting,
            }),
            Some(&(false, _, _, remaining_ms)) => Attempt::Busy {
                remaining: remaining(remaining_ms),
            },
            None => Attempt::Busy { remaining: None },
        })
    }

    /// release.sql over `held` in chunks; per item whether it held our token.
    async fn release(&self, held: &[(String, String)]) -> Result<Vec<Result<bool>>> {
        let mut out = Vec::with_capacity(held.len());
        for chunk in held.chunks(statements::CHUNK) {
            let prefix = self.prefix.to_string();
            let names: Vec<String> = chunk.iter().map(|h| h.0.clone()).collect();
            let tokens: Vec<String> = chunk.iter().map(|h| h.1.clone()).collect();
            let rows = self
                .fetch_all(Phase::Release, || {
                    statements::release(prefix.clone(), names.clone(), tokens.clone())
                })
                .await?;
            let released: HashSet<(String, String)> = rows
                .into_iter()
                .filter(|r| r.2)
                .map(|(name, token, _, _)| (name, token))
                .collect();
            out.extend(chunk.iter().map(|h| Ok(released.contains(h))));
        }
        Ok(out)
    }
}

impl StoreKind {
    /// A table in a PostgreSQL database (`postgres://`, `postgresql://`).
    pub const POSTGRES: StoreKind = StoreKind::new("postgres");
}

#[async_trait]
impl Store for PostgresStore {
    fn meta(&self) -> &StoreMeta {
        &self.core.meta
    }

    fn key_of(&self, name: &str) -> String {
        key(&self.core.prefix, name)
    }

    /// One statement, run in a task of its own: a caller cancelled while it is in flight cannot
    /// cut it off half-way (the server would still commit a statement it received, and a release
    /// sent meanwhile on another connection could overtake it); the task finishes, and releases
    /// what it took when nobody waits for the answer any more. When the caller may wait, the
    /// listening session is started first (once), so that the release it waits for cannot be
    /// notified before anyone listens.
    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt> {
        if req.opts.replicas.is_some() {
            return Err(Error::invalid(
                "replica wait",
                "it applies to Redis only; with PostgreSQL, configure synchronous replication \
                 (synchronous_standby_names) so that a commit waits for a standby",
            ));
        }
        if !req.wait.is_zero() {
            self.listener.ensure().await;
        }
        let (core, name, token) = (self.core.clone(), req.name.to_owned(), req.token.to_owned());
        let (ttl, wait) = (req.opts.ttl, req.wait);
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let r = core.acquire(name.clone(), token.clone(), ttl, wait).await;
            if let Err(Ok(Attempt::Taken(_))) = tx.send(r) {
                // The caller is gone: release what it will never hold.
                let _ = core.release(&[(name, token)]).await;
            }
        });
        rx.await.unwrap_or_else(|_| {
            Err(Error::invalid(
                "acquire",
                "the acquiring task ended without an answer (runtime shutting down?)",
            ))
        })
    }

    /// Waits for a notification of `req.name`'s release (or one that came since the busy answer),
    /// for at most `block`. Blocks no connection: the listening session serves every waiter.
    async fn wait_turn(&self, req: &Request<'_>, block: Duration) -> Result<Turn> {
        self.listener.ensure().await;
        let wake = self.listener.wakeups.of(req.name);
        let woken = tokio::time::timeout(block, wake.notified()).await.is_ok();
        tracing::trace!(woken, "lease notification");
        Ok(Turn::AskAgain)
    }

    /// One statement per chunk of [`statements::CHUNK`] leases.
    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let mut out = Vec::with_capacity(held.len());
        for chunk in held.chunks(statements::CHUNK) {
            let prefix = self.core.prefix.to_string();
            let names: Vec<String> = chunk.iter().map(|h| h.name.to_owned()).collect();
            let tokens: Vec<String> = chunk.iter().map(|h| h.token.to_owned()).collect();
            let ttls: Vec<Duration> = chunk.iter().map(|h| h.opts.ttl).collect();
            let rows = self
                .core
                .fetch_all(Phase::Renew, || {
                    statements::renew(prefix.clone(), names.clone(), tokens.clone(), ttls.clone())
                })
                .await?;
            let renewed: HashSet<(String, String)> = rows.into_iter().collect();
            out.extend(
                chunk
                    .iter()
                    .map(|h| Ok(renewed.contains(&(h.name.to_owned(), h.token.to_owned())))),
            );
        }
        Ok(out)
    }

    /// One statement per chunk of [`statements::CHUNK`] leases, notifications included.
    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let held: Vec<(String, String)> = held
            .iter()
            .map(|h| (h.name.to_owned(), h.token.to_owned()))
            .collect();
        self.core.release(&held).await
    }

    async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        let (prefix, name) = (self.core.prefix.to_string(), name.to_owned());
        let rows = self
            .core
            .fetch_all(Phase::Release, || {
                statements::force_release(prefix.clone(), name.clone())
            })
            .await?;
        let &(evicted, fence, _, _) = rows
            .first()
            .ok_or_else(|| from_sqlx(Phase::Release, sqlx::Error::RowNotFound))?;
        Ok(ForcedRelease {
            evicted,
            fence: fence_of(Phase::Release, fence)?,
        })
    }

    /// The listening session's change channel: a leader's record written, a release of a row that
    /// carries a note, a forced release, each notified in the transaction that made it.
    async fn changes(&self, name: &str) -> Result<Option<Changes>> {
        if !self.listener.ensure().await {
            return Ok(None);
        }
        Ok(Some(Changes::new(
            self.listener.observers.subscribe(name),
            (),
        )))
    }

    async fn write_note(&self, held: &Held<'_>, note: &[u8]) -> Result<bool> {
        let (prefix, name, token) = (
            self.core.prefix.to_string(),
            held.name.to_owned(),
            held.token.to_owned(),
        );
        let rows = self
            .core
            .fetch_all(Phase::Note, || {
                statements::write_note(prefix.clone(), name.clone(), token.clone(), note.to_vec())
            })
            .await?;
        Ok(!rows.is_empty())
    }

    async fn read_note(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let (prefix, name) = (self.core.prefix.to_string(), name.to_owned());
        let rows = self
            .core
            .fetch_all(Phase::Inspect, || {
                statements::read_note(prefix.clone(), name.clone())
            })
            .await?;
        Ok(rows.into_iter().next().and_then(|(note,)| note))
    }

    /// One statement: `clock_timestamp()` (the time now, not the transaction's start).
    async fn wall_clock_ms(&self) -> Result<Option<i64>> {
        let rows = self
            .core
            .fetch_all(Phase::Inspect, statements::wall_clock_ms)
            .await?;
        Ok(rows.into_iter().next().map(|(ms,)| ms))
    }

    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        self.core.inspect(names).await
    }

    /// Every name under the prefix with a row (held, or idle within the retention) whose name
    /// matches the glob.
    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        self.core.list(pattern).await
    }
}
