//! `pg-restart`: the PostgreSQL lease store is restarted (a fast shutdown and a start, same port,
//! same data) while a holder is inside its critical section.
//!
//! Limit: the run-wide store ([`LeaseStores`](super::super::store::LeaseStores)), never the
//! resource's database.

use leasehold_testkit::PostgresServer;

use super::super::cell::Cell;
use super::super::store::postgres;
use super::StoreFault;

/// The fault's line of the fault table (`FAULTS`).
pub(crate) static FAULT: StoreFault = StoreFault {
    name: "pg-restart",
    help: "The PostgreSQL lease store is restarted (a fast shutdown and a start, same data) while a holder is inside its critical section",
    store: &postgres::STORE,
    what: "a restart of the PostgreSQL lease store",
    inject: |cell| Box::pin(inject(cell)),
};

/// Restarts the store: the lease rows survive, the holder's renewals fail while it is down, and
/// its lease runs out on the server's clock meanwhile. The window is 3 × TTL from the restart's
/// start.
async fn inject(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    cell.ctx.stores.with(
        &postgres::STORE,
        |pg: &mut PostgresServer| Ok(pg.restart()?),
    )?;
    tokio::time::sleep_until(started + cell.timing.hold).await;
    Ok(())
}
