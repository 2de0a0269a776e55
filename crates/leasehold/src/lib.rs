//! leasehold: coordination that is honest about what a lock can and cannot promise.
//!
//! A Redis lock is a **lease**: it keeps two workers from doing the same job at the same time *most of
//! the time*. A process pause longer than the lease, or a Redis failover, gives two holders, and nothing
//! in Redis can prevent that. So leasehold ships both halves:
//!
//! * the lease, done right (unique token, TTL, compare-and-delete release, compare-and-renew, a fencing
//!   token that never goes backwards, a lost-lease signal), for **efficiency**;
//! * the guards that live at the resource (fenced writes, idempotency keys, inbox dedup, conditional
//!   updates, state machines), for **correctness**.
//!
//! # Layout: which module answers which problem
//!
//! | problem | module | what it gives | what it does NOT promise |
//! |---|---|---|---|
//! | mutual exclusion (efficiency) | [`lease`] | [`LeaseClient`], [`Lease`]: Redis leases with fencing tokens, watchdog renewal, a lost-lease signal, waiting without retry storms, metrics | exclusion under process pauses or failover |
//! | correctness under a lost lease | [`fence`] | fenced writes: the resource keeps the highest fence it accepted and refuses older writers (PostgreSQL, SQLite, Redis) | anything about writers that do not present a fence |
//! | idempotency | [`idempotency`] | idempotency keys: one effect per key, stored response replayed, recovery points for multi-step work | dedup on the far side of an external call that ignores the derived key |
//! | duplicated messages | [`inbox`] | message ids recorded in the same transaction as the business write | ordering |
//! | state flow, data consistency | [`state`] | declared transition tables, conditional updates, bounded decrements | business rules you did not declare |
//! | fault recovery | [`Error`] | every error says whether retrying is safe ([`Error::is_retryable`]) | compensation: that is yours to design |
//!
//! [`db`] holds what the SQL modules share: the database handle (PostgreSQL or SQLite) and the
//! migrations leasehold ships (tables prefixed `leasehold_`).
//!
//! The `leasehold` command-line tool (crate `leasehold-cli`) and the demo, fault-injection verifier and
//! benchmarks (crate `leasehold-lab`) are thin layers over this crate.
//!
//! # Features
//!
//! Each store and each database is a cargo feature, so an application compiles only the clients it
//! uses. The default set is `redis`, `postgres` and `sqlite`: everything above.
//!
//! | feature | default | what it brings |
//! |---|---|---|
//! | `redis` | on | [`lease`] ([`LeaseClient`], [`Lease`]) and the fenced write to a value kept in Redis ([`fence::redis_fenced_set`]); compiles the `redis` client |
//! | `postgres` | on | [`db`], [`fence::check`], [`idempotency`], [`inbox`] and [`state`] on PostgreSQL; compiles sqlx's PostgreSQL driver |
//! | `sqlite` | on | the same on SQLite; compiles sqlx's SQLite driver and the SQLite library it bundles |
//! | `etcd` | off | reserved for leases on etcd; nothing behind it yet |
//!
//! The SQL modules need `postgres` or `sqlite` (either one is enough) and speak only to the backends
//! compiled in: [`db::Database::connect`] with a URL for a backend left out fails with
//! [`Error::Invalid`] naming the feature to enable. [`Fence`] and [`Error`] are there with any set.
//! An application that wants only Redis leases:
//!
//! ```toml
//! [dependencies]
//! leasehold = { version = "0.1", default-features = false, features = ["redis"] }
//! ```
#![forbid(unsafe_code)]
#![deny(missing_docs)]

pub mod db;
mod error;
pub mod fence;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod idempotency;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod inbox;
pub mod lease;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod state;
pub mod url;

/// The README's code examples, compiled and type-checked as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

pub use error::{Error, LostReason, Phase, Result};
pub use fence::Fence;
pub use lease::{
    Lease, LeaseClient, LeaseClientBuilder, LeaseOptions, LostSignal, ReplicaPolicy, StoreKind,
};
