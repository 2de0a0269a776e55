//! What differs between the SQL backends, as data: each backend module (`postgres.rs`, `sqlite.rs`, …)
//! holds one [`Dialect`] and implements [`Driver`] for its sqlx database type, and the rest of the
//! crate (the [`Database`](super::Database) handle, the guards, the migrations) reads the dialect
//! instead of matching on the backend, and opens transactions through [`Driver::begin`]. Adding a
//! backend is a new module with its dialect and its `Driver`, plus one variant in each of the three
//! enums (`Pool` in `database.rs`, `TxInner` and `Conn` in `tx.rs`) and one arm in `on_backend!`.
//!
//! Promise: every backend answers the same questions (its clock, its row lock, its upsert, its
//! migrations' lock), so a guard written once behaves alike on each.
//! Limit: only the differences leasehold's own statements meet are here; this is no SQL translator.

use std::borrow::Cow;
use std::future::Future;
use std::sync::LazyLock;

use sqlx::migrate::Migrator;
use sqlx::{AssertSqlSafe, SqlSafeStr, SqlStr};

use super::{Backend, Param};
use crate::{Error, Result};

/// One backend's SQL, where it differs from the statements the guards write (PostgreSQL's, with
/// `$1, $2, …` placeholders).
#[derive(Debug)]
pub(crate) struct Dialect {
    /// Which backend this is.
    pub(crate) backend: Backend,
    /// The statement that opens a transaction (SQLite takes the write lock at once).
    pub(crate) begin: &'static str,
    /// A query returning the database clock as `BIGINT` milliseconds since 1970.
    pub(crate) now_ms: &'static str,
    /// Appended to a `SELECT` whose rows must stay locked until commit and be read as last committed
    /// (empty where the transaction holds the whole database's write lock anyway).
    pub(crate) for_update: &'static str,
    /// `INSERT` that does nothing when the key exists: the verb, and the clause after `VALUES (…)`.
    pub(crate) insert_ignore: (&'static str, &'static str),
    /// Whether a guard that inserts a key or else locks the row found should lock first (a locking
    /// read, then the insert only if the row is missing): on InnoDB an insert that finds the key
    /// takes a shared lock, and two of those upgrading to an exclusive one deadlock.
    pub(crate) lock_before_insert: bool,
    /// Whether `UPDATE … RETURNING` and `INSERT … RETURNING` work; where they do not, the guards read
    /// the row back in the same transaction (their own write is visible to them).
    pub(crate) returning: bool,
    /// Whether the driver wants `?` placeholders; the guards' `$n` are rewritten for it.
    pub(crate) question_marks: bool,
    /// The fenced-write upsert: with [`Dialect::returning`], returns the fence when stored; without,
    /// stores the larger of the two and the caller reads the row back.
    pub(crate) fence_upsert: &'static str,
    /// The migrations leasehold ships for this backend.
    pub(crate) migrator: &'static LazyLock<Migrator>,
    /// `CREATE TABLE IF NOT EXISTS leasehold_schema_migrations …` in the backend's column types.
    pub(crate) migrations_table: &'static str,
    /// Taken first in the migration's transaction so concurrent migrations queue (none where the
    /// transaction's write lock already does that).
    pub(crate) migration_lock: Option<&'static str>,
    /// Whether DDL runs inside a transaction (it commits implicitly on MySQL and MariaDB, so there
    /// each migration must be safe to repeat and a session lock serialises migrators).
    pub(crate) transactional_ddl: bool,
}

impl Dialect {
    /// `sql` and `params` as the driver wants them: unchanged for `$n` backends; for `?` backends each
    /// `$n` outside quotes becomes `?` and the parameters are repeated in the order of appearance.
    pub(crate) fn prepare<'p, 'v>(
        &self,
        sql: SqlStr,
        params: &'p [Param<'v>],
    ) -> Result<(SqlStr, Cow<'p, [Param<'v>]>)> {
        if !self.question_marks || !sql.as_str().contains('$') {
            return Ok((sql, Cow::Borrowed(params)));
        }
        let (text, order) = to_question_marks(sql.as_str())?;
        let mut ordered = Vec::with_capacity(order.len());
        for n in order {
            let p = params.get(n.wrapping_sub(1)).ok_or_else(|| {
                Error::invalid(
                    "sql parameters",
                    format!("`${n}` is used but {} parameters were given", params.len()),
                )
            })?;
            ordered.push(*p);
        }
        // The same text the caller vouched for, with its placeholders renamed.
        Ok((AssertSqlSafe(text).into_sql_str(), Cow::Owned(ordered)))
    }
}

