//! Opening the PostgreSQL store: the URL, the connection budget, the schema check, the listener and
//! the sweeper.
//!
//! Promise: a store is returned only after a first connection reached the server, logged in and
//! found leasehold's table and a fence sequence that caches one value per session (a larger cache,
//! which could hand out fences out of order, is refused with the `ALTER SEQUENCE` that fixes it);
//! that connection then serves the first call. Sessions are named `leasehold` unless the URL names
//! them; the sweeper starts with the store, the listener when a wait first needs it, and both stop
//! when the store is dropped.
//!
//! Limit: the store checks leasehold's table and sequence once, at connect; it never creates them.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use tokio_util::sync::CancellationToken;

use super::conn::Conns;
use super::errors::{missing_tables, pg_error};
use super::listen::Listener;
use super::{statements, sweep, Core, PostgresStore, MAX_PREFIX_LEN};
use crate::error::{Error, Phase, Result};
use crate::lease::store::contract::{Settings, StoreKind, StoreMeta};
use crate::url::StoreUrl;

impl PostgresStore {
    /// Connects and checks the schema once. A malformed URL, a database missing leasehold's tables,
    /// a fence sequence with a cache are [`Error::Invalid`] naming the fix; refused credentials are
    /// [`Error::Unauthorized`]; an unreachable server is [`Error::Store`] or [`Error::Timeout`] with
    /// [`Phase::Connect`].
    ///
    /// The store does not create its tables: a lock client should not need the right to change the
    /// schema, nor change it as a side effect of a job starting; `leasehold migrate` (or
    /// `Database::migrate()`) does, once.
    pub(crate) async fn connect(url: &StoreUrl, settings: Settings) -> Result<Self> {
        let meta = StoreMeta::new(StoreKind::POSTGRES, url.redacted());
        let location = meta.location();
        let options = options(url, &settings, location)?;
        let (connect_timeout, response_timeout) =
            (settings.connect_timeout, settings.response_timeout);
        let conns = Conns::new(options.clone(), connect_timeout, meta.clone());

        // Fail fast and clearly on an unreachable server, bad credentials or a database that was
        // never migrated; the connection then serves the first call.
        let conn = check_schema(&conns, location, connect_timeout, response_timeout).await?;
        conns.put(conn);

        let prefix: Arc<str> = settings.prefix.into();
        let retention = settings.retention;
        let sweeper = CancellationToken::new();
        sweep::spawn(
            options.clone(),
            retention,
            (response_timeout * 10).max(Duration::from_secs(10)),
            sweeper.clone(),
        );
        tracing::debug!(url = %location, prefix = %prefix, "postgres lease store connected");
        Ok(PostgresStore {
            listener: Listener::new(options, prefix.clone(), connect_timeout),
            core: Arc::new(Core {
                conns,
                prefix,
                response_timeout,
                connect_timeout,
                meta: meta.clone(),
            }),
            sweeper,
        })
    }
}

/// The driver's options for `url` (application name `leasehold` unless the URL names one), after
/// refusing settings the PostgreSQL store cannot use (TLS roots, a prefix too long).
fn options(url: &StoreUrl, settings: &Settings, location: &str) -> Result<PgConnectOptions> {
    if settings.tls_root_ca_pem.is_some() {
        return Err(Error::invalid(
            "tls root certificate",
            format!(
                "it applies to Redis; for PostgreSQL put `sslmode=verify-full&sslrootcert=PATH` \
                 in the URL (`{location}`)"
            ),
        ));
    }
    if settings.prefix.len() > MAX_PREFIX_LEN {
        return Err(Error::invalid(
            "key prefix",
            format!(
                "it is {} bytes long; the PostgreSQL store accepts at most {MAX_PREFIX_LEN}",
                settings.prefix.len()
            ),
        ));
    }
    let mut options = PgConnectOptions::from_str(url.expose()).map_err(|e| {
        Error::invalid(
            "postgres url",
            format!(
                "`{location}` was refused ({}); use postgres://user[:password]@host[:port]/database",
                crate::url::redact(&e.to_string())
            ),
        )
    })?;
    if options.get_application_name().is_none() {
        options = options.application_name("leasehold");
    }
    Ok(options)
}

/// Opens the first connection and checks leasehold's table and fence sequence on it (and warns of
/// fsync off); the connection, checked, is returned for the first call.
async fn check_schema(
    conns: &Conns,
    location: &str,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<sqlx::PgConnection> {
    let mut conn = conns.open().await.map_err(|e| match e {
        sqlx::Error::PoolTimedOut => Error::Timeout {
            phase: Phase::Connect,
            after: connect_timeout,
        },
        e => pg_error(Phase::Connect, location)(e),
    })?;
    let probe = tokio::time::timeout(response_timeout, statements::probe().fetch_one(&mut conn))
        .await
        .map_err(|_| Error::Timeout {
            phase: Phase::Connect,
            after: response_timeout,
        })?
        .map_err(pg_error(Phase::Connect, location))?;
    match probe {
        (false, _, _) | (_, None, _) => {
            return Err(missing_tables(
                location,
                "not found on the connection's search_path",
            ))
        }
        (_, Some(cache), _) if cache != 1 => {
            return Err(Error::invalid(
                "database schema",
                format!(
                    "the fence sequence `leasehold_lease_fence` caches {cache} values per \
                     session, so fences could go backwards; run \
                     `ALTER SEQUENCE leasehold_lease_fence CACHE 1`"
                ),
            ))
        }
        (_, _, fsync) if fsync == "off" => tracing::warn!(
            url = %location,
            "PostgreSQL runs with fsync off: a crash can lose committed leases and issue a fence again"
        ),
        _ => {}
    }
    Ok(conn)
}
