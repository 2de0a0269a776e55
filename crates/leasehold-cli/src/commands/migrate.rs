//! `leasehold migrate`: creates or upgrades leasehold's tables in a PostgreSQL, MariaDB/MySQL or
//! SQLite database,
//! through the library's `Database::migrate`. Promise: idempotent and safe to run concurrently (the
//! library takes a lock). Limit: it needs the right to create tables; the lease store itself never
//! changes the schema.

use leasehold::db::Database;
use leasehold::url::redact;

use crate::cli::MigrateArgs;
use crate::exit;
use crate::store::fail;

/// How long to wait for the database to accept a connection before calling it unreachable.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// `leasehold migrate`.
pub(crate) async fn migrate(args: MigrateArgs) -> i32 {
    let url = match args.store.urls().as_slice() {
        [one] => one.clone(),
        many => {
            eprintln!(
                "leasehold: migrate takes one database URL, {} were given",
                many.len()
            );
            return exit::USAGE;
        }
    };
    if let Err(code) = crate::features::check_urls(std::slice::from_ref(&url), false) {
        return code;
    }
    if url.starts_with("redis") || url.starts_with("etcd") {
        eprintln!(
            "leasehold: `{}` is a store that needs no tables; migrate takes a postgres://, mysql://, mariadb:// or sqlite: URL",
            redact(&url)
        );
        return exit::USAGE;
    }
    // `mariadb://` names the same protocol as `mysql://`, for the lease store and the guards alike.
    let db = match tokio::time::timeout(CONNECT_TIMEOUT, Database::connect(&url)).await {
        Err(_) => {
            eprintln!(
                "leasehold: cannot reach the database at {}: no answer within 10 s; check --store / LEASEHOLD_STORE and that the server is up",
                redact(&url)
            );
            return exit::UNAVAILABLE;
        }
        Ok(Err(e)) => return refused(&url, &e),
        Ok(Ok(db)) => db,
    };
    let result = db.migrate_counted().await;
    db.close().await;
    match result {
        Ok(0) => {
            println!(
                "leasehold: the leasehold_* tables in {} were already up to date",
                redact(&url)
            );
            0
        }
        Ok(applied) => {
            println!(
                "leasehold: applied {applied} migration{} to {}: the leasehold_* tables are up to date",
                if applied == 1 { "" } else { "s" },
                redact(&url)
            );
            0
        }
        Err(e) => refused(&url, &e),
    }
}

/// Prints why the database refused and returns the exit code: 69 when it cannot be reached, 77 for
/// credentials it refuses, 2 for a database name that is wrong.
fn refused(url: &str, e: &leasehold::Error) -> i32 {
    if e.is_unavailable() {
        eprintln!(
            "leasehold: cannot reach the database at {}: {e}; check --store / LEASEHOLD_STORE and that the server is up",
            redact(url)
        );
        return exit::UNAVAILABLE;
    }
    let code = match e {
        leasehold::Error::Database(leasehold::sqlx::Error::Database(db)) => {
            db.code().map(|c| c.into_owned())
        }
        _ => None,
    };
    // invalid_password, invalid_authorization_specification: the credentials (EX_NOPERM).
    if matches!(code.as_deref(), Some("28P01" | "28000")) {
        eprintln!(
            "leasehold: the database at {} refused the credentials: {e}; check the user and password in the URL",
            redact(url)
        );
        return exit::NOPERM;
    }
    // invalid_catalog_name (no such database; MariaDB/MySQL: 42000 "Unknown database").
    let wrong_setup = code.as_deref() == Some("3D000")
        || matches!(e, leasehold::Error::Database(leasehold::sqlx::Error::Database(db))
            if db.message().starts_with("Unknown database"));
    if wrong_setup {
        eprintln!(
            "leasehold: the database at {} refused: {e}; check the user, password and database in the URL",
            redact(url)
        );
        return exit::USAGE;
    }
    fail(e)
}
