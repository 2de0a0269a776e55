//! leasehold's proving ground: everything that shows, checks or measures what the `leasehold` crate
//! promises, against real servers.
//!
//! | module | what it does |
//! |---|---|
//! | [`demo`] | tells the story live, scene by scene: naive locks failing, a paused holder writing stale data, fencing refusing it, database guards needing no lock |
//! | [`verify`] | Jepsen in miniature: workloads × injected faults × strategies, invariant violations counted from the recorded history |
//! | [`bench`](mod@bench) | the figures users compare locks on, each against a baseline measured in the same run |
//!
//! Beside them, `psql` (private) writes from outside Rust, through the `psql` program and the SQL
//! function `leasehold_fence`, for the demo's scene 4 and `verify --fenced-writer psql`.
//!
//! The `leasehold` binary is a thin layer over these.
#![forbid(unsafe_code)]

pub mod bench;
pub mod demo;
mod psql;
pub mod verify;
