//! Applies the migrations leasehold ships, recorded in its own table so they never mix with an
//! application's `_sqlx_migrations`. Only the migrations of the backends compiled in are embedded in
//! the binary.
//!
//! The migrations are sqlx's own [`Migration`]s, embedded with `include_str!` and put in order by
//! [`Migrator::with_migrations`] (no `migrate!` macro: its proc-macro crate would compile the SQL
//! drivers a second time). They are applied here rather than by [`Migrator::run`], although sqlx 0.9
//! can rename its bookkeeping table: `run` takes no lock on SQLite (two first starts at once would
//! both apply the first migration, and one fails) and commits each migration on its own, while this
//! runner applies all pending migrations in one transaction that concurrent callers queue behind
//! (`BEGIN IMMEDIATE` on SQLite, an advisory lock on PostgreSQL, `GET_LOCK` on MariaDB/MySQL, where
//! DDL commits implicitly), and keeps the table layout that databases migrated by earlier versions
//! already have. Which migrator, lock and record table a backend uses is in its
//! [`Dialect`](super::dialect::Dialect).
//!
//! Promise: concurrent callers apply each pending migration once, all of them in one transaction where
//! the backend allows it (PostgreSQL, SQLite), in version order; a migration already applied whose
//! text changed is refused, never applied again.
//! Limit: on MariaDB/MySQL DDL commits implicitly, so a failure midway leaves the migrations before it
//! applied (each is written to be safe to repeat); migrations are only ever added, never rolled back.

use std::borrow::Cow;
use std::sync::LazyLock;

use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::SqlSafeStr;

use super::{Database, Param, Tx};
use crate::{Error, Result};

/// One migration file: its version and description (as `sqlx migrate add` names the file) and text.
macro_rules! migration {
    ($version:literal, $description:literal, $file:literal) => {
        Migration::new(
            $version,
            Cow::Borrowed($description),
            MigrationType::Simple,
            include_str!($file).into_sql_str(),
            false,
        )
    };
}

#[cfg(feature = "postgres")]
pub(super) static POSTGRES: LazyLock<Migrator> = LazyLock::new(|| {
    Migrator::with_migrations(vec![
        migration!(
            20260101000001,
            "leasehold init",
            "../../migrations/postgres/20260101000001_leasehold_init.sql"
        ),
        migration!(
            20260101000002,
            "idempotency owner",
            "../../migrations/postgres/20260101000002_idempotency_owner.sql"
        ),
        migration!(
            20260101000003,
            "lease store",
            "../../migrations/postgres/20260101000003_lease_store.sql"
        ),
        migration!(
            20260101000004,
            "lease notes",
            "../../migrations/postgres/20260101000004_lease_notes.sql"
        ),
        migration!(
            20261204000001,
            "fence function",
            "../../migrations/postgres/20261204000001_fence_function.sql"
        ),
    ])
});
#[cfg(feature = "sqlite")]
pub(super) static SQLITE: LazyLock<Migrator> = LazyLock::new(|| {
    Migrator::with_migrations(vec![
        migration!(
            20260101000001,
            "leasehold init",
            "../../migrations/sqlite/20260101000001_leasehold_init.sql"
        ),
        migration!(
            20260101000002,
            "idempotency owner",
            "../../migrations/sqlite/20260101000002_idempotency_owner.sql"
        ),
    ])
});
#[cfg(feature = "mysql")]
pub(super) static MYSQL: LazyLock<Migrator> = LazyLock::new(|| {
    Migrator::with_migrations(vec![
        migration!(
            20260101000001,
            "leasehold init",
            "../../migrations/mysql/20260101000001_leasehold_init.sql"
        ),
        migration!(
            20260101000003,
            "lease store",
            "../../migrations/mysql/20260101000003_lease_store.sql"
        ),
        migration!(
            20260101000004,
            "lease notes",
            "../../migrations/mysql/20260101000004_lease_notes.sql"
        ),
        migration!(
            20261204000001,
            "fence function",
            "../../migrations/mysql/20261204000001_fence_function.sql"
        ),
    ])
});

/// Applies the pending migrations in one transaction (`BEGIN IMMEDIATE` on SQLite, under an advisory
/// lock on PostgreSQL), so concurrent callers queue and each migration runs once. Where DDL commits
/// implicitly (MariaDB, MySQL) the lock is a session lock (`GET_LOCK`), released at the end, and each
/// migration is recorded right after it ran; one cut short runs again whole, which its
/// `IF NOT EXISTS` statements allow. Returns how many migrations this call applied.
pub(super) async fn run(db: &Database) -> Result<usize> {
    let dialect = db.dialect();
    let mut tx = db.begin().await?;
    if let Some(lock) = dialect.migration_lock {
        if dialect.transactional_ddl {
            tx.execute_script(lock).await?;
        } else if tx.fetch_i64(lock, &[]).await? != Some(1) {
            return Err(Error::invalid(
                "migration lock",
                "another migration held `leasehold_migrate` for 60 s; run migrate again when it ends",
            ));
        }
    }
    let result = apply_pending(&mut tx).await;
    if !dialect.transactional_ddl {
        // The session lock outlives the transaction: release it before the connection goes back.
        let released = tx
            .execute_script("DO RELEASE_LOCK('leasehold_migrate')")
            .await;
        let applied = result?;
        released?;
        tx.commit().await?;
        Ok(applied)
    } else {
        let applied = result?;
        tx.commit().await?;
        Ok(applied)
    }
}

