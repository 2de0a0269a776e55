//! [`Tx`], the one transaction type of the SQL guards and the caller's writes, its typed connection
//! [`Conn`], the portable parameters [`Param`] and the [`with_conn!`](crate::with_conn) macro.
//!
//! Promise: a [`Tx`] is committed only by [`Tx::commit`]: dropped, returned with `?` or cancelled,
//! it rolls back, so a guard's row and the caller's writes land together or not at all.
//! Limit: a commit cut off before its reply may or may not have landed (see [`Tx::commit`]'s cancel
//! safety); what a transaction sees of others is the backend's default isolation.

use sqlx::{AssertSqlSafe, SqlSafeStr};

use super::dialect::{dialect_of, Dialect};
use crate::{Error, Result};

/// The sqlx transaction of one compiled backend; `on_backend!` lists the arms.
#[derive(Debug)]
pub(crate) enum TxInner {
    #[cfg(feature = "postgres")]
    Postgres(sqlx::Transaction<'static, sqlx::Postgres>),
    #[cfg(feature = "sqlite")]
    Sqlite(sqlx::Transaction<'static, sqlx::Sqlite>),
    #[cfg(feature = "mysql")]
    MySql(super::mysql::MyTx),
}

#[cfg(feature = "mysql")]
impl From<super::mysql::MyTx> for TxInner {
    fn from(t: super::mysql::MyTx) -> Self {
        TxInner::MySql(t)
    }
}

/// An open transaction on any backend. leasehold's guards (fence, idempotency, inbox, state) write
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

/// The connection of a [`Tx`], typed by backend, for your own sqlx queries. Every arm derefs from
/// the sqlx transaction, so `sqlx::query(...).execute(conn)` works in each.
///
/// There is one variant per backend compiled in (feature `postgres`, `sqlite`, `mysql`), so a `match`
/// naming them all compiles only when all are on; [`with_conn!`](crate::with_conn) adapts by itself.
#[derive(Debug)]
pub enum Conn<'a> {
    /// PostgreSQL (feature `postgres`).
    #[cfg(feature = "postgres")]
    Postgres(&'a mut sqlx::PgConnection),
    /// SQLite (feature `sqlite`).
    #[cfg(feature = "sqlite")]
    Sqlite(&'a mut sqlx::SqliteConnection),
    /// MariaDB or MySQL (feature `mysql`).
    #[cfg(feature = "mysql")]
    MySql(&'a mut sqlx::MySqlConnection),
}

impl Tx {
    pub(super) fn new(inner: TxInner) -> Self {
        Tx { inner }
    }

    /// Which backend this transaction runs on.
    pub fn backend(&self) -> super::Backend {
        self.dialect().backend
    }

    /// The SQL this transaction's backend speaks where it differs.
    pub(crate) fn dialect(&self) -> &'static Dialect {
        on_backend!(&self.inner, TxInner, t => dialect_of(t))
    }

    /// The connection, for your own queries in this transaction.
    pub fn conn(&mut self) -> Conn<'_> {
        on_backend!(&mut self.inner, TxInner, t => (&mut **t).into())
    }

    /// The PostgreSQL connection, if this is PostgreSQL. Needs the `postgres` feature.
    #[cfg(feature = "postgres")]
    pub fn postgres(&mut self) -> Option<&mut sqlx::PgConnection> {
        match &mut self.inner {
            TxInner::Postgres(t) => Some(&mut **t),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// The SQLite connection, if this is SQLite. Needs the `sqlite` feature.
    #[cfg(feature = "sqlite")]
    pub fn sqlite(&mut self) -> Option<&mut sqlx::SqliteConnection> {
        match &mut self.inner {
            TxInner::Sqlite(t) => Some(&mut **t),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Runs one statement of portable SQL (`$1, $2, ...` placeholders, rewritten for backends that
    /// want `?`) with the given parameters and returns the number of rows it affected (matched,
    /// for an `UPDATE`).
    ///
    /// `sql` is a string literal, or SQL built at run time that you have checked for injection and
    /// wrapped in [`sqlx::AssertSqlSafe`] (values go in `params`, never into the text).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the statement fails; [`Error::Invalid`] when it names a `$n` beyond
    /// the parameters given.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future leaves the transaction in an unknown state; drop the `Tx` too (it then
    /// rolls back).
    pub async fn execute(
        &mut self,
        sql: impl SqlSafeStr + Send,
        params: &[Param<'_>],
    ) -> Result<u64> {
        let (sql, params) = self.dialect().prepare(sql.into_sql_str(), params)?;
        Ok(on_backend!(&mut self.inner, TxInner, t => {
            let mut q = sqlx::query(sql);
            for p in params.iter() {
                q = p.bind(q);
            }
            q.execute(&mut **t).await?.rows_affected()
        }))
    }

    /// Runs SQL text as it is, without parameters and without rewriting (the simple protocol, so a
    /// script of several statements works): migrations and DDL.
    pub(crate) async fn execute_script(&mut self, sql: impl SqlSafeStr + Send) -> Result<()> {
        on_backend!(&mut self.inner, TxInner, t => {
            sqlx::Executor::execute(&mut **t, sql).await?;
        });
        Ok(())
    }

    /// Runs a portable query returning at most one row with one `BIGINT` column (`None` when no row,
    /// or the value is NULL). `sql` as for [`Tx::execute`].
    ///
    /// # Errors
    ///
    /// As [`Tx::execute`], and [`Error::Database`] when the column is not a `BIGINT`.
    ///
    /// # Cancel safety
    ///
    /// As [`Tx::execute`].
    pub async fn fetch_i64(
        &mut self,
        sql: impl SqlSafeStr + Send,
        params: &[Param<'_>],
    ) -> Result<Option<i64>> {
        let (sql, params) = self.dialect().prepare(sql.into_sql_str(), params)?;
        Ok(on_backend!(&mut self.inner, TxInner, t => {
            let mut q = sqlx::query_scalar::<_, Option<i64>>(sql);
            for p in params.iter() {
                q = p.bind_scalar(q);
            }
            q.fetch_optional(&mut **t).await?.flatten()
        }))
    }

    /// Runs an `UPDATE` that changes at most one row and returns one `BIGINT` column of that row
    /// after the update, or `None` when it matched none: `UPDATE … RETURNING col` where the backend
    /// has it, otherwise the update followed by `select` (which reads our own write back, and may
    /// name any of the update's parameters by number).
    pub(crate) async fn update_returning_i64(
        &mut self,
        update: &str,
        column: &str,
        select: &str,
        params: &[Param<'_>],
    ) -> Result<Option<i64>> {
        // The callers build these from checked identifiers; values are bound.
        if self.dialect().returning {
            let sql = AssertSqlSafe(format!("{update} RETURNING {column}"));
            return self.fetch_i64(sql, params).await;
        }
        if self
            .execute(AssertSqlSafe(update.to_owned()), params)
            .await?
            == 0
        {
            return Ok(None);
        }
        self.fetch_i64(AssertSqlSafe(select.to_owned()), params)
            .await
    }

    /// Runs an `INSERT` of one row into a table whose `id` is generated, and returns that id:
    /// `RETURNING id` where the backend has it, otherwise `LAST_INSERT_ID()` of this connection.
    pub(crate) async fn insert_returning_id(
        &mut self,
        insert: &'static str,
        params: &[Param<'_>],
    ) -> Result<i64> {
        let id = if self.dialect().returning {
            self.fetch_i64(AssertSqlSafe(format!("{insert} RETURNING id")), params)
                .await?
        } else {
            self.execute(insert, params).await?;
            self.fetch_i64("SELECT CAST(LAST_INSERT_ID() AS SIGNED)", &[])
                .await?
        };
        id.ok_or_else(|| Error::invalid("database", "an INSERT returned no id"))
    }

    /// The database's clock in milliseconds since 1970: one clock for every process, so lock timeouts
    /// and retention do not depend on the callers' clocks agreeing.
    pub(crate) async fn now_ms(&mut self) -> Result<i64> {
        let sql = self.dialect().now_ms;
        self.fetch_i64(sql, &[])
            .await?
            .ok_or_else(|| Error::invalid("database clock", "the database returned no time"))
    }

    /// Commits. Until this returns `Ok`, nothing of the transaction is visible to others.
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the commit fails; then nothing was committed, unless the
    /// connection broke after the server received it (the outcome is then unknown).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a dropped commit may or may not have been applied.
    pub async fn commit(self) -> Result<()> {
        on_backend!(self.inner, TxInner, t => t.commit().await?);
        Ok(())
    }

    /// Rolls back explicitly (dropping the `Tx` does the same, a moment later).
    ///
    /// # Errors
    ///
    /// [`Error::Database`] when the connection failed; the server rolls back on its own then.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the transaction is rolled back either way.
    pub async fn rollback(self) -> Result<()> {
        on_backend!(self.inner, TxInner, t => t.rollback().await?);
        Ok(())
    }
}

// PostgreSQL's and SQLite's conversions live in their modules; MariaDB's stay here, beside the one of
// its transaction, so that `mysql.rs` and this file do not import each other.
#[cfg(feature = "mysql")]
impl<'a> From<&'a mut sqlx::MySqlConnection> for Conn<'a> {
    fn from(c: &'a mut sqlx::MySqlConnection) -> Self {
        Conn::MySql(c)
    }
}

/// A parameter for [`Tx::execute`] and [`Tx::fetch_i64`], the types every backend shares.
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
    ($self:ident, $q:ident) => {
        match $self {
            Param::I64(v) => $q.bind(v),
            Param::F64(v) => $q.bind(v),
            Param::Text(v) => $q.bind(v),
            Param::Bytes(v) => $q.bind(v),
            Param::Bool(v) => $q.bind(v),
            Param::Null => $q.bind(None::<&str>),
        }
    };
}

impl<'a> Param<'a> {
    /// Binds this parameter to a query of any backend.
    pub(crate) fn bind<'q, DB>(
        self,
        q: sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>,
    ) -> sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>
    where
        'a: 'q,
        DB: sqlx::Database,
        i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        f64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        &'q [u8]: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        bind_param!(self, q)
    }

    /// Binds this parameter to a scalar query of any backend.
    pub(crate) fn bind_scalar<'q, DB, O>(
        self,
        q: sqlx::query::QueryScalar<'q, DB, O, <DB as sqlx::Database>::Arguments>,
    ) -> sqlx::query::QueryScalar<'q, DB, O, <DB as sqlx::Database>::Arguments>
    where
        'a: 'q,
        DB: sqlx::Database,
        i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        f64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        &'q [u8]: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        bind_param!(self, q)
    }
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
/// once per backend with `conn` bound to that backend's connection (`&mut PgConnection`,
/// `&mut SqliteConnection`, `&mut MySqlConnection`). Every arm must produce the same type (so map sqlx's per-backend
/// results, e.g. `.map(|r| r.rows_affected())`). Only the backends compiled into leasehold get an
/// arm, so the body need only compile for those.
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
    ($tx:expr, |$conn:ident| $body:expr) => {{
        let __leasehold_conn = $tx.conn();
        $crate::__with_conn_postgres!(__leasehold_conn, $conn, $body)
    }};
}

// The arms of `with_conn!`: a chain of one macro per backend, each matching its own variant or
// passing the connection on to the next. A `#[cfg]` written inside an exported macro would be judged
// by the features of the crate that *uses* the macro, not leasehold's; choosing each link's
// definition here judges them by leasehold's.
#[cfg(feature = "postgres")]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_postgres {
    ($v:ident, $conn:ident, $body:expr) => {
        match $v {
            $crate::db::Conn::Postgres($conn) => $body,
            #[allow(unreachable_patterns)]
            $v => $crate::__with_conn_sqlite!($v, $conn, $body),
        }
    };
}

#[cfg(not(feature = "postgres"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_postgres {
    ($v:ident, $conn:ident, $body:expr) => {
        $crate::__with_conn_sqlite!($v, $conn, $body)
    };
}

#[cfg(feature = "sqlite")]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_sqlite {
    ($v:ident, $conn:ident, $body:expr) => {
        match $v {
            $crate::db::Conn::Sqlite($conn) => $body,
            #[allow(unreachable_patterns)]
            $v => $crate::__with_conn_mysql!($v, $conn, $body),
        }
    };
}

#[cfg(not(feature = "sqlite"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_sqlite {
    ($v:ident, $conn:ident, $body:expr) => {
        $crate::__with_conn_mysql!($v, $conn, $body)
    };
}

#[cfg(feature = "mysql")]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_mysql {
    ($v:ident, $conn:ident, $body:expr) => {
        match $v {
            $crate::db::Conn::MySql($conn) => $body,
            #[allow(unreachable_patterns)]
            $v => $crate::__with_conn_end!($v),
        }
    };
}

#[cfg(not(feature = "mysql"))]
#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_mysql {
    ($v:ident, $conn:ident, $body:expr) => {
        $crate::__with_conn_end!($v)
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __with_conn_end {
    ($v:ident) => {{
        let _ = $v;
        unreachable!("every backend compiled into leasehold has an arm")
    }};
}
