//! [`Database`], [`Tx`] and [`Conn`] over the backends compiled in: each `#[cfg(feature = ...)]` below
//! removes one backend's arm, so a build with one feature carries no code (and no driver) of the other.

use std::str::FromStr;
use std::time::Duration;

#[cfg(feature = "postgres")]
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
#[cfg(feature = "sqlite")]
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};
#[cfg(feature = "postgres")]
use sqlx::{Executor, PgConnection, PgPool, Postgres};
#[cfg(feature = "sqlite")]
use sqlx::{Sqlite, SqliteConnection, SqlitePool};

use crate::{Error, Result};

/// Which database a [`Database`] or [`Tx`] talks to. Both variants exist whatever the features, so
/// that code matching on a backend compiles under any feature set; a [`Database`] is only ever one
/// whose feature is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// PostgreSQL (`postgres://` or `postgresql://` URLs).
    Postgres,
    /// SQLite (`sqlite:path`, `sqlite://path`, `sqlite::memory:`).
    Sqlite,
}

impl Backend {
    /// The backend's name, which is also the name of the cargo feature that compiles it in.
    pub const fn as_str(self) -> &'static str {
        match self {
            Backend::Postgres => "postgres",
            Backend::Sqlite => "sqlite",
        }
    }

    /// Whether this build of leasehold can talk to this backend (its cargo feature is on).
    pub const fn is_compiled(self) -> bool {
        match self {
            Backend::Postgres => cfg!(feature = "postgres"),
            Backend::Sqlite => cfg!(feature = "sqlite"),
        }
    }
}

impl std::fmt::Display for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The pool of one compiled backend. An enum rather than a trait object so that every query is
/// written against a concrete sqlx driver.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    /// PostgreSQL.
    #[cfg(feature = "postgres")]
    Postgres(PgPool),
    /// SQLite.
    #[cfg(feature = "sqlite")]
    Sqlite(SqlitePool),
}

/// A pool of connections to PostgreSQL or SQLite, chosen from the URL. Cheap to clone (the pool is
/// shared).
#[derive(Debug, Clone)]
pub struct Database {
    /// The sqlx pool; an enum so that callers write one code path for both backends.
    pool: Pool,
}

/// Builder for [`Database`]: pool size, an isolated PostgreSQL schema, SQLite's busy timeout.
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until .connect() is awaited"]
pub struct DatabaseBuilder {
    /// Where to connect; the scheme picks the backend.
    url: String,
    /// Pool size; `None` = 10 for PostgreSQL, 4 for a SQLite file, 1 for SQLite in memory (each
    /// in-memory connection would otherwise see its own empty database).
    max_connections: Option<u32>,
    /// PostgreSQL only: a schema created if missing and put alone on every connection's
    /// `search_path`, so leasehold's tables (and the caller's) live there. Isolates tests and tenants.
    postgres_schema: Option<String>,
    /// SQLite only: how long a writer waits for another writer's transaction before failing with
    /// `SQLITE_BUSY`. Long by default: writers are meant to queue, not fail. Kept (and settable)
    /// without the `sqlite` feature so that one builder chain compiles under any feature set.
    #[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
    busy_timeout: Duration,
    /// How long to wait for a free pooled connection.
    acquire_timeout: Duration,
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
    pub async fn connect(self) -> Result<Database> {
        if self.max_connections == Some(0) {
            return Err(Error::invalid("max connections", "must be at least 1"));
        }
        match backend_of_url(&self.url)? {
            #[cfg(feature = "postgres")]
            Backend::Postgres => self.connect_postgres().await,
            #[cfg(feature = "sqlite")]
            Backend::Sqlite => self.connect_sqlite().await,
            #[cfg(not(all(feature = "postgres", feature = "sqlite")))]
            missing => Err(not_compiled(missing, &self.url)),
        }
    }

    #[cfg(feature = "postgres")]
    async fn connect_postgres(self) -> Result<Database> {
        let options = PgConnectOptions::from_str(&self.url).map_err(|e| {
            Error::invalid("database url", format!("cannot parse PostgreSQL url: {e}"))
        })?;
        let mut pool_options = PgPoolOptions::new()
            .max_connections(self.max_connections.unwrap_or(10))
            .acquire_timeout(self.acquire_timeout);
        if let Some(schema) = self.postgres_schema {
            check_identifier("postgres schema", &schema)?;
            // Create it once up front; per-connection work is then only the SET.
            let mut conn: PgConnection = sqlx::Connection::connect_with(&options).await?;
            let create = format!("CREATE SCHEMA IF NOT EXISTS \"{schema}\"");
            if let Err(e) = (&mut conn).execute(create.as_str()).await {
                // Two processes creating the same schema at once may race on the catalog's unique
                // index; the schema exists either way.
                if !is_unique_violation(&e) {
                    return Err(e.into());
                }
            }
            sqlx::Connection::close(conn).await?;
            let set = format!("SET search_path TO \"{schema}\"");
            pool_options = pool_options.after_connect(move |conn, _meta| {
                let set = set.clone();
                Box::pin(async move {
                    conn.execute(set.as_str()).await?;
                    Ok(())
                })
            });
        }
        let pool = pool_options.connect_with(options).await?;
        Ok(Database {
            pool: Pool::Postgres(pool),
        })
    }

