//! Fenced writes on the SQL backends: one upsert into `leasehold_fences` inside the caller's
//! transaction. This module sits above [`crate::db`]: the database knows nothing of fences.
//!
//! Promise: once a transaction with fence `n` for a resource has committed, no transaction with a
//! fence `< n` for it commits; the check holds the resource's row (or the database) until commit.
//! Limit: only writes made in that transaction are protected; the same fence twice is accepted.

use super::Fence;
use crate::db::{
    check_key, deadlock_backoff, is_deadlock, missing_tables_hint, Database, Param, Tx,
    DEADLOCK_RETRIES,
};
use crate::{Error, Result};

const CURRENT: &str = "SELECT fence FROM leasehold_fences WHERE resource = $1";

pub(crate) fn check_args(resource: &str, fence: Fence) -> Result<i64> {
    check_key("fenced resource name", resource)?;
    i64::try_from(fence.get()).map_err(|_| {
        Error::invalid(
            "fence",
            format!(
                "{fence} does not fit SQL BIGINT (max {}); fences minted by leasehold never do this",
                i64::MAX
            ),
        )
    })
}

/// Fences `tx` for `resource`: records `fence` if it is `>=` the highest fence the resource has
/// accepted, and from then on holds the resource's lock (row lock on PostgreSQL, the write lock on
/// SQLite) until `tx` ends. Call it *before* reading or writing the data the fence protects.
///
/// On [`Error::StaleFence`] the caller must not commit: drop or roll back `tx` (with `?` that happens
/// by itself). [`Database::begin_fenced`] does both steps for you.
///
/// # Errors
///
/// [`Error::StaleFence`] when the resource accepted a newer fence; [`Error::Invalid`] for an empty or
/// over-long resource name, or when leasehold's tables are missing (run the migrations);
/// [`Error::Database`] when the statement fails.
///
/// # Cancel safety
///
/// If the future is dropped, drop `tx` too; it then rolls back.
pub async fn check(tx: &mut Tx, resource: &str, fence: Fence) -> Result<()> {
    let presented = check_args(resource, fence)?;
    let (accepted, current) = upsert(tx, resource, presented)
        .await
        .map_err(missing_tables_hint)?;
    crate::db::metrics::fence_check(tx.backend().as_str(), accepted);
    if accepted {
        return Ok(());
    }
    let current = current.unwrap_or_default();
    tracing::debug!(resource, presented = %fence, current, "stale fence refused");
    Err(Error::StaleFence {
        resource: resource.to_owned(),
        presented: fence,
        current: Fence::new(u64::try_from(current).unwrap_or(0)),
    })
}

/// Stores the presented fence unless the stored one is newer, and locks the row; returns whether
/// it was accepted and the fence the row holds now.
async fn upsert(tx: &mut Tx, resource: &str, presented: i64) -> Result<(bool, Option<i64>)> {
    let dialect = tx.dialect();
    let params = [Param::Text(resource), Param::I64(presented)];
    if dialect.returning {
        if tx.fetch_i64(dialect.fence_upsert, &params).await?.is_some() {
            return Ok((true, Some(presented)));
        }
        // Refused: the row exists with a newer fence (and we hold its lock, so this read is current).
        let current = tx.fetch_i64(CURRENT, &params[..1]).await?;
        return Ok((false, current));
    }
    // The upsert keeps the larger fence; the locking read sees the last committed row (a plain read
    // could see an older snapshot), which holds ours exactly when ours was not older.
    tx.execute(dialect.fence_upsert, &params).await?;
    // The dialect's own keywords; values are bound.
    let locked = sqlx::AssertSqlSafe(format!("{CURRENT}{}", dialect.for_update));
    let stored = tx.fetch_i64(locked, &params[..1]).await?;
    Ok((stored == Some(presented), stored))
}

/// The highest fence `resource` has accepted, or `None` if no fenced write reached it yet.
///
/// # Errors
///
/// [`Error::Invalid`] for a bad resource name; [`Error::Database`] when the query fails.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub async fn current(db: &Database, resource: &str) -> Result<Option<Fence>> {
    check_key("fenced resource name", resource)?;
    let value = db.fetch_i64(CURRENT, &[Param::Text(resource)]).await?;
    Ok(value.map(|v| Fence::new(u64::try_from(v).unwrap_or(0))))
}

impl Database {
    /// Begins a transaction fenced for `resource`: see [`crate::fence`]. Shorthand for
    /// [`Database::begin`] followed by [`check`]; on a stale fence the transaction is rolled back and
    /// [`Error::StaleFence`] returned.
    ///
    /// ```no_run
    /// # async fn demo(db: leasehold::db::Database, fence: leasehold::Fence) -> leasehold::Result<()> {
    /// let mut tx = db.begin_fenced("ledger:acct-1", fence).await?; // Err(StaleFence) if superseded
    /// leasehold::with_conn!(tx, |conn| {
    ///     sqlx::query("UPDATE ledger SET balance = balance + $1 WHERE account = $2")
    ///         .bind(5_i64)
    ///         .bind("acct-1")
    ///         .execute(conn)
    ///         .await
    ///         .map(|_| ())
    /// })?;
    /// tx.commit().await?; // the fence and the business write commit together
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Database::begin`] and [`check`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a transaction begun by a dropped future rolls back.
    pub async fn begin_fenced(&self, resource: &str, fence: Fence) -> Result<Tx> {
        check_args(resource, fence)?;
        let mut attempt = 0;
        loop {
            let mut tx = self.begin().await?;
            match check(&mut tx, resource, fence).await {
                Ok(()) => return Ok(tx),
                // Nothing but the check ran in it: a transaction that lost a deadlock is begun again.
                Err(e) if is_deadlock(&e) && attempt < DEADLOCK_RETRIES => {
                    attempt += 1;
                    deadlock_backoff(attempt).await;
                }
                Err(e) => {
                    // Release the lock now rather than when the pool gets the connection back.
                    let _ = tx.rollback().await;
                    return Err(e);
                }
            }
        }
    }
}
