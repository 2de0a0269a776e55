//! The MariaDB lease store as the harness runs it: a private server (`mariadb-install-db` in
//! `/dev/shm`) with leasehold's tables, started once per run.
//!
//! Limit: one server, no replica; its fault (`mysql-restart`) restarts it on the same data.

use anyhow::Context as _;
use leasehold_testkit::MariaDbServer;

/// Starts a private MariaDB and makes leasehold's tables in it.
pub(super) async fn start() -> anyhow::Result<MariaDbServer> {
    let server = tokio::task::spawn_blocking(MariaDbServer::start)
        .await?
        .context("cannot start a private MariaDB for the lease store")?;
    let db = leasehold::db::Database::connect(&server.url()).await?;
    db.migrate().await?;
    db.close().await;
    Ok(server)
}
