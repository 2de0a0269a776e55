//! The one error type of the crate. Every variant says, in the caller's terms, what went wrong, and
//! [`Error::is_retryable`] says whether trying again can help.

use std::time::Duration;

use crate::fence::Fence;

/// Result with leasehold's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The step during which a store or resource failed; carried by [`Error::Redis`], [`Error::Timeout`]
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
}

impl std::fmt::Display for LostReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LostReason::DeadlinePassed => "its deadline passed without a successful renewal",
            LostReason::NotOurs => {
                "the store no longer holds our token (expired, force-released, or lost in a failover)"
            }
            LostReason::MaxHoldReached => "the maximum hold time was reached",
        })
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
    /// Redis could not be reached or answered with an error (feature `redis`).
    #[cfg(feature = "redis")]
    #[error("redis failed during {phase}: {source}")]
    Redis {
        /// What we were doing.
        phase: Phase,
        /// The driver's error.
        #[source]
        source: redis::RedisError,
    },
    /// etcd could not be reached or answered with an error.
    #[cfg(feature = "etcd")]
    #[error(
        "etcd failed during {phase}: {}",
        crate::lease::store::etcd::errors::describe(source)
    )]
    Etcd {
        /// What we were doing.
        phase: Phase,
        /// The driver's error.
        #[source]
        source: etcd_client::Error,
    },
    /// The PostgreSQL lease store could not reach the database or got an error from it.
    #[cfg(feature = "postgres")]
    #[error("postgres lease store failed during {phase}: {source}")]
    Postgres {
        /// What we were doing.
        phase: Phase,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
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
    /// released again). A "busy" or "not ours" from a majority is not this error.
    #[error("redlock {phase}: only {answered} of {nodes} Redis masters answered ({needed} needed for a majority){}; check that a majority of the masters are up and reachable", source.as_ref().map(|e| format!("; first failure: {e}")).unwrap_or_default())]
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
    /// The database failed (feature `postgres` or `sqlite`).
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    #[error("database error: {0}")]
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
            #[cfg(feature = "redis")]
            Error::Redis { source, .. } => {
                source.is_io_error()
                    || source.is_timeout()
                    || source.is_connection_dropped()
                    || source.is_connection_refusal()
                    || source.is_cluster_error()
                    || is_slot_moving(source)
            }
            #[cfg(feature = "etcd")]
            Error::Etcd { source, .. } => crate::lease::store::etcd::errors::is_transient(source),
            #[cfg(any(feature = "postgres", feature = "sqlite"))]
            Error::Database(e) => {
                matches!(
                    e,
                    sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed
                ) || is_serialization_failure(e)
            }
            #[cfg(feature = "postgres")]
            Error::Postgres { source, .. } => {
                is_postgres_unreachable(source) || is_serialization_failure(source)
            }
            Error::LeaseLost { .. }
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
            // Redis answered with an error, or not at all: either way it is failing us.
            Error::Timeout { .. } | Error::NotReplicated { .. } | Error::NoQuorum { .. } => true,
            #[cfg(feature = "redis")]
            Error::Redis { .. } => true,
            #[cfg(feature = "etcd")]
            Error::Etcd { .. } => true,
            #[cfg(any(feature = "postgres", feature = "sqlite"))]
            Error::Database(e) => matches!(
                e,
                sqlx::Error::Io(_)
                    | sqlx::Error::PoolTimedOut
                    | sqlx::Error::PoolClosed
                    | sqlx::Error::Tls(_)
            ),
            // A statement the server refused (a constraint, a permission) is an answer, not an
            // outage.
            #[cfg(feature = "postgres")]
            Error::Postgres { phase, source } => {
                *phase == Phase::Connect || is_postgres_unreachable(source)
            }
            _ => false,
        }
    }

    // A build with no store and no database feature has nothing left to validate.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", feature = "sqlite")),
        allow(dead_code)
    )]
    pub(crate) fn invalid(what: &'static str, why: impl Into<String>) -> Self {
        Error::Invalid {
            what,
            why: why.into(),
        }
    }

    #[cfg(feature = "redis")]
    pub(crate) fn redis(phase: Phase) -> impl FnOnce(redis::RedisError) -> Self {
        move |source| Error::Redis { phase, source }
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

/// The connection failed, or the server says it is shutting down, starting, out of connections or
/// resources (SQLSTATE classes 08, 53, 57P): a later attempt may get through.
#[cfg(feature = "postgres")]
fn is_postgres_unreachable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|c| c.starts_with("08") || c.starts_with("53") || c.starts_with("57P")),
        _ => false,
    }
}

/// Serialization failures and deadlocks (PostgreSQL 40001/40P01, SQLite BUSY/LOCKED) are safe to retry:
/// the database rolled the whole transaction back.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn is_serialization_failure(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => matches!(
            db.code().as_deref(),
            Some("40001") | Some("40P01") | Some("5") | Some("6") | Some("517") | Some("262")
        ),
        _ => false,
    }
}

/// A cluster slot is being migrated and the request touches keys on both sides: `TRYAGAIN` (the
/// lease scripts declare a key that never exists so that this comes before they run), or a script
/// that reached a key the node no longer holds ("Script attempted to access a non local key").
/// Send it again shortly.
#[cfg(feature = "redis")]
pub(crate) fn is_slot_moving(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
        || e.to_string()
            .contains("attempted to access a non local key")
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
}
