//! The stores a strategy's lock lives on, one file each, and the lease stores the harness runs for
//! the whole run.
//!
//! Redis (`redis.rs`) is started per cell, in the deployment the cell's fault needs (one server,
//! Redlock's three masters, a Sentinel set, a Cluster), behind the harness's proxies. Every other
//! store is *run-wide*: started once per run, at its first cell, and shared by the cells after it
//! ([`LeaseStores`]), each cell's leases under its own key prefix. Limit: the run-wide stores are
//! reached directly, not through a proxy, so no network fault reaches them, except in a
//! `partition` cell, which puts a proxy per worker in front of its store (`cell::StoreLink`).
//!
//! Adding a run-wide store: a file beside this one declaring its [`RunWide`] (its name, what must be
//! installed and whether it is, its shortest lease, how it starts, its two strategies' names, how
//! the benchmarks reach it), and its line in [`RUN_WIDE`] below. Its strategies follow from that
//! line (`strategy.rs`), and so do its rows in the benchmarks' S5 and S6 (`bench/stores.rs`); its
//! own fault, if it has one, is a file in `faults/` naming the store it acts on.

pub(crate) mod etcd;
pub(crate) mod mariadb;
pub(crate) mod postgres;
pub(crate) mod redis;

use std::any::Any;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Mutex;
use std::time::Duration;

use futures::future::BoxFuture;

/// Every run-wide lease store, in the order of their strategies in the plan and the reports (and of
/// their rows in the benchmarks): the one list of them.
pub(crate) const RUN_WIDE: &[&RunWide] = &[&postgres::STORE, &mariadb::STORE, &etcd::STORE];

/// The run-wide stores' names as a list for a message: "PostgreSQL, MariaDB or etcd" with `or`.
pub(crate) fn run_wide_names(conjunction: &str) -> String {
    let names: Vec<&str> = RUN_WIDE.iter().map(|s| s.name).collect();
    match names.split_last() {
        Some((last, [])) => (*last).to_owned(),
        Some((last, rest)) => format!("{} {conjunction} {last}", rest.join(", ")),
        None => String::new(),
    }
}

/// A lease store the harness runs once for the whole run: what the harness asks of it, declared in
/// the store's own file.
#[derive(Debug)]
pub(crate) struct RunWide {
    /// Its name in notes and messages.
    pub(crate) name: &'static str,
    /// What must be installed for [`available`](Self::available), for a skipped cell's note.
    pub(crate) needs_installed: &'static str,
    /// Whether the harness can run one here (its binaries installed).
    pub(crate) available: fn() -> bool,
    /// The shortest lease the store keeps whatever TTL is asked, when that is longer than any TTL
    /// the harness uses: a fault window must outlast it (`Timing::for_strategy`).
    pub(crate) min_lease: Option<Duration>,
    /// Starts a private one for the run, ready for leases (its tables made).
    pub(crate) start: fn() -> BoxFuture<'static, anyhow::Result<Started>>,
    /// The URL scheme that says whether this build of the library has the store.
    pub(crate) scheme: &'static str,
    /// Its row's label in the benchmarks' tables and JSON (S5, S6).
    pub(crate) label: &'static str,
    /// Reaches one for the benchmarks, or starts a private one, given the run's `--database`
    /// (`bench/stores.rs`).
    pub(crate) measured: fn(String) -> BoxFuture<'static, anyhow::Result<Started>>,
    /// Its two strategies' names on the command line and in the reports: the lease, then the
    /// lease whose fence the resource checks.
    pub(crate) strategies: [&'static str; 2],
    /// Where those strategies' lease comes from, for their `--help` ("the PostgreSQL lease
    /// store").
    pub(crate) lease_from: &'static str,
}

/// Where a strategy's lock lives: Redis, or one of the run-wide stores (`store::RUN_WIDE`).
#[derive(Clone, Copy)]
pub struct Store(Kind);

#[derive(Clone, Copy)]
enum Kind {
    Redis,
    RunWide(&'static RunWide),
}

impl Store {
    /// Redis: one server (or a Sentinel set, or a Cluster), or Redlock's three masters.
    pub const REDIS: Store = Store(Kind::Redis);

    /// The run-wide store `store` declares.
    pub(crate) const fn run_wide(store: &'static RunWide) -> Store {
        Store(Kind::RunWide(store))
    }

    /// The store's name in notes.
    pub fn name(self) -> &'static str {
        match self.0 {
            Kind::Redis => "Redis",
            Kind::RunWide(s) => s.name,
        }
    }

    /// The store's declaration when the harness runs one for the whole run ([`LeaseStores`]), rather
    /// than a deployment per cell.
    pub(crate) fn as_run_wide(self) -> Option<&'static RunWide> {
        match self.0 {
            Kind::Redis => None,
            Kind::RunWide(s) => Some(s),
        }
    }

