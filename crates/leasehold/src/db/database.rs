//! [`Database`] and its builder over the backends compiled in. The backend arms live in one place:
//! the [`Pool`] enum and `on_backend!` (in `mod.rs`); what each backend does differently is in its
//! own module (`postgres.rs`, `sqlite.rs`) as a [`Dialect`](super::dialect::Dialect).
//!
//! Promise: a [`Database`] talks to the one backend its URL names, and only if that backend is
//! compiled in (a URL of another is refused with a message naming the feature to turn on, before
//! anything is sent); every guard and [`Tx`](super::Tx) taken from it runs on that backend.
//! Limit: it is a pool, not a coordinator: it opens connections lazily up to its bound and promises
//! nothing about the server itself (its durability, its isolation level beyond what each guard sets).

use std::time::Duration;

use super::dialect::{dialect_of, Dialect, Driver};
use super::tx::Tx;
use crate::{Error, Result};

/// Which database a [`Database`] or [`Tx`] talks to. Every variant exists whatever the features, so
/// that code matching on a backend compiles under any feature set; a [`Database`] is only ever one
/// whose feature is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// PostgreSQL (`postgres://` or `postgresql://` URLs).
    Postgres,
    /// SQLite (`sqlite:path`, `sqlite://path`, `sqlite::memory:`).
    Sqlite,
    /// MariaDB or MySQL (`mysql://` or `mariadb://` URLs), InnoDB tables.
    MySql,
}

impl Backend {
    /// The backend's name, which is also the name of the cargo feature that compiles it in.
    pub const fn as_str(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
            Backend::MySql => "mysql",
        }
    }

    /// Whether this build of leasehold can talk to this backend (its cargo feature is on).
    pub const fn is_compiled(self) -> bool {
        match self {
            Backend::Postgres => cfg!(feature = "postgres"),
            Backend::Sqlite => cfg!(feature = "sqlite"),
            Backend::MySql => cfg!(feature = "mysql"),
        }
    }

    /// The backend a URL names by its scheme, compiled in or not.
    fn of_url(url: &str) -> Result<Backend> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Backend::Postgres)
        } else if url.starts_with("sqlite:") {
            Ok(Backend::Sqlite)
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            Ok(Backend::MySql)
        } else {
            Err(Error::invalid(
                "database url",
                format!(
                    "`{}` has no supported scheme; use postgres://user@host/db, \
                     mysql://user@host/db, sqlite:path/to/file.db or sqlite::memory:",
                    crate::url::redact(url)
                ),
            ))
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pool of one compiled backend. An enum rather than a trait object so that every query is
/// written against a concrete sqlx driver; `on_backend!` is the one place that lists the arms.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(sqlx::PgPool),
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::SqlitePool),
    /// MariaDB or MySQL.
    #[cfg(feature = "mysql")]
    MySql(sqlx::MySqlPool),
}

/// A pool of connections to one database, whose backend is chosen from the URL. Cheap to clone (the
/// pool is shared).
#[derive(Debug, Clone)]
pub struct Database {
    /// The sqlx pool; an enum so that callers write one code path for every backend.
    pool: Pool,
}

/// Builder for [`Database`]: pool size, an isolated PostgreSQL schema, SQLite's busy timeout.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .connect() is awaited"]
pub struct DatabaseBuilder {
    /// Where to connect; the scheme picks the backend.
    pub(super) url: String,
    /// Pool size; `None` = the backend's default (10 for a server, 4 for a SQLite file, 1 for SQLite
    /// in memory, where each connection would otherwise see its own empty database).
    pub(super) max_connections: Option<u32>,
    /// PostgreSQL only: a schema created if missing and put alone on every connection's
    /// `search_path`, so leasehold's tables (and the caller's) live there. Isolates tests and tenants.
    pub(super) postgres_schema: Option<String>,
    /// SQLite only: how long a writer waits for another writer's transaction before failing with
    /// `SQLITE_BUSY`. Long by default: writers are meant to queue, not fail. Kept (and settable)
    /// without the `sqlite` feature so that one builder chain compiles under any feature set.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    pub(super) busy_timeout: Duration,
    /// How long to wait for a free pooled connection.
    pub(super) acquire_timeout: Duration,
}

