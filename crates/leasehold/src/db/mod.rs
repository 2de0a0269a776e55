//! The database handle shared by the SQL guards ([`crate::fence`], [`crate::idempotency`],
//! [`crate::inbox`], [`crate::state`]) and the migrations leasehold ships.
//!
//! Promise: one [`Database`] type over PostgreSQL or SQLite (chosen from the URL), one transaction type
//! [`Tx`] in which leasehold's guards and your own business writes commit or roll back together, and
//! writers that *wait* for each other rather than fail (row locks on PostgreSQL; `BEGIN IMMEDIATE`, WAL
//! and a busy timeout on SQLite). Limit: it does not translate SQL dialects; write portable SQL (use
//! `$1, $2, ...` placeholders, which both backends accept) or match on [`Conn`].
//!
//! Features: the handle needs leasehold's `postgres` or `sqlite` feature (both are on by default) and
//! speaks only to the backends compiled in; a URL for another one is refused with an error naming the
//! feature to enable. The metric names in [`metrics`] are here whatever the features.
//!
//! ```no_run
//! # #[cfg(any(feature = "postgres", feature = "sqlite"))]
//! # async fn demo() -> leasehold::Result<()> {
//! use leasehold::db::Database;
//!
//! let db = Database::connect("sqlite:/tmp/app.db").await?; // or postgres://user@host/db
//! db.migrate().await?; // creates the leasehold_* tables (idempotent, safe to run concurrently)
//!
//! let mut tx = db.begin().await?;
//! let rows = leasehold::with_conn!(tx, |conn| {
//!     sqlx::query("UPDATE accounts SET balance = balance - $1 WHERE id = $2")
//!         .bind(10_i64)
//!         .bind("acct-1")
//!         .execute(conn)
//!         .await
//!         .map(|r| r.rows_affected())
//! })?;
//! tx.commit().await?;
//! # let _ = rows; Ok(()) }
//! ```

pub mod metrics;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod database;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
mod migrate;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use database::{check_identifier, missing_tables_hint, Pool};
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub use database::{Backend, Conn, Database, DatabaseBuilder, Param, Tx};

/// Refuses an empty key or one longer than 255 bytes (keys, resource names, message ids, item ids).
/// Shared by the SQL guards and the Redis fenced write.
#[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
pub(crate) fn check_key(what: &'static str, key: &str) -> crate::Result<()> {
    use crate::Error;

    if key.is_empty() {
        Err(Error::invalid(what, "must not be empty"))
    } else if key.len() > 255 {
        Err(Error::invalid(
            what,
            format!(
                "is {} bytes; at most 255 are allowed (hash a longer key first)",
                key.len()
            ),
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
#[cfg(any(feature = "redis", feature = "postgres", feature = "sqlite"))]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded() {
        assert!(check_key("key", "").is_err());
        assert!(check_key("key", &"k".repeat(256)).is_err());
        assert!(check_key("key", &"k".repeat(255)).is_ok());
    }
}
