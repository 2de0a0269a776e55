//! `net-delay`, `net-cut`, `net-blackhole`: the holder's links to Redis (its one proxy, or on
//! Redlock its proxies to all three masters) get slower than the lease, are cut, or swallow
//! everything, for the fault window. `partition`: the holder's links to its lease store, whichever
//! it is (its Redis proxies, or the proxies a `partition` cell puts in front of a run-wide store
//! for each worker), swallow everything for the fault window while the other workers reach the
//! store as before, and the holder's critical section goes on as a long one that stops by its
//! stop rule (`worker.rs`).
//!
//! Limit: only links through the harness's proxies: the Sentinel set and the Cluster are reached
//! directly, so these faults do not apply to them, and the run-wide stores are behind proxies in
//! `partition` cells only.

use std::time::Duration;

use super::super::cell::Cell;

/// Delays every chunk on the holder's links by 2 × TTL each way, for the fault window.
pub(super) async fn delay(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    let t = cell.timing;
    for p in cell.links(slot)? {
        p.set_delay(t.ttl * 2);
    }
    tokio::time::sleep(t.hold).await;
    for p in cell.links(slot)? {
        p.set_delay(Duration::ZERO);
    }
    Ok(())
}

/// Closes the holder's connections and refuses new ones, for the fault window.
pub(super) async fn cut(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    for p in cell.links(slot)? {
        p.cut();
    }
    tokio::time::sleep(cell.timing.hold).await;
    for p in cell.links(slot)? {
        p.restore();
    }
    Ok(())
}

/// Keeps the holder's connections open and silent, for the fault window; then traffic resumes on
/// the same connections.
pub(super) async fn blackhole(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    for p in cell.links(slot)? {
        p.blackhole();
    }
    tokio::time::sleep(cell.timing.hold).await;
    for p in cell.links(slot)? {
        p.restore();
    }
    Ok(())
}

/// Black-holes the holder's links to its lease store for the fault window and lets its critical
/// section go on as a long one (`long`), which stops when its stop rule says so; the harness's
/// `go` at the end of the window is the word of a strategy with no lease to watch.
pub(super) async fn partition(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    for p in cell.links(slot)? {
        p.blackhole();
    }
    cell.workers[slot as usize].send("long").await;
    tokio::time::sleep(cell.timing.hold).await;
    for p in cell.links(slot)? {
        p.restore();
    }
    Ok(())
}
