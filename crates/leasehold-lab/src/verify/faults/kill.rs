//! `kill`: the holder is killed (SIGKILL) inside its critical section; a new worker takes its slot
//! and continues at the next operation.
//!
//! Limit: the new worker is a new client; what a crashed holder's own restart would remember is
//! not modelled.

use std::time::Duration;

use super::super::cell::Cell;
use super::super::worker::Event;

/// Kills worker `slot` and waits until its replacement is ready.
pub(super) async fn inject(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    let i = slot as usize;
    let w = &mut cell.workers[i];
    w.child.start_kill()?;
    let _ = w.child.wait().await;
    let next = cell.log.last_op(slot) + 1;
    let since = cell.log.len();
    cell.workers[i] = cell.spawn(slot, next).await?;
    cell.log
        .wait_for(since, Duration::from_secs(20), |s, ev| {
            s == slot && matches!(ev, Event::Ready)
        })
        .await;
    Ok(())
}