impl DatabaseBuilder {
    /// Maximum connections in the pool (at least 1).
    pub fn max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n);
        self
    }

    /// PostgreSQL only: use (and create if missing) this schema for every connection. The name must
    /// be a plain identifier (`[A-Za-z_][A-Za-z0-9_]*`, at most 63 bytes).
    pub fn postgres_schema(mut self, schema: impl Into<String>) -> Self {
        self.postgres_schema = Some(schema.into());
        self
    }

    /// SQLite only: how long a writer waits for the write lock (default 30 s).
    pub fn busy_timeout(mut self, timeout: Duration) -> Self {
        self.busy_timeout = timeout;
        self
    }

    /// How long to wait for a pooled connection (default 30 s).
    pub fn acquire_timeout(mut self, timeout: Duration) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Validates the settings and opens the pool (one connection is opened at once, so a wrong URL
    /// fails here rather than at the first query).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a URL without a supported scheme, one whose backend this build leaves
    /// out (naming the feature), or a setting that does not apply; [`Error::Database`] when the
    /// database refuses or does not answer.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future drops the connections opened so far.
    pub async fn connect(self) -> Result<Database> {
        if self.max_connections == Some(0) {
            return Err(Error::invalid("max connections", "must be at least 1"));
        }
        match Backend::of_url(&self.url)? {
            #[cfg(feature = "postgres")]
            Backend::Postgres => super::postgres::connect(self).await,
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => super::sqlite::connect(self).await,
            #[cfg(feature = "mysql")]
            Backend::MySql => super::mysql::connect(self).await,
            #[allow(unreachable_patterns)]
            missing => Err(not_compiled(missing, &self.url)),
        }
    }
}

/// The error for a URL whose backend this build leaves out: names the feature that brings it in.
fn not_compiled(backend: Backend, url: &str) -> Error {
    let feature = backend.as_str();
    Error::invalid(
        "database url",
        format!(
            "`{}` needs leasehold's `{feature}` feature, which this build leaves out; enable it in \
             Cargo.toml (leasehold = {{ version = \"...\", features = [\"{feature}\"] }})",
            crate::url::redact(url)
        ),
    )
}

impl Database {
    /// Connects with default settings: `postgres://...`, `postgresql://...`, `mysql://...`,
    /// `mariadb://...`, `sqlite:path` or `sqlite::memory:`. A SQLite file is created if missing and put in WAL mode.
    ///
    /// # Errors
    ///
    /// As [`DatabaseBuilder::connect`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: nothing is left open.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// A builder for pool size, an isolated PostgreSQL schema, or SQLite's busy timeout.
    pub fn builder(url: impl Into<String>) -> DatabaseBuilder {
        DatabaseBuilder {
            url: url.into(),
            max_connections: None,
            postgres_schema: None,
            busy_timeout: Duration::from_secs(30),
            acquire_timeout: Duration::from_secs(30),
        }
    }

    pub(super) fn new(pool: Pool) -> Self {
        Database { pool }
    }

    /// Wraps a PostgreSQL pool you configured yourself. Needs the `postgres` feature.
    #[cfg(feature = "postgres")]
    pub fn from_postgres(pool: sqlx::PgPool) -> Self {
        Database::new(Pool::Postgres(pool))
    }

    /// Wraps a MariaDB/MySQL pool you configured yourself (its sessions should run in UTC, sqlx's
    /// default). The pools leasehold opens run their sessions at READ COMMITTED (set in
    /// `after_connect`); do the same on yours, or concurrent first requests of different keys deadlock more often at InnoDB's
    /// REPEATABLE READ (leasehold runs a transaction that lost a deadlock again, a few times). Needs
    /// the `mysql` feature.
    #[cfg(feature = "mysql")]
    pub fn from_mysql(pool: sqlx::MySqlPool) -> Self {
        Database::new(Pool::MySql(pool))
    }

