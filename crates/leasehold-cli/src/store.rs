//! The store every command talks to: the name checked before anything is sent, the connection
//! (one URL, or several for a Redlock), and a library error said on stderr with its exit code.
//! Promise: bad input is exit 2 even when the store is down; a store that cannot be reached within
//! [`CONNECT_TIMEOUT`] is exit 69.

use leasehold::url::redact;
use leasehold::LeaseClient;

use crate::cli::StoreArgs;
use crate::duration::show;
use crate::exit;

/// How long to wait for the store to accept a connection before calling it unreachable.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connects, or prints why not and returns the exit code: 2 for a URL or setting that is wrong, 69
/// for a store that cannot be reached.
/// Several `--store`/`--redis` URLs make a Redlock over that many masters.
pub(crate) async fn connect(store: &StoreArgs) -> Result<LeaseClient, i32> {
    let urls = store.urls();
    crate::features::check_urls(&urls, true)?;
    let shown = urls.iter().map(|u| redact(u)).collect::<Vec<_>>().join(" ");
    let builder = match urls.as_slice() {
        [one] => LeaseClient::builder(one.clone()),
        many => LeaseClient::redlock(many),
    };
    let builder = builder
        .key_prefix(store.key_prefix.clone())
        .retention(store.retention);
    #[cfg(feature = "redis")]
    let builder = builder.store_options(
        leasehold::lease::store::redis::RedisOptions::default()
            .allow_eviction(store.allow_eviction)
            .multiplexed_only(store.multiplexed_only),
    );
    let connecting = builder.connect();
    let Ok(result) = tokio::time::timeout(CONNECT_TIMEOUT, connecting).await else {
        eprintln!(
            "leasehold: cannot reach the store at {shown}: no answer within {}; check --store / LEASEHOLD_STORE and that the server is up",
            show(CONNECT_TIMEOUT)
        );
        return Err(exit::UNAVAILABLE);
    };
    result.map_err(|e| {
        if e.is_unavailable() {
            eprintln!(
                "leasehold: cannot reach the store at {shown}: {e}; check --store / LEASEHOLD_STORE and that the server is up",
            );
            exit::UNAVAILABLE
        } else {
            fail(&e)
        }
    })
}

/// Prints a library error and returns its exit code.
pub(crate) fn fail(e: &leasehold::Error) -> i32 {
    eprintln!("leasehold: {}", exit::describe(e));
    exit::for_error(e, exit::BUSY)
}

/// Checks a lease name (and the key prefix) before any connection, so bad input is exit 2 even when
/// the store is down.
pub(crate) fn check_name(store: &StoreArgs, name: &str) -> Result<(), i32> {
    leasehold::lease::check_prefix(&store.key_prefix)
        .and_then(|()| leasehold::lease::check_name(name))
        .map_err(|e| fail(&e))
}
