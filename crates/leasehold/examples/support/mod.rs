//! What every example shares: a database to run against.
//!
//! By default a SQLite file in a fresh temporary directory (nothing to install). Set
//! `LEASEHOLD_DATABASE_URL=postgres://...` to run the same example on PostgreSQL; it then works in
//! its own schema `leasehold_examples`, which it drops and creates again on every run.

use leasehold::db::Database;

/// The database, migrated, and the temporary directory that must outlive it (SQLite only).
pub(crate) async fn database() -> leasehold::Result<(Database, Option<tempfile::TempDir>)> {
    if let Ok(url) = std::env::var("LEASEHOLD_DATABASE_URL") {
        // Start from scratch so the example can run again.
        let admin = Database::connect(&url).await?;
        let mut tx = admin.begin().await?;
        tx.execute("DROP SCHEMA IF EXISTS leasehold_examples CASCADE", &[])
            .await?;
        tx.commit().await?;
        admin.close().await;
        let db = Database::builder(url)
            .postgres_schema("leasehold_examples")
            .connect()
            .await?;
        db.migrate().await?;
        println!("database: PostgreSQL, schema leasehold_examples");
        return Ok((db, None));
    }
    let dir = tempfile::tempdir().map_err(|e| leasehold::Error::Invalid {
        what: "temporary directory",
        why: e.to_string(),
    })?;
    let path = dir.path().join("example.db");
    let db = Database::connect(&format!("sqlite:{}", path.display())).await?;
    db.migrate().await?;
    println!("database: SQLite file {}", path.display());
    Ok((db, Some(dir)))
}

/// Runs portable DDL (drops the table first so the example can run again).
pub(crate) async fn fresh_table(db: &Database, name: &str, columns: &str) -> leasehold::Result<()> {
    let mut tx = db.begin().await?;
    tx.execute(
        leasehold::sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {name}")),
        &[],
    )
    .await?;
    tx.execute(
        leasehold::sqlx::AssertSqlSafe(format!("CREATE TABLE {name} ({columns})")),
        &[],
    )
    .await?;
    tx.commit().await
}

/// A fresh `ledger` table holding account `acct-1` with `balance`.
#[allow(dead_code)] // not every example keeps a ledger
pub(crate) async fn ledger_with(db: &Database, balance: i64) -> leasehold::Result<()> {
    fresh_table(
        db,
        "ledger",
        "account TEXT PRIMARY KEY, balance BIGINT NOT NULL",
    )
    .await?;
    let mut tx = db.begin().await?;
    tx.execute(
        "INSERT INTO ledger VALUES ('acct-1', $1)",
        &[balance.into()],
    )
    .await?;
    tx.commit().await
}
