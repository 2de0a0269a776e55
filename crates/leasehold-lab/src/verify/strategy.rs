//! How the workers coordinate: a strategy is a lock kind, the store the lock lives on, and whether
//! the resource checks the lease's fence; [`TABLE`] names each one the verifier runs.
//!
//! Limit: only the combinations in the table exist (a hand-made lock on PostgreSQL, or a fence
//! without a lease, means nothing here); a strategy is made by parsing its name or from the
//! constants below, never field by field.

use clap::builder::PossibleValue;

use super::store::Store;

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

impl Strategy {
    /// `naive`.
    pub const NAIVE: Self = on(Lock::Naive, Store::Redis, false);
    /// `ttl-del`.
    pub const TTL_DEL: Self = on(Lock::TtlDel, Store::Redis, false);
    /// `lease`.
    pub const LEASE: Self = on(Lock::Lease, Store::Redis, false);
    /// `lease-fence`.
    pub const LEASE_FENCE: Self = on(Lock::Lease, Store::Redis, true);
    /// `redlock`.
    pub const REDLOCK: Self = on(Lock::Redlock, Store::Redis, false);
    /// `redlock-fence`.
    pub const REDLOCK_FENCE: Self = on(Lock::Redlock, Store::Redis, true);
    /// `db-guards`.
    pub const DB_GUARDS: Self = Self {
        lock: Lock::Guards,
        store: None,
        fenced: false,
    };
    /// `pg-lease`.
    pub const PG_LEASE: Self = on(Lock::Lease, Store::Postgres, false);
    /// `pg-lease-fence`.
    pub const PG_LEASE_FENCE: Self = on(Lock::Lease, Store::Postgres, true);
    /// `election`.
    pub const ELECTION: Self = on(Lock::Election, Store::Redis, false);
    /// `election-fence`.
    pub const ELECTION_FENCE: Self = on(Lock::Election, Store::Redis, true);
    /// `mysql-lease`.
    pub const MYSQL_LEASE: Self = on(Lock::Lease, Store::MariaDb, false);
    /// `mysql-lease-fence`.
    pub const MYSQL_LEASE_FENCE: Self = on(Lock::Lease, Store::MariaDb, true);
    /// `etcd-lease`.
    pub const ETCD_LEASE: Self = on(Lock::Lease, Store::Etcd, false);
    /// `etcd-lease-fence`.
    pub const ETCD_LEASE_FENCE: Self = on(Lock::Lease, Store::Etcd, true);
}

/// Every strategy the verifier runs, in the order of its plan and its reports: the one place that
/// names them. A lease on a new store is two lines here (its unfenced and fenced forms) once the
/// store is in [`Store`].
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
    Entry {
        name: "pg-lease",
        strategy: Strategy::PG_LEASE,
        help: "A leasehold lease from the PostgreSQL lease store; the fence is ignored",
    },
    Entry {
        name: "pg-lease-fence",
        strategy: Strategy::PG_LEASE_FENCE,
        help: "A leasehold lease from the PostgreSQL lease store whose fence the resource checks in the same transaction as each write, as `lease-fence` does",
    },
    Entry {
        name: "mysql-lease",
        strategy: Strategy::MYSQL_LEASE,
        help: "A leasehold lease from the MariaDB (MySQL) lease store; the fence is ignored",
    },
    Entry {
        name: "mysql-lease-fence",
        strategy: Strategy::MYSQL_LEASE_FENCE,
        help: "A leasehold lease from the MariaDB (MySQL) lease store whose fence the resource checks in the same transaction as each write, as `lease-fence` does",
    },
    Entry {
        name: "etcd-lease",
        strategy: Strategy::ETCD_LEASE,
        help: "A leasehold lease from a three-member etcd cluster; the fence is ignored",
    },
    Entry {
        name: "etcd-lease-fence",
        strategy: Strategy::ETCD_LEASE_FENCE,
        help: "A leasehold lease from a three-member etcd cluster whose fence the resource checks in the same transaction as each write, as `lease-fence` does",
    },
];

