//! One Redis server (`redis://`, `rediss://`): the shared connection reconnects to the same address,
//! which is all a single server, or a managed service that moves one name on failover, needs.
//!
//! Promise: the server is asked once at connect, so an unreachable server or wrong credentials fail
//! there, a URL that reaches a cluster node or a sentinel is refused with the URL to use instead, and
//! a replica (writable or not) or a server that may evict lease keys is refused before anything is
//! written (`health`).
//! Limit: it follows no failover by itself; behind one DNS name it reaches a new primary only when
//! the name moves.

use redis::AsyncConnectionConfig;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::conn::{manager_config, DirectRoute, Nodes, Reconnecting, Route};
use super::direct::{DirectPool, Target};
use super::errors::{self, within};
use super::health;
use crate::error::{Error, Phase, Result};
use crate::lease::store::contract::Settings;
use crate::url::StoreUrl;

/// One server: checks that it answers (and takes the credentials) and is neither a cluster
/// node nor a sentinel, then opens the reconnecting shared connection. The connection that
/// asked serves as the first dedicated (blocking) connection.
pub(super) async fn connect(
    url: &StoreUrl,
    settings: &Settings,
    round_trips: Arc<AtomicU64>,
) -> Result<(Route, Nodes, redis::aio::MultiplexedConnection)> {
    let (connect_timeout, response_timeout) = (settings.connect_timeout, settings.response_timeout);
    let location = url.redacted();
    let client = client(url, settings)?;

    // Fail fast and clearly on an unreachable server or bad credentials.
    let probe_config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(None);
    let mut probe = within(
        Phase::Connect,
        connect_timeout + response_timeout,
        client.get_multiplexed_async_connection_with_config(&probe_config),
    )
    .await
    .map_err(errors::unauthorized_at(location))?;
    round_trips.fetch_add(1, Ordering::Relaxed);
    // A server that requires AUTH accepts the connection and refuses commands: ask once, so that
    // missing or wrong credentials are a connect error, not a surprise on the first acquire. The
    // same question says whether it is a cluster node or a sentinel, which this URL cannot use.
    // It also says whether this node is a replica or may evict lease keys (`health`).
    let facts = within(Phase::Connect, response_timeout, health::facts(&mut probe))
        .await
        .map_err(errors::unauthorized_at(location))?;
    round_trips.fetch_add(1, Ordering::Relaxed);
    refuse_other_kinds(location, &facts)?;
    health::check(
        location,
        &facts,
        super::RedisOptions::of(settings).allow_eviction,
    )?;

    let manager = within(
        Phase::Connect,
        connect_timeout * 2 + response_timeout,
        redis::aio::ConnectionManager::new_with_config(client.clone(), manager_config(settings)),
    )
    .await?;
    round_trips.fetch_add(1, Ordering::Relaxed);
    let manager = Reconnecting::resending(manager, round_trips.clone());
    let direct = (!super::RedisOptions::of(settings).multiplexed_only)
        .then(|| Target::for_client(&client, connect_timeout))
        .flatten()
        .map(Arc::new);
    let route = match &direct {
        Some(target) => Route::Direct(DirectRoute {
            pool: Arc::new(DirectPool::new(target.clone(), response_timeout)),
            manager,
        }),
        None => Route::Standalone(manager),
    };
    Ok((
        route,
        Nodes::Standalone {
            client: Box::new(client),
            direct,
        },
        probe,
    ))
}

/// A driver client for `url`, with the TLS roots of `settings` (refused for a URL without TLS). A
/// malformed URL is [`Error::Invalid`] naming it redacted.
fn client(url: &StoreUrl, settings: &Settings) -> Result<redis::Client> {
    let pem = settings.tls_root_ca_pem.as_deref();
    let client = super::node::one_server_client(url, pem)?;
    if pem.is_some() && url.scheme() != "rediss" {
        return Err(Error::invalid(
            "tls root certificate",
            format!(
                "it was given for `{}`, which is not a TLS URL; use rediss://",
                url.redacted()
            ),
        ));
    }
    Ok(client)
}

/// Refuses a cluster node or a sentinel behind a `redis://` URL, naming the URL to use instead.
fn refuse_other_kinds(location: &str, facts: &health::NodeFacts) -> Result<()> {
    match facts.mode.as_deref() {
        Some("cluster") => {
            Err(Error::invalid(
                "store url",
                format!(
                    "`{location}` is a Redis Cluster node; use redis-cluster://host:port[,host:port...] so that each lease goes to the master of its slot"
                ),
            ))
        }
        Some("sentinel") => {
            Err(Error::invalid(
                "store url",
                format!(
                    "`{location}` is a sentinel, not a data node; use redis-sentinel://host[:port][,host[:port]...]#<master name>"
                ),
            ))
        }
        _ => Ok(()),
    }
}
