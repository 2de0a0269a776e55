//! The signal that tells a holder its lease is gone.
//!
//! Promise: it fires once, with the first reason, and every clone and child token sees it. Limit: it
//! cannot stop code that is already running; the holder must look (`select!` on
//! [`LostSignal::fired`]) and stop.

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

use crate::error::LostReason;

/// Fires once when the lease stops being safe to act on. Clone it into the task doing the work and
/// `select!` on [`fired`](Self::fired).
#[derive(Debug, Clone)]
pub struct LostSignal {
    /// What waiters block on; cancelled once, after `reason` is set.
    token: CancellationToken,
    /// Set before `token` is cancelled, so a woken `fired()` always finds it.
    reason: Arc<OnceLock<LostReason>>,
}

impl LostSignal {
    pub(crate) fn new() -> Self {
        LostSignal {
            token: CancellationToken::new(),
            reason: Arc::new(OnceLock::new()),
        }
    }

    /// Fires with `reason` unless it already fired; `true` if this call fired it.
    pub(crate) fn fire(&self, reason: LostReason) -> bool {
        if self.reason.set(reason).is_ok() {
            self.token.cancel();
            true
        } else {
            false
        }
    }

    /// Completes when the lease is lost, with the reason.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping the future loses nothing; call it again to keep waiting.
    pub async fn fired(&self) -> LostReason {
        self.token.cancelled().await;
        self.reason
            .get()
            .copied()
            .unwrap_or(LostReason::DeadlinePassed)
    }

    /// Whether the lease has been lost.
    pub fn is_fired(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The reason, once fired.
    pub fn reason(&self) -> Option<LostReason> {
        self.reason.get().copied()
    }

    /// A child cancellation token that is cancelled when the lease is lost, for code that already
    /// speaks `tokio_util`.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.token.child_token()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_signal_fires_once_with_its_first_reason() {
        let s = LostSignal::new();
        let child = s.cancellation_token();
        let waiter = tokio::spawn({
            let s = s.clone();
            async move { s.fired().await }
        });
        assert!(!s.is_fired() && s.reason().is_none());
        assert!(s.fire(LostReason::NotOurs));
        assert!(!s.fire(LostReason::DeadlinePassed));
        assert_eq!(waiter.await.unwrap(), LostReason::NotOurs);
        assert!(child.is_cancelled());
        assert_eq!(s.reason(), Some(LostReason::NotOurs));
    }
}
