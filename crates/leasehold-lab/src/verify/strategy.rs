//! How the workers coordinate: a strategy is a lock kind, the store the lock lives on, and whether
//! the resource checks the lease's fence; [`TABLE`] names the strategies on Redis and without a
//! lock, and each run-wide store (`store::RUN_WIDE`) brings its two, a lease unfenced and fenced.
//!
//! Limit: only the combinations named there exist (a hand-made lock on PostgreSQL, or a fence
//! without a lease, means nothing here); a strategy is made by parsing its name or from the
//! constants below, never field by field.

use clap::builder::PossibleValue;

use super::store::{RunWide, Store, RUN_WIDE};

/// What the workers take before their critical section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Lock {
    /// A hand-made Redis lock: `SETNX` + `PEXPIRE` to lock, `DEL` to unlock.
    Naive,
    /// A hand-made Redis lock: `SET NX PX` to lock, a bare `DEL` to unlock.
    TtlDel,
    /// A leasehold lease (token, renewal, safe release) on one deployment of its store.
    Lease,
    /// A leasehold Redlock lease over three independent Redis masters.
    Redlock,
    /// Leadership of a leasehold election on one Redis server: each critical section is a term,
    /// won by `campaign` and ended by `resign`; the term is the fence.
    Election,
    /// No lock at all: the database's own guards (unique index, conditional update, state check,
    /// inbox) keep the data correct.
    Guards,
}

/// One strategy of the verifier: (lock kind, store, fenced).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Strategy {
    /// What the workers lock with.
    lock: Lock,
    /// Where the lock lives; `None` without a lock.
    store: Option<Store>,
    /// Whether the resource checks the lease's fence in the same transaction as each write.
    fenced: bool,
}

/// One line of [`TABLE`]: a strategy, its name on the command line and in the reports, and what it
/// is (the `--help` text).
#[derive(Debug)]
pub(crate) struct Entry {
    pub(crate) name: &'static str,
    pub(crate) strategy: Strategy,
    pub(crate) help: &'static str,
}

const fn on(lock: Lock, store: Store, fenced: bool) -> Strategy {
    Strategy {
        lock,
        store: Some(store),
        fenced,
    }
}

/// The lease on run-wide store `store`, fenced or not: the two strategies every such store brings.
pub(crate) const fn lease_on(store: &'static RunWide, fenced: bool) -> Strategy {
    on(Lock::Lease, Store::run_wide(store), fenced)
}

impl Strategy {
    /// `naive`.
    pub const NAIVE: Self = on(Lock::Naive, Store::REDIS, false);
    /// `ttl-del`.
    pub const TTL_DEL: Self = on(Lock::TtlDel, Store::REDIS, false);
    /// `lease`.
    pub const LEASE: Self = on(Lock::Lease, Store::REDIS, false);
    /// `lease-fence`.
    pub const LEASE_FENCE: Self = on(Lock::Lease, Store::REDIS, true);
    /// `redlock`.
    pub const REDLOCK: Self = on(Lock::Redlock, Store::REDIS, false);
    /// `redlock-fence`.
    pub const REDLOCK_FENCE: Self = on(Lock::Redlock, Store::REDIS, true);
    /// `db-guards`.
    pub const DB_GUARDS: Self = Self {
        lock: Lock::Guards,
        store: None,
        fenced: false,
    };
    /// `election`.
    pub const ELECTION: Self = on(Lock::Election, Store::REDIS, false);
    /// `election-fence`.
    pub const ELECTION_FENCE: Self = on(Lock::Election, Store::REDIS, true);
}

/// The strategies on Redis and without a lock, in the order of the plan and the reports; the
/// strategies on the run-wide stores follow them ([`ALL`]), named in their stores' files.
pub(crate) const TABLE: &[Entry] = &[
    Entry {
        name: "naive",
        strategy: Strategy::NAIVE,
        help: "`SETNX` + `PEXPIRE` to lock, `DEL` to unlock",
    },
    Entry {
        name: "ttl-del",
        strategy: Strategy::TTL_DEL,
        help: "`SET NX PX` to lock, a bare `DEL` to unlock",
    },
    Entry {
        name: "lease",
        strategy: Strategy::LEASE,
        help: "A leasehold lease (token, renewal, safe release); the fence is ignored",
    },
    Entry {
        name: "lease-fence",
        strategy: Strategy::LEASE_FENCE,
        help: "A leasehold lease whose fence the resource checks in the same transaction as each write",
    },
    Entry {
        name: "redlock",
        strategy: Strategy::REDLOCK,
        help: "A leasehold Redlock lease over three independent masters; the fence is ignored",
    },
    Entry {
        name: "redlock-fence",
        strategy: Strategy::REDLOCK_FENCE,
        help: "A leasehold Redlock lease whose fence the resource checks in the same transaction as each write, as `lease-fence` does",
    },
    Entry {
        name: "election",
        strategy: Strategy::ELECTION,
        help: "Leadership of a leasehold election (campaign, resign); the term is ignored",
    },
    Entry {
        name: "election-fence",
        strategy: Strategy::ELECTION_FENCE,
        help: "Leadership of a leasehold election whose term the resource checks in the same transaction as each write, as `lease-fence` does with the fence",
    },
    Entry {
        name: "db-guards",
        strategy: Strategy::DB_GUARDS,
        help: "No lock: unique index, conditional update, state check, inbox",
    },
];

