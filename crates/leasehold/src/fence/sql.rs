//! Fenced writes on PostgreSQL and SQLite: one upsert into `leasehold_fences` inside the caller's
//! transaction.

use super::Fence;
use crate::db::{check_key, missing_tables_hint, Database, Pool, Tx};
use crate::{Error, Result};

/// Stores `fence` as `resource`'s fence only if it is not older than the stored one; returns the row's
/// fence when it did, nothing when the stored one is newer. Portable: PostgreSQL and SQLite (3.35+)
/// share upsert-with-WHERE and RETURNING.
const UPSERT: &str = "INSERT INTO leasehold_fences (resource, fence) VALUES ($1, $2) \
     ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence \
     WHERE leasehold_fences.fence <= excluded.fence \
     RETURNING fence";

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
/// Cancel safety: if the future is dropped, drop `tx` too; it then rolls back.
pub async fn check(tx: &mut Tx, resource: &str, fence: Fence) -> Result<()> {
    let presented = check_args(resource, fence)?;
    let accepted: Option<i64> = crate::with_conn!(tx, |c| {
        sqlx::query_scalar(UPSERT)
            .bind(resource)
            .bind(presented)
            .fetch_optional(c)
            .await
    })
    .map_err(|e| missing_tables_hint(e.into()))?;
    crate::db::metrics::fence_check(tx.backend().as_str(), accepted.is_some());
    if accepted.is_some() {
        return Ok(());
    }
    // Refused: the row exists with a newer fence (and we hold its lock, so this read is current).
    let current = crate::with_conn!(tx, |c| {
        sqlx::query_scalar::<_, i64>(CURRENT)
            .bind(resource)
            .fetch_one(c)
            .await
    })?;
    tracing::debug!(resource, presented = %fence, current, "stale fence refused");
    Err(Error::StaleFence {
        resource: resource.to_owned(),
        presented: fence,
        current: Fence::new(u64::try_from(current).unwrap_or(0)),
    })
}

/// The highest fence `resource` has accepted, or `None` if no fenced write reached it yet.
pub async fn current(db: &Database, resource: &str) -> Result<Option<Fence>> {
    check_key("fenced resource name", resource)?;
    // On the pool, not in a transaction: a read needs no `BEGIN IMMEDIATE` (SQLite's write lock).
    let value: Option<i64> = match db.pool() {
        #[cfg(feature = "postgres")]
        Pool::Postgres(p) => {
            sqlx::query_scalar(CURRENT)
                .bind(resource)
                .fetch_optional(p)
                .await?
        }
        #[cfg(feature = "sqlite")]
        Pool::Sqlite(p) => {
            sqlx::query_scalar(CURRENT)
                .bind(resource)
                .fetch_optional(p)
                .await?
        }
    };
    Ok(value.map(|v| Fence::new(u64::try_from(v).unwrap_or(0))))
}
