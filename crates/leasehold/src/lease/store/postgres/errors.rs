//! What a PostgreSQL driver error means for a lease: the crate's [`Error`] for the phase that failed,
//! with leasehold's missing table and a refused login told apart from an outage.
//!
//! Promise: a missing or outdated table or sequence is [`Error::Invalid`] naming `leasehold
//! migrate`; a refused login is [`Error::Unauthorized`]; an unknown database at connect is a wrong
//! URL; a server that cannot be reached or is shutting down, starting or out of connections is
//! retryable, and so is a serialization failure or deadlock (the transaction was rolled back); any
//! other refusal is an answer, not an outage, and is not retried.
//!
//! Limit: SQLSTATE codes are read as PostgreSQL documents them; a proxy that rewrites them misleads it.

use super::TABLE;
use crate::error::{is_serialization_failure, Error, Phase, StoreFailure};
use crate::lease::store::contract::StoreKind;

/// What went wrong talking to PostgreSQL during `phase`, in the caller's terms: leasehold's table
/// missing (or from an older version) is a mistake to fix, named with the fix; anything else keeps
/// the driver's error.
pub(super) fn pg_error(phase: Phase, location: &str) -> impl FnOnce(sqlx::Error) -> Error + '_ {
    move |e| {
        let code = match &e {
            sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
            _ => None,
        };
        match code.as_deref() {
            // undefined_table (also a missing sequence), undefined_column (an older schema).
            Some("42P01") | Some("42703") => missing_tables(location, &e.to_string()),
            // invalid_password, invalid_authorization_specification (no such role, or pg_hba
            // refuses it): the credentials are wrong, not the server down (exit 77, not 69).
            Some("28P01") | Some("28000") => Error::Unauthorized {
                phase,
                store: location.to_owned(),
                detail: e.to_string(),
                fix: "check the user and password in the URL (postgres://user:password@host/db) \
                      and that pg_hba.conf lets that user in from here"
                    .to_owned(),
            },
            // invalid_catalog_name (no such database): the URL is wrong, not the server down.
            Some("3D000") if phase == Phase::Connect => Error::invalid(
                "store url",
                format!(
                    "PostgreSQL at `{location}` refused the connection ({e}); check the user, \
                         password and database in the URL"
                ),
            ),
            _ => from_sqlx(phase, e),
        }
    }
}

pub(super) fn missing_tables(location: &str, detail: &str) -> Error {
    Error::invalid(
        "database schema",
        format!(
            "the lease table `{TABLE}` or its fence sequence is missing or out of date in the \
             database at `{location}` ({detail}); create them once with \
             `leasehold migrate --store <the same URL>` or by calling \
             `leasehold::db::Database::migrate()`"
        ),
    )
}

/// A driver error during `phase` as the crate's error: no connection or a server shutting down,
/// starting, out of connections or resources is unreachable; a serialization failure or a deadlock
/// aborted (retry); any other error at connect is the store failing us; any other statement the
/// server refused (a constraint, a permission) is an answer, not an outage.
pub(super) fn from_sqlx(phase: Phase, e: sqlx::Error) -> Error {
    let kind = if is_unreachable(&e) {
        StoreFailure::Unreachable
    } else if is_serialization_failure(&e) {
        StoreFailure::Aborted
    } else if phase == Phase::Connect {
        StoreFailure::Failing
    } else {
        StoreFailure::Rejected
    };
    Error::store(phase, StoreKind::POSTGRES, kind, e)
}

/// The connection failed, or the server says it is shutting down, starting, out of connections or
/// resources (SQLSTATE classes 08, 53, 57P): a later attempt may get through.
fn is_unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("53") || c.starts_with("57P")),
        _ => false,
    }
}
