//! Leases on Redis: mutual exclusion for **efficiency**, with a fencing token for the resource.
//!
//! Promise: while no process pauses past its deadline and Redis keeps its data, at most one holder has
//! a lease name at a time; every new holder gets a strictly larger [`Fence`](crate::Fence), even when
//! Redis lost the keys; a holder is told (the [`LostSignal`]) as soon as its lease is no longer safe.
//! Limit: a process pause longer than the lease, or a failover before the lock write replicated, gives
//! two holders. Nothing in Redis prevents it. If double execution would corrupt data, fence or
//! constrain at the resource ([`crate::fence`], [`crate::idempotency`], [`crate::state`]).
//!
//! The fence is `max(previous + 1, Redis server time in µs)`. It survives a restart without
//! persistence or a failover to a replica that missed the last write **as long as the new server's
//! clock is not behind the old one's by more than the time the restart or failover took** (seconds in
//! practice; keep server clocks NTP-synchronised and never step them back).
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
//! Layout: [`options`] (validated per-lease settings), [`client`] (connection, acquire, waiting,
//! inspect), [`guard`] (the held [`Lease`] and its [`LostSignal`]), [`metrics`] (metric names),
//! `keys` (hash-tagged key names), `scripts` (one `.lua` file per script, each behind one typed
//! function), `watchdog` (one renewal scheduler per client), `waiters` (one contender per name),
//! `conn` (shared and dedicated connections, round-trip counting).

pub mod client;
mod conn;
pub mod guard;
mod keys;
pub mod metrics;
pub mod options;
mod scripts;
mod waiters;
mod watchdog;

pub use client::{ForcedRelease, LeaseClient, LeaseClientBuilder, LeaseInfo};
pub use guard::{Lease, LostSignal};
pub use keys::{LeaseKeys, MAX_NAME_LEN};
pub use options::{LeaseOptions, LeaseOptionsBuilder, ReplicaPolicy};