    /// Whether the harness can run a store of its own here (its binaries installed).
    pub(crate) fn available(self) -> bool {
        match self.0 {
            Kind::Redis => leasehold_testkit::redis_server_available(),
            Kind::RunWide(s) => (s.available)(),
        }
    }

    /// What must be installed for [`available`](Self::available), for a skipped cell's note.
    pub(crate) fn needs_installed(self) -> &'static str {
        match self.0 {
            Kind::Redis => "redis-server",
            Kind::RunWide(s) => s.needs_installed,
        }
    }

    /// The shortest lease the store keeps whatever TTL is asked, when that is longer than any TTL
    /// the harness uses; a fault window must outlast it.
    pub(crate) fn min_lease(self) -> Option<Duration> {
        self.as_run_wide().and_then(|s| s.min_lease)
    }
}

// A store is known by its name: two declarations with one name would be one store to the harness
// (the strategy table's tests check that names are unique).
impl PartialEq for Store {
    fn eq(&self, other: &Self) -> bool {
        self.name() == other.name()
    }
}

impl Eq for Store {}

impl Hash for Store {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.name().hash(state);
    }
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A run-wide store the harness started: the URL its clients connect with, and its server(s),
/// stopped on drop.
pub(crate) struct Started {
    url: String,
    server: Box<dyn Any + Send>,
}

impl Started {
    /// `server`, reached at `url`.
    pub(crate) fn new(url: String, server: impl Any + Send) -> Self {
        Self {
            url,
            server: Box::new(server),
        }
    }

    /// The URL and what keeps the server(s) running.
    pub(crate) fn into_parts(self) -> (String, Box<dyn Any + Send>) {
        (self.url, self.server)
    }
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("url", &leasehold::url::redact(&self.url))
            .finish_non_exhaustive()
    }
}

/// The run-wide lease stores, each started once per run at its first cell and shared by the cells
/// after it, since making a database's data directory or an etcd cluster takes seconds. They are
/// the harness's own, so their faults (`faults/`) act on them for real; the run's database (the
/// resource) is never one of them. Cells run one at a time, and a fault leaves its store running
/// again, so a cell starts from a healthy store.
#[derive(Debug, Default)]
pub(crate) struct LeaseStores {
    running: Mutex<HashMap<Store, Started>>,
}

impl LeaseStores {
    /// The URL of `store`, started if it is not yet; `None` for a store started per cell (Redis)
    /// or no store at all.
    pub(crate) async fn url_for(&self, store: Option<Store>) -> anyhow::Result<Option<String>> {
        let Some((store, declared)) = store.and_then(|s| Some((s, s.as_run_wide()?))) else {
            return Ok(None);
        };
        let running = self
            .running
            .lock()
            .ok()
            .and_then(|r| r.get(&store).map(|s| s.url.clone()));
        if let Some(url) = running {
            return Ok(Some(url));
        }
        let started = (declared.start)().await?;
        let url = started.url.clone();
        if let Ok(mut r) = self.running.lock() {
            r.insert(store, started);
        }
        Ok(Some(url))
    }

    /// Runs `f` on the server(s) of the running `store`, of the type its file starts (on a blocking
    /// thread's worth of patience: the testkit's server control blocks).
    pub(crate) fn with<S: Any, T>(
        &self,
        store: &'static RunWide,
        f: impl FnOnce(&mut S) -> anyhow::Result<T>,
    ) -> anyhow::Result<T> {
        tokio::task::block_in_place(|| {
            let mut running = self
                .running
                .lock()
                .map_err(|_| anyhow::anyhow!("poisoned"))?;
            let server = running
                .get_mut(&Store::run_wide(store))
                .and_then(|s| s.server.downcast_mut::<S>())
                .ok_or_else(|| anyhow::anyhow!("needs the harness's {} lease store", store.name))?;
            f(server)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_run_wide_stores_are_listed_in_their_table_s_order() {
        let listed = run_wide_names("or");
        assert!(listed.starts_with("PostgreSQL, MariaDB"), "{listed}");
        let last = RUN_WIDE.last().map(|s| s.name).unwrap_or_default();
        assert!(listed.ends_with(&format!(" or {last}")), "{listed}");
        assert_eq!(Store::run_wide(&mariadb::STORE).name(), "MariaDB");
        assert!(Store::REDIS.as_run_wide().is_none());
        assert_eq!(
            Store::run_wide(&etcd::STORE).min_lease(),
            Some(Duration::from_secs(2))
        );
        assert_eq!(Store::run_wide(&postgres::STORE).min_lease(), None);
    }
}
