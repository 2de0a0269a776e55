//! The SQLite backend of [`Database`]: a file in WAL mode (or one in-memory connection), writers that
//! queue on `BEGIN IMMEDIATE` and a busy timeout, and the dialect.
//!
//! Promise: writers of one file run one at a time (each transaction holds the write lock from its
//! `BEGIN IMMEDIATE`), so a guard's read-then-write is never interleaved with another's.
//! Limit: one machine: a file shared over a network file system gets no such promise; a writer waits at
//! most the busy timeout, then fails.

use std::str::FromStr;

use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
use sqlx::Sqlite;

use super::dialect::Dialect;
use super::tx::{Conn, TxInner};
use super::{Backend, Database, DatabaseBuilder, Pool};
use crate::{Error, Result};

/// SQLite (3.35+) shares PostgreSQL's upsert and `RETURNING`; every transaction holds the database's
/// write lock from its `BEGIN IMMEDIATE`, so no row lock is needed and none is asked for.
pub(crate) static DIALECT: Dialect = Dialect {
    backend: Backend::Sqlite,
    begin: "BEGIN IMMEDIATE",
    now_ms: "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
    for_update: "",
    insert_ignore: ("INSERT INTO", " ON CONFLICT DO NOTHING"),
    lock_before_insert: false,
    returning: true,
    question_marks: false,
    fence_upsert: super::dialect::FENCE_UPSERT_RETURNING,
    migrator: &super::migrate::SQLITE,
    migrations_table: "CREATE TABLE IF NOT EXISTS leasehold_schema_migrations (
    version INTEGER PRIMARY KEY, description TEXT NOT NULL, checksum BLOB NOT NULL)",
    migration_lock: None,
    transactional_ddl: true,
};

super::dialect::sqlx_driver!(Sqlite, &DIALECT);

/// Opens the pool: WAL and `synchronous = NORMAL` for a file, one connection kept for memory.
pub(super) async fn connect(b: DatabaseBuilder) -> Result<Database> {
    if b.postgres_schema.is_some() {
        return Err(Error::invalid(
            "postgres schema",
            "a schema applies only to PostgreSQL; use a separate SQLite file instead",
        ));
    }
    let options = SqliteConnectOptions::from_str(&b.url)
        .map_err(|e| Error::invalid("database url", format!("cannot parse SQLite url: {e}")))?;
    let in_memory = is_memory(&b.url);
    let options = options
        .create_if_missing(true)
        .busy_timeout(b.busy_timeout)
        .foreign_keys(true);
    let options = if in_memory {
        options
    } else {
        // WAL: readers do not block the writer; NORMAL sync is durable at checkpoints and safe
        // against application crashes, the usual pairing with WAL.
        options
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
    };
    let mut pool_options = SqlitePoolOptions::new()
        .max_connections(if in_memory {
            1
        } else {
            b.max_connections.unwrap_or(4)
        })
        .acquire_timeout(b.acquire_timeout)
        .after_release(|conn, _meta| {
            Box::pin(async move {
                // A task cancelled while its `BEGIN` was in flight can leave the connection inside
                // a transaction nothing owns (sqlx-sqlite hands the BEGIN's reply to a receiver
                // that may already be gone), holding the write lock. Let the worker finish what is
                // queued, then drop such a connection: closing rolls it back.
                sqlx::Connection::ping(&mut *conn).await?;
                Ok(!sqlx::Connection::is_in_transaction(&*conn))
            })
        });
    if in_memory {
        // The database lives only as long as its one connection.
        pool_options = pool_options
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None);
    }
    let pool = pool_options.connect_with(options).await?;
    Ok(Database::new(Pool::Sqlite(pool)))
}

fn is_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

impl From<sqlx::Transaction<'static, Sqlite>> for TxInner {
    fn from(t: sqlx::Transaction<'static, Sqlite>) -> Self {
        TxInner::Sqlite(t)
    }
}

impl<'a> From<&'a mut sqlx::SqliteConnection> for Conn<'a> {
    fn from(c: &'a mut sqlx::SqliteConnection) -> Self {
        Conn::Sqlite(c)
    }
}
