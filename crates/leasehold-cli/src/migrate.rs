//! `leasehold migrate`: creates or upgrades leasehold's tables in a PostgreSQL or SQLite database,
//! through the library's `Database::migrate`. Promise: idempotent and safe to run concurrently (the
//! library takes a lock). Limit: it needs the right to create tables; the lease store itself never
//! changes the schema.

use leasehold::db::Database;
use leasehold::url::redact;

use crate::cli::MigrateArgs;
use crate::exit;
use crate::inspect::fail;

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
    if url.starts_with("redis") || url.starts_with("etcd") {
        eprintln!(
            "leasehold: `{}` is a store that needs no tables; migrate takes a postgres:// or sqlite: URL",
            redact(&url)
        );
        return exit::USAGE;
    }
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
    let result = db.migrate().await;
    db.close().await;
    match result {
        Ok(()) => {
            println!(
                "leasehold: the leasehold_* tables in {} are up to date",
                redact(&url)
            );
            0
        }
        Err(e) => refused(&url, &e),
    }
}

/// Prints why the database refused and returns the exit code: 69 when it cannot be reached, 2 for
/// a URL, credentials or database name that are wrong.
fn refused(url: &str, e: &leasehold::Error) -> i32 {
    if e.is_unavailable() {
        eprintln!(
            "leasehold: cannot reach the database at {}: {e}; check --store / LEASEHOLD_STORE and that the server is up",
            redact(url)
        );
        return exit::UNAVAILABLE;
    }
    // invalid_password, invalid_authorization_specification, invalid_catalog_name (no such database).
    let wrong_setup = matches!(
        e,
        leasehold::Error::Database(sqlx::Error::Database(db))
            if matches!(db.code().as_deref(), Some("28P01" | "28000" | "3D000"))
    );
    if wrong_setup {
        eprintln!(
            "leasehold: the database at {} refused: {e}; check the user, password and database in the URL",
            redact(url)
        );
        return exit::USAGE;
    }
    fail(e)
}
