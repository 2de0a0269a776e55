//! The Redis family's own options, which the generic builder carries unread
//! ([`StoreOptions`](crate::lease::store::contract::StoreOptions)) to whichever store reads them.
//!
//! Promise: when no Redis options were given, the stores of the family read the defaults (eviction
//! refused at connect); options given are read by every store of the family (one server, Sentinel,
//! Cluster, Redlock) at its connect.
//!
//! Limit: a store of another family ignores them; nothing warns that they were given in vain.

use crate::lease::store::contract::Settings;

/// The Redis family's own options, handed to
/// [`LeaseClientBuilder::store_options`](crate::LeaseClientBuilder::store_options); other stores
/// ignore them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Accept a Redis that may evict lease keys under memory pressure (`maxmemory` set with a
    /// `maxmemory-policy` other than `noeviction`), which is refused at connect by default: an
    /// evicted lock key lets a second holder in while the first still works. With this set,
    /// leasehold warns once, keeps watching the policy, and reports a lease whose key was evicted as
    /// lost ([`LostReason::Evicted`](crate::LostReason::Evicted)) at its next renewal. Use fenced
    /// writes on such a Redis.
    pub allow_eviction: bool,
    /// Send every request on the one multiplexed connection. By default a client of one server
    /// (`redis://`, without TLS or RESP3) sends its single requests (the scripts of an acquire, a
    /// release, a renewal) on up to eight direct connections beside it, which cost less client
    /// CPU and latency than a multiplexed connection's hand-off to its own task; set this for a
    /// server that limits connections per client tightly.
    pub multiplexed_only: bool,
}

impl RedisOptions {
    /// Sets [`allow_eviction`](Self::allow_eviction).
    #[must_use]
    pub const fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Sets [`multiplexed_only`](Self::multiplexed_only).
    #[must_use]
    pub const fn multiplexed_only(mut self, only: bool) -> Self {
        self.multiplexed_only = only;
        self
    }

    /// The options `settings` carry (the defaults when none were given).
    pub(crate) fn of(settings: &Settings) -> Self {
        settings.options.get::<Self>().copied().unwrap_or_default()
    }
}
