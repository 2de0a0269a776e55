//! The one error type of the crate. Every variant says, in the caller's terms, what went wrong, and
//! [`Error::is_retryable`] says whether trying again can help.
//!
//! Promise: every failure of the crate is one [`Error`] variant, which keeps the underlying error as
//! its source and says whether a retry can help ([`Error::is_retryable`]) and whether the outcome is
//! unknown ([`Error::outcome_unknown`]).
//! Limit: the classification is about the operation that failed, not the lease: a retryable error
//! while holding says nothing about whether the lease is still held (its lost signal does).

use std::time::Duration;

use crate::fence::Fence;
use crate::lease::store::StoreKind;

/// Result with leasehold's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The step during which a store or resource failed; carried by [`Error::Store`], [`Error::Timeout`]
/// and the other store errors so that an operator knows whether a lease may have been taken
/// (acquire), may still be held (release) or may be about to be lost (renew).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Phase {
    /// Opening the connection (includes AUTH and TLS).
    Connect,
    /// Acquiring a lease.
    Acquire,
    /// Waiting for a busy lease to be released.
    Wait,
    /// Renewing a lease.
    Renew,
    /// Releasing a lease.
    Release,
    /// Waiting for replicas to acknowledge the lock write (`WAIT`).
    Replicate,
    /// Reading lease state (status, list).
    Inspect,
    /// A fenced write to a resource kept in Redis.
    FencedWrite,
    /// Writing a holder's note beside its lease (an election's leader record).
    Note,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Phase::Connect => "connect",
            Phase::Acquire => "acquire",
            Phase::Wait => "wait",
            Phase::Renew => "renew",
            Phase::Release => "release",
            Phase::Replicate => "replicate",
            Phase::Inspect => "inspect",
            Phase::FencedWrite => "fenced write",
            Phase::Note => "note",
        };
        f.write_str(s)
    }
}

/// Why a held lease stopped being ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LostReason {
    /// The holder's own deadline (measured from before the acquire was sent, minus drift) passed without
    /// a successful renewal. Redis may not have expired the key yet; it does not matter.
    DeadlinePassed,
    /// The store answered a renewal: the key no longer holds our token (it expired, was
    /// force-released, or was lost in a failover to a replica that never received it; someone else
    /// may hold it now).
    NotOurs,
    /// The configured maximum hold time was reached; renewal stopped on purpose.
    MaxHoldReached,
    /// The store answered a renewal that the key is gone, and the store evicted keys under memory
    /// pressure since the lease was taken (a Redis with an evicting `maxmemory-policy`, used with
    /// `allow_eviction`): someone else may have held the name meanwhile.
    Evicted,
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::DeadlinePassed => "its deadline passed without a successful renewal",
            LostReason::NotOurs => {
                "the store no longer holds our token (expired, force-released, or lost in a failover)"
            }
            LostReason::MaxHoldReached => "the maximum hold time was reached",
            LostReason::Evicted => {
                "the store evicted its key under memory pressure (an evicting maxmemory-policy); another holder may have had it meanwhile"
            }
        })
    }
}

/// What a store's failure means for the caller, as the store read its driver's error: whether
/// trying again may help and whether the store is failing us (the CLI's exit code 69) or answered
/// "no". Each store decides this for its own driver in its `errors.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum StoreFailure {
    /// No answer: the connection could not be opened, broke, or the request timed out inside the
    /// driver. Retrying may help; the store is unavailable.
    Unreachable,
    /// The store answered that it cannot serve the request now (a cluster slot moving, a leader
    /// election, a member down). Retrying shortly may help; the store is unavailable meanwhile.
    Transient,
    /// The store rolled the request's transaction back (a serialization failure, a deadlock).
    /// Retrying is safe; the store is up.
    Aborted,
    /// The store answered with an error that retrying will not fix, and is failing us (an error
    /// reply, a reply we cannot read, a connect that went wrong).
    Failing,
    /// The store refused this request (a constraint, a bad statement) and is otherwise up.
    Rejected,
}

impl StoreFailure {
    /// Whether the same call may succeed if retried.
    pub fn is_retryable(self) -> bool {
        matches!(
            self,
            StoreFailure::Unreachable | StoreFailure::Transient | StoreFailure::Aborted
        )
    }

