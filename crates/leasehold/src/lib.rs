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
//! Promise: a lease done right, for efficiency (a unique token, renewal and release only by its
//! holder, fences that never go backwards, a signal when it is lost); the guards at the resource,
//! for correctness; and an [`Error`] that says whether retrying is safe. The table below says what
//! each module gives and what it does not promise.
//!
//! Limit: no lease here, on any store, keeps two holders apart under a process pause longer than
//! its TTL or a failover that loses its write; only a guard at the resource that checks the fence
//! (or an idempotency key, or a conditional update) does. The crate speaks only to the stores and
//! databases compiled in (see Features).
//!
//! # Layout: which module answers which problem
//!
//! | problem | module | what it gives | what it does NOT promise |
//! |---|---|---|---|
//! | one leader among replicas | [`election`] | [`election::Election`]: campaign, leader, observe, proclaim, resign; the term is a fence | one leader under process pauses or failover (the term, checked at the resource, is what holds) |
//! | a scheduled job once per slot | [`schedule`] | [`schedule::scheduler::Scheduler`] (cron expressions and intervals in IANA zones, reckoned on the store's clock, with deadline, catch-up, overlap, retry and pause policies), [`schedule::Schedule`] (nearest-slot mapping for jobs fired elsewhere, late firings kept in their own slot), [`schedule::claim`], a record per slot ([`schedule::history`]), [`schedule::record_in`] for the job's own transaction | once per slot when a run outlives its lease or the store forgets the record (the database record is what holds); agreement on a slot on a store without a clock (etcd, Redlock) |
//! | mutual exclusion (efficiency) | [`lease`] | [`LeaseClient`], [`Lease`]: Redis leases with fencing tokens, watchdog renewal, a lost-lease signal, waiting without retry storms, metrics | exclusion under process pauses or failover |
//! | correctness under a lost lease | [`fence`] | fenced writes: the resource keeps the highest fence it accepted and refuses older writers (PostgreSQL, SQLite, Redis) | anything about writers that do not present a fence |
//! | idempotency | [`idempotency`] | idempotency keys: one effect per key, stored response replayed, recovery points for multi-step work | dedup on the far side of an external call that ignores the derived key |
//! | duplicated messages | [`inbox`] | message ids recorded in the same transaction as the business write | ordering |
//! | state flow, data consistency | [`state`] | declared transition tables, conditional updates, bounded decrements | business rules you did not declare |
//! | fault recovery | [`Error`] | every error says whether retrying is safe ([`Error::is_retryable`]) | compensation: that is yours to design |
//!
//! [`db`] holds what the SQL modules share: the database handle (PostgreSQL, MariaDB/MySQL or SQLite) and the
//! migrations leasehold ships (tables prefixed `leasehold_`).
//!
//! The `leasehold` command-line tool (crate `leasehold-cli`) and the demo, fault-injection verifier and
//! benchmarks (crate `leasehold-lab`) are thin layers over this crate.
//!
//! # Features
//!
//! Each store and each database is a cargo feature, so an application compiles only the clients it
//! uses. The default set is `redis`, `tls`, `postgres`, `sqlite` and `mysql`: everything above but
//! etcd.
//!
//! | feature | default | what it brings |
//! |---|---|---|
//! | `redis` | on | [`lease`] ([`LeaseClient`], [`Lease`]) and the fenced write to a value kept in Redis ([`fence::redis_fenced_set`]); compiles the `redis` client |
//! | `postgres` | on | [`db`], [`fence::check`], [`idempotency`], [`inbox`] and [`state`] on PostgreSQL; compiles sqlx's PostgreSQL driver |
//! | `sqlite` | on | the same on SQLite; compiles sqlx's SQLite driver and the SQLite library it bundles |
//! | `mysql` | on | leases on MariaDB/MySQL (`mysql://`, `mariadb://`) and the same guards there; compiles sqlx's MySQL driver |
//! | `tls` | on | TLS to Redis (`rediss://`, `rediss-sentinel://`, `rediss-cluster://`, Redlock masters on `rediss://`) with rustls; without it such a URL is refused with [`Error::Invalid`] naming this feature |
//! | `etcd` | off | leases on etcd (`etcd://`, `etcds://`): consensus-backed, the fence from etcd revisions; compiles the `etcd-client` gRPC client (from crates.io its build runs `protoc`: Debian `protobuf-compiler`, or `PROTOC` naming one; this repository's workspace points it at the one `protoc-bin-vendored` ships) |
//! | `contract-suite` | off | `lease::store::contract_suite` and `contract_suite!`: the lease contract as tests a store of your own runs against itself |
//!
//! The SQL modules need `postgres`, `sqlite` or `mysql` (any one is enough) and speak only to the backends
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
// docs.rs builds with `--cfg docsrs` (see Cargo.toml): every item then shows the features it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod db;
pub mod election;
mod error;
pub mod fence;
#[cfg(feature = "sql")]
pub mod idempotency;
#[cfg(feature = "sql")]
pub mod inbox;
pub mod lease;
pub mod schedule;
#[cfg(feature = "sql")]
pub mod state;
pub mod url;

/// The repository README's code examples, compiled and type-checked as doctests.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeExamples;

/// This crate's README (its registry page) and its example, compiled as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct CrateReadmeExamples;

/// The `redis` crate leasehold is built with, so that an application that hands leasehold its own
/// clients or connections, or matches on [`redis::RedisError`], uses the same version.
#[cfg(feature = "redis")]
pub use redis;
/// The `sqlx` crate leasehold is built with, so that an application that hands leasehold its pool
/// (`db::Database::from_postgres` / `from_sqlite` / `from_mysql`) or matches on [`sqlx::Error`] uses the same version.
#[cfg(feature = "sql")]
pub use sqlx;

pub use error::{Error, LostReason, Phase, Report, Result, StoreFailure};
pub use fence::Fence;
pub use lease::{
    HealthWatch, Lease, LeaseClient, LeaseClientBuilder, LeaseHealth, LeaseOptions, LostSignal,
    ReplicaPolicy, Stop, StoreKind, SuspectReason,
};
