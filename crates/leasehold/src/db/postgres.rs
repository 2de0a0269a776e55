//! The PostgreSQL backend of [`Database`]: connecting (with an optional schema of its own) and the
//! dialect. Writers wait on row locks; DDL is transactional, so a migration commits whole or not at all.
//!
//! Promise: with a schema, every connection of the pool works in that schema alone (created once), so
//! two applications (or two tests) in one database never see each other's tables.
//! Limit: what PostgreSQL has committed is what it keeps: a failover to an asynchronous standby or a
//! restore from a backup can lose the last commits, guards' rows included.

use std::str::FromStr;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgConnection, Postgres};

use super::dialect::Dialect;
use super::tx::{Conn, TxInner};
use super::{check_identifier, Backend, Database, DatabaseBuilder, Pool};
use crate::{Error, Result};

/// PostgreSQL's SQL is the one the guards are written in; only the clock and the migrations' lock
/// are its own.
pub(crate) static DIALECT: Dialect = Dialect {
    backend: Backend::Postgres,
    begin: "BEGIN",
    now_ms: "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
    for_update: " FOR UPDATE",
    insert_ignore: ("INSERT INTO", " ON CONFLICT DO NOTHING"),
    lock_before_insert: false,
    returning: true,
    question_marks: false,
    fence_upsert: super::dialect::FENCE_UPSERT_RETURNING,
    migrator: &super::migrate::POSTGRES,
    migrations_table: "CREATE TABLE IF NOT EXISTS leasehold_schema_migrations (
    version BIGINT PRIMARY KEY, description TEXT NOT NULL, checksum BYTEA NOT NULL)",
    // Advisory lock id "leasehol" in ASCII. Database-wide, so concurrent migrations of different
    // schemas queue too; each is quick.
    migration_lock: Some("SELECT pg_advisory_xact_lock(7810770336629157740)"),
    transactional_ddl: true,
};

super::dialect::sqlx_driver!(Postgres, &DIALECT);

/// Opens the pool; with a schema, creates it once and puts it alone on every connection's path.
pub(super) async fn connect(b: DatabaseBuilder) -> Result<Database> {
    let options = PgConnectOptions::from_str(&b.url)
        .map_err(|e| Error::invalid("database url", format!("cannot parse PostgreSQL url: {e}")))?;
    let mut pool_options = PgPoolOptions::new()
        .max_connections(b.max_connections.unwrap_or(10))
        .acquire_timeout(b.acquire_timeout);
    if let Some(schema) = b.postgres_schema {
        check_identifier("postgres schema", &schema)?;
        create_schema(&options, &schema).await?;
        let set = format!("SET search_path TO \"{schema}\"");
        pool_options = pool_options.after_connect(move |conn, _meta| {
            let set = set.clone();
            Box::pin(async move {
                conn.execute(sqlx::AssertSqlSafe(set)).await?;
                Ok(())
            })
        });
    }
    let pool = pool_options.connect_with(options).await?;
    Ok(Database::new(Pool::Postgres(pool)))
}

/// Creates the schema once up front; per-connection work is then only the `SET`.
async fn create_schema(options: &PgConnectOptions, schema: &str) -> Result<()> {
    let mut conn = <PgConnection as sqlx::Connection>::connect_with(options).await?;
    // The name was checked to be a plain identifier (`check_identifier`).
    let create = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
    if let Err(e) = (&mut conn).execute(sqlx::AssertSqlSafe(create)).await {
        // Two processes creating the same schema at once may race on the catalog's unique index;
        // the schema exists either way.
        if !is_unique_violation(&e) {
            return Err(e.into());
        }
    }
    sqlx::Connection::close(conn).await?;
    Ok(())
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") || db.code().as_deref() == Some("42P06"))
}

impl From<sqlx::Transaction<'static, Postgres>> for TxInner {
    fn from(t: sqlx::Transaction<'static, Postgres>) -> Self {
        TxInner::Postgres(t)
    }
}

impl<'a> From<&'a mut PgConnection> for Conn<'a> {
    fn from(c: &'a mut PgConnection) -> Self {
        Conn::Postgres(c)
    }
}