    /// Whether the store is unreachable or failing (as opposed to having answered "no").
    pub fn is_unavailable(self) -> bool {
        matches!(
            self,
            StoreFailure::Unreachable | StoreFailure::Transient | StoreFailure::Failing
        )
    }
}

/// Everything that can go wrong in leasehold.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The lease is held by someone else and the caller chose not to wait (or no wait was left).
    #[error("lease `{name}` is busy{}; try later or wait longer", remaining.map(|d| format!(" (held for about {} ms more)", d.as_millis())).unwrap_or_default())]
    Busy {
        /// Lease name.
        name: String,
        /// How long the current holder's lease still runs, when Redis said.
        remaining: Option<Duration>,
    },
    /// Waited the full bound without getting the lease.
    #[error("gave up waiting for lease `{name}` after {} ms", waited.as_millis())]
    WaitTimeout {
        /// Lease name.
        name: String,
        /// How long we waited.
        waited: Duration,
    },
    /// The lease is no longer ours; anything done after this point may overlap with another holder.
    #[error("lease `{name}` was lost: {reason}")]
    LeaseLost {
        /// Lease name.
        name: String,
        /// Why.
        reason: LostReason,
    },
    /// A request got no answer within its time bound. Whether it took effect is unknown when
    /// [`Error::outcome_unknown`] says so (an acquire may have taken the lease, a release may have
    /// freed it, a fenced write may have committed).
    #[error("{phase} timed out after {} ms{}", after.as_millis(), timeout_consequence(*phase))]
    Timeout {
        /// What we were doing.
        phase: Phase,
        /// How long we waited for the answer.
        after: Duration,
    },
    /// A lease store (or a Redis resource) could not be reached, or answered with an error. The
    /// store read its driver's error itself (`lease/store/<store>/errors.rs`) into `kind`; the
    /// driver's error is kept as `source` (downcast it, e.g. to `redis::RedisError`, for details).
    /// `Display` names the store and the phase only; the driver's error is the `source()`
    /// ([`Error::report`] prints both).
    #[error("{store} failed during {phase}")]
    Store {
        /// What we were doing.
        phase: Phase,
        /// Which kind of store.
        store: StoreKind,
        /// What the failure means for the caller: retry, outage, refusal.
        kind: StoreFailure,
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// `WAIT` after acquire returned fewer replica acknowledgements than asked for, under the
    /// fail-closed policy: the lease was released again.
    #[error("lease `{name}`: only {acked} of {wanted} replicas acknowledged the lock within the timeout; lease released (fail-closed)")]
    NotReplicated {
        /// Lease name.
        name: String,
        /// Replicas that acknowledged.
        acked: i64,
        /// Replicas asked for.
        wanted: i64,
    },
    /// A Redlock request did not get answers from a majority of its Redis masters, so it could
    /// neither succeed nor be refused (a lease it may have taken on the masters that answered was
    /// released again). A "busy" or "not ours" from a majority is not this error. The first
    /// master's failure is the `source()`, not part of `Display` ([`Error::report`] prints both).
    #[error("redlock {phase}: only {answered} of {nodes} Redis masters answered ({needed} needed for a majority; check that a majority of the masters are up and reachable)")]
    NoQuorum {
        /// What we were doing.
        phase: Phase,
        /// Masters that answered.
        answered: usize,
        /// Masters a majority needs.
        needed: usize,
        /// Masters configured.
        nodes: usize,
        /// The first master's failure, when one failed rather than stayed silent.
        source: Option<Box<Error>>,
    },
    /// The name is in use with another number of permits (1: as a lock) than this acquire asked for.
    /// Nothing was taken.
    #[error("lease `{name}` is in use with {}, not the {asked} asked for; everyone using a name must ask for the same number of permits (1 is a lock): ask for {in_use}, use another name, or wait until it is free", permits_phrase(*in_use))]
    PermitsInUse {
        /// Lease name.
        name: String,
        /// Permits this acquire asked for.
        asked: u32,
        /// Permits the name is in use with.
        in_use: u32,
    },
    /// The store or database refused our credentials (wrong password, unknown user, a certificate it
    /// does not accept). Retrying with the same credentials cannot help: the CLI's exit code 77.
    #[error("{store} refused the credentials during {phase}: {detail}; {fix}")]
    Unauthorized {
        /// What we were doing.
        phase: Phase,
        /// Which store, as its redacted location (`redis://127.0.0.1:6379`).
        store: String,
        /// What the store said.
        detail: String,
        /// What to do about it.
        fix: String,
    },
    /// The store answered that our user may not run a command or touch a key (Redis `NOPERM`, SQL
    /// `42501`). Retrying cannot help until the permission is granted: the CLI's exit code 77.
    #[error("permission denied during {phase}: {what}: {detail}; {fix}")]
    Denied {
        /// What we were doing.
        phase: Phase,
        /// The command, key or table that was refused (`TIME`, `{leasehold:jobs}:lock`).
        what: String,
        /// What the store said.
        detail: String,
        /// What to do about it.
        fix: String,
    },
    /// The store is set up in a way that breaks what a lease promises, or holds data under our
    /// names that we did not write: a replica instead of a primary, an evicting `maxmemory-policy`,
    /// a key of the wrong type. Nothing was written; retrying cannot help until the store is changed:
    /// the CLI's exit code 78.
    #[error("{what}: {found}; {fix}")]
    Misconfigured {
        /// What was checked (the node, the key).
        what: String,
        /// What was found there.
        found: String,
        /// How to repair it, or how to opt in knowingly.
        fix: String,
    },
    /// A configuration value or argument was refused before anything was sent.
    #[error("invalid {what}: {why}")]
    Invalid {
        /// What was wrong (`lease name`, `ttl`, `redis url`, `idempotency key`, ...).
        what: &'static str,
        /// Why, and what to do instead.
        why: String,
    },
    /// A resource refused a writer whose fence is older than one it already accepted.
    #[error("stale fence for resource `{resource}`: presented {presented}, resource already accepted {current}; this writer's lease was lost, do not retry with the same fence")]
    StaleFence {
        /// Resource name.
        resource: String,
        /// Fence the writer presented.
        presented: Fence,
        /// Highest fence the resource has accepted.
        current: Fence,
    },
    /// The database failed (feature `postgres`, `sqlite` or `mysql`). `Display` says only that;
    /// sqlx's error is the `source()` ([`Error::report`] prints both).
    #[cfg(feature = "sql")]
    #[error("database error")]
    Database(#[from] sqlx::Error),
    /// The idempotency key's first attempt is still running (HTTP 409 in the IETF draft's terms).
    #[error("idempotency key `{key}` is in progress in another attempt; retry later")]
    IdempotencyInProgress {
        /// The key.
        key: String,
    },
    /// The idempotency key was used before with a different request (HTTP 422 in the draft's terms).
    #[error("idempotency key `{key}` was already used with a different request; use a new key for a new request")]
    IdempotencyKeyReused {
        /// The key.
        key: String,
    },
    /// A row the operation needs does not exist.
    #[error("{entity} `{id}` not found")]
    NotFound {
        /// What kind of row.
        entity: &'static str,
        /// Its id.
        id: String,
    },
    /// A state transition that the declared table does not allow.
    #[error("illegal transition {from} -> {to}: not in the transition table")]
    IllegalTransition {
        /// From state.
        from: String,
        /// To state.
        to: String,
    },
    /// The row's state (or version) changed between read and conditional update.
    #[error("lost race on {entity} `{id}`: expected {expected}, found {actual}")]
    TransitionRace {
        /// What kind of row.
        entity: &'static str,
        /// Its id.
        id: String,
        /// State or version the caller expected.
        expected: String,
        /// What the row holds now.
        actual: String,
    },
    /// A bounded decrement would go below zero.
    #[error("insufficient quantity for `{id}`: requested {requested}, available {available}")]
    Insufficient {
        /// Item id.
        id: String,
        /// Requested quantity.
        requested: i64,
        /// Quantity left.
        available: i64,
    },
}

impl Error {
    /// Whether the same call may succeed if retried (after a pause or backoff): transient Redis or
    /// database failures, busy leases, in-progress idempotency keys, lost races. `false` for errors that
    /// retrying cannot fix (bad input, stale fence, reused key, illegal transition) and for a lost lease,
    /// after which the caller must re-acquire rather than retry the write.
    pub fn is_retryable(&self) -> bool {
        match self {
            Error::Busy { .. }
            | Error::WaitTimeout { .. }
            | Error::Timeout { .. }
            | Error::IdempotencyInProgress { .. }
            | Error::TransitionRace { .. }
            | Error::NotReplicated { .. }
            | Error::NoQuorum { .. } => true,
            Error::Store { kind, .. } => kind.is_retryable(),
            #[cfg(feature = "sql")]
            Error::Database(e) => {
                matches!(
                    e,
                    sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
                ) || is_serialization_failure(e)
            }
            Error::LeaseLost { .. }
            | Error::Unauthorized { .. }
            | Error::Denied { .. }
            | Error::Misconfigured { .. }
            | Error::PermitsInUse { .. }
            | Error::Invalid { .. }
            | Error::StaleFence { .. }
            | Error::IdempotencyKeyReused { .. }
            | Error::NotFound { .. }
            | Error::IllegalTransition { .. }
            | Error::Insufficient { .. } => false,
        }
    }

    /// Whether the failed call may still have taken effect: a timed-out acquire (the lease may be
    /// held, unrenewed, until its TTL passes), release (it may still be held until its TTL passes) or
    /// fenced write (it may have committed). Check before retrying anything that is not idempotent.
    pub fn outcome_unknown(&self) -> bool {
        matches!(
            self,
            Error::Timeout {
                phase: Phase::Acquire | Phase::Release | Phase::FencedWrite | Phase::Renew,
                ..
            } | Error::NoQuorum {
                phase: Phase::Acquire | Phase::Release | Phase::Renew,
                ..
            }
        )
    }

    /// Whether the store or database could not be reached or did not answer in time (as opposed to
    /// answering "no" or being asked wrongly): the CLI's exit code 69.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Timeout { .. } | Error::NotReplicated { .. } | Error::NoQuorum { .. } => true,
            Error::Store { kind, .. } => kind.is_unavailable(),
            #[cfg(feature = "sql")]
            Error::Database(e) => matches!(
                e,
                sqlx::Error::Io(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::Tls(_)
            ),
            _ => false,
        }
    }

    // A build with no store and no database feature has nothing left to validate.
    #[cfg_attr(not(any(feature = "redis", feature = "sql")), allow(dead_code))]
    pub(crate) fn invalid(what: &'static str, why: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            why: why.into(),
        }
    }

    /// A store's failure during `phase`, as the store classified it (for a store's `errors.rs`,
    /// in this crate or outside it).
    pub fn store(
        phase: Phase,
        store: StoreKind,
        kind: StoreFailure,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Error::Store {
            phase,
            store,
            kind,
            source: source.into(),
        }
    }

    /// This error and each cause under it, on one line joined by `: ` (what anyhow's `{:#}`
    /// prints): `Display` shows only this error's own message, and the cause (the driver's error
    /// of [`Error::Store`] and [`Error::Database`], the first failure of [`Error::NoQuorum`]) is
    /// its `source()`, so a reporter that walks the chain prints each cause once.
    ///
    /// ```
    /// use leasehold::{Error, Phase, StoreFailure, lease::StoreKind};
    /// let e = Error::store(
    ///     Phase::Connect,
    ///     StoreKind::new("toy"),
    ///     StoreFailure::Unreachable,
    ///     std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"),
    /// );
    /// assert_eq!(e.to_string(), "toy failed during connect");
    /// assert_eq!(e.report().to_string(), "toy failed during connect: connection refused");
    /// ```
    pub fn report(&self) -> Report<'_> {
        Report::new(self)
    }

    /// The driver's error of a store failure, if it is an `E` (`redis::RedisError`, ...).
    pub fn store_source<E: std::error::Error + 'static>(&self) -> Option<&E> {
        match self {
            Error::Store { source, .. } => source.downcast_ref::<E>(),
            _ => None,
        }
    }
}

