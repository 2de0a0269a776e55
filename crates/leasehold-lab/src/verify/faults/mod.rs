//! The fault table: what each fault needs from a cell, where it applies, and the dispatch to the
//! file that does it (one file per fault or family of faults).
//!
//! Adding a fault of the workers or of Redis: a [`Fault`] variant with its name and help
//! (`verify/mod.rs`) and its line in [`FAULTS`], its line in [`Fault::needs`] (and in [`Fault::slow`]
//! or [`Fault::estimate`] if each injection takes seconds), a file here with its `inject` (and
//! `arm` / `disarm` when something must be set up before the target is chosen), and its lines in
//! the `match`es of [`Cell::arm`], [`Cell::disarm`] and [`Cell::inject`]; the compiler points at
//! each. Adding a fault of a run-wide lease store: a file here declaring its [`StoreFault`] (its
//! name, its help, the store it acts on, its `inject`), its `mod` line below and its line in
//! [`FAULTS`]; the table and the dispatch need nothing more. Limit: every fault is aimed at one worker
//! caught inside its critical section (or at the lease store it talks to); faults that hit several
//! parts at once are not modelled, except the Redlock clock jump, which needs a cut link and a
//! jumped master together.
//!
//! Which faults apply where ([`applicability`]): the single-server faults (`redis-restart`,
//! `failover`) are not applicable to Redlock, whose masters are independent servers without
//! replicas (`node-restart` and `node-kill` are their Redlock forms), and the Redlock faults are
//! not applicable to the single-server strategies. The network faults hit all of the target's
//! links (on Redlock, its three proxies). `sentinel-failover` and `cluster-failover` apply to the
//! leases and elections on one deployment (`lease`, `lease-fence`, `election`, `election-fence`);
//! the hand-made locks speak to one `redis://` server only. `partition` applies to every strategy
//! with a lock, wherever it lives (not to `db-guards`). The strategies on a run-wide store take
//! `none`, `pause`, `kill`, `partition` and their own store's faults, which act on the store the
//! harness runs for the whole run (`LeaseStores`); no Redis fault applies to them, the network
//! faults included (their store is reached directly, not through the proxies, except in a
//! `partition` cell, which puts a proxy per worker in front of it).

mod clock_jump;
mod cluster_failover;
mod eviction;
mod failover;
mod kill;
pub(crate) mod member_kill;
mod mysql_restart;
mod network;
mod pause;
mod pg_restart;
mod reach;
mod redis_restart;
mod redlock_node;
mod sentinel_failover;

use std::time::Duration;

use futures::future::BoxFuture;

use super::cell::{Cell, CellStatus};
use super::store::redis::{Deployment, Want};
use super::store::{RunWide, Store};
use super::strategy::Strategy;
use super::timing::Timing;
use super::Fault;

/// Every fault a run offers, in the order of its plan and its reports: the one list of them. A
/// fault of a run-wide store is its file in `faults/` and its line here.
pub const FAULTS: &[Fault] = &[
    Fault::None,
    Fault::Pause,
    Fault::Kill,
    Fault::RedisRestart,
    Fault::Failover,
    Fault::NetDelay,
    Fault::NetCut,
    Fault::NetBlackhole,
    Fault::Partition,
    Fault::ClockJump,
    Fault::NodeKill,
    Fault::NodeRestart,
    Fault::SentinelFailover,
    Fault::ClusterFailover,
    Fault::Store(&pg_restart::FAULT),
    Fault::Store(&mysql_restart::FAULT),
    Fault::Eviction,
    Fault::Store(&member_kill::FAULT),
];

/// A fault of one run-wide lease store (`store::RUN_WIDE`), declared in the fault's own file: the
/// harness does it only to the strategies whose lease is on that store.
pub struct StoreFault {
    /// Its name on the command line and in the reports.
    pub(crate) name: &'static str,
    /// What it does, for `--help`.
    pub(crate) help: &'static str,
    /// The store it acts on.
    pub(crate) store: &'static RunWide,
    /// What it does there, for the note of a cell it does not apply to.
    pub(crate) what: &'static str,
    /// Applies it to the running store while the target worker holds its lease, for the fault
    /// window.
    pub(crate) inject: for<'a, 'c> fn(&'a mut Cell<'c>) -> BoxFuture<'a, anyhow::Result<()>>,
}

