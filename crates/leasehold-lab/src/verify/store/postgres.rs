//! The PostgreSQL lease store as the harness runs it: a private server (`initdb` in `/dev/shm`)
//! with leasehold's tables, started once per run.
//!
//! Limit: one server, no replica; its fault (`pg-restart`) restarts it on the same data.

use anyhow::Context as _;
use leasehold_testkit::PostgresServer;

/// Starts a private PostgreSQL and makes leasehold's tables in it.
pub(super) async fn start() -> anyhow::Result<PostgresServer> {
    let server = tokio::task::spawn_blocking(PostgresServer::start)
        .await?
        .context("cannot start a private PostgreSQL for the lease store")?;
    let db = leasehold::db::Database::connect(&server.url()).await?;
    db.migrate().await?;
    db.close().await;
    Ok(server)
}
