//! The held lease and the signal that tells its holder the lease is gone.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::{LostReason, Result};
use crate::fence::Fence;

/// A held lease. Renewed in the background while alive; [`release`](Self::release) it explicitly.
/// Dropping it without release hands the release to a background task (Drop does no I/O in place).
#[must_use = "a lease is released when dropped; hold it for the critical section"]
#[derive(Debug)]
pub struct Lease {
    // Filled in by the lease implementation.
}

/// Fires once when the lease stops being safe to act on. Clone it into the task doing the work and
/// `select!` on [`fired`](Self::fired).
#[derive(Debug, Clone)]
pub struct LostSignal {
    token: CancellationToken,
}

impl LostSignal {
    /// Completes when the lease is lost, with the reason. Cancel safe.
    pub async fn fired(&self) -> LostReason {
        self.token.cancelled().await;
        todo!("lease implementation")
    }

    /// Whether the lease has been lost.
    pub fn is_fired(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The reason, once fired.
    pub fn reason(&self) -> Option<LostReason> {
        todo!("lease implementation")
    }

    /// A child cancellation token that is cancelled when the lease is lost, for code that already
    /// speaks `tokio_util`.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.token.child_token()
    }
}

impl Lease {
    /// The lease name.
    pub fn name(&self) -> &str {
        todo!("lease implementation")
    }

    /// The fencing token to present to resources.
    pub fn fence(&self) -> Fence {
        todo!("lease implementation")
    }

    /// The random token stored in the lock key.
    pub fn token(&self) -> &str {
        todo!("lease implementation")
    }

    /// The lost-lease signal.
    pub fn lost(&self) -> LostSignal {
        todo!("lease implementation")
    }

    /// Safe time left by the holder's own deadline (zero once lost).
    pub fn remaining(&self) -> Duration {
        todo!("lease implementation")
    }

    /// Renews now (the watchdog does this on its own). [`crate::Error::LeaseLost`] when it is no longer
    /// ours.
    pub async fn renew(&self) -> Result<()> {
        todo!("lease implementation")
    }

    /// Releases: deletes the lock only if it still holds our token, then wakes one waiter.
    /// [`crate::Error::LeaseLost`] when it was already gone (expired, or force-released).
    pub async fn release(self) -> Result<()> {
        todo!("lease implementation")
    }
}
