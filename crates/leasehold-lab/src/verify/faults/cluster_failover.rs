//! `cluster-failover`: a Redis Cluster: the replica link of the master owning the lease's slot
//! cut, then that master killed and its replica promoted by the cluster.
//!
//! Limit: one slot's master; the cluster decides when, so an injection takes seconds.

use std::time::Duration;

use anyhow::Context as _;

use super::super::cell::Cell;
use super::super::worker::{lock_key, now_ms};

/// Brings the last failover's old master back, then isolates the replica of the lease's master:
/// as the Sentinel set's lossy failover, the replica has everything so far, then is stopped and
/// its link closed on the master's side (a stopped process would still receive into its socket
/// buffer and apply it on resume).
pub(super) fn arm(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let key =
        lock_key(cell.spec.strategy, cell.spec.key).context("cluster-failover needs a lock key")?;
    let c = cell.cluster()?;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        if let Some(old) = c.down.take() {
            // Back as a replica of its successor.
            c.cluster.restart_node(old)?;
        }
        let master = c.cluster.master_of_key(&key)?;
        let replica = *c
            .cluster
            .replicas_of(master)?
            .first()
            .context("the lease's master has no replica")?;
        let mut con = c.cluster.node(master).connection()?;
        // WAIT counts the acknowledgements of this connection's own last write (without one it
        // returns at once): a short-lived write in the lease's slot comes after the lease's keys in
        // the replication stream.
        // A key's slot is its hash tag's, or (without one) the whole key's: `{key}` hashes alike.
        let tag = match (key.starts_with('{'), key.find('}')) {
            (true, Some(end)) => key[..=end].to_owned(),
            _ => format!("{{{key}}}"),
        };
        redis::cmd("SET")
            .arg(format!("{tag}:verify-replicated"))
            .arg(1)
            .arg("PX")
            .arg(1_000)
            .query::<()>(&mut con)?;
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut con)?;
        anyhow::ensure!(acked >= 1, "the replica did not acknowledge within 2 s");
        c.cluster.node_mut(replica).pause()?;
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query::<i64>(&mut con)?;
        c.isolated = Some((master, replica));
        Ok(())
    })?;
    cell.replication_cut_ms = Some(now_ms());
    Ok(())
}

/// Continues the stopped replica when no target was found.
pub(super) fn disarm(cell: &mut Cell<'_>) {
    if let Ok(c) = cell.cluster() {
        if let Some((_, replica)) = c.isolated.take() {
            let _ = c.cluster.node_mut(replica).resume();
        }
    }
}

/// Kills the master, continues its replica and waits for the cluster to promote it.
pub(super) async fn inject(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    cell.failover_ms = Some(now_ms());
    let c = cell.cluster()?;
    let (old, replica) = c.isolated.take().context("cluster-failover not armed")?;
    tokio::task::block_in_place(|| -> anyhow::Result<()> {
        c.cluster.node_mut(old).kill()?;
        c.cluster.node_mut(replica).resume()?;
        c.down = Some(old);
        c.cluster.wait_until_ok(Duration::from_secs(20))?;
        Ok(())
    })?;
    cell.after_promotion(slot, started).await;
    Ok(())
}
