//! `failover`: the Redis primary is killed after granting a lock it had not replicated (its
//! replication link cut when the fault is armed), and the replica is promoted.
//!
//! Limit: the harness plays the failover manager (it promotes and switches the proxies); the
//! Sentinel form is `sentinel-failover`.

use super::super::cell::Cell;
use super::super::worker::now_ms;

/// A fresh replica after each failover; then the primary's writes (the target's lock among them)
/// stop reaching it.
pub(super) async fn arm(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let redis = cell.redis()?;
    redis.ensure_replica().await?;
    redis.cut_replication();
    cell.replication_cut_ms = Some(now_ms());
    Ok(())
}

/// Kills the primary, promotes the replica, looks at what it says of the lock (the evidence for a
/// stall), and waits out the fault window.
pub(super) async fn inject(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    cell.failover_ms = Some(now_ms());
    cell.redis()?.fail_over().await?;
    cell.check_lock("on the promoted replica").await;
    tokio::time::sleep_until(started + cell.timing.hold).await;
    Ok(())
}
