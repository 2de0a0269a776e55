//! `mysql-restart`: the MariaDB lease store is restarted (a clean shutdown and a start, same port,
//! same data) while a holder is inside its critical section.
//!
//! Limit: the run-wide store ([`LeaseStores`](super::super::store::LeaseStores)), never the
//! resource's database.

use leasehold_testkit::MariaDbServer;

use super::super::cell::Cell;
use super::super::store::mariadb;
use super::StoreFault;

/// The fault's line of the fault table (`FAULTS`).
pub(crate) static FAULT: StoreFault = StoreFault {
    name: "mysql-restart",
    help: "The MariaDB lease store is restarted (a clean shutdown and a start, same data) while a holder is inside its critical section",
    store: &mariadb::STORE,
    what: "a restart of the MariaDB lease store",
    inject: |cell| Box::pin(inject(cell)),
};

/// Restarts the store: the lease rows survive (InnoDB), the holder's renewals fail while it is
/// down, and its lease runs out on the server's clock meanwhile. The window is 3 × TTL from the
/// restart's start.
async fn inject(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    cell.ctx
        .stores
        .with(&mariadb::STORE, |my: &mut MariaDbServer| Ok(my.restart()?))?;
    tokio::time::sleep_until(started + cell.timing.hold).await;
    Ok(())
}
