//! The demo's resource: a counter in an embedded SQLite file, plus a log of every increment that
//! committed. Promise: the log row and the counter update commit in one transaction, so
//! `value < committed increments` is proof of a lost update, read from data rather than from anyone's
//! say-so. Limit: it is a demonstration resource, not a library API.

use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

/// The counter resource in one SQLite file.
#[derive(Debug, Clone)]
pub(crate) struct Counter {
    pub(crate) pool: SqlitePool,
}

/// The statement a holder runs to read the counter (shown in the timeline).
pub(crate) const READ_SQL: &str = "SELECT value FROM counter WHERE id = 1";

impl Counter {
    /// Opens (creating if needed) the counter at `path`; several processes may open it.
    pub(crate) async fn open(path: &Path) -> anyhow::Result<Self> {
        let opts = SqliteConnectOptions::from_str(&super::stage::sqlite_url(path))?
            .create_if_missing(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(4)
            .connect_with(opts)
            .await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS counter (id INTEGER PRIMARY KEY, value INTEGER NOT NULL)",
        )
        .execute(&pool)
        .await?;
        sqlx::query("INSERT OR IGNORE INTO counter (id, value) VALUES (1, 0)")
            .execute(&pool)
            .await?;
        sqlx::query(
            "CREATE TABLE IF NOT EXISTS increments (writer TEXT NOT NULL, read_value INTEGER NOT NULL, wrote_value INTEGER NOT NULL)",
        )
        .execute(&pool)
        .await?;
        Ok(Counter { pool })
    }

    /// The counter's value.
    pub(crate) async fn read(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar(READ_SQL).fetch_one(&self.pool).await?)
    }

    /// Read-modify-write's write half, with no guard: `value = read + 1`, logged in the same
    /// transaction.
    pub(crate) async fn write_unguarded(&self, writer: &str, read: i64) -> anyhow::Result<()> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE counter SET value = ? WHERE id = 1")
            .bind(read + 1)
            .execute(&mut *tx)
            .await?;
        log_increment(&mut tx, writer, read).await?;
        tx.commit().await?;
        Ok(())
    }

    /// Increments that committed (rows of the log).
    pub(crate) async fn committed_increments(&self) -> anyhow::Result<i64> {
        Ok(sqlx::query_scalar("SELECT COUNT(*) FROM increments")
            .fetch_one(&self.pool)
            .await?)
    }
}

/// Logs one increment inside the caller's transaction.
pub(crate) async fn log_increment(
    tx: &mut sqlx::SqliteConnection,
    writer: &str,
    read: i64,
) -> sqlx::Result<()> {
    sqlx::query("INSERT INTO increments (writer, read_value, wrote_value) VALUES (?, ?, ?)")
        .bind(writer)
        .bind(read)
        .bind(read + 1)
        .execute(&mut *tx)
        .await?;
    Ok(())
}
