//! `sentinel-failover`: a primary managed by three Redis Sentinels: its replica link cut (the
//! lock's write never reaches the replica), then the primary killed and the replica promoted by the
//! sentinels.
//!
//! Limit: the sentinels decide when; the window lasts until another worker has written on the new
//! primary (at most 5 s), so an injection takes seconds.

use std::time::Duration;

use super::super::cell::Cell;
use super::super::worker::now_ms;

/// Brings the last failover's old primary back as a replica, then isolates the replica of the
/// current one.
pub(super) fn arm(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let s = cell.sentinel()?;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        if let Some(old) = s.down.take() {
            // Back as a replica of the new primary, synced and seen by every sentinel.
            s.set.restart_node(old)?;
        }
        s.set.begin_lossy_failover()?;
        s.failing = Some(s.set.primary_index()?);
        Ok(())
    })?;
    cell.replication_cut_ms = Some(now_ms());
    Ok(())
}

/// Continues the stopped replica when no target was found (it reconnects to its primary by
/// itself).
pub(super) fn disarm(cell: &mut Cell<'_>) {
    if let Ok(s) = cell.sentinel() {
        if let Some(primary) = s.failing.take() {
            for i in (0..s.set.nodes().len()).filter(|i| *i != primary) {
                if s.set.node(i).is_paused() {
                    let _ = s.set.node_mut(i).resume();
                }
            }
        }
    }
}

/// Kills the primary and waits for the sentinels to promote the replica.
pub(super) async fn inject(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    cell.failover_ms = Some(now_ms());
    let s = cell.sentinel()?;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        s.set.finish_lossy_failover(Duration::from_secs(20))?;
        s.down = s.failing.take();
        Ok(())
    })?;
    cell.after_promotion(slot, started).await;
    Ok(())
}