// A fault is known by its name (the table's tests check that names are unique).
impl PartialEq for StoreFault {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for StoreFault {}

impl std::hash::Hash for StoreFault {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl std::fmt::Debug for StoreFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name)
    }
}

/// What a fault needs from a cell.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Needs {
    /// It acts on the strategy's Redis: not applicable to a strategy without one.
    pub(crate) redis: bool,
    /// It kills, restarts or re-clocks a server: only on servers the harness runs (skipped with
    /// `--redis`).
    pub(crate) own_redis: bool,
    /// A replica behind a replication link the harness can cut.
    pub(crate) replica: bool,
    /// The primary (for Redlock: one master) runs under a fake wall clock (libfaketime).
    pub(crate) fake_clock: bool,
    /// It is defined on one Redis deployment (the single-server strategies).
    pub(crate) one_deployment: bool,
    /// It is defined on Redlock's three masters.
    pub(crate) redlock: bool,
    /// What it runs on, for the single-server strategies.
    pub(crate) deployment: Deployment,
    /// It acts on the holder's own connection to its lock, wherever that lock lives: not
    /// applicable without a lock.
    pub(crate) holder_link: bool,
    /// It acts on this run-wide lease store, and what it does there (for the note of a cell it
    /// does not apply to).
    pub(crate) store: Option<(Store, &'static str)>,
}

impl Needs {
    /// What a cell of `strategy` must start on Redis for this fault.
    pub(crate) fn want(self, strategy: Strategy, workers: u32) -> Want {
        Want {
            redlock: strategy.redlock(),
            deployment: self.deployment,
            replica: self.replica,
            fake_clock: self.fake_clock,
            workers,
        }
    }
}

impl Fault {
    /// The one table of what each fault needs.
    pub(crate) fn needs(self) -> Needs {
        let any = Needs {
            one_deployment: true,
            redlock: true,
            ..Needs::default()
        };
        let redis = Needs { redis: true, ..any };
        let own = Needs {
            own_redis: true,
            ..redis
        };
        let one_server = Needs {
            redlock: false,
            ..own
        };
        let masters = Needs {
            one_deployment: false,
            ..own
        };
        let on_store = |store, what| Needs {
            store: Some((store, what)),
            ..Needs::default()
        };
        match self {
            Fault::None | Fault::Pause | Fault::Kill => any,
            Fault::NetDelay | Fault::NetCut | Fault::NetBlackhole => redis,
            Fault::Partition => Needs {
                holder_link: true,
                ..any
            },
            Fault::RedisRestart | Fault::Eviction => one_server,
            Fault::Failover => Needs {
                replica: true,
                ..one_server
            },
            Fault::ClockJump => Needs {
                fake_clock: true,
                ..own
            },
            Fault::NodeKill | Fault::NodeRestart => masters,
            Fault::SentinelFailover => Needs {
                deployment: Deployment::Sentinel,
                ..one_server
            },
            Fault::ClusterFailover => Needs {
                deployment: Deployment::Cluster,
                ..one_server
            },
            Fault::Store(fault) => on_store(Store::run_wide(fault.store), fault.what),
        }
    }

    /// Whether each injection takes seconds (a failure detected and a replica elected by sentinels
    /// or by the cluster), so a full run does fewer of them per cell.
    pub(crate) fn slow(self) -> bool {
        matches!(self, Fault::SentinelFailover | Fault::ClusterFailover)
    }

    /// Injections in a cell of this fault with timings `t`.
    /// A `partition` takes as many as the slow failovers: its window is two 2 s leases.
    pub(crate) fn injections(self, t: &Timing) -> u32 {
        t.injections(self.slow() || self == Fault::Partition)
    }

    /// An estimate of one cell's wall time, for the announcement: the timeline plus what starting
    /// servers and workers and stopping them takes on a busy 2-core machine (a Sentinel set or a
    /// Cluster takes seconds to start, and each of its failovers seconds more). A store restart or
    /// an etcd member's restart takes about a second.
    pub(crate) fn estimate(self, timing: &Timing, strategy: Strategy) -> Duration {
        let t = timing.for_fault(self, strategy);
        let (start, per_injection) = if self.slow() {
            (Duration::from_secs(4), Duration::from_secs(5))
        } else if self.needs().store.is_some() {
            (Duration::from_millis(300), Duration::from_millis(1_000))
        } else {
            (Duration::from_millis(300), Duration::from_millis(60))
        };
        start + t.warmup + (t.gap + t.hold + per_injection) * self.injections(&t) + t.cooldown
    }
}

