//! `pg-restart`: the PostgreSQL lease store is restarted (a fast shutdown and a start, same port,
//! same data) while a holder is inside its critical section.
//!
//! Limit: the run-wide store ([`LeaseStores`](super::super::store::LeaseStores)), never the
//! resource's database.

use super::super::cell::Cell;
use super::super::store::{Running, Store};

/// Restarts the store: the lease rows survive, the holder's renewals fail while it is down, and
/// its lease runs out on the server's clock meanwhile. The window is 3 × TTL from the restart's
/// start.
pub(super) async fn inject(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let started = tokio::time::Instant::now();
    cell.ctx
        .stores
        .with(Store::Postgres, |running| match running {
            Running::Postgres(pg) => Ok(pg.restart()?),
            _ => anyhow::bail!("pg-restart needs the harness's PostgreSQL lease store"),
        })?;
    tokio::time::sleep_until(started + cell.timing.hold).await;
    Ok(())
}
