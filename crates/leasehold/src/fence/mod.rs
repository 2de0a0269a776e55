//! Resource-side fencing: the resource keeps the highest fence it has accepted and refuses writers that
//! present an older one, in the same transaction as the business write.
//!
//! Promise: once a writer with fence `n` has committed, no writer with a fence `< n` can commit to that
//! resource. Limit: it protects only writes that go through it, and only against holders whose lease
//! was superseded (a newer fence was issued and used); it does not stop two writers with the same fence.
//!
//! # SQL (PostgreSQL and SQLite; features `postgres`, `sqlite`)
//!
//! [`Database::begin_fenced`](crate::db::Database::begin_fenced) opens a transaction and, first thing,
//! upserts the presented fence into `leasehold_fences` only if it is `>=` the stored one. A stale fence
//! fails with [`Error::StaleFence`](crate::Error::StaleFence) and the transaction is rolled back, so
//! nothing of that writer is committed. The upsert locks the resource's row (PostgreSQL) or the database
//! (SQLite, `BEGIN IMMEDIATE`) until commit, so writers of one resource run one after another and a
//! read-modify-write inside the transaction is safe. The same fence again is accepted (one holder
//! writing twice).
//!
//! ```no_run
//! # #[cfg(feature = "sql")]
//! # async fn demo(lease_fence: leasehold::Fence) -> leasehold::Result<()> {
//! use leasehold::db::Database;
//!
//! let db = Database::connect("sqlite:/tmp/app.db").await?;
//! db.migrate().await?;
//!
//! // `lease_fence` comes from the lease (`lease.fence()`) or from LEASEHOLD_FENCE.
//! let mut tx = db.begin_fenced("ledger:acct-1", lease_fence).await?; // Err(StaleFence) if superseded
//! let balance: i64 = leasehold::with_conn!(tx, |conn| {
//!     sqlx::query_scalar("SELECT balance FROM ledger WHERE account = $1")
//!         .bind("acct-1")
//!         .fetch_one(conn)
//!         .await
//! })?;
//! tx.execute(
//!     "UPDATE ledger SET balance = $1 WHERE account = $2",
//!     &[(balance + 5).into(), "acct-1".into()],
//! )
//! .await?;
//! tx.commit().await?; // fence and business write commit together, or not at all
//! # Ok(()) }
//! ```
//!
//! To fence a transaction that also records an idempotency key or an inbox message, call [`check`] on
//! a [`Tx`](crate::db::Tx) you began yourself.
//!
//! Writers outside Rust check the same record with one statement in their own transaction, installed
//! by the migrations on PostgreSQL (`SELECT leasehold_fence(resource, fence)`) and MariaDB/MySQL
//! (`CALL leasehold_fence(resource, fence)`): the same rule, refusing with SQLSTATE `LHF01` naming
//! both fences (`docs/fencing-sql.md`; SQLite has no stored routines, its other writers run the upsert
//! themselves). `tests/fence_sql_function.rs` mixes both kinds of writer on one resource.
//!
//! # Redis (feature `redis`)
//!
//! [`redis_fenced_set`] sets a value kept in Redis only if the presented fence is not older than the
//! one stored beside it, in one Lua script.

#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "sql")]
mod sql;
mod token;

#[cfg(feature = "redis")]
pub use self::redis::{redis_fenced_set, FencedKey, RedisWrite};
#[cfg(feature = "sql")]
pub use sql::{check, current};
pub use token::Fence;