/// [`TABLE`]'s strategies alone, for [`clap::ValueEnum::value_variants`].
const ALL: [Strategy; TABLE.len()] = {
    let mut all = [Strategy::DB_GUARDS; TABLE.len()];
    let mut i = 0;
    while i < TABLE.len() {
        all[i] = TABLE[i].strategy;
        i += 1;
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
        TABLE
            .iter()
            .find(|e| e.strategy == self)
            .map_or("?", |e| e.name)
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

    /// Whether the lock is a Redlock lease over three masters (else one deployment, or none).
    pub fn redlock(self) -> bool {
        self.lock == Lock::Redlock
    }

    /// Whether the lock is a leasehold lease on one Redis deployment, which is what speaks Sentinel
    /// and Cluster URLs (the hand-made locks speak to one `redis://` server only).
    pub fn single_lease(self) -> bool {
        self.lock == Lock::Lease && self.store == Some(Store::Redis)
    }

    /// Whether the lock is an election's leadership (its cells run the counter under a pause:
    /// an election is a lease, whose other faults are the lease's cells).
    pub fn election(self) -> bool {
        self.lock == Lock::Election
    }

    /// Whether the strategy talks to Redis at all.
    pub fn uses_redis(self) -> bool {
        self.store == Some(Store::Redis)
    }

    /// The lease store the harness runs once for the whole run, when the lock lives on one
    /// (PostgreSQL, MariaDB, etcd), rather than on the Redis deployment each cell starts.
    pub(crate) fn run_wide_store(self) -> Option<Store> {
        self.store.filter(|s| s.run_wide())
    }
}

impl clap::ValueEnum for Strategy {
    fn value_variants<'a>() -> &'a [Self] {
        &ALL
    }

    fn to_possible_value(&self) -> Option<PossibleValue> {
        let entry = TABLE.iter().find(|e| e.strategy == *self)?;
        Some(PossibleValue::new(entry.name).help(entry.help))
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

    use super::*;

    #[test]
    fn every_name_parses_back_to_its_strategy_and_names_are_unique() {
        for e in TABLE {
            assert_eq!(
                Strategy::from_str(e.name, false),
                Ok(e.strategy),
                "{}",
                e.name
            );
            assert_eq!(e.strategy.name(), e.name);
            assert_eq!(e.strategy.to_string(), e.name);
            assert_eq!(
                serde_json::to_value(e.strategy).unwrap(),
                serde_json::json!(e.name)
            );
            assert_eq!(TABLE.iter().filter(|o| o.strategy == e.strategy).count(), 1);
        }
        assert_eq!(ALL.len(), 15);
        assert!(Strategy::from_str("meteor", false).is_err());
    }

    #[test]
    fn the_structure_answers_what_the_flat_names_meant() {
        let fenced: Vec<&str> = TABLE
            .iter()
            .filter(|e| e.strategy.fenced())
            .map(|e| e.name)
            .collect();
        assert_eq!(
            fenced,
            [
                "lease-fence",
                "redlock-fence",
                "election-fence",
                "pg-lease-fence",
                "mysql-lease-fence",
                "etcd-lease-fence"
            ]
        );
        let safe: Vec<&str> = TABLE
            .iter()
            .filter(|e| e.strategy.safe_by_design())
            .map(|e| e.name)
            .collect();
        assert_eq!(
            safe,
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
        assert!(Strategy::ELECTION.election() && !Strategy::ELECTION.single_lease());
        assert!(!Strategy::DB_GUARDS.locks() && !Strategy::DB_GUARDS.uses_redis());
        assert!(Strategy::NAIVE.uses_redis() && !Strategy::NAIVE.single_lease());
        assert!(Strategy::LEASE_FENCE.single_lease());
        assert!(Strategy::REDLOCK.redlock() && !Strategy::REDLOCK.single_lease());
        assert!(!Strategy::PG_LEASE.uses_redis());
        assert_eq!(Strategy::PG_LEASE.run_wide_store(), Some(Store::Postgres));
        assert!(!Strategy::MYSQL_LEASE.uses_redis() && Strategy::MYSQL_LEASE_FENCE.fenced());
        assert_eq!(Strategy::MYSQL_LEASE.run_wide_store(), Some(Store::MariaDb));
        assert_eq!(
            Strategy::ETCD_LEASE_FENCE.run_wide_store(),
            Some(Store::Etcd)
        );
        assert_eq!(Strategy::LEASE.run_wide_store(), None);
    }
}