    #[cfg(feature = "sqlite")]
    async fn connect_sqlite(self) -> Result<Database> {
        if self.postgres_schema.is_some() {
            return Err(Error::invalid(
                "postgres schema",
                "a schema applies only to PostgreSQL; use a separate SQLite file instead",
            ));
        }
        let options = SqliteConnectOptions::from_str(&self.url)
            .map_err(|e| Error::invalid("database url", format!("cannot parse SQLite url: {e}")))?;
        let in_memory = is_sqlite_memory(&self.url);
        let options = options
            .create_if_missing(true)
            .busy_timeout(self.busy_timeout)
            .foreign_keys(true);
        let options = if in_memory {
            options
        } else {
            // WAL: readers do not block the writer; NORMAL sync is durable at checkpoints and safe
            // against application crashes, the usual pairing with WAL.
            options
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
        };
        let mut pool_options = SqlitePoolOptions::new()
            .max_connections(if in_memory {
                1
            } else {
                self.max_connections.unwrap_or(4)
            })
            .acquire_timeout(self.acquire_timeout)
            .after_release(|conn, _meta| {
                Box::pin(async move {
                    // A task cancelled while its `BEGIN` was in flight can leave the connection
                    // inside a transaction nothing owns (sqlx-sqlite 0.8 hands the BEGIN's reply to
                    // a receiver that may already be gone), holding the write lock. Let the worker
                    // finish what is queued, then drop such a connection: closing rolls it back.
                    sqlx::Connection::ping(&mut *conn).await?;
                    Ok(!sqlx::Connection::is_in_transaction(&*conn))
                })
            });
        if in_memory {
            // The database lives only as long as its one connection.
            pool_options = pool_options
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        }
        let pool = pool_options.connect_with(options).await?;
        Ok(Database {
            pool: Pool::Sqlite(pool),
        })
    }
}

fn backend_of_url(url: &str) -> Result<Backend> {
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Backend::Postgres)
    } else if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite)
    } else {
        Err(Error::invalid(
            "database url",
            format!(
                "`{}` has no supported scheme; use postgres://user@host/db, sqlite:path/to/file.db \
                 or sqlite::memory:",
                crate::url::redact(url)
            ),
        ))
    }
}

/// The error for a URL whose backend this build leaves out: names the feature that brings it in.
#[cfg(not(all(feature = "postgres", feature = "sqlite")))]
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

#[cfg(feature = "sqlite")]
fn is_sqlite_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

#[cfg(feature = "postgres")]
fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505") || db.code().as_deref() == Some("42P06"))
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
                "{e}; leasehold's tables are missing: call Database::migrate() once at startup"
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

impl Database {
    /// Connects with default settings: `postgres://...`, `postgresql://...`, `sqlite:path` or
    /// `sqlite::memory:`. A SQLite file is created if missing and put in WAL mode.
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

    /// Wraps a PostgreSQL pool you configured yourself. Needs the `postgres` feature.
    #[cfg(feature = "postgres")]
    pub fn from_postgres(pool: PgPool) -> Self {
        Database {
            pool: Pool::Postgres(pool),
        }
    }

    /// Wraps a SQLite pool you configured yourself. Set a busy timeout on it, or concurrent writers
    /// fail with `SQLITE_BUSY` instead of waiting; and an `after_release` hook that drops connections
    /// still inside a transaction (see the source of [`DatabaseBuilder::connect`]), or a task
    /// cancelled during `BEGIN` can leave one holding the write lock. Needs the `sqlite` feature.
    #[cfg(feature = "sqlite")]
    pub fn from_sqlite(pool: SqlitePool) -> Self {
        Database {
            pool: Pool::Sqlite(pool),
        }
    }

