//! The connection to Redis and the operations that are not tied to one held lease: acquire, inspect,
//! list, force-release.

use std::time::Duration;

use crate::error::Result;
use crate::fence::Fence;
use crate::lease::{Lease, LeaseKeys, LeaseOptions};

/// A handle to one Redis deployment for leases. Cheap to clone; clones share one multiplexed connection,
/// one watchdog, and one contender per lease name for all waiting tasks.
#[derive(Debug, Clone)]
pub struct LeaseClient {
    // Filled in by the lease implementation.
}

/// Builder for [`LeaseClient`].
#[derive(Debug, Clone)]
#[must_use]
pub struct LeaseClientBuilder {
    url: String,
    key_prefix: String,
}

/// What Redis says about one lease name (for `status` and `list`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct LeaseInfo {
    /// Lease name.
    pub name: String,
    /// The lock key.
    pub key: String,
    /// Whether a holder has it now.
    pub held: bool,
    /// Remaining TTL of the current holder, in milliseconds (`None` when free).
    pub ttl_ms: Option<u64>,
    /// The last fence issued for this name (`None` if never acquired since Redis last lost its data).
    pub fence: Option<Fence>,
}

/// Result of [`LeaseClient::force_release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ForcedRelease {
    /// Whether a holder was evicted.
    pub evicted: bool,
    /// The fence after the forced release: strictly above anything the evicted holder presented, so
    /// fenced resources refuse its later writes.
    pub fence: Fence,
}

impl LeaseClientBuilder {
    /// Key prefix (default `leasehold`): keys are `{<prefix>:<name>}:lock` and so on.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Connects (AUTH/ACL and TLS from the URL: `redis://user:pass@host:port/db`, `rediss://...`).
    /// A malformed URL is [`crate::Error::Invalid`]; an unreachable server is
    /// [`crate::Error::Redis`] with [`crate::Phase::Connect`].
    pub async fn connect(self) -> Result<LeaseClient> {
        let _ = (self.url, self.key_prefix);
        todo!("lease implementation")
    }
}

impl LeaseClient {
    /// Starts a builder for the Redis at `url`.
    pub fn builder(url: impl Into<String>) -> LeaseClientBuilder {
        LeaseClientBuilder {
            url: url.into(),
            key_prefix: "leasehold".to_owned(),
        }
    }

    /// Connects with the default settings.
    pub async fn connect(url: &str) -> Result<Self> {
        Self::builder(url).connect().await
    }

    /// Requests this client (all its clones) has sent to Redis so far, counting a pipeline or script as
    /// one. For benchmarks and tests of round trips per acquisition.
    pub fn round_trips(&self) -> u64 {
        todo!("lease implementation")
    }

    /// The Redis keys used for `name`.
    pub fn keys(&self, name: &str) -> Result<LeaseKeys> {
        let _ = name;
        todo!("lease implementation")
    }

    /// Tries once: the lease, or [`crate::Error::Busy`] with how long the holder's lease still runs.
    /// One round trip. Cancel safety: if cancelled after the request was sent, the lease may be taken
    /// and then expires after one TTL (it is never renewed).
    pub async fn try_acquire(&self, name: &str, opts: &LeaseOptions) -> Result<Lease> {
        let _ = (name, opts);
        todo!("lease implementation")
    }

    /// Waits up to `max_wait` for the lease (`Duration::ZERO` behaves like
    /// [`try_acquire`](Self::try_acquire)); [`crate::Error::WaitTimeout`] when the bound passes. Woken
    /// by releases, not by polling.
    pub async fn acquire(
        &self,
        name: &str,
        opts: &LeaseOptions,
        max_wait: Duration,
    ) -> Result<Lease> {
        let _ = (name, opts, max_wait);
        todo!("lease implementation")
    }

    /// Reads the state of `name` without touching it.
    pub async fn inspect(&self, name: &str) -> Result<LeaseInfo> {
        let _ = name;
        todo!("lease implementation")
    }

    /// Lists lease names under this client's prefix whose name matches the glob `pattern` (`*` for all).
    /// Uses `SCAN`, never `KEYS`.
    pub async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        let _ = pattern;
        todo!("lease implementation")
    }

    /// Operator's override, unsafe for the evicted holder by design: deletes the lock whoever holds it
    /// and advances the fence, so the evicted holder's renewal fails and its fenced writes are refused.
    pub async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        let _ = name;
        todo!("lease implementation")
    }
}
