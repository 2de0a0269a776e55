//! The sweeper: deletes lease rows nobody has held for longer than the idle retention, so names
//! that are no longer used leave nothing behind.
//!
//! Every store sweeps the whole table (all prefixes) on its own connection, soon after it connects
//! and then about every quarter of the retention (clamped to 50 ms ..= 5 minutes), each pause
//! jittered to between half and one and a half of that: an idle row is gone between one and about
//! one and three eighths retentions after it became idle.
//! A sweep reads the whole table (no index covers the expiry, so that lease updates stay in place);
//! sweeps of several processes overlap harmlessly (locked rows are skipped, deleted rows are gone).
//!
//! Promise: a row is deleted only when its lease expired or was released longer than the retention
//! ago (by the database clock), so a held lease never loses its row; deleting it takes no fence
//! back, since fences come from the sequence. A sweep holds a connection only while it runs, is
//! bounded in time, and a failed one is tried again at the next period.
//!
//! Limit: the shortest retention among the clients of one table wins; a table nobody connects to is
//! not swept.

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

use super::statements::{self, SWEEP_BATCH};

/// Starts sweeping in the background until `stop` is cancelled.
pub(super) fn spawn(
    options: PgConnectOptions,
    retention: Duration,
    timeout: Duration,
    stop: CancellationToken,
) {
    tokio::spawn(async move {
        let every = (retention / 4).clamp(Duration::from_millis(50), Duration::from_secs(300));
        // The first sweep soon (a short-lived process such as a cron job's `leasehold run` still
        // does its share), the next ones spread out so that processes started together do not
        // sweep together.
        let mut pause = jitter(every.min(Duration::from_secs(2)));
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = tokio::time::sleep(pause) => {}
            }
            match tokio::time::timeout(timeout, sweep(&options, retention)).await {
                Ok(Ok(0)) => {}
                Ok(Ok(n)) => tracing::debug!(rows = n, "swept idle lease rows"),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "sweeping idle lease rows failed; trying again later");
                }
                Err(_) => tracing::debug!("sweeping idle lease rows timed out; trying again later"),
            }
            pause = every / 2 + jitter(every);
        }
    });
}

/// Deletes idle rows in batches until a batch comes back short; returns how many. The connection
/// is opened for the sweep and closed after it: between sweeps the sweeper holds none.
async fn sweep(options: &PgConnectOptions, retention: Duration) -> Result<u64, sqlx::Error> {
    let mut conn = PgConnection::connect_with(options).await?;
    let mut total = 0;
    loop {
        let n = statements::sweep(retention)
            .execute(&mut conn)
            .await?
            .rows_affected();
        total += n;
        if n < SWEEP_BATCH as u64 {
            let _ = conn.close().await;
            return Ok(total);
        }
    }
}

/// Up to `d`, at random.
fn jitter(d: Duration) -> Duration {
    d.mul_f64(rand::random::<f64>())
}
