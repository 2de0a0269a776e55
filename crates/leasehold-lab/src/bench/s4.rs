//! S4, fenced write: the fenced SQL transaction against the same transaction unfenced, on PostgreSQL
//! and SQLite.

use std::time::{Duration, Instant};

use anyhow::Context as _;
use leasehold::db::{Database, Param};
use leasehold::Fence;

use super::measure::{round3, Latencies};

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

/// The business transaction both sides run: one balance update and one journal row.
const UPDATE: &str = "UPDATE bench_accounts SET balance = balance + $1 WHERE id = 1";
const JOURNAL: &str = "INSERT INTO bench_journal (account, amount) VALUES (1, $1)";

/// Runs S4 on PostgreSQL at `database_url` (skipped with a reason when unreachable) and on an SQLite
/// file in a temporary directory, `each` per side.
pub(crate) async fn run(database_url: &str, each: Duration) -> anyhow::Result<S4Report> {
    // A schema of its own, so the benchmark never touches other tables and parallel runs never collide.
    let schema = format!(
        "leasehold_bench_{}_{:08x}",
        std::process::id(),
        rand::random::<u32>()
    );
    let (postgres, postgres_skipped) = match Database::builder(database_url)
        .postgres_schema(&schema)
        .max_connections(1)
        .acquire_timeout(Duration::from_secs(5))
        .connect()
        .await
    {
        Ok(db) => {
            let side = measure(&db, each).await;
            // Drop the schema whatever the measurement did.
            let dropped = drop_schema(&db, &schema).await;
            db.close().await;
            let side = side.context("S4 on PostgreSQL")?;
            dropped.with_context(|| format!("dropping the benchmark schema {schema}"))?;
            (Some(side), None)
        }
        Err(e) => (
            None,
            Some(format!(
                "PostgreSQL at --database is unreachable ({e}); start it or pass --database URL"
            )),
        ),
    };
    let dir = tempfile::tempdir().context("creating a temporary directory for SQLite")?;
    let path = dir.path().join("bench.db");
    let db = Database::connect(&format!("sqlite:{}", path.display()))
        .await
        .context("opening the SQLite file for S4")?;
    let sqlite = measure(&db, each).await.context("S4 on SQLite")?;
    db.close().await;
    Ok(S4Report {
        postgres_ratio: postgres.as_ref().map(|s| s.ratio),
        sqlite_ratio: Some(sqlite.ratio),
        target_met: postgres.as_ref().map(|s| s.ratio >= 0.75),
        postgres,
        sqlite: Some(sqlite),
        postgres_skipped,
    })
}

async fn drop_schema(db: &Database, schema: &str) -> anyhow::Result<()> {
    let mut tx = db.begin().await?;
    tx.execute(
        sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE")),
        &[],
    )
    .await?;
    tx.commit().await?;
    Ok(())
}

/// Sets up the tables, then alternates slices of unfenced and fenced transactions, one writer.
async fn measure(db: &Database, each: Duration) -> anyhow::Result<S4Side> {
    db.migrate().await?;
    let mut tx = db.begin().await?;
    tx.execute(
        "CREATE TABLE bench_accounts (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)",
        &[],
    )
    .await?;
    tx.execute(
        "CREATE TABLE bench_journal (account BIGINT NOT NULL, amount BIGINT NOT NULL)",
        &[],
    )
    .await?;
    tx.execute(
        "INSERT INTO bench_accounts (id, balance) VALUES (1, 0)",
        &[],
    )
    .await?;
    tx.commit().await?;

    let (mut plain, mut fenced) = (Latencies::default(), Latencies::default());
    let (mut plain_time, mut fenced_time) = (Duration::ZERO, Duration::ZERO);
    // Warm both paths (statement caches, the fence row) outside the measurement.
    for i in 0..50 {
        one_tx(db, None).await?;
        one_tx(db, Some(Fence::new(1 + i))).await?;
    }
    // Alternate transaction by transaction: commit latency on a shared disk comes in bursts longer
    // than any slice, and only fine interleaving lets both sides see the same bursts. Every 200
    // transactions a new holder takes over with a higher fence; in between, the holder writes
    // repeatedly with its own fence, as a real holder does.
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < each * 2 {
        let fence = Fence::new(1_000 + i / 200);
        for which in [i % 2, (i + 1) % 2] {
            let t = Instant::now();
            if which == 0 {
                one_tx(db, None).await?;
                let d = t.elapsed();
                plain.record(d);
                plain_time += d;
            } else {
                one_tx(db, Some(fence)).await?;
                let d = t.elapsed();
                fenced.record(d);
                fenced_time += d;
            }
        }
        i += 1;
    }
    let plain_rate = plain.len() as f64 / plain_time.as_secs_f64();
    let fenced_rate = fenced.len() as f64 / fenced_time.as_secs_f64();
    Ok(S4Side {
        unfenced_tx_per_s: round3(plain_rate),
        fenced_tx_per_s: round3(fenced_rate),
        unfenced_p50_us: round3(plain.quantile_us(0.5)),
        fenced_p50_us: round3(fenced.quantile_us(0.5)),
        unfenced_p99_us: round3(plain.quantile_us(0.99)),
        fenced_p99_us: round3(fenced.quantile_us(0.99)),
        ratio: round3(fenced_rate / plain_rate),
    })
}

/// The business transaction, fenced for resource `bench-account-1` when `fence` is given.
async fn one_tx(db: &Database, fence: Option<Fence>) -> anyhow::Result<()> {
    let mut tx = match fence {
        Some(f) => db.begin_fenced("bench-account-1", f).await?,
        None => db.begin().await?,
    };
    tx.execute(UPDATE, &[Param::I64(1)]).await?;
    tx.execute(JOURNAL, &[Param::I64(1)]).await?;
    tx.commit().await?;
    Ok(())
}