/// Creates the record table and applies every migration not recorded in it; how many it applied.
async fn apply_pending(tx: &mut Tx) -> Result<usize> {
    let dialect = tx.dialect();
    tx.execute_script(dialect.migrations_table).await?;
    let applied = applied(tx).await?;
    let mut count = 0;
    for m in dialect.migrator.iter() {
        if check_applied(&applied, m)? {
            continue;
        }
        count += 1;
        tx.execute_script(m.sql.clone()).await?;
        tx.execute(
            "INSERT INTO leasehold_schema_migrations (version, description, checksum) \
             VALUES ($1, $2, $3)",
            &[
                Param::I64(m.version),
                Param::Text(&m.description),
                Param::Bytes(&m.checksum),
            ],
        )
        .await?;
    }
    Ok(count)
}

/// The versions and checksums recorded so far.
async fn applied(tx: &mut Tx) -> Result<Vec<(i64, Vec<u8>)>> {
    Ok(crate::with_conn!(tx, |c| {
        sqlx::query_as("SELECT version, checksum FROM leasehold_schema_migrations")
            .fetch_all(c)
            .await
    })?)
}

/// Migrations whose text changed without changing what they do, with the checksum (SHA-384, as
/// sqlx computes it) of each earlier text: a database that recorded one of those is up to date.
const EARLIER_TEXTS: &[(i64, &str)] = &[
    // mysql lease notes: MariaDB adds the column with `ADD COLUMN IF NOT EXISTS` instead of reading
    // information_schema.COLUMNS (0.2); the column is the same.
    (
        20260101000004,
        "902029533822eefa3d29ecda898c1f34b7a982d5a6830c387b39aa6d1491dc0d33cab3cfd80544b600f545d663c1c26c",
    ),
];

/// Whether `m` was applied already; an applied migration whose text changed is refused rather than
/// silently skipped, unless [`EARLIER_TEXTS`] lists the text it was applied with.
fn check_applied(applied: &[(i64, Vec<u8>)], m: &Migration) -> Result<bool> {
    let earlier = |sum: &[u8]| {
        EARLIER_TEXTS
            .iter()
            .any(|(v, hex_sum)| *v == m.version && hex::encode(sum) == *hex_sum)
    };
    match applied.iter().find(|(v, _)| *v == m.version) {
        None => Ok(false),
        Some((_, sum)) if sum.as_slice() == &*m.checksum || earlier(sum) => Ok(true),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The files of a backend's migrations folder, as (version, description), in order.
    fn files(backend: &str) -> Vec<(i64, String)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("migrations")
            .join(backend);
        let mut found: Vec<(i64, String)> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|entry| {
                let name = entry.unwrap().file_name().into_string().unwrap();
                let stem = name.strip_suffix(".sql").expect("only .sql files");
                let (version, description) = stem.split_once('_').unwrap();
                (version.parse().unwrap(), description.replace('_', " "))
            })
            .collect();
        found.sort();
        found
    }

    fn embedded(migrator: &Migrator) -> Vec<(i64, String)> {
        migrator
            .iter()
            .map(|m| (m.version, m.description.to_string()))
            .collect()
    }

    /// A database migrated with a rewritten migration's earlier text is up to date; any other
    /// text is refused.
    #[cfg(feature = "mysql")]
    #[test]
    fn an_earlier_text_of_a_rewritten_migration_counts_as_applied() {
        let notes = MYSQL.iter().find(|m| m.version == 20260101000004).unwrap();
        let (_, old) = EARLIER_TEXTS[0];
        let old = hex::decode(old).unwrap();
        assert_ne!(old.as_slice(), &*notes.checksum, "the text did change");
        assert!(check_applied(&[(notes.version, old)], notes).unwrap());
        assert!(check_applied(&[(notes.version, vec![0; 48])], notes).is_err());
        assert!(!check_applied(&[], notes).unwrap());
    }

    /// A migration file added to the folder but not to the list above would never be applied.
    #[cfg(feature = "postgres")]
    #[test]
    fn every_postgres_file_is_embedded() {
        assert_eq!(embedded(&POSTGRES), files("postgres"));
    }

    #[cfg(feature = "sqlite")]
    #[test]
    fn every_sqlite_file_is_embedded() {
        assert_eq!(embedded(&SQLITE), files("sqlite"));
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn every_mysql_file_is_embedded() {
        assert_eq!(embedded(&MYSQL), files("mysql"));
    }
}