    /// Wraps a SQLite pool you configured yourself. Set a busy timeout on it, or concurrent writers
    /// fail with `SQLITE_BUSY` instead of waiting; and an `after_release` hook that drops connections
    /// still inside a transaction (see the source of [`DatabaseBuilder::connect`]), or a task
    /// cancelled during `BEGIN` can leave one holding the write lock. Needs the `sqlite` feature.
    #[cfg(feature = "sqlite")]
    pub fn from_sqlite(pool: sqlx::SqlitePool) -> Self {
        Database::new(Pool::Sqlite(pool))
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        self.dialect().backend
    }

    /// The SQL this backend speaks where it differs.
    pub(crate) fn dialect(&self) -> &'static Dialect {
        on_backend!(&self.pool, Pool, p => dialect_of(p))
    }

    /// The PostgreSQL pool, if this is PostgreSQL. Needs the `postgres` feature.
    #[cfg(feature = "postgres")]
    pub fn postgres(&self) -> Option<&sqlx::PgPool> {
        match &self.pool {
            Pool::Postgres(p) => Some(p),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The SQLite pool, if this is SQLite. Needs the `sqlite` feature.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(&self) -> Option<&sqlx::SqlitePool> {
        match &self.pool {
            Pool::Sqlite(p) => Some(p),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Reads one `BIGINT` (or nothing) on the pool, outside any transaction: a read needs no
    /// `BEGIN IMMEDIATE` (SQLite's write lock). Portable SQL, as [`Tx::fetch_i64`].
    pub(crate) async fn fetch_i64(
        &self,
        sql: &'static str,
        params: &[super::Param<'_>],
    ) -> Result<Option<i64>> {
        let (sql, params) = self
            .dialect()
            .prepare(sqlx::SqlSafeStr::into_sql_str(sql), params)?;
        Ok(on_backend!(&self.pool, Pool, p => {
            let mut q = sqlx::query_scalar::<_, Option<i64>>(sql);
            for param in params.iter() {
                q = param.bind_scalar(q);
            }
            q.fetch_optional(p).await?.flatten()
        }))
    }

    /// Creates or upgrades leasehold's tables (all prefixed `leasehold_`). Idempotent and safe to run
    /// from many processes at once (an advisory lock on PostgreSQL, `BEGIN IMMEDIATE` on SQLite).
    ///
    /// leasehold records its own migrations in `leasehold_schema_migrations`, not in sqlx's
    /// `_sqlx_migrations`, so it never clashes with an application's own `sqlx::migrate!`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] when the database was migrated by a leasehold whose migrations differ
    /// (upgrade this one); [`Error::Database`] when a statement fails (no right to create tables).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe where DDL is transactional (PostgreSQL, SQLite): a dropped future rolls back the
    /// migration in progress, and the next run applies it.
    pub async fn migrate(&self) -> Result<()> {
        super::migrate::run(self).await.map(|_| ())
    }

    /// [`migrate`](Self::migrate), saying how many migrations this call applied: 0 when the
    /// tables were up to date, all of them on a database that had none.
    ///
    /// # Errors
    ///
    /// As [`migrate`](Self::migrate).
    ///
    /// # Cancel safety
    ///
    /// As [`migrate`](Self::migrate).
    pub async fn migrate_counted(&self) -> Result<usize> {
        super::migrate::run(self).await
    }

    /// Begins a transaction. On SQLite it is `BEGIN IMMEDIATE`: it takes the write lock at once (waiting
    /// up to the busy timeout), so two read-then-write transactions never deadlock-upgrade.
    ///
    /// Dropping the [`Tx`] without [`Tx::commit`] rolls it back.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when no connection is free within the acquire timeout or the `BEGIN`
    /// fails (SQLite: the busy timeout passed).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a transaction begun by a dropped future is rolled back when its connection
    /// returns to the pool.
    pub async fn begin(&self) -> Result<Tx> {
        let begin = self.dialect().begin;
        let inner = on_backend!(&self.pool, Pool, p => Driver::begin(p, begin).await?.into());
        Ok(Tx::new(inner))
    }

    /// Closes the pool, waiting for connections in use to come back.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the pool is closed to new work from the first poll.
    pub async fn close(&self) {
        on_backend!(&self.pool, Pool, p => p.close().await)
    }
}

/// Whether the database gave up the transaction to break a lock cycle (a deadlock, SQLSTATE 40001 on
/// MariaDB/MySQL and 40P01 on PostgreSQL): it was rolled back whole, and running it again is safe.
/// InnoDB gets there where two `INSERT`s of one new key wait on each other's shared lock.
pub(crate) fn is_deadlock(e: &Error) -> bool {
    matches!(e, Error::Database(sqlx::Error::Database(db))
        if matches!(db.code().as_deref(), Some("40001" | "40P01")))
}

/// How often a transaction of leasehold's own that lost a deadlock is run again.
pub(crate) const DEADLOCK_RETRIES: u32 = 8;

/// Waits before running again a transaction that lost a deadlock (`attempt` counts from 1): a random
/// time up to 2, 4, 8, … ms (at most 64), so that the transactions which met do not meet again at
/// once. Cancel safe: a sleep.
pub(crate) async fn deadlock_backoff(attempt: u32) {
    let ceiling_ms = 1_u64 << attempt.clamp(1, 6);
    let wait = rand::random_range(0..=ceiling_ms * 1000);
    tokio::time::sleep(std::time::Duration::from_micros(wait)).await;
}

/// Turns "no such table" on one of leasehold's own tables into an error that says what to do.
pub(crate) fn missing_tables_hint(e: Error) -> Error {
    let missing = match &e {
        Error::Database(sqlx::Error::Database(db)) => {
            db.code().as_deref() == Some("42P01") || db.message().contains("no such table")
        }
        _ => false,
    };
    if missing {
        Error::invalid(
            "database schema",
            format!(
                "{}; leasehold's tables are missing: call Database::migrate() once at startup",
                e.report()
            ),
        )
    } else {
        e
    }
}

/// Refuses anything but a plain SQL identifier (`[A-Za-z_][A-Za-z0-9_]*`, 1..=63 bytes), so that a
/// table, column or schema name can be put into SQL text without any chance of injection.
pub(crate) fn check_identifier(what: &'static str, name: &str) -> Result<()> {
    let mut chars = name.chars();
    let ok_first = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    let ok_rest = chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if ok_first && ok_rest && name.len() <= 63 {
        Ok(())
    } else {
        Err(Error::invalid(
            what,
            format!(
                "{name:?} is not a plain identifier; use 1 to 63 characters from [A-Za-z0-9_], \
                 not starting with a digit"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_are_strict() {
        for ok in ["orders", "_x", "Order_2", "a"] {
            assert!(check_identifier("table", ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1abc",
            "orders;drop table x",
            "a b",
            "a\"b",
            "naïve",
            "x-y",
            &"a".repeat(64),
        ] {
            let err = check_identifier("table", bad).unwrap_err().to_string();
            assert!(err.contains("invalid table"), "{err}");
        }
    }

    #[test]
    fn urls_pick_the_backend_and_hide_passwords() {
        assert_eq!(
            Backend::of_url("postgres://u@h/db").unwrap(),
            Backend::Postgres
        );
        assert_eq!(Backend::of_url("sqlite::memory:").unwrap(), Backend::Sqlite);
        assert_eq!(Backend::of_url("mariadb://u@h/db").unwrap(), Backend::MySql);
        let err = Backend::of_url("mssql://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("secret"), "{err}");
        assert!(err.contains("sqlite:"), "{err}");
    }

    /// Runs only in a build that leaves a backend out (e.g. `--no-default-features --features
    /// sqlite`): its URLs must be refused before any connection, naming the feature, without the
    /// password.
    #[cfg(not(all(feature = "postgres", feature = "sqlite", feature = "mysql")))]
    #[tokio::test]
    async fn a_backend_left_out_is_refused_naming_its_feature() {
        let (url, feature) = if cfg!(feature = "postgres") {
            ("sqlite:/nonexistent/dir/app.db", "`sqlite` feature")
        } else {
            ("postgres://app:secret@127.0.0.1:1/db", "`postgres` feature")
        };
        let err = Database::connect(url).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Invalid {
                    what: "database url",
                    ..
                }
            ),
            "{err:?}"
        );
        let msg = err.to_string();
        assert!(msg.contains(feature), "{msg}");
        assert!(!msg.contains("secret"), "{msg}");
    }
}