impl Dialect {
    /// `sql` with its `$n` turned into `?` for backends that want them, for a caller that binds the
    /// parameters itself, in the order they appear (each once).
    ///
    /// The caller vouches for `sql` as for any SQL text it builds (identifiers checked, values bound).
    pub(crate) fn sql(&self, sql: String) -> AssertSqlSafe<String> {
        if !self.question_marks || !sql.contains('$') {
            return AssertSqlSafe(sql);
        }
        match to_question_marks(&sql) {
            Ok((text, _)) => AssertSqlSafe(text),
            Err(_) => AssertSqlSafe(sql),
        }
    }
}

/// Rewrites `$1 … $n` outside string literals and quoted identifiers into `?`, returning the numbers
/// in order of appearance.
fn to_question_marks(sql: &str) -> Result<(String, Vec<usize>)> {
    let mut out = String::with_capacity(sql.len());
    let mut order = Vec::new();
    let mut quote: Option<char> = None;
    let mut chars = sql.char_indices().peekable();
    while let Some((_, c)) = chars.next() {
        match (quote, c) {
            (Some(q), _) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"' | '`') => quote = Some(c),
            (None, '$') if chars.peek().is_some_and(|(_, d)| d.is_ascii_digit()) => {
                let mut n = 0usize;
                while let Some((_, d)) = chars.peek().copied().filter(|(_, d)| d.is_ascii_digit()) {
                    n = n
                        .saturating_mul(10)
                        .saturating_add(d as usize - '0' as usize);
                    chars.next();
                }
                if n == 0 {
                    return Err(Error::invalid("sql parameters", "`$0` is not a parameter"));
                }
                order.push(n);
                out.push('?');
                continue;
            }
            _ => {}
        }
        out.push(c);
    }
    Ok((out, order))
}

/// The sqlx database type of one backend, tied to its dialect: lets code written once, generic over
/// the driver, find the SQL it must send, and open a transaction the backend's way.
pub(crate) trait Driver: sqlx::Database {
    /// This backend's dialect.
    const DIALECT: &'static Dialect;

    /// What opening a transaction gives on this backend, before it goes into a `Tx`.
    type Tx;

    /// Takes a connection from `pool` and opens a transaction on it with `begin` (the dialect's
    /// statement).
    fn begin(
        pool: &sqlx::Pool<Self>,
        begin: &'static str,
    ) -> impl Future<Output = sqlx::Result<Self::Tx>> + Send;
}

/// Implements [`Driver`] for a backend whose transaction is sqlx's own, opened with the dialect's
/// `BEGIN` (PostgreSQL, SQLite; MariaDB/MySQL wraps its own).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
macro_rules! sqlx_driver {
    ($db:ty, $dialect:expr) => {
        impl $crate::db::dialect::Driver for $db {
            const DIALECT: &'static $crate::db::dialect::Dialect = $dialect;

            type Tx = sqlx::Transaction<'static, $db>;

            fn begin(
                pool: &sqlx::Pool<$db>,
                begin: &'static str,
            ) -> impl std::future::Future<Output = sqlx::Result<Self::Tx>> + Send {
                pool.begin_with(begin)
            }
        }
    };
}
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) use sqlx_driver;

/// The dialect of the driver behind any sqlx value typed by it (a pool, a transaction).
pub(crate) fn dialect_of<DB: Driver, T: ?Sized + TypedBy<DB>>(_: &T) -> &'static Dialect {
    DB::DIALECT
}

/// Values whose type names their sqlx database (pools and transactions).
pub(crate) trait TypedBy<DB> {}
impl<DB: sqlx::Database> TypedBy<DB> for sqlx::Pool<DB> {}
impl<DB: sqlx::Database> TypedBy<DB> for sqlx::Transaction<'_, DB> {}

/// The fenced-write upsert of PostgreSQL and SQLite (3.35+): stores the presented fence only if it
/// is not older than the stored one, and returns it when it did.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) const FENCE_UPSERT_RETURNING: &str =
    "INSERT INTO leasehold_fences (resource, fence) VALUES ($1, $2) \
     ON CONFLICT (resource) DO UPDATE SET fence = excluded.fence \
     WHERE leasehold_fences.fence <= excluded.fence \
     RETURNING fence";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_question_marks_in_order_of_use() {
        let (sql, order) =
            to_question_marks("UPDATE t SET q = q - $1 WHERE id = $2 AND q >= $1 AND s = '$3'")
                .unwrap();
        assert_eq!(
            sql,
            "UPDATE t SET q = q - ? WHERE id = ? AND q >= ? AND s = '$3'"
        );
        assert_eq!(order, vec![1, 2, 1]);
        assert!(to_question_marks("SELECT $0").is_err());
        let (sql, order) = to_question_marks("SELECT `a$1`, $12").unwrap();
        assert_eq!((sql.as_str(), order), ("SELECT `a$1`, ?", vec![12]));
    }
}
