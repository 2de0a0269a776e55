//! What a MariaDB/MySQL driver error means for a lease: the crate's [`Error`] for the phase that
//! failed, with a refused login, a missing permission and leasehold's missing table told apart from
//! an outage, and which failures a retry can fix.
//!
//! Promise: a server that did not answer or went away, and a lost row-lock wait (rolled back by the
//! server), are retryable; a refused login is [`Error::Unauthorized`]; a missing privilege names
//! the `GRANT` that fixes it; a missing or outdated table says how to create it; any other refusal
//! is an answer, not an outage, and is not retried. A statement that failed on a dead connection is
//! told apart, so that it may run again on a fresh one.
//!
//! Limit: error numbers are read as MariaDB and MySQL document them (they share these); a proxy that
//! rewrites them misleads it.

use sqlx::mysql::MySqlDatabaseError;

use super::TABLE;
use crate::error::{Error, Phase, StoreFailure};
use crate::lease::store::contract::StoreKind;

/// `ER_ACCESS_DENIED_ERROR`: unknown user or wrong password.
const ACCESS_DENIED: u16 = 1045;
/// `ER_DBACCESS_DENIED_ERROR`: the user may not use the database.
const DB_ACCESS_DENIED: u16 = 1044;
/// `ER_TABLEACCESS_DENIED_ERROR`, `ER_COLUMNACCESS_DENIED_ERROR`, `ER_SPECIFIC_ACCESS_DENIED_ERROR`,
/// `ER_PROCACCESS_DENIED_ERROR`: a statement the user lacks a privilege for.
const PRIVILEGE_DENIED: [u16; 4] = [1142, 1143, 1227, 1370];
/// `ER_BAD_DB_ERROR`: no such database.
const NO_DATABASE: u16 = 1049;
/// `ER_NO_SUCH_TABLE`, `ER_BAD_FIELD_ERROR`: the table is missing or from an older leasehold.
const NO_TABLE: [u16; 2] = [1146, 1054];
/// `ER_LOCK_WAIT_TIMEOUT`, `ER_LOCK_DEADLOCK`: the statement lost a wait for a row lock; the
/// transaction was rolled back and may be run again.
const LOCK_LOST: [u16; 2] = [1205, 1213];
/// Server going away: `ER_SERVER_SHUTDOWN`, `ER_CONNECTION_KILLED`, `ER_QUERY_INTERRUPTED`,
/// `ER_CON_COUNT_ERROR` (too many connections).
const SERVER_GONE: [u16; 4] = [1053, 1927, 1317, 1040];

/// The server's error number, when the server answered with one.
pub(super) fn number(e: &sqlx::Error) -> Option<u16> {
    match e {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// What went wrong talking to MariaDB during `phase`, in the caller's terms.
pub(super) fn classify(phase: Phase, location: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |e| {
        match number(&e) {
        Some(ACCESS_DENIED) => Error::Unauthorized {
            phase,
            store: location.to_owned(),
            detail: e.to_string(),
            fix: "check the user and password in the URL (percent-escape `@`, `:` and `/` in them)"
                .to_owned(),
        },
        Some(n) if n == DB_ACCESS_DENIED || PRIVILEGE_DENIED.contains(&n) => Error::Denied {
            phase,
            what: format!("the database or the table `{TABLE}`"),
            detail: e.to_string(),
            fix: format!(
                "GRANT SELECT, INSERT, UPDATE, DELETE ON <database>.{TABLE} TO <the URL's user>"
            ),
        },
        Some(NO_DATABASE) => Error::invalid(
            "store url",
            format!(
                "MariaDB at `{location}` has no such database ({e}); name an existing one in the URL"
            ),
        ),
        Some(n) if NO_TABLE.contains(&n) => missing_table(location, &e.to_string()),
        _ => from_sqlx(phase, e),
    }
    }
}

/// A driver error during `phase` as the crate's [`Error::Store`]: the server could not be reached
/// or went away (unreachable: retry), a lost row-lock wait (aborted: rolled back, retry), a TLS
/// failure or any error at connect (failing us), or any other statement the server refused (an
/// answer, not an outage).
pub(super) fn from_sqlx(phase: Phase, e: sqlx::Error) -> Error {
    let kind = match (
        is_transient(&e),
        phase == Phase::Connect || is_unreachable(&e),
    ) {
        (true, true) => StoreFailure::Unreachable,
        (true, false) => StoreFailure::Aborted,
        (false, true) => StoreFailure::Failing,
        (false, false) => StoreFailure::Rejected,
    };
    Error::store(phase, StoreKind::MYSQL, kind, e)
}

/// The lease table is missing: say how to create it.
pub(super) fn missing_table(location: &str, detail: &str) -> Error {
    Error::invalid(
        "database schema",
        format!(
            "the lease table `{TABLE}` is missing or out of date in the database at `{location}` \
             ({detail}); create it once with `leasehold migrate --store <the same URL>` or by \
             calling `leasehold::db::Database::migrate()`"
        ),
    )
}

/// Whether retrying can help: the server could not be reached or went away, or a row-lock wait was
/// lost (the statement was rolled back).
fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        _ => number(e).is_some_and(|n| LOCK_LOST.contains(&n) || SERVER_GONE.contains(&n)),
    }
}

/// Whether the server did not answer at all (as opposed to answering with an error).
fn is_unreachable(e: &sqlx::Error) -> bool {
    matches!(
        e,
        sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Tls(_)
    ) || number(e).is_some_and(|n| SERVER_GONE.contains(&n))
}

/// Whether a statement failed because the connection it went out on was dead (the server restarted
/// or the connection idled out): the same statement on a new connection may succeed.
pub(super) fn is_stale_connection(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Io(_) | sqlx::Error::Protocol(_))
        || number(e).is_some_and(|n| SERVER_GONE.contains(&n) || n == 2006 || n == 2013)
}
