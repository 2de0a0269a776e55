//! Opening the Redis store: the URL's topology (one server, Sentinel, Cluster), the shared handle and
//! the pool of dedicated connections, the scripts loaded once.
//!
//! Promise: a store is returned only after every data node answered, the user was found allowed
//! every command its deployment needs (`acl.rs`), and every data node was asked what it is and
//! accepted (a replica, a Redis older than 7.0, or one that may evict lease keys without
//! [`RedisOptions::allow_eviction`](super::RedisOptions::allow_eviction) is refused) before
//! anything is written; on one server the scripts are loaded once, so the first waiting acquire is
//! not answered `NOSCRIPT`.
//!
//! Limit: the checks are of the nodes as they are at connect; a node that changes later (a
//! failover, a new policy, rules changed) is met by the requests after it, and the eviction policy
//! by the watch kept on it. What a topology's own files check beyond this (a Sentinel's answers, a
//! cluster's slot map) is theirs.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use redis::aio::MultiplexedConnection;

use super::acl::{self, Deployment};
use super::cluster::ClusterConn;
use super::conn::{BlockingPool, Counted, Nodes, Route};
use super::errors::{self, within};
use super::scripts::{self, Tuning};
use super::sentinel::SentinelConn;
use super::topology::{self, Topology};
use super::{health, standalone, RedisStore};
use crate::error::{Phase, Result};
use crate::lease::store::contract::{Settings, StoreKind, StoreMeta};
use crate::url::StoreUrl;

use super::changes::Feed;

impl RedisStore {
    /// Connects (AUTH/ACL and TLS from the URL: `redis://user:pass@host:port/db`, `rediss://...`).
    /// A malformed URL is [`Error::Invalid`]; missing or wrong credentials, or a user without a
    /// command leasehold sends, are [`Error::Unauthorized`] naming the node; an unreachable server
    /// is [`Error::Store`] or [`Error::Timeout`] with [`Phase::Connect`].
    pub(crate) async fn connect(url: &StoreUrl, settings: Settings) -> Result<Self> {
        let meta = StoreMeta::new(StoreKind::REDIS, url.redacted());
        let (location, round_trips) = (meta.location(), meta.counter());
        let (connect_timeout, response_timeout, retention) = (
            settings.connect_timeout,
            settings.response_timeout,
            settings.retention,
        );
        let topology = topology::parse(url, settings.tls_root_ca_pem.as_deref())?;
        if url.scheme().starts_with("rediss") {
            super::node::prepare_tls(location)?;
        }
        let one_clock = matches!(topology, Topology::Standalone);
        let cluster = matches!(topology, Topology::Cluster(_));
        let deployment = match topology {
            Topology::Standalone => Deployment::OneServer,
            Topology::Sentinel(_) => Deployment::Sentinel,
            Topology::Cluster(_) => Deployment::Cluster,
        };
        let (shared, blocking, first_dedicated) =
            open_topology(url, topology, &settings, &round_trips).await?;
        let blocking = Arc::new(BlockingPool::new(
            blocking,
            connect_timeout,
            round_trips.clone(),
        ));
        let feed = Arc::new(Feed::new(
            blocking.nodes(),
            connect_timeout,
            response_timeout,
            round_trips.clone(),
        ));
        tracing::debug!(url = %location, prefix = %settings.prefix, "redis lease store connected");
        let allow_eviction = super::RedisOptions::of(&settings).allow_eviction;
        let store = RedisStore {
            shared: Counted {
                con: shared,
                count: round_trips.clone(),
            },
            blocking,
            prefix: settings.prefix.into(),
            response_timeout,
            connect_timeout,
            tuning: Tuning {
                cluster,
                ..Tuning::with_retention(retention)
            },
            allow_eviction,
            watch: Arc::default(),
            clock: one_clock.then(Arc::default),
            server_time: Arc::default(),
            feed,
            contended: Arc::default(),
            meta: meta.clone(),
        };
        // Every data node is asked, before anything is run, whether the user may run every command
        // leasehold sends, so that a missing one refuses now rather than at the release.
        store
            .check_acl(deployment)
            .await
            .map_err(errors::unauthorized_at(store.meta.location()))?;
        if let Some(probe) = first_dedicated {
            store.load_scripts(probe).await?;
        }
        // Every data node is asked what it is before anything is written: a replica, or a node that
        // may evict lease keys without the opt-in, is refused.
        let looked = store
            .look_at_nodes(Phase::Connect)
            .await
            .map_err(errors::unauthorized_at(store.meta.location()))?;
        for (node, facts) in &looked {
            health::check(node, facts, store.allow_eviction)?;
        }
        store.watch.observe(&looked, store.allow_eviction);
        Ok(store)
    }

    /// [`acl::check`] on every data node.
    async fn check_acl(&self, deployment: Deployment) -> Result<()> {
        let nodes = within(
            Phase::Connect,
            self.limit(),
            self.shared.masters_named(self.meta.location()),
        )
        .await?;
        for (node, mut con) in nodes {
            within(
                Phase::Connect,
                self.limit(),
                acl::check(&mut con, &node, deployment, &self.prefix),
            )
            .await??;
        }
        Ok(())
    }

    /// Loads the scripts on a single server through its first dedicated connection, which then
    /// joins the pool (unless the pool opens direct ones, which waits read faster: it is closed,
    /// and a direct one joins the pool instead). The server's script cache is shared by every connection: loaded once here, the first
    /// pipelined acquire + BLPOP is not answered NOSCRIPT (its BLPOP would block for nothing before
    /// the retry). A dedicated connection made later, perhaps after a restart, loads again.
    async fn load_scripts(&self, mut probe: MultiplexedConnection) -> Result<()> {
        within(
            Phase::Connect,
            self.response_timeout,
            scripts::load_all(&mut probe),
        )
        .await?;
        self.meta.count(1);
        if self.blocking.opens_direct() {
            // The first dedicated connection is a direct one, opened now (the scripts are loaded
            // on this server): a first wait, of every process at once, opens nothing.
            drop(probe);
            within(
                Phase::Connect,
                self.connect_timeout,
                self.blocking.open_idle(),
            )
            .await?;
        } else {
            self.blocking.put_idle(String::new(), probe);
        }
        Ok(())
    }
}

/// Opens the shared connection and the nodes for dedicated ones, as the URL's topology says. A
/// single server's probe connection comes back to be the first dedicated one (once it has loaded
/// the scripts).
async fn open_topology(
    url: &StoreUrl,
    topology: Topology,
    settings: &Settings,
    round_trips: &Arc<AtomicU64>,
) -> Result<(Route, Nodes, Option<MultiplexedConnection>)> {
    let (connect_timeout, response_timeout) = (settings.connect_timeout, settings.response_timeout);
    let mut first_dedicated = None;
    let (shared, blocking) = match topology {
        Topology::Standalone => {
            let (shared, nodes, probe) =
                standalone::connect(url, settings, round_trips.clone()).await?;
            first_dedicated = Some(probe);
            (shared, nodes)
        }
        Topology::Sentinel(sentinel) => {
            let conn = SentinelConn::connect(
                sentinel,
                connect_timeout,
                response_timeout,
                round_trips.clone(),
            )
            .await?;
            (Route::Sentinel(conn.clone()), Nodes::Sentinel(conn))
        }
        Topology::Cluster(cluster) => {
            let conn = ClusterConn::connect(
                cluster,
                connect_timeout,
                response_timeout,
                round_trips.clone(),
            )
            .await?;
            (Route::Cluster(conn.clone()), Nodes::Cluster(conn))
        }
    };
    Ok((shared, blocking, first_dedicated))
}
