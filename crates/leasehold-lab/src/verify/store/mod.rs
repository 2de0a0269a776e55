//! The stores a strategy's lock lives on, one file each, and the lease stores the harness runs for
//! the whole run.
//!
//! Redis (`redis.rs`) is started per cell, in the deployment the cell's fault needs (one server,
//! Redlock's three masters, a Sentinel set, a Cluster), behind the harness's proxies. PostgreSQL
//! (`postgres.rs`), MariaDB (`mariadb.rs`) and etcd (`etcd.rs`) are started once per run, at their first cell, and shared
//! by the cells after it ([`LeaseStores`]), each cell's leases under its own key prefix. Limit: the
//! run-wide stores are reached directly, not through a proxy, so no network fault reaches them.
//!
//! Adding a store: a [`Store`] variant and its arms in the `match`es of this file (its name, whether
//! the harness can run one, how long its shortest lease lives, how it starts), its [`Running`]
//! variant, a file beside this one that starts it, and its strategies' lines in
//! `strategy::TABLE`; its own fault, if it has one, is a fault file (`faults/`).

mod etcd;
mod mariadb;
mod postgres;
pub(crate) mod redis;

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use leasehold_testkit::{EtcdCluster, MariaDbServer, PostgresServer};

pub(crate) use etcd::ETCD_MEMBERS;

/// Where a strategy's lock lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Store {
    /// Redis: one server (or a Sentinel set, or a Cluster), or Redlock's three masters.
    Redis,
    /// The PostgreSQL lease store (`postgres://`).
    Postgres,
    /// The MariaDB (MySQL) lease store (`mysql://`).
    MariaDb,
    /// A three-member etcd cluster (`etcd://`).
    Etcd,
}

impl Store {
    /// The store's name in notes.
    pub fn name(self) -> &'static str {
        match self {
            Store::Redis => "Redis",
            Store::Postgres => "PostgreSQL",
            Store::MariaDb => "MariaDB",
            Store::Etcd => "etcd",
        }
    }

    /// Whether the harness runs one of this store for the whole run ([`LeaseStores`]) rather than
    /// a deployment per cell.
    pub(crate) fn run_wide(self) -> bool {
        !matches!(self, Store::Redis)
    }

    /// Whether the harness can run a store of its own here (its binaries installed).
    pub(crate) fn available(self) -> bool {
        match self {
            Store::Redis => leasehold_testkit::redis_server_available(),
            Store::Postgres => leasehold_testkit::postgres_server_available(),
            Store::MariaDb => leasehold_testkit::mariadb_server_available(),
            Store::Etcd => leasehold_testkit::etcd_available(),
        }
    }

    /// What must be installed for [`available`](Self::available), for a skipped cell's note.
    pub(crate) fn needs_installed(self) -> &'static str {
        match self {
            Store::Redis => "redis-server",
            Store::Postgres => "initdb and postgres",
            Store::MariaDb => "mariadb-install-db and mariadbd",
            Store::Etcd => "etcd",
        }
    }

    /// The shortest lease the store keeps whatever TTL is asked, when that is longer than any TTL
    /// the harness uses ([`etcd::MIN_LEASE`]); a fault window must outlast it.
    pub(crate) fn min_lease(self) -> Option<Duration> {
        match self {
            Store::Etcd => Some(etcd::MIN_LEASE),
            Store::Redis | Store::Postgres | Store::MariaDb => None,
        }
    }

    /// Starts the harness's own store of this kind.
    async fn start(self) -> anyhow::Result<Running> {
        match self {
            Store::Postgres => postgres::start().await.map(Running::Postgres),
            Store::MariaDb => mariadb::start().await.map(Running::MariaDb),
            Store::Etcd => etcd::start().await.map(Running::Etcd),
            Store::Redis => anyhow::bail!("Redis is started per cell, not for the run"),
        }
    }
}

/// A run-wide lease store the harness started.
#[derive(Debug)]
pub(crate) enum Running {
    Postgres(PostgresServer),
    MariaDb(MariaDbServer),
    Etcd(EtcdCluster),
}

impl Running {
    fn url(&self) -> String {
        match self {
            Running::Postgres(pg) => pg.url(),
            Running::MariaDb(my) => my.url(),
            Running::Etcd(etcd) => etcd.url(),
        }
    }
}

/// The lease stores that are not Redis, each started once per run at its first cell and shared by
/// the cells after it, since making a PostgreSQL or MariaDB data directory or an etcd cluster takes
/// seconds. They are the harness's own, so their faults (`pg-restart`, `mysql-restart`,
/// `member-kill`) act on them for real; the run's database (the resource) is never one of them.
/// Cells run one at a time, and a fault leaves its store running again, so a cell starts from a
/// healthy store.
#[derive(Debug, Default)]
pub(crate) struct LeaseStores {
    running: Mutex<HashMap<Store, Running>>,
}

impl LeaseStores {
    /// The URL of `store`, started if it is not yet; `None` for a store started per cell (Redis)
    /// or no store at all.
    pub(crate) async fn url_for(&self, store: Option<Store>) -> anyhow::Result<Option<String>> {
        let Some(store) = store.filter(|s| s.run_wide()) else {
            return Ok(None);
        };
        let running = self
            .running
            .lock()
            .ok()
            .and_then(|r| r.get(&store).map(Running::url));
        if let Some(url) = running {
            return Ok(Some(url));
        }
        let started = store.start().await?;
        let url = started.url();
        if let Ok(mut r) = self.running.lock() {
            r.insert(store, started);
        }
        Ok(Some(url))
    }

    /// Runs `f` on the running `store` (on a blocking thread's worth of patience: the testkit's
    /// server control blocks).
    pub(crate) fn with<T>(
        &self,
        store: Store,
        f: impl FnOnce(&mut Running) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        tokio::task::block_in_place(|| {
            let mut running = self
                .running
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?;
            let store_ = running.get_mut(&store).ok_or_else(|| {
                anyhow::anyhow!("needs the harness's {} lease store", store.name())
            })?;
            f(store_)
        })
    }
}