/// Every strategy the verifier runs, in the order of its plan and its reports: [`TABLE`]'s, then the
/// lease of each run-wide store, unfenced and fenced ([`RUN_WIDE`]'s order). A new store's line in
/// `RUN_WIDE` is its two strategies here.
const ALL: [Strategy; TABLE.len() + 2 * RUN_WIDE.len()] = {
    let mut all = [Strategy::DB_GUARDS; TABLE.len() + 2 * RUN_WIDE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        all[i] = TABLE[i].strategy;
        i += 1;
    }
    let mut s = 0;
    while s < RUN_WIDE.len() {
        all[TABLE.len() + 2 * s] = lease_on(RUN_WIDE[s], false);
        all[TABLE.len() + 2 * s + 1] = lease_on(RUN_WIDE[s], true);
        s += 1;
    }
    all
};

impl Strategy {
    /// What the workers lock with.
    pub fn lock(self) -> Lock {
        self.lock
    }

    /// Where the lock lives (`None` without a lock).
    pub fn store(self) -> Option<Store> {
        self.store
    }

    /// Whether the resource checks the lease's fence with each write.
    pub fn fenced(self) -> bool {
        self.fenced
    }

    /// The strategy's name on the command line and in the reports.
    pub fn name(self) -> &'static str {
        match self.store.and_then(Store::as_run_wide) {
            Some(store) => store.strategies[usize::from(self.fenced)],
            None => TABLE
                .iter()
                .find(|e| e.strategy == self)
                .map_or("?", |e| e.name),
        }
    }

    /// What the strategy is, for `--help`: its line in [`TABLE`], or said alike of every run-wide
    /// store's lease.
    fn help(self) -> String {
        let Some(store) = self.store.and_then(Store::as_run_wide) else {
            return TABLE
                .iter()
                .find(|e| e.strategy == self)
                .map_or_else(String::new, |e| e.help.to_owned());
        };
        let from = store.lease_from;
        if self.fenced {
            format!(
                "A leasehold lease from {from} whose fence the resource checks in the same transaction as each write, as `lease-fence` does"
            )
        } else {
            format!("A leasehold lease from {from}; the fence is ignored")
        }
    }

    /// Whether leasehold documents this strategy as keeping the data correct under every fault here.
    pub fn safe_by_design(self) -> bool {
        self.fenced || self.guarded()
    }

    /// Whether the database guards keep the data correct (no lock).
    pub fn guarded(self) -> bool {
        self.lock == Lock::Guards
    }

    /// Whether the workers take a lock at all.
    pub fn locks(self) -> bool {
        self.lock != Lock::Guards
    }

    /// Whether the lock is a leasehold lease (on one deployment, Redlock's masters, a run-wide store,
    /// or an election's): what can say when its holder must stop.
    pub fn leased(self) -> bool {
        matches!(self.lock, Lock::Lease | Lock::Redlock | Lock::Election)
    }

    /// Whether the lock is a Redlock lease over three masters (else one deployment, or none).
    pub fn redlock(self) -> bool {
        self.lock == Lock::Redlock
    }

    /// Whether the lock is a leasehold lease on one Redis deployment, which is what speaks Sentinel
    /// and Cluster URLs (the hand-made locks speak to one `redis://` server only).
    pub fn single_lease(self) -> bool {
        self.lock == Lock::Lease && self.store == Some(Store::REDIS)
    }

    /// Whether the lock is a leasehold lease or election on one Redis deployment: what speaks
    /// Sentinel and Cluster URLs, so what the Sentinel and Cluster failovers apply to.
    pub fn single_deployment(self) -> bool {
        self.single_lease() || (self.election() && self.store == Some(Store::REDIS))
    }

    /// Whether the lock is an election's leadership (its cells run the counter only: its lease's
    /// behaviour does not depend on the workload).
    pub fn election(self) -> bool {
        self.lock == Lock::Election
    }

    /// Whether the strategy talks to Redis at all.
    pub fn uses_redis(self) -> bool {
        self.store == Some(Store::REDIS)
    }

    /// The lease store the harness runs once for the whole run, when the lock lives on one
    /// (`store::RUN_WIDE`), rather than on the Redis deployment each cell starts.
    pub(crate) fn run_wide_store(self) -> Option<Store> {
        self.store.filter(|s| s.as_run_wide().is_some())
    }
}

impl clap::ValueEnum for Strategy {
    fn value_variants<'a>() -> &'a [Self] {
        &ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        Some(PossibleValue::new(self.name()).help(self.help()))
    }
}

impl serde::Serialize for Strategy {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum as _;

    use super::super::store::{etcd, mariadb, postgres};
    use super::*;