fn not_applicable(why: &str) -> Option<(CellStatus, String)> {
    Some((CellStatus::NotApplicable, format!("not applicable: {why}")))
}

/// Whether `fault` can be done to `strategy` here; `None` when it can, else the status and why not.
pub(crate) fn applicability(
    fault: Fault,
    strategy: Strategy,
    user_redis: bool,
) -> Option<(CellStatus, String)> {
    let needs = fault.needs();
    if needs.holder_link && !strategy.locks() {
        return not_applicable(
            "no lock, so no connection to a lock store to cut the holder off from",
        );
    }
    if let Some((store, what)) = needs.store {
        if strategy.store() != Some(store) {
            return not_applicable(&format!("{what}; this strategy takes no lease there"));
        }
    }
    match strategy.run_wide_store() {
        Some(store) => on_run_wide_store(fault, needs, store),
        None => on_redis(fault, needs, strategy, user_redis),
    }
}

/// [`applicability`] for a strategy whose lease is on a run-wide store.
fn on_run_wide_store(fault: Fault, needs: Needs, store: Store) -> Option<(CellStatus, String)> {
    let name = store.name();
    if matches!(fault, Fault::NetDelay | Fault::NetCut | Fault::NetBlackhole) {
        return not_applicable(&format!(
            "the network faults act on the proxies in front of Redis; the {name} lease store is reached directly (`partition` is the fault of the holder's link to it)"
        ));
    }
    if needs.redis {
        return not_applicable(&format!(
            "a fault of Redis; this strategy's lease is on {name}"
        ));
    }
    if !store.available() {
        return Some((
            CellStatus::Skipped,
            format!(
                "skipped: needs {name} installed for a lease store of the harness's own ({})",
                store.needs_installed()
            ),
        ));
    }
    None
}

/// [`applicability`] for a strategy on Redis, or without a lock.
fn on_redis(
    fault: Fault,
    needs: Needs,
    strategy: Strategy,
    user_redis: bool,
) -> Option<(CellStatus, String)> {
    if needs.redis && !strategy.uses_redis() {
        return not_applicable("this strategy uses no Redis");
    }
    if strategy.redlock() && !needs.redlock {
        return not_applicable(match fault {
            Fault::RedisRestart => "one server restarted; node-restart is its Redlock form",
            Fault::Eviction => "memory pressure on one server; Redlock's masters are not modelled as caches",
            Fault::Failover => {
                "Redlock's masters are independent, with no replica to promote; node-kill is its Redlock form"
            }
            _ => "Redlock's masters are independent servers, not a Sentinel set or a Cluster",
        });
    }
    if !strategy.redlock() && !needs.one_deployment && strategy.uses_redis() {
        return not_applicable(
            "a fault of one Redlock master among three; redis-restart is its single-server form",
        );
    }
    if needs.deployment != Deployment::Standalone && !strategy.single_deployment() {
        return not_applicable(
            "the hand-made locks speak to one redis:// server; Sentinel and Cluster need a client that follows the primary",
        );
    }
    if user_redis && (needs.own_redis || strategy.redlock()) {
        return Some((
            CellStatus::Skipped,
            "skipped: needs Redis servers the harness runs itself (--redis was given)".into(),
        ));
    }
    if needs.fake_clock && leasehold_testkit::libfaketime_path().is_none() {
        return Some((
            CellStatus::Skipped,
            "skipped: needs libfaketime (apt-get install -y faketime, or set LEASEHOLD_LIBFAKETIME)"
                .into(),
        ));
    }
    None
}

