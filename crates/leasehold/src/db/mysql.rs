//! The MariaDB/MySQL backend of [`Database`] (`mysql://`, `mariadb://`, InnoDB tables): connecting
//! and the dialect. Writers wait on InnoDB row locks (up to `innodb_lock_wait_timeout`, 50 s by
//! default); sessions run in UTC (`time_zone = '+00:00'`, sqlx's default), so `NOW()` is the same
//! instant for every client.
//!
//! What differs from PostgreSQL, and how the guards cope: `?` placeholders (the guards' `$n` are
//! rewritten, and so are those of [`Tx::execute`](super::Tx::execute)); no `UPDATE … RETURNING`
//! (the row is read back in the same transaction, which sees its own write); `INSERT IGNORE` for
//! "insert unless the key exists"; an `ON DUPLICATE KEY UPDATE` that keeps the larger fence, then a
//! locking read (`FOR UPDATE`, which reads the last committed row, not the transaction's snapshot);
//! DDL commits implicitly, so migrations are serialised by `GET_LOCK` and each is safe to repeat.
//!
//! Promise: the guards' statements mean on MariaDB/MySQL what they mean on PostgreSQL: the same
//! rows locked, the same fence kept, the same duplicate refused.
//! Limit: what InnoDB promises at its settings: a server with `innodb_flush_log_at_trx_commit` other
//! than 1, or an asynchronous replica promoted, can lose the last commits, guards' rows included.

use std::future::Future;
use std::str::FromStr;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::pool::PoolConnection;
use sqlx::MySql;

use super::dialect::{Dialect, Driver};
use super::{Backend, Database, DatabaseBuilder, Pool};
use crate::{Error, Result};

/// MariaDB 10.5+ and MySQL 8 share everything used here; `VALUES(col)` in the upsert is deprecated
/// (not removed) in MySQL 8.0.20+, where it logs a warning.
///
pub(crate) static DIALECT: Dialect = Dialect {
    backend: Backend::MySql,
    begin: "BEGIN",
    now_ms: "SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)",
    for_update: " FOR UPDATE",
    insert_ignore: ("INSERT IGNORE INTO", ""),
    lock_before_insert: true,
    returning: false,
    question_marks: true,
    fence_upsert: "INSERT INTO leasehold_fences (resource, fence) VALUES ($1, $2) \
         ON DUPLICATE KEY UPDATE fence = GREATEST(fence, VALUES(fence))",
    migrator: &super::migrate::MYSQL,
    migrations_table: "CREATE TABLE IF NOT EXISTS leasehold_schema_migrations (
    version BIGINT PRIMARY KEY, description TEXT NOT NULL, checksum BLOB NOT NULL) ENGINE = InnoDB",
    migration_lock: Some("SELECT GET_LOCK('leasehold_migrate', 60)"),
    transactional_ddl: false,
};

/// Every session of a pool leasehold opens runs its transactions at READ COMMITTED, as on PostgreSQL,
/// not InnoDB's default REPEATABLE READ: there a locking read that finds no row takes a gap lock, gap
/// locks of different keys share a gap, and two transactions each inserting its own new key then
/// deadlock on each other's gap (under 200 concurrent first requests nearly every claim lost one). At
/// READ COMMITTED a locking read of a missing row locks nothing, and reads see the last committed
/// row, which the guards are written for. (Set per session, not per transaction: a `SET TRANSACTION`
/// is refused on a connection a task cancelled during its `BEGIN` left inside a transaction, where a
/// `BEGIN` commits that empty transaction and goes on.)
const SESSION_ISOLATION: &str = "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

impl Driver for MySql {
    const DIALECT: &'static Dialect = &DIALECT;

    /// A connection that a cancelled transaction left mid-reply is closed, not pooled.
    type Tx = MyTx;

    fn begin(
        pool: &sqlx::MySqlPool,
        begin: &'static str,
    ) -> impl Future<Output = sqlx::Result<Self::Tx>> + Send {
        MyTx::begin(pool, begin)
    }
}

/// Opens the pool.
pub(super) async fn connect(b: DatabaseBuilder) -> Result<Database> {
    if b.postgres_schema.is_some() {
        return Err(Error::invalid(
            "postgres schema",
            "a schema applies only to PostgreSQL; on MariaDB/MySQL name another database in the URL",
        ));
    }
    let options = MySqlConnectOptions::from_str(&b.url).map_err(|e| {
        Error::invalid(
            "database url",
            format!("cannot parse MariaDB/MySQL url: {e}"),
        )
    })?;
    let pool = MySqlPoolOptions::new()
        .max_connections(b.max_connections.unwrap_or(10))
        .acquire_timeout(b.acquire_timeout)
        .after_connect(|conn, _meta| {
            Box::pin(async move {
                sqlx::Executor::execute(&mut *conn, SESSION_ISOLATION).await?;
                Ok(())
            })
        })
        .connect_with(options)
        .await?;
    Ok(Database::new(Pool::MySql(pool)))
}

/// A MariaDB/MySQL transaction on a connection of the pool, which is **closed**, not returned to
/// the pool, when the transaction is dropped before its commit or rollback finished.
///
/// A task cancelled in the middle of a statement (aborted, timed out, its future dropped) leaves its
/// connection with a reply still on the way; sqlx's `Transaction` would hand that connection back to
/// the pool after a ping, and on MariaDB such a connection answered neither the ping nor the next
/// statement (a test that aborts consumers mid-transaction hung the pool: every connection idle on
/// the server, every client waiting). Closing it rolls the transaction back on the server just as
/// surely, and costs one new connection per abandoned transaction.
#[derive(Debug)]
pub(crate) struct MyTx {
    conn: PoolConnection<MySql>,
    /// Set before `BEGIN` is sent, cleared once `COMMIT` or `ROLLBACK` came back.
    open: bool,
}

impl MyTx {
    /// Takes a connection from `pool` and sends `begin` on it.
    pub(crate) async fn begin(pool: &sqlx::MySqlPool, begin: &'static str) -> sqlx::Result<Self> {
        let conn = pool.acquire().await?;
        let mut tx = MyTx { conn, open: true };
        sqlx::Executor::execute(&mut *tx.conn, begin).await?;
        Ok(tx)
    }

    /// `COMMIT`; the connection goes back to the pool once it is done.
    pub(crate) async fn commit(mut self) -> sqlx::Result<()> {
        sqlx::Executor::execute(&mut *self.conn, "COMMIT").await?;
        self.open = false;
        Ok(())
    }

    /// `ROLLBACK`; the connection goes back to the pool once it is done.
    pub(crate) async fn rollback(mut self) -> sqlx::Result<()> {
        sqlx::Executor::execute(&mut *self.conn, "ROLLBACK").await?;
        self.open = false;
        Ok(())
    }
}

impl Drop for MyTx {
    fn drop(&mut self) {
        if self.open {
            // Dropped mid-way (cancelled, an error, or simply not committed): the server rolls
            // back when the connection closes.
            self.conn.close_on_drop();
        }
    }
}

impl std::ops::Deref for MyTx {
    type Target = sqlx::MySqlConnection;
    fn deref(&self) -> &Self::Target {
        &self.conn
    }
}

impl std::ops::DerefMut for MyTx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.conn
    }
}

impl super::dialect::TypedBy<MySql> for MyTx {}
