//! `node-kill`, `node-restart`: one of Redlock's three masters (taking turns) is killed for the
//! fault window and comes back empty, or is restarted empty, while the lease is held on all three.
//!
//! Limit: aimed at a lease held on all three masters (the case Redlock is for): a holder whose
//! lease stands on a bare majority is let go and another chosen ([`suits`]), and an injection that
//! still finds one is counted apart (`Cell::bare_majorities`).

use super::super::cell::Cell;
use super::super::worker::lock_key;

/// The master this injection takes: the Redlock faults take turns among the masters.
fn turn(cell: &Cell<'_>) -> usize {
    cell.injected as usize % 3
}

/// Kills a master for the fault window, then brings it back empty on its port (the proxies lead
/// there).
pub(super) async fn kill(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    count_bare_majority(cell).await;
    let master = turn(cell);
    let m = &mut cell.masters()?.masters[master];
    tokio::task::block_in_place(|| m.kill())?;
    tokio::time::sleep(cell.timing.hold).await;
    let m = &mut cell.masters()?.masters[master];
    tokio::task::block_in_place(|| m.restart())?;
    Ok(())
}

/// Restarts a master empty, then waits out the fault window.
pub(super) async fn restart(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    count_bare_majority(cell).await;
    let master = turn(cell);
    let m = &mut cell.masters()?.masters[master];
    tokio::task::block_in_place(|| m.restart())?;
    tokio::time::sleep(cell.timing.hold).await;
    Ok(())
}

/// Whether the stopped target holds its lease on all three masters.
pub(super) async fn suits(cell: &mut Cell<'_>) -> bool {
    let Some(key) = lock_key(cell.spec.strategy, cell.spec.key) else {
        return true;
    };
    match cell.masters() {
        Ok(r) => r.held_on(&key).await == 3,
        Err(_) => true,
    }
}

/// Counts an injection that finds the target's lease held on fewer than all three masters (an
/// acquire granted by a bare majority, the third master's reply too late): losing one master of
/// that majority loses the lease, Redlock's documented limit, not the fault this cell is about.
async fn count_bare_majority(cell: &mut Cell<'_>) {
    let Some(key) = lock_key(cell.spec.strategy, cell.spec.key) else {
        return;
    };
    if let Ok(r) = cell.masters() {
        if r.held_on(&key).await < 3 {
            cell.bare_majorities += 1;
        }
    }
}
