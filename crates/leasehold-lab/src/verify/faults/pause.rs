//! `pause`: the holder is stopped (SIGSTOP) inside its critical section for the fault window, its
//! lease renewal with it, then resumed.
//!
//! Limit: the whole process stops; a stop of one thread (a long GC pause of one task) is not
//! modelled apart.

use nix::sys::signal::{kill, Signal};

use super::super::cell::Cell;

/// Stops worker `slot` for the fault window. On etcd the window outlasts etcd's own minimum lease
/// (`Timing::for_strategy`).
pub(super) async fn inject(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    if let Some(pid) = cell.workers[slot as usize].pid() {
        kill(pid, Signal::SIGSTOP)?;
        tokio::time::sleep(cell.timing.hold).await;
        kill(pid, Signal::SIGCONT)?;
    }
    Ok(())
}
