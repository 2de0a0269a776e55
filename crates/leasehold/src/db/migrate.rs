//! Applies the migrations leasehold ships, recorded in its own table so they never mix with an
//! application's `_sqlx_migrations` (sqlx 0.8 cannot rename that table, and two migrators sharing it
//! each refuse the other's versions as "missing"). Only the migrations of the backends compiled in
//! are embedded in the binary.

use sqlx::migrate::Migrator;
use sqlx::Executor;

use super::{Conn, Database};
use crate::{Error, Result};

#[cfg(feature = "postgres")]
static POSTGRES: Migrator = sqlx::migrate!("migrations/postgres");
#[cfg(feature = "sqlite")]
static SQLITE: Migrator = sqlx::migrate!("migrations/sqlite");

/// Advisory lock id taken while migrating on PostgreSQL ("leasehol" in ASCII). Database-wide, so
/// concurrent migrations of different schemas queue too; each is quick.
#[cfg(feature = "postgres")]
const PG_MIGRATION_LOCK: i64 = 0x6c65_6173_6568_6f6c;

/// The table recording applied migrations; the column types are the only difference between backends.
#[cfg(feature = "postgres")]
const PG_TABLE: &str = "CREATE TABLE IF NOT EXISTS leasehold_schema_migrations (
    version BIGINT PRIMARY KEY, description TEXT NOT NULL, checksum BYTEA NOT NULL)";
#[cfg(feature = "sqlite")]
const SQLITE_TABLE: &str = "CREATE TABLE IF NOT EXISTS leasehold_schema_migrations (
    version INTEGER PRIMARY KEY, description TEXT NOT NULL, checksum BLOB NOT NULL)";

/// Applies the pending migrations in one transaction (`BEGIN IMMEDIATE` on SQLite, under an advisory
/// lock on PostgreSQL), so concurrent callers queue and each migration runs once.
pub(super) async fn run(db: &Database) -> Result<()> {
    let mut tx = db.begin().await?;
    let (migrator, table) = match tx.conn() {
        #[cfg(feature = "postgres")]
        Conn::Postgres(c) => {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(PG_MIGRATION_LOCK)
                .execute(c)
                .await?;
            (&POSTGRES, PG_TABLE)
        }
        #[cfg(feature = "sqlite")]
        Conn::Sqlite(_) => (&SQLITE, SQLITE_TABLE),
    };
    crate::with_conn!(tx, |c| c.execute(table).await.map(drop))?;
    let applied: Vec<(i64, Vec<u8>)> = crate::with_conn!(tx, |c| {
        sqlx::query_as("SELECT version, checksum FROM leasehold_schema_migrations")
            .fetch_all(c)
            .await
    })?;
    for m in migrator.iter() {
        if check_applied(&applied, m)? {
            continue;
        }
        crate::with_conn!(tx, |c| c.execute(&*m.sql).await.map(drop))?;
        crate::with_conn!(tx, |c| {
            sqlx::query(
                "INSERT INTO leasehold_schema_migrations (version, description, checksum) \
                 VALUES ($1, $2, $3)",
            )
            .bind(m.version)
            .bind(&*m.description)
            .bind(&*m.checksum)
            .execute(c)
            .await
            .map(drop)
        })?;
    }
    tx.commit().await
}

/// Whether `m` was applied already; an applied migration whose text changed is refused rather than
/// silently skipped.
fn check_applied(applied: &[(i64, Vec<u8>)], m: &sqlx::migrate::Migration) -> Result<bool> {
    match applied.iter().find(|(v, _)| *v == m.version) {
        None => Ok(false),
        Some((_, sum)) if sum.as_slice() == &*m.checksum => Ok(true),
        Some(_) => Err(Error::invalid(
            "database schema",
            format!(
                "leasehold migration {} ({}) was applied with different contents; the database was \
                 migrated by another leasehold version, upgrade this one",
                m.version, m.description
            ),
        )),
    }
}