    /// The names of `strategies`, in order.
    fn names(strategies: impl Iterator<Item = Strategy>) -> Vec<&'static str> {
        strategies.map(Strategy::name).collect()
    }

    #[test]
    fn every_name_parses_back_to_its_strategy_and_names_are_unique() {
        for s in ALL {
            let name = s.name();
            assert_eq!(Strategy::from_str(name, false), Ok(s), "{name}");
            assert_eq!(s.to_string(), name);
            assert_eq!(serde_json::to_value(s).unwrap(), serde_json::json!(name));
            assert_eq!(ALL.iter().filter(|o| o.name() == name).count(), 1);
            assert_eq!(ALL.iter().filter(|o| **o == s).count(), 1);
        }
        for e in TABLE {
            assert_eq!(e.strategy.name(), e.name);
        }
        // Nine on Redis or without a lock, then two per run-wide store: 15 with PostgreSQL,
        // MariaDB and etcd, in that order.
        assert_eq!(TABLE.len(), 9);
        assert_eq!(ALL.len(), TABLE.len() + 2 * RUN_WIDE.len());
        assert_eq!(
            names(ALL[TABLE.len()..TABLE.len() + 6].iter().copied()),
            [
                "pg-lease",
                "pg-lease-fence",
                "mysql-lease",
                "mysql-lease-fence",
                "etcd-lease",
                "etcd-lease-fence"
            ]
        );
        assert!(Strategy::from_str("meteor", false).is_err());
    }

    #[test]
    fn a_run_wide_store_s_strategies_are_helped_as_they_were_written_out() {
        let help = |name: &str| {
            Strategy::from_str(name, false)
                .unwrap()
                .to_possible_value()
                .and_then(|v| v.get_help().map(ToString::to_string))
                .unwrap()
        };
        assert_eq!(
            help("mysql-lease"),
            "A leasehold lease from the MariaDB (MySQL) lease store; the fence is ignored"
        );
        assert_eq!(
            help("pg-lease-fence"),
            "A leasehold lease from the PostgreSQL lease store whose fence the resource checks in the same transaction as each write, as `lease-fence` does"
        );
        assert_eq!(
            help("etcd-lease"),
            "A leasehold lease from a three-member etcd cluster; the fence is ignored"
        );
        assert_eq!(
            help("naive"),
            "`SETNX` + `PEXPIRE` to lock, `DEL` to unlock"
        );
    }

    #[test]
    fn the_structure_answers_what_the_flat_names_meant() {
        let fenced = names(ALL.iter().copied().filter(|s| s.fenced()));
        assert_eq!(
            fenced[..6],
            [
                "lease-fence",
                "redlock-fence",
                "election-fence",
                "pg-lease-fence",
                "mysql-lease-fence",
                "etcd-lease-fence"
            ]
        );
        assert_eq!(fenced.len(), 3 + RUN_WIDE.len());
        let safe = names(ALL.iter().copied().filter(|s| s.safe_by_design()));
        assert_eq!(
            safe[..7],
            [
                "lease-fence",
                "redlock-fence",
                "election-fence",
                "db-guards",
                "pg-lease-fence",
                "mysql-lease-fence",
                "etcd-lease-fence"
            ]
        );
        assert_eq!(safe.len(), 4 + RUN_WIDE.len());
        assert!(Strategy::ELECTION.election() && !Strategy::ELECTION.single_lease());
        assert!(!Strategy::DB_GUARDS.locks() && !Strategy::DB_GUARDS.uses_redis());
        assert!(Strategy::NAIVE.uses_redis() && !Strategy::NAIVE.single_lease());
        assert!(Strategy::LEASE_FENCE.single_lease());
        assert!(Strategy::REDLOCK.redlock() && !Strategy::REDLOCK.single_lease());
        let pg = Store::run_wide(&postgres::STORE);
        let mysql = Store::run_wide(&mariadb::STORE);
        assert!(!lease_on(&postgres::STORE, false).uses_redis());
        assert_eq!(lease_on(&postgres::STORE, false).run_wide_store(), Some(pg));
        assert!(
            !lease_on(&mariadb::STORE, false).uses_redis()
                && lease_on(&mariadb::STORE, true).fenced()
        );
        assert_eq!(
            lease_on(&mariadb::STORE, false).run_wide_store(),
            Some(mysql)
        );
        assert_eq!(
            lease_on(&etcd::STORE, true).run_wide_store(),
            Some(Store::run_wide(&etcd::STORE))
        );
        assert_eq!(Strategy::LEASE.run_wide_store(), None);
        // Every run-wide store's two strategies are leases on it, the second fenced.
        for store in RUN_WIDE {
            let [lease, fenced] = store
                .strategies
                .map(|n| Strategy::from_str(n, false).unwrap());
            assert_eq!(
                (lease, fenced),
                (lease_on(store, false), lease_on(store, true))
            );
            assert!(lease.locks() && !lease.safe_by_design() && fenced.safe_by_design());
        }
    }
}
