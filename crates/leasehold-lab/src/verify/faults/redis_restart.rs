//! `redis-restart`: the holder's one Redis server is restarted without persistence: it comes back
//! empty, every lock and fence forgotten.
//!
//! Limit: one server; on Redlock its form is `node-restart` (`redlock_node.rs`).

use super::super::cell::Cell;

/// Restarts the cell's Redis, then waits out the fault window.
pub(super) async fn inject(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let hold = cell.timing.hold;
    let redis = cell.redis()?;
    if let Some(mut server) = redis.primary.take() {
        let server =
            tokio::task::spawn_blocking(move || server.restart().map(|_| server)).await??;
        redis.primary = Some(server);
    }
    tokio::time::sleep(hold).await;
    Ok(())
}
