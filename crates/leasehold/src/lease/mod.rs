//! Leases: mutual exclusion for **efficiency**, with a fencing token for the resource, in the store
//! you choose by URL.
//!
//! Promise: while no process pauses past its deadline and the store keeps its data, at most one holder
//! has a lease name at a time (at most N for a semaphore, [`LeaseOptionsBuilder::permits`]); every new
//! holder gets a strictly larger [`Fence`](crate::Fence), by the store's own rule (Redis:
//! `max(previous + 1, server time in µs)`, so it survives a restart or failover that lost the keys, or
//! the retention passing, as long as the server's clock has not stepped back by more than that took;
//! PostgreSQL: a sequence drawn under the name's advisory lock, durable across a crash; etcd: the
//! cluster revision at which the holder became the owner); a holder is told (the [`LostSignal`]) as
//! soon as its lease is no longer safe, and ([`Lease::health`]) when it is at risk before that.
//! Limit: a process pause longer than the lease, or a failover before the lock write replicated, gives
//! two holders. No store prevents a pause. If double execution would corrupt data, fence or
//! constrain at the resource ([`crate::fence`], [`crate::idempotency`], [`crate::state`]).
//!
//! # Example: do a job under a lease, stop when it is lost
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::{Error, LeaseClient, LeaseOptions};
//!
//! # async fn job(_fence: leasehold::Fence) {}
//! # async fn example() -> leasehold::Result<()> {
//! let client = LeaseClient::connect("redis://127.0.0.1:6379/").await?;
//! let opts = LeaseOptions::builder().ttl(Duration::from_secs(10)).build()?;
//! let lease = match client.acquire("nightly-import", &opts, Duration::from_secs(30)).await {
//!     Ok(lease) => lease,
//!     Err(e @ Error::WaitTimeout { .. }) => return Err(e), // someone else is doing it
//!     Err(e) => return Err(e),
//! };
//! let lost = lease.lost();
//! tokio::select! {
//!     // Present the fence to the resource so that it refuses this writer once superseded.
//!     _ = job(lease.fence()) => lease.release().await?,
//!     reason = lost.fired() => eprintln!("stopped: lease lost ({reason})"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Layout
//!
//! From the top: [`client`] (the [`LeaseClient`]: acquire, waiting, the scoped
//! [`with_lease`](LeaseClient::with_lease), inspect, list, force-release) uses `waiters` (one contender
//! per name in this process), [`guard`] (the held [`Lease`]), `watchdog` (one renewal task per client,
//! and the narrow handle a lease keeps), `state` (what a held lease shares with the watchdog),
//! [`signal`] (the [`LostSignal`], and the [`HealthWatch`] that says a lease is
//! [`Suspect`](LeaseHealth::Suspect) before it is lost), `clock` (the store's clock rate, learned
//! from the store's time in its replies), and [`store`] (where leases live: the one trait every store
//! implements, and the stores: `store::redis`, the Redis family (one server, Sentinel, Cluster, and
//! Redlock over several independent masters, opened with [`LeaseClient::redlock`]),
//! `store::postgres`, `store::mysql` and `store::etcd`; `docs/stores.md` compares them). [`options`] and `names` say what is accepted;
//! [`metrics`] names what is measured. `recorded` pairs a held lease with the typed record its
//! holder keeps beside it (its note): what an election's leader, a scheduled slot's run and a
//! [`holder`] label share (the codec, the rule matching a record to the current holder, the clock).

// With no store compiled in, the core is still there (and documented) but nothing constructs what
// only a store builds.
#![cfg_attr(
    not(any(
        feature = "redis",
        feature = "postgres",
        feature = "mysql",
        feature = "etcd"
    )),
    allow(dead_code, unused_variables)
)]

pub mod client;
mod clock;
mod glob;
pub mod guard;
pub mod holder;
pub mod metrics;
pub(crate) mod names;
pub mod options;
pub(crate) mod recorded;
pub mod signal;
pub(crate) mod state;
pub mod store;
mod waiters;
mod watchdog;

pub use client::{LeaseClient, LeaseClientBuilder};
pub use glob::Glob;
pub use guard::Lease;
pub use names::{check_name, check_pattern, check_prefix, MAX_NAME_LEN};
pub use options::{LeaseOptions, LeaseOptionsBuilder, ReplicaPolicy};
pub use signal::{HealthWatch, LeaseHealth, LostSignal, Stop, SuspectReason};
pub use state::HOLDER_EVENTS;
pub use store::{lease_schemes, ForcedRelease, HolderInfo, LeaseInfo, StoreKind};