/// The dispatch from a fault to its file. Each `match` names every fault, so a new one is a
/// compile error until it has its line in each.
impl Cell<'_> {
    /// Sets up what must already be true when the target takes its lock.
    pub(crate) async fn arm(&mut self, fault: Fault) -> anyhow::Result<()> {
        match fault {
            Fault::Failover => failover::arm(self).await,
            Fault::ClockJump => clock_jump::arm(self),
            Fault::SentinelFailover => sentinel_failover::arm(self),
            Fault::ClusterFailover => cluster_failover::arm(self),
            Fault::Eviction => eviction::arm(self),
            Fault::None
            | Fault::Pause
            | Fault::Kill
            | Fault::RedisRestart
            | Fault::NetDelay
            | Fault::NetCut
            | Fault::NetBlackhole
            | Fault::Partition
            | Fault::NodeKill
            | Fault::NodeRestart
            | Fault::Store(_) => Ok(()),
        }
    }

    /// Undoes [`arm`](Self::arm) when no target was found, where leaving it would change the next
    /// injection's conditions: the links cut for a Redlock clock jump, the replica stopped for a
    /// Sentinel or Cluster failover (continued, it reconnects to its primary by itself). A failed
    /// undo is left for the next arming to report.
    pub(crate) fn disarm(&mut self, fault: Fault) {
        match fault {
            Fault::ClockJump => clock_jump::disarm(self),
            Fault::SentinelFailover => sentinel_failover::disarm(self),
            Fault::ClusterFailover => cluster_failover::disarm(self),
            Fault::Eviction => eviction::disarm(self),
            Fault::None
            | Fault::Pause
            | Fault::Kill
            | Fault::RedisRestart
            | Fault::Failover
            | Fault::NetDelay
            | Fault::NetCut
            | Fault::NetBlackhole
            | Fault::Partition
            | Fault::NodeKill
            | Fault::NodeRestart
            | Fault::Store(_) => {}
        }
    }

    /// Applies `fault` to the worker in `slot`, which is stopped at its hold point inside its
    /// critical section, for the fault window. Returns whether that worker is still there to be
    /// told to go on (a killed one is replaced instead).
    pub(crate) async fn inject(&mut self, fault: Fault, slot: u32) -> anyhow::Result<bool> {
        match fault {
            Fault::None => {}
            Fault::Pause => pause::inject(self, slot).await?,
            Fault::Kill => {
                kill::inject(self, slot).await?;
                return Ok(false);
            }
            Fault::RedisRestart => redis_restart::inject(self).await?,
            Fault::Failover => failover::inject(self).await?,
            Fault::NetDelay => network::delay(self, slot).await?,
            Fault::NetCut => network::cut(self, slot).await?,
            Fault::NetBlackhole => network::blackhole(self, slot).await?,
            Fault::Partition => network::partition(self, slot).await?,
            Fault::ClockJump => clock_jump::inject(self, slot).await?,
            Fault::NodeKill => redlock_node::kill(self).await?,
            Fault::NodeRestart => redlock_node::restart(self).await?,
            Fault::SentinelFailover => sentinel_failover::inject(self, slot).await?,
            Fault::ClusterFailover => cluster_failover::inject(self, slot).await?,
            Fault::Store(fault) => (fault.inject)(self).await?,
            Fault::Eviction => eviction::inject(self).await?,
        }
        Ok(true)
    }

    /// Whether the worker in `slot`, stopped at its hold point, is a target `fault` is meant for:
    /// the Redlock master faults are aimed at a lease held on all three masters (the case Redlock
    /// is for); a lease granted by a bare majority is let go and another target chosen.
    pub(crate) async fn suits(&mut self, fault: Fault, _slot: u32) -> bool {
        match fault {
            Fault::NodeKill | Fault::NodeRestart => redlock_node::suits(self).await,
            _ => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::store::{etcd, mariadb, postgres, RUN_WIDE};
    use super::*;

    #[test]
    fn redis_faults_do_not_apply_without_redis_and_server_faults_skip_a_user_redis() {
        use clap::ValueEnum as _;
        for f in Fault::value_variants() {
            let needs = f.needs();
            let na = applicability(*f, Strategy::DB_GUARDS, false);
            assert_eq!(
                na.map(|n| n.0),
                (needs.redis || needs.store.is_some() || needs.holder_link)
                    .then_some(CellStatus::NotApplicable),
                "{f}"
            );
            for s in [Strategy::LEASE, Strategy::REDLOCK] {
                if needs.own_redis && applicability(*f, s, false).is_none() {
                    assert_eq!(
                        applicability(*f, s, true).map(|n| n.0),
                        Some(CellStatus::Skipped),
                        "{f} {s}"
                    );
                }
            }
        }
        // Redlock needs three masters of its own whatever the fault.
        assert_eq!(
            applicability(Fault::Pause, Strategy::REDLOCK_FENCE, true).map(|n| n.0),
            Some(CellStatus::Skipped)
        );
    }

    #[test]
    fn each_fault_applies_to_the_deployments_it_is_defined_on() {
        let na = |f, s| applicability(f, s, false).map(|n| n.0) == Some(CellStatus::NotApplicable);
        for f in [Fault::RedisRestart, Fault::Failover, Fault::Eviction] {
            assert!(
                na(f, Strategy::REDLOCK) && na(f, Strategy::REDLOCK_FENCE),
                "{f}"
            );
            assert!(!na(f, Strategy::NAIVE), "{f}");
        }
        for f in [Fault::NodeKill, Fault::NodeRestart] {
            for s in [
                Strategy::NAIVE,
                Strategy::TTL_DEL,
                Strategy::LEASE,
                Strategy::LEASE_FENCE,
            ] {
                assert!(na(f, s), "{f} {s}");
            }
            assert!(
                !na(f, Strategy::REDLOCK) && !na(f, Strategy::REDLOCK_FENCE),
                "{f}"
            );
        }
        for f in [Fault::SentinelFailover, Fault::ClusterFailover] {
            for s in [
                Strategy::NAIVE,
                Strategy::TTL_DEL,
                Strategy::REDLOCK,
                Strategy::REDLOCK_FENCE,
                Strategy::DB_GUARDS,
            ] {
                assert!(na(f, s), "{f} {s}");
            }
            assert!(
                !na(f, Strategy::LEASE) && !na(f, Strategy::LEASE_FENCE),
                "{f}"
            );
        }
        // An election is a lease on one deployment: it takes every fault the lease takes.
        for f in FAULTS {
            for (lease, election) in [
                (Strategy::LEASE, Strategy::ELECTION),
                (Strategy::LEASE_FENCE, Strategy::ELECTION_FENCE),
            ] {
                assert_eq!(na(*f, lease), na(*f, election), "{f} {election}");
            }
        }
        // The partition cuts the holder off from whichever store its lock is on.
        for s in Strategy::value_variants() {
            assert_eq!(na(Fault::Partition, *s), !s.locks(), "{s}");
        }
        // Each lease-store fault acts on the store its file names.
        let store_of = |name: &str| {
            FAULTS
                .iter()
                .find_map(|f| match f {
                    Fault::Store(sf) if sf.name == name => Some(Store::run_wide(sf.store)),
                    _ => None,
                })
                .unwrap()
        };
        assert_eq!(store_of("pg-restart"), Store::run_wide(&postgres::STORE));
        assert_eq!(store_of("mysql-restart"), Store::run_wide(&mariadb::STORE));
        assert_eq!(store_of("member-kill"), Store::run_wide(&etcd::STORE));
        // The lease-store faults apply to their store's strategies only, and of the Redis faults
        // none applies to those.
        use clap::ValueEnum as _;
        let on_its_store = |f: Fault, s: Strategy| matches!(f, Fault::Store(sf) if s.store() == Some(Store::run_wide(sf.store)));
        for s in Strategy::value_variants() {
            for f in FAULTS.iter().filter(|f| matches!(f, Fault::Store(_))) {
                assert_eq!(!na(*f, *s), on_its_store(*f, *s), "{f} {s}");
            }
        }
        let on_stores: Vec<Strategy> = Strategy::value_variants()
            .iter()
            .copied()
            .filter(|s| s.run_wide_store().is_some())
            .collect();
        assert_eq!(on_stores.len(), 2 * RUN_WIDE.len());
        for s in on_stores {
            for f in FAULTS {
                let applies = matches!(
                    f,
                    Fault::None | Fault::Pause | Fault::Kill | Fault::Partition
                ) || on_its_store(*f, s);
                assert_eq!(!na(*f, s), applies, "{f} {s}");
                // Their stores are the harness's own whatever Redis is given.
                if applies {
                    assert!(applicability(*f, s, true).is_none(), "{f} {s}");
                }
            }
        }
        for f in [
            Fault::Pause,
            Fault::Kill,
            Fault::NetDelay,
            Fault::NetCut,
            Fault::NetBlackhole,
            Fault::ClockJump,
        ] {
            assert!(!na(f, Strategy::REDLOCK) && !na(f, Strategy::LEASE), "{f}");
        }
    }
}
