//! The PostgreSQL lease store as the lab runs it: for the verifier a private server (`initdb` in
//! `/dev/shm`) with leasehold's tables, started once per run; for the benchmarks the PostgreSQL at
//! their `--database`.
//!
//! Limit: one server, no replica; its fault (`pg-restart`) restarts it on the same data.

use anyhow::Context as _;
use leasehold_testkit::PostgresServer;

use super::{RunWide, Started};

/// The store's line of the harness's table of run-wide stores (`RUN_WIDE`).
pub(crate) static STORE: RunWide = RunWide {
    name: "PostgreSQL",
    needs_installed: "initdb and postgres",
    available: leasehold_testkit::postgres_server_available,
    min_lease: None,
    start: || Box::pin(start()),
    strategies: ["pg-lease", "pg-lease-fence"],
    lease_from: "the PostgreSQL lease store",
    scheme: "postgres://",
    label: "postgres",
    measured: |database| Box::pin(measured(database)),
};

/// Starts a private PostgreSQL and makes leasehold's tables in it.
async fn start() -> anyhow::Result<Started> {
    let server = tokio::task::spawn_blocking(PostgresServer::start)
        .await?
        .context("cannot start a private PostgreSQL for the lease store")?;
    let db = leasehold::db::Database::connect(&server.url()).await?;
    db.migrate().await?;
    db.close().await;
    Ok(Started::new(server.url(), server))
}

/// The PostgreSQL at the benchmarks' `--database`, with leasehold's tables made or brought up to
/// date first (as S4 does there), so that a fresh machine measures it rather than skipping it.
async fn measured(database: String) -> anyhow::Result<Started> {
    // Its error and causes on one line, as the benchmarks' note has always said it.
    let db = match leasehold::db::Database::connect(&database).await {
        Ok(db) => db,
        Err(e) => anyhow::bail!("{}", e.report()),
    };
    let migrated = db.migrate().await;
    db.close().await;
    if let Err(e) = migrated {
        anyhow::bail!("making leasehold's tables failed: {}", e.report());
    }
    if let Err(e) = leasehold::LeaseClient::connect(&database).await {
        anyhow::bail!("{}", e.report());
    }
    Ok(Started::new(database, ()))
}
