//! Applies the migrations leasehold ships, recorded in its own table so they never mix with an
//! application's `_sqlx_migrations` (sqlx 0.8 cannot rename that table, and two migrators sharing it
//! each refuse the other's versions as "missing").

use sqlx::migrate::Migrator;
use sqlx::Executor;

use super::{Database, Pool};
use crate::{Error, Result};

static POSTGRES: Migrator = sqlx::migrate!("migrations/postgres");
static SQLITE: Migrator = sqlx::migrate!("migrations/sqlite");

/// Advisory lock id taken while migrating on PostgreSQL ("leasehol" in ASCII). Database-wide, so
/// concurrent migrations of different schemas queue too; each is quick.
const PG_MIGRATION_LOCK: i64 = 0x6c65_6173_6568_6f6c;

pub(super) async fn run(db: &Database) -> Result<()> {
    match &db.pool {
        Pool::Postgres(pool) => {
            let mut tx = pool.begin().await?;
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(PG_MIGRATION_LOCK)
                .execute(&mut *tx)
                .await?;
            (&mut *tx)
                .execute(
                    "CREATE TABLE IF NOT EXISTS leasehold_schema_migrations (
                    version BIGINT PRIMARY KEY,
                    description TEXT NOT NULL,
                    checksum BYTEA NOT NULL
                )",
                )
                .await?;
            let applied: Vec<(i64, Vec<u8>)> =
                sqlx::query_as("SELECT version, checksum FROM leasehold_schema_migrations")
                    .fetch_all(&mut *tx)
                    .await?;
            for m in POSTGRES.iter() {
                if check_applied(&applied, m)? {
                    continue;
                }
                (&mut *tx).execute(&*m.sql).await?;
                sqlx::query(
                    "INSERT INTO leasehold_schema_migrations (version, description, checksum) \
                     VALUES ($1, $2, $3)",
                )
                .bind(m.version)
                .bind(&*m.description)
                .bind(&*m.checksum)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        }
        Pool::Sqlite(pool) => {
            let mut tx = pool.begin_with("BEGIN IMMEDIATE").await?;
            (&mut *tx)
                .execute(
                    "CREATE TABLE IF NOT EXISTS leasehold_schema_migrations (
                    version INTEGER PRIMARY KEY,
                    description TEXT NOT NULL,
                    checksum BLOB NOT NULL
                )",
                )
                .await?;
            let applied: Vec<(i64, Vec<u8>)> =
                sqlx::query_as("SELECT version, checksum FROM leasehold_schema_migrations")
                    .fetch_all(&mut *tx)
                    .await?;
            for m in SQLITE.iter() {
                if check_applied(&applied, m)? {
                    continue;
                }
                (&mut *tx).execute(&*m.sql).await?;
                sqlx::query(
                    "INSERT INTO leasehold_schema_migrations (version, description, checksum) \
                     VALUES ($1, $2, $3)",
                )
                .bind(m.version)
                .bind(&*m.description)
                .bind(&*m.checksum)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        }
    }
    Ok(())
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