    /// Which backend this is.
    pub fn backend(&self) -> Backend {
        match self.pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => Backend::Postgres,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// The PostgreSQL pool, if this is PostgreSQL. Needs the `postgres` feature.
    #[cfg(feature = "postgres")]
    pub fn postgres(&self) -> Option<&PgPool> {
        match &self.pool {
            Pool::Postgres(p) => Some(p),
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(_) => None,
        }
    }

    /// The SQLite pool, if this is SQLite. Needs the `sqlite` feature.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(&self) -> Option<&SqlitePool> {
        match &self.pool {
            Pool::Sqlite(p) => Some(p),
            #[cfg(feature = "postgres")]
            Pool::Postgres(_) => None,
        }
    }

    /// The pool, for crate code that runs one query per backend without a transaction.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }

    /// Creates or upgrades leasehold's tables (all prefixed `leasehold_`). Idempotent and safe to run
    /// from many processes at once (an advisory lock on PostgreSQL, `BEGIN IMMEDIATE` on SQLite).
    ///
    /// leasehold records its own migrations in `leasehold_schema_migrations`, not in sqlx's
    /// `_sqlx_migrations`, so it never clashes with an application's own `sqlx::migrate!`.
    pub async fn migrate(&self) -> Result<()> {
        super::migrate::run(self).await
    }

