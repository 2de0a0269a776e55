//! A model of leasehold's Redis lease protocol: the server's keys, the scripts' effects, the clients
//! that send them and the faults around them, checked exhaustively for small bounds with
//! [stateright], and tied to the scripts the library ships by a model-based test on a real
//! redis-server.
//!
//! Promise: within the bounds `checker::Bounds` states (clients, names, clock steps, faults), every
//! reachable state keeps the properties `checker` lists, or the checker prints the path to the one
//! that does not; and `scripts` answers as the real scripts do on every sequence the model-based
//! test draws. Limit: a model, not a proof of the code: what it leaves out (the PostgreSQL, MariaDB
//! and etcd stores, real-time bounds, Sentinel and Cluster routing, the client's watchdog and
//! clock estimate) is listed in docs/verification.md.
//!
//! # Layout
//!
//! - [`keyspace`]: a Redis keyspace in memory (the commands the scripts send, Redis's expiry rule).
//! - [`scripts`]: each `.lua` script transcribed over a keyspace, with the same arguments and
//!   replies, and the [`scripts::Mutation`]s that break the protocol on purpose.
//! - [`checker`]: the stateright model: clients, a fenced resource, the clock, a pause, a restart
//!   that loses writes, a failover to a replica that missed the last writes; the properties.
#![forbid(unsafe_code)]

pub mod checker;
pub mod keyspace;
pub mod scripts;