/// An error and its causes on one line, joined by `: ` ([`Error::report`]; [`Report::new`] for any
/// error). A cause whose text the message before it already ends with is skipped: some drivers'
/// errors print their source in `Display` and return it from `source()` too.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a>(&'a (dyn std::error::Error + 'static));

impl<'a> Report<'a> {
    /// The report of `error` and its chain of `source()`s.
    pub fn new(error: &'a (dyn std::error::Error + 'static)) -> Self {
        Report(error)
    }
}

impl std::fmt::Display for Report<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut last = self.0.to_string();
        f.write_str(&last)?;
        let mut cause = self.0.source();
        while let Some(e) = cause {
            let text = e.to_string();
            if !text.is_empty() && !last.ends_with(&text) {
                write!(f, ": {text}")?;
            }
            last = text;
            cause = e.source();
        }
        Ok(())
    }
}

fn permits_phrase(n: u32) -> String {
    if n == 1 {
        "1 permit (as a lock)".to_owned()
    } else {
        format!("{n} permits")
    }
}

fn timeout_consequence(phase: Phase) -> &'static str {
    match phase {
        Phase::Acquire => {
            "; the acquire may have taken the lease: if it did, it expires unrenewed after its TTL"
        }
        Phase::Release => "; the lease may still be held until its TTL passes",
        Phase::Renew => {
            "; the renewal may or may not have extended the lease: its deadline is unchanged"
        }
        Phase::FencedWrite => "; the write may have committed: check before retrying",
        _ => "",
    }
}

