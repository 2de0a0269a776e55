//! Opening the MariaDB/MySQL store: the URL, the pool of statement connections, and the one check at
//! connect (the table exists; commits reach the disk).
//!
//! Promise: a store is returned only after one connection of its own reached the server, logged in
//! and found leasehold's table in the URL's database; otherwise connect fails at once and says
//! which (a malformed URL or one without a database, or a missing table, is [`Error::Invalid`]
//! naming the fix; refused credentials [`Error::Unauthorized`]; no answer [`Error::Store`] or
//! [`Error::Timeout`]). Sessions run in UTC; the sweeper starts with the store and stops when it is
//! dropped.
//!
//! Limit: durability is only looked at, not enforced: `innodb_flush_log_at_trx_commit` other than 1
//! is logged as a warning (a crash may then lose committed leases; fences stay monotonic). The
//! check runs once; a table dropped or a permission revoked later is met by the statement it
//! breaks. The pool's connections are not pinged before use: a dead one is found by the statement
//! sent on it.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::mysql::{MySqlConnectOptions, MySqlPoolOptions};
use sqlx::{ConnectOptions, Connection};
use tokio_util::sync::CancellationToken;

use super::errors::{classify, missing_table};
use super::wake::Wake;
use super::{sweep, Core, MySqlStore, MAX_KEY_LEN};
use crate::error::{Error, Phase, Result};
use crate::lease::store::contract::{Settings, StoreKind, StoreMeta};
use crate::url::StoreUrl;

/// Statement connections per client: calls are short, so a few serve many leases.
const POOL_SIZE: u32 = 4;

/// The URL as sqlx takes it (`mariadb://` is the same protocol as `mysql://`), sessions in UTC.
fn options(url: &StoreUrl, location: &str) -> Result<MySqlConnectOptions> {
    let url = url.expose();
    let url = match url.strip_prefix("mariadb://") {
        Some(rest) => format!("mysql://{rest}"),
        None => url.to_owned(),
    };
    let options = MySqlConnectOptions::from_str(&url).map_err(|e| {
        Error::invalid(
            "mysql url",
            format!(
                "`{location}` was refused ({}); use mysql://user[:password]@host[:port]/database \
                 or mariadb://…",
                crate::url::redact(&e.to_string())
            ),
        )
    })?;
    if options.get_database().is_none() {
        return Err(Error::invalid(
            "mysql url",
            format!("`{location}` names no database; add it as the URL's path (…/database)"),
        ));
    }
    Ok(options.timezone(Some("+00:00".to_owned())))
}

fn check_settings(settings: &Settings, location: &str) -> Result<()> {
    if settings.tls_root_ca_pem.is_some() {
        return Err(Error::invalid(
            "tls root certificate",
            format!(
                "it applies to Redis; for MariaDB put `ssl-mode=VERIFY_IDENTITY&ssl-ca=PATH` in the \
                 URL (`{location}`)"
            ),
        ));
    }
    if settings.prefix.is_empty() || settings.prefix.len() > MAX_KEY_LEN {
        return Err(Error::invalid(
            "key prefix",
            format!(
                "it is {} bytes long; the MariaDB store takes 1 to {MAX_KEY_LEN}",
                settings.prefix.len()
            ),
        ));
    }
    Ok(())
}

/// Connects and checks the schema once. A malformed URL or one without a database, a missing lease
/// table are [`Error::Invalid`] naming the fix; refused credentials [`Error::Unauthorized`]; an
/// unreachable server [`Error::Store`] or [`Error::Timeout`] with [`Phase::Connect`].
pub(super) async fn connect(url: &StoreUrl, settings: Settings) -> Result<MySqlStore> {
    let location: Arc<str> = url.redacted().into();
    check_settings(&settings, &location)?;
    let options = options(url, &location)?;
    let (connect_timeout, response_timeout) = (settings.connect_timeout, settings.response_timeout);
    let pool = MySqlPoolOptions::new()
        .max_connections(POOL_SIZE)
        .min_connections(0)
        .acquire_timeout(connect_timeout)
        // A ping before every call would double its round trips; a dead connection is replaced when
        // a statement on it fails instead (see `Core::run`).
        .test_before_acquire(false)
        .connect_lazy_with(options.clone());
    probe(&options, &location, connect_timeout, response_timeout).await?;
    let sweeper = CancellationToken::new();
    sweep::spawn(pool.clone(), settings.retention, sweeper.clone());
    tracing::debug!(url = %location, prefix = %settings.prefix, "mariadb lease store connected");
    Ok(MySqlStore {
        core: Arc::new(Core {
            pool,
            wake: Wake::new(options, connect_timeout),
            prefix: settings.prefix.into(),
            response_timeout,
            connect_timeout,
            meta: StoreMeta::new(StoreKind::MYSQL, location),
        }),
        sweeper,
    })
}

/// Fails fast and clearly on an unreachable server, bad credentials or a database never migrated,
/// on one connection of its own: the pool's would retry a refused connect until its acquire
/// timeout and then say only "timed out", where this one says "refused" at once.
async fn probe(
    options: &MySqlConnectOptions,
    location: &str,
    connect_timeout: Duration,
    response_timeout: Duration,
) -> Result<()> {
    let timeout = |after| {
        move |_| Error::Timeout {
            phase: Phase::Connect,
            after,
        }
    };
    let mut conn = tokio::time::timeout(connect_timeout, options.connect())
        .await
        .map_err(timeout(connect_timeout))?
        .map_err(classify(Phase::Connect, location))?;
    let query = sqlx::query_as::<_, (i64, i64, String)>(include_str!("sql/probe.sql"));
    let answer = tokio::time::timeout(response_timeout, query.fetch_one(&mut conn))
        .await
        .map_err(timeout(response_timeout))?
        .map_err(classify(Phase::Connect, location));
    // Closed politely in the background; the pool opens its own when the first call needs one.
    tokio::spawn(async move {
        let _ = conn.close().await;
    });
    let (has_table, flush_at_commit, version) = answer?;
    if has_table == 0 {
        return Err(missing_table(location, "not found in the URL's database"));
    }
    if flush_at_commit != 1 {
        tracing::warn!(
            url = %location, version, flush_at_commit,
            "innodb_flush_log_at_trx_commit is not 1: a crash can lose committed leases (fences stay monotonic)"
        );
    }
    Ok(())
}
