//! Where a lease lives: the contract every store keeps ([`contract`]), the registry that picks a
//! store by URL scheme (`registry`), and one folder per store, each with the same floor plan
//! (`docs/architecture.md`, "Adding a store").
//!
//! A store answers the few questions the store-independent machinery asks
//! (take, wait for a turn, renew, release, force-release, inspect, list) and owns the rule that makes
//! its fence monotonic; everything else (the holder's deadline on its own clock, the watchdog, the lost
//! signal, the maximum hold, the in-process queue, cancel safety, metrics) lives once, above it.
//!
//! Promise: every store keeps these contracts, and the lease tests run against each.
//! * A grant's fence is strictly greater than every fence an earlier holder of the name could have
//!   acted on (each store says in its docs what that rests on).
//! * `since` in a grant is a local instant no later than the moment the store started the lease's
//!   TTL, so a deadline counted from it is never later than the store's own expiry (up to clock rate
//!   drift, which the drift allowance covers).
//! * renew and release act only while the store still holds the caller's token, and running either
//!   twice (a retry after a reconnect) has the effect of running it once.
//!
//! Limit: a store promises nothing about a holder that is paused past its deadline; fence the resource.

pub mod contract;
#[cfg(feature = "contract-suite")]
pub mod contract_suite;
mod registry;

#[cfg(feature = "etcd")]
pub(crate) mod etcd;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

pub use crate::lease::clock::ClockRate;
pub use contract::*;
pub(crate) use registry::open;
pub use registry::{built_with, lease_schemes, Scheme, KNOWN_SCHEMES};

/// A [`Request`] that owns its parts, for a task that outlives the caller's borrow (an abandon
/// sent in the background, an acquire run in a task of its own).
#[derive(Debug, Clone)]
pub(crate) struct OwnedRequest {
    name: String,
    token: String,
    opts: crate::lease::LeaseOptions,
    wait: std::time::Duration,
    step: u32,
}

impl OwnedRequest {
    /// A copy of `req`.
    pub(crate) fn of(req: &Request<'_>) -> Self {
        OwnedRequest {
            name: req.name.to_owned(),
            token: req.token.to_owned(),
            opts: req.opts.clone(),
            wait: req.wait,
            step: req.step,
        }
    }

    /// The request, borrowed back.
    pub(crate) fn get(&self) -> Request<'_> {
        Request {
            name: &self.name,
            token: &self.token,
            opts: &self.opts,
            wait: self.wait,
            step: self.step,
        }
    }
}

/// The outcome of a batch of one lease (a renewal, a release): its one item's, `Ok(false)` when
/// the store answered none.
pub(crate) fn only(batch: crate::Result<Vec<crate::Result<bool>>>) -> crate::Result<bool> {
    batch.and_then(|mut v| v.pop().unwrap_or(Ok(false)))
}
