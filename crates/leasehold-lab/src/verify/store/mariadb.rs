//! The MariaDB lease store as the lab runs it: a private server (`mariadb-install-db` in
//! `/dev/shm`) with leasehold's tables, started once per run, for the verifier and the benchmarks
//! alike.
//!
//! Limit: one server, no replica; its fault (`mysql-restart`) restarts it on the same data.

use anyhow::Context as _;
use leasehold_testkit::MariaDbServer;

use super::{RunWide, Started};

/// The store's line of the harness's table of run-wide stores (`RUN_WIDE`).
pub(crate) static STORE: RunWide = RunWide {
    name: "MariaDB",
    needs_installed: "mariadb-install-db and mariadbd",
    available: leasehold_testkit::mariadb_server_available,
    min_lease: None,
    start: || Box::pin(start()),
    strategies: ["mysql-lease", "mysql-lease-fence"],
    lease_from: "the MariaDB (MySQL) lease store",
    scheme: "mysql://",
    label: "mariadb",
    measured: |_| Box::pin(start()),
};

/// Starts a private MariaDB and makes leasehold's tables in it.
async fn start() -> anyhow::Result<Started> {
    let server = tokio::task::spawn_blocking(MariaDbServer::start)
        .await?
        .context("cannot start a private MariaDB for the lease store")?;
    let db = leasehold::db::Database::connect(&server.url()).await?;
    db.migrate().await?;
    db.close().await;
    Ok(Started::new(server.url(), server))
}
