//! `mysql-restart`: the MariaDB lease store is restarted (a clean shutdown and a start, same port,
//! same data) while a holder is inside its critical section.
//!
//! Limit: the run-wide store ([`LeaseStores`](super::super::store::LeaseStores)), never the
//! resource's database.

use super::super::cell::Cell;
use super::super::store::{Running, Store};

/// Restarts the store: the lease rows survive (InnoDB), the holder's renewals fail while it is
/// down, and its lease runs out on the server's clock meanwhile. The window is 3 × TTL from the
/// restart's start.
pub(super) async fn inject(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    cell.ctx
        .stores
        .with(Store::MariaDb, |running| match running {
            Running::MariaDb(my) => Ok(my.restart()?),
            _ => anyhow::bail!("mysql-restart needs the harness's MariaDB lease store"),
        })?;
    tokio::time::sleep_until(started + cell.timing.hold).await;
    Ok(())
}
