//! S4, fenced write: the fenced SQL transaction against the same transaction unfenced, on PostgreSQL
//! and SQLite.

use std::time::Duration;

/// One backend's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S4Side {
    pub(crate) unfenced_tx_per_s: f64,
    pub(crate) fenced_tx_per_s: f64,
    pub(crate) unfenced_p50_us: f64,
    pub(crate) fenced_p50_us: f64,
    pub(crate) unfenced_p99_us: f64,
    pub(crate) fenced_p99_us: f64,
    /// fenced ÷ unfenced transactions per second.
    pub(crate) ratio: f64,
}

/// The figures of S4.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S4Report {
    pub(crate) postgres_ratio: Option<f64>,
    pub(crate) sqlite_ratio: Option<f64>,
    pub(crate) postgres: Option<S4Side>,
    pub(crate) sqlite: Option<S4Side>,
    /// Why PostgreSQL was skipped, when it was.
    pub(crate) postgres_skipped: Option<String>,
    /// Fenced ≥ 0.75 × unfenced on PostgreSQL (`None` when skipped).
    pub(crate) target_met: Option<bool>,
}

pub(crate) async fn run(database_url: &str, each: Duration) -> anyhow::Result<S4Report> {
    let _ = (database_url, each);
    anyhow::bail!("S4 needs the fenced-write API (db::Database), which is not merged yet")
}