    /// Begins a transaction. On SQLite it is `BEGIN IMMEDIATE`: it takes the write lock at once (waiting
    /// up to the busy timeout), so two read-then-write transactions never deadlock-upgrade.
    ///
    /// Dropping the [`Tx`] without [`Tx::commit`] rolls it back.
    pub async fn begin(&self) -> Result<Tx> {
        let inner = match &self.pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => TxInner::Postgres(p.begin().await?),
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(p) => TxInner::Sqlite(p.begin_with("BEGIN IMMEDIATE").await?),
        };
        Ok(Tx { inner })
    }

    /// Begins a transaction fenced for `resource`: see [`crate::fence`]. Shorthand for
    /// [`Database::begin`] followed by [`crate::fence::check`]; on a stale fence the transaction is
    /// rolled back and [`Error::StaleFence`] returned.
    ///
    /// ```no_run
    /// # async fn demo(db: leasehold::db::Database, fence: leasehold::Fence) -> leasehold::Result<()> {
    /// let mut tx = db.begin_fenced("ledger:acct-1", fence).await?; // Err(StaleFence) if superseded
    /// leasehold::with_conn!(tx, |conn| {
    ///     sqlx::query("UPDATE ledger SET balance = balance + $1 WHERE account = $2")
    ///         .bind(5_i64)
    ///         .bind("acct-1")
    ///         .execute(conn)
    ///         .await
    ///         .map(|_| ())
    /// })?;
    /// tx.commit().await?; // the fence and the business write commit together
    /// # Ok(()) }
    /// ```
    pub async fn begin_fenced(&self, resource: &str, fence: crate::Fence) -> Result<Tx> {
        crate::fence::check_args(resource, fence)?;
        let mut tx = self.begin().await?;
        match crate::fence::check(&mut tx, resource, fence).await {
            Ok(()) => Ok(tx),
            Err(e) => {
                // Release the lock now rather than when the pool gets the connection back.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }

    /// Closes the pool, waiting for connections in use to come back.
    pub async fn close(&self) {
        match &self.pool {
            #[cfg(feature = "postgres")]
            Pool::Postgres(p) => p.close().await,
            #[cfg(feature = "sqlite")]
            Pool::Sqlite(p) => p.close().await,
        }
    }
}

#[derive(Debug)]
enum TxInner {
    #[cfg(feature = "postgres")]
    Postgres(sqlx::Transaction<'static, Postgres>),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::Transaction<'static, Sqlite>),
}

/// An open transaction on either backend. leasehold's guards (fence, idempotency, inbox, state) write
/// into it; your own queries run on [`Tx::conn`] (or the [`with_conn!`](crate::with_conn) macro) and
/// commit or roll back together with them.
///
/// Dropping a `Tx` without [`Tx::commit`] rolls it back: nothing of it is ever committed.
#[derive(Debug)]
#[must_use = "a transaction rolls back unless .commit() is awaited"]
pub struct Tx {
    /// The sqlx transaction; an enum because sqlx types transactions by backend.
    inner: TxInner,
}

/// The connection of a [`Tx`], typed by backend, for your own sqlx queries. Both arms deref from the
/// sqlx transaction, so `sqlx::query(...).execute(conn)` works in each.
///
/// There is one variant per backend compiled in (feature `postgres`, feature `sqlite`), so a `match`
/// naming both compiles only when both are on; [`with_conn!`](crate::with_conn) adapts by itself.
#[derive(Debug)]
pub enum Conn<'a> {
    /// PostgreSQL (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(&'a mut PgConnection),
    /// SQLite (feature `sqlite`).
    #[cfg(feature = "sqlite")]
    Sqlite(&'a mut SqliteConnection),
}

impl Tx {
    /// Which backend this transaction runs on.
    pub fn backend(&self) -> Backend {
        match self.inner {
            #[cfg(feature = "postgres")]
            TxInner::Postgres(_) => Backend::Postgres,
            #[cfg(feature = "sqlite")]
            TxInner::Sqlite(_) => Backend::Sqlite,
        }
    }

    /// The connection, for your own queries in this transaction.
    pub fn conn(&mut self) -> Conn<'_> {
        match &mut self.inner {
            #[cfg(feature = "postgres")]
            TxInner::Postgres(t) => Conn::Postgres(t),
            #[cfg(feature = "sqlite")]
            TxInner::Sqlite(t) => Conn::Sqlite(t),
        }
    }

    /// The PostgreSQL connection, if this is PostgreSQL. Needs the `postgres` feature.
    #[cfg(feature = "postgres")]
    pub fn postgres(&mut self) -> Option<&mut PgConnection> {
        match &mut self.inner {
            TxInner::Postgres(t) => Some(&mut **t),
            #[cfg(feature = "sqlite")]
            TxInner::Sqlite(_) => None,
        }
    }

    /// The SQLite connection, if this is SQLite. Needs the `sqlite` feature.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(&mut self) -> Option<&mut SqliteConnection> {
        match &mut self.inner {
            TxInner::Sqlite(t) => Some(&mut **t),
            #[cfg(feature = "postgres")]
            TxInner::Postgres(_) => None,
        }
    }

    /// Runs one statement of portable SQL (`$1, $2, ...` placeholders) with the given parameters and
    /// returns the number of rows it affected.
    ///
    /// Cancel safety: dropping the future leaves the transaction in an unknown state; drop the `Tx`
    /// too (it then rolls back).
    pub async fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<u64> {
        Ok(match self.conn() {
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => {
                let mut q = sqlx::query(sql);
                for p in params {
                    q = p.bind_pg(q);
                }
                q.execute(c).await?.rows_affected()
            }
            #[cfg(feature = "sqlite")]
            Conn::Sqlite(c) => {
                let mut q = sqlx::query(sql);
                for p in params {
                    q = p.bind_sqlite(q);
                }
                q.execute(c).await?.rows_affected()
            }
        })
    }

    /// Runs a portable query returning at most one row with one `BIGINT` column (`None` when no row,
    /// or the value is NULL).
    pub async fn fetch_i64(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Option<i64>> {
        Ok(match self.conn() {
            #[cfg(feature = "postgres")]
            Conn::Postgres(c) => {
                let mut q = sqlx::query_scalar::<_, Option<i64>>(sql);
                for p in params {
                    q = p.bind_pg_scalar(q);
                }
                q.fetch_optional(c).await?.flatten()
            }
            #[cfg(feature = "sqlite")]
            Conn::Sqlite(c) => {
                let mut q = sqlx::query_scalar::<_, Option<i64>>(sql);
                for p in params {
                    q = p.bind_sqlite_scalar(q);
                }
                q.fetch_optional(c).await?.flatten()
            }
        })
    }

    /// The database's clock in milliseconds since 1970: one clock for every process, so lock timeouts
    /// and retention do not depend on the callers' clocks agreeing.
    pub(crate) async fn now_ms(&mut self) -> Result<i64> {
        let sql = match self.backend() {
            Backend::Postgres => "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT",
            Backend::Sqlite => {
                "SELECT CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"
            }
        };
        self.fetch_i64(sql, &[])
            .await?
            .ok_or_else(|| Error::invalid("database clock", "the database returned no time"))
    }

    /// Commits. Until this returns `Ok`, nothing of the transaction is visible to others.
    pub async fn commit(self) -> Result<()> {
        match self.inner {
            #[cfg(feature = "postgres")]
            TxInner::Postgres(t) => t.commit().await?,
            #[cfg(feature = "sqlite")]
            TxInner::Sqlite(t) => t.commit().await?,
        }
        Ok(())
    }

    /// Rolls back explicitly (dropping the `Tx` does the same, a moment later).
    pub async fn rollback(self) -> Result<()> {
        match self.inner {
            #[cfg(feature = "postgres")]
            TxInner::Postgres(t) => t.rollback().await?,
            #[cfg(feature = "sqlite")]
            TxInner::Sqlite(t) => t.rollback().await?,
        }
        Ok(())
    }
}

/// A parameter for [`Tx::execute`] and [`Tx::fetch_i64`], the types both backends share.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub enum Param<'a> {
    /// `BIGINT` / `INTEGER`.
    I64(i64),
    /// `DOUBLE PRECISION` / `REAL`.
    F64(f64),
    /// `TEXT`.
    Text(&'a str),
    /// `BYTEA` / `BLOB`.
    Bytes(&'a [u8]),
    /// `BOOLEAN`.
    Bool(bool),
    /// SQL NULL (typed as text).
    Null,
}

macro_rules! bind_param {
    ($name:ident, $q:ty) => {
        fn $name<'q>(self, q: $q) -> $q
        where
            'a: 'q,
        {
            match self {
                Param::I64(v) => q.bind(v),
                Param::F64(v) => q.bind(v),
                Param::Text(v) => q.bind(v),
                Param::Bytes(v) => q.bind(v),
                Param::Bool(v) => q.bind(v),
                Param::Null => q.bind(None::<&str>),
            }
        }
    };
}

#[cfg(feature = "postgres")]
impl<'a> Param<'a> {
    bind_param!(
        bind_pg,
        sqlx::query::Query<'q, Postgres, sqlx::postgres::PgArguments>
    );
    bind_param!(
        bind_pg_scalar,
        sqlx::query::QueryScalar<'q, Postgres, Option<i64>, sqlx::postgres::PgArguments>
    );
}

#[cfg(feature = "sqlite")]
impl<'a> Param<'a> {
    bind_param!(
        bind_sqlite,
        sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments<'q>>
    );
    bind_param!(
        bind_sqlite_scalar,
        sqlx::query::QueryScalar<'q, Sqlite, Option<i64>, sqlx::sqlite::SqliteArguments<'q>>
    );
}

impl From<i64> for Param<'_> {
    fn from(v: i64) -> Self {
        Param::I64(v)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Param::Text(v)
    }
}

/// Runs the same sqlx code on whichever backend a [`Tx`](crate::db::Tx) uses: the body is compiled
/// once per backend with `conn` bound to `&mut PgConnection` or `&mut SqliteConnection`. Both arms
/// must produce the same type (so map sqlx's per-backend results, e.g. `.map(|r| r.rows_affected())`).
/// Only the backends compiled into leasehold get an arm, so the body need only compile for those.
///
/// ```no_run
/// # async fn demo(db: leasehold::db::Database) -> leasehold::Result<()> {
/// let mut tx = db.begin().await?;
/// let balance: Option<i64> = leasehold::with_conn!(tx, |conn| {
///     sqlx::query_scalar("SELECT balance FROM accounts WHERE id = $1")
///         .bind("acct-1")
///         .fetch_optional(conn)
///         .await
/// })?;
/// # let _ = balance; tx.commit().await }
/// ```
#[macro_export]
macro_rules! with_conn {
    ($tx:expr, |$conn:ident| $body:expr) => {
        $crate::__with_conn_arms!($tx.conn(), $conn, $body)
    };
}

// The arms of `with_conn!`, one definition per feature set. A `#[cfg]` written inside an exported
// macro would be judged by the features of the crate that *uses* the macro, not leasehold's; choosing
// the definition here judges them by leasehold's.
#[cfg(all(feature = "postgres", feature = "sqlite"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_arms {
    ($conn_expr:expr, $conn:ident, $body:expr) => {
        match $conn_expr {
            $crate::db::Conn::Postgres($conn) => $body,
            $crate::db::Conn::Sqlite($conn) => $body,
        }
    };
}

#[cfg(all(feature = "postgres", not(feature = "sqlite")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_arms {
    ($conn_expr:expr, $conn:ident, $body:expr) => {
        match $conn_expr {
            $crate::db::Conn::Postgres($conn) => $body,
        }
    };
}

#[cfg(all(feature = "sqlite", not(feature = "postgres")))]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_arms {
    ($conn_expr:expr, $conn:ident, $body:expr) => {
        match $conn_expr {
            $crate::db::Conn::Sqlite($conn) => $body,
        }
    };
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
            backend_of_url("postgres://u@h/db").unwrap(),
            Backend::Postgres
        );
        assert_eq!(backend_of_url("sqlite::memory:").unwrap(), Backend::Sqlite);
        let err = backend_of_url("mysql://u:secret@h/db")
            .unwrap_err()
            .to_string();
        assert!(!err.contains("secret"), "{err}");
        assert!(err.contains("sqlite:"), "{err}");
    }

    /// Runs only in a build that leaves a backend out (e.g. `--no-default-features --features
    /// sqlite`): its URLs must be refused before any connection, naming the feature, without the
    /// password.
    #[cfg(not(all(feature = "postgres", feature = "sqlite")))]
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
