//! The nightly job in the database you already have: the lease lives in PostgreSQL, and so does the
//! report the job writes; the fence the lease hands out is checked by `begin_fenced` in the same
//! database, so a run that was paused past its lease cannot overwrite a newer run's report.
//!
//! The same with the command-line tool, as a cron entry (after `leasehold migrate --store "$DB"` once):
//!
//!     leasehold run --store "$DB" --ttl 1m nightly-report -- ./report.sh
//!
//! where `report.sh` presents `$LEASEHOLD_FENCE` in the transaction that writes the report:
//!
//!     psql "$DB" -v ON_ERROR_STOP=1 -v fence="$LEASEHOLD_FENCE" <<'SQL'
//!     BEGIN;
//!     -- Refused (division by zero, so the transaction rolls back) once a newer run has written.
//!     WITH accepted AS (
//!       INSERT INTO leasehold_fences (resource, fence) VALUES ('report:daily', :fence)
//!       ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence
//!       WHERE leasehold_fences.fence <= excluded.fence RETURNING fence)
//!     SELECT 1 / count(*) FROM accepted;
//!     INSERT INTO daily_report (day, total) SELECT current_date, sum(amount) FROM orders;
//!     COMMIT;
//!     SQL
//!
//! This example does both halves in Rust. Needs PostgreSQL at `LEASEHOLD_DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); it works in its own schema
//! `leasehold_nightly_example`, dropped and created again on every run.
//!
//!     cargo run -p leasehold --example nightly_report

use std::time::Duration;

use leasehold::db::{Database, Param};
use leasehold::{Error, Fence, LeaseClient, LeaseOptions};

const SCHEMA: &str = "leasehold_nightly_example";

/// What `report.sh` does: write the report in a transaction fenced for it.
async fn write_report(db: &Database, fence: Fence, by: &str) -> leasehold::Result<()> {
    let mut tx = db.begin_fenced("report:daily", fence).await?;
    tx.execute(
        "INSERT INTO daily_report (written_by, fence) VALUES ($1, $2)",
        &[Param::Text(by), Param::I64(fence.as_i64())],
    )
    .await?;
    tx.commit().await
}

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    let base = std::env::var("LEASEHOLD_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let admin = Database::connect(&base).await?;
    let mut tx = admin.begin().await?;
    tx.execute(
        leasehold::sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")),
        &[],
    )
    .await?;
    tx.commit().await?;
    admin.close().await;
    // `leasehold migrate` once: the lease table and the fence table, in the application's database.
    let db = Database::builder(&base)
        .postgres_schema(SCHEMA)
        .connect()
        .await?;
    db.migrate().await?;
    let mut tx = db.begin().await?;
    tx.execute(
        "CREATE TABLE daily_report (written_by TEXT NOT NULL, fence BIGINT NOT NULL)",
        &[],
    )
    .await?;
    tx.commit().await?;

    // The lease store is the same database (same schema): no Redis to run for a nightly job.
    let sep = if base.contains('?') { '&' } else { '?' };
    let store = format!("{base}{sep}options[search_path]={SCHEMA}");
    let tonight = LeaseClient::connect(&store).await?;

    // Cron starts the job twice by mistake: the second start finds it busy and does nothing.
    let opts = LeaseOptions::with_ttl(Duration::from_secs(30))?;
    let run = tonight.try_acquire("nightly-report", &opts).await?;
    match tonight.try_acquire("nightly-report", &opts).await {
        Err(Error::Busy { remaining, .. }) => println!(
            "second start: busy (held for about {} ms more), skipped",
            remaining.unwrap_or_default().as_millis()
        ),
        other => panic!("expected busy, got {other:?}"),
    }
    write_report(&db, run.fence(), "run 1").await?;
    println!("run 1 wrote the report with fence {}", run.fence());
    run.release().await?;

    // Run 2 is paused past its lease (a stalled VM, a long GC). The database expires the lease by
    // its own clock; run 3 takes it with a larger fence and writes. Run 2 wakes up and writes too:
    // nothing stopped it, but the fence check in the same database does.
    let short = LeaseOptions::builder()
        .ttl(Duration::from_millis(300))
        .no_renewal()
        .build()?;
    let run2 = tonight.try_acquire("nightly-report", &short).await?;
    tokio::time::sleep(Duration::from_millis(600)).await; // paused
    let run3 = tonight
        .acquire("nightly-report", &opts, Duration::from_secs(5))
        .await?;
    write_report(&db, run3.fence(), "run 3").await?;
    println!("run 3 wrote the report with fence {}", run3.fence());
    match write_report(&db, run2.fence(), "run 2").await {
        Err(Error::StaleFence {
            presented, current, ..
        }) => println!("run 2's late write refused: fence {presented} < {current}"),
        Ok(()) => unreachable!("a superseded fence is never accepted"),
        Err(e) => return Err(e),
    }
    run3.release().await?;
    let _ = run2.release().await; // not its lease any more: releases nothing

    let mut tx = db.begin().await?;
    let stale = tx
        .fetch_i64(
            "SELECT count(*) FROM daily_report WHERE written_by = 'run 2'",
            &[],
        )
        .await?;
    tx.commit().await?;
    assert_eq!(stale, Some(0));
    println!("the report holds runs 1 and 3 only");
    db.close().await;
    Ok(())
}
