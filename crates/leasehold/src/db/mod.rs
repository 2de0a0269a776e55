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
//! # #[cfg(feature = "sql")]
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

/// Matches a [`Pool`](database::Pool) or a `TxInner` of whichever backend it is and runs `$body`
/// with `$x` bound to that backend's sqlx value: the one place that lists the backends' arms, so
/// that code over them is written once and compiled per backend.
#[cfg(feature = "sql")]
macro_rules! on_backend {
    ($value:expr, $enum:ident, $x:ident => $body:expr) => {
        match $value {
            #[cfg(feature = "postgres")]
            $enum::Postgres($x) => $body,
            #[cfg(feature = "sqlite")]
            $enum::Sqlite($x) => $body,
            #[cfg(feature = "mysql")]
            $enum::MySql($x) => $body,
        }
    };
}

#[cfg(feature = "sql")]
mod database;
#[cfg(feature = "sql")]
mod dialect;
#[cfg(feature = "sql")]
mod migrate;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "sql")]
mod tx;

#[cfg(feature = "sql")]
pub(crate) use database::{
    check_identifier, deadlock_backoff, is_deadlock, missing_tables_hint, Pool, DEADLOCK_RETRIES,
};
#[cfg(feature = "sql")]
pub use database::{Backend, Database, DatabaseBuilder};
#[cfg(feature = "sql")]
pub use tx::{Conn, Param, Tx};

/// Refuses an empty key or one longer than 255 bytes (keys, resource names, message ids, item ids).
/// Shared by the SQL guards and the Redis fenced write.
#[cfg(any(feature = "redis", feature = "sql"))]
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
#[cfg(any(feature = "redis", feature = "sql"))]
mod tests {
    use super::*;

    #[test]
    fn keys_are_bounded() {
        assert!(check_key("key", "").is_err());
        assert!(check_key("key", &"k".repeat(256)).is_err());
        assert!(check_key("key", &"k".repeat(255)).is_ok());
    }
}