/// Serialization failures and deadlocks (PostgreSQL 40001/40P01, SQLite BUSY/LOCKED) are safe to retry:
/// the database rolled the whole transaction back.
#[cfg(feature = "sql")]
pub(crate) fn is_serialization_failure(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => matches!(
            db.code().as_deref(),
            Some("40001") | Some("40P01") | Some("5") | Some("6") | Some("517") | Some("262")
        ),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_problem_and_the_remedy() {
        let busy = Error::Busy {
            name: "orders".into(),
            remaining: Some(Duration::from_millis(1500)),
        };
        assert_eq!(
            busy.to_string(),
            "lease `orders` is busy (held for about 1500 ms more); try later or wait longer"
        );
        assert!(busy.is_retryable());
        let stale = Error::StaleFence {
            resource: "ledger".into(),
            presented: Fence::new(3),
            current: Fence::new(7),
        };
        assert!(stale.to_string().contains("presented 3"));
        assert!(!stale.is_retryable());
        let mismatch = Error::PermitsInUse {
            name: "pool".into(),
            asked: 5,
            in_use: 3,
        };
        assert_eq!(
            mismatch.to_string(),
            "lease `pool` is in use with 3 permits, not the 5 asked for; everyone using a name must ask for the same number of permits (1 is a lock): ask for 3, use another name, or wait until it is free"
        );
        assert!(!mismatch.is_retryable() && !mismatch.is_unavailable());
    }

    /// Display or source, never both: walking the chain prints each cause once.
    #[test]
    fn a_cause_is_printed_once() {
        use std::error::Error as _;
        let io = || std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let store = Error::store(
            Phase::Acquire,
            StoreKind::new("toy"),
            StoreFailure::Unreachable,
            io(),
        );
        assert_eq!(store.to_string(), "toy failed during acquire");
        assert_eq!(store.source().unwrap().to_string(), "refused");
        assert_eq!(
            store.report().to_string(),
            "toy failed during acquire: refused"
        );
        let quorum = Error::NoQuorum {
            phase: Phase::Acquire,
            answered: 1,
            needed: 2,
            nodes: 3,
            source: Some(Box::new(store)),
        };
        assert!(!quorum.to_string().contains("refused"), "{quorum}");
        assert!(quorum
            .report()
            .to_string()
            .ends_with("reachable): toy failed during acquire: refused"));
        #[cfg(feature = "sql")]
        {
            let db = Error::from(sqlx::Error::Io(io()));
            assert_eq!(db.to_string(), "database error");
            // sqlx prints its cause in Display and returns it as source: printed once.
            assert_eq!(
                db.report().to_string(),
                "database error: error communicating with database: refused"
            );
        }
    }
}
