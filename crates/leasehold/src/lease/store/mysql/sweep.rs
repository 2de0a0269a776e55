//! Deleting idle rows: every client deletes, soon after it connects and then every quarter of the
//! retention (at most every 5 minutes), the rows nobody holds that have been idle for longer than the
//! retention, in batches.
//!
//! Promise: a row is deleted only once its lease expired or was released longer than the retention
//! ago (by the database clock), so a held lease never loses its row; deleting one takes no fence
//! back, since the next fence is floored by the server clock. A failed sweep is logged and the next
//! one tries again; the sweeper stops when the store is dropped.
//!
//! Limit: a table no client connects to is not swept; with clients of different retentions on one
//! table, the shortest wins.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Rows deleted by one statement.
const BATCH: u64 = 1_000;

/// Starts the sweeper; it stops when `stop` is cancelled (the store is dropped).
pub(super) fn spawn(pool: sqlx::MySqlPool, retention: Duration, stop: CancellationToken) {
    let period = (retention / 4).clamp(Duration::from_millis(100), Duration::from_secs(300));
    let retention_us = i64::try_from(retention.as_micros()).unwrap_or(i64::MAX);
    tokio::spawn(async move {
        // Soon after connect, not at once: a burst of clients starting together spreads out.
        let first = Duration::from_millis(rand::random_range(100..1_000)).min(period);
        let mut next = tokio::time::Instant::now() + first;
        loop {
            tokio::select! {
                () = stop.cancelled() => return,
                () = tokio::time::sleep_until(next) => {}
            }
            sweep(&pool, retention_us).await;
            next = tokio::time::Instant::now() + period;
        }
    });
}

async fn sweep(pool: &sqlx::MySqlPool, retention_us: i64) {
    loop {
        let deleted = sqlx::query(include_str!("sql/sweep.sql"))
            .bind(retention_us)
            .bind(BATCH)
            .execute(pool)
            .await;
        match deleted {
            Ok(r) if r.rows_affected() == BATCH => continue,
            Ok(r) => {
                tracing::trace!(deleted = r.rows_affected(), "mariadb lease sweep");
                return;
            }
            Err(e) => {
                tracing::debug!(error = %e, "mariadb lease sweep failed; the next one retries");
                return;
            }
        }
    }
}
