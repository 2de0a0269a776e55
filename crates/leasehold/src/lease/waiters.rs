//! Waiting for a busy lease without retry storms: the tasks of one client that wait for the same name
//! queue behind one FIFO async mutex, so only the head of the queue talks to the store. The head waits
//! the store's way: on Redis it tries first (unless the name was busy last time), then joins the
//! name's queue in Redis and blocks on its own wake list until a release hands it the lease; a step blocks no longer than the holder's remaining TTL plus jitter, so
//! that an expiry (a crashed holder) is noticed too.
//!
//! Promise: the tasks of one client waiting for one name are served in the order they came, and only
//! the first of them talks to the store.
//! Limit: this queue orders the tasks of one client; across clients the store's queue decides (Redis:
//! arrival order). `try_acquire` does not queue, and on Redis it does not jump a non-empty queue either.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rand::RngExt;
use tokio::time::Instant;

/// Per-name queue state, guarded by the FIFO mutex.
#[derive(Debug, Default)]
pub(crate) struct Contender {
    /// Set by a head that got the lease: until about this instant the lock is held by a task of this
    /// client, so the next head can block on the wake list at once instead of asking first (one round
    /// trip fewer per hand-over). Taken (reset) by the next head.
    pub(crate) held_here_until: Option<Instant>,
}

/// The queues, one per name with waiters; entries vanish when no task holds or waits for them.
#[derive(Debug, Default)]
pub(crate) struct Contenders {
    queues: Mutex<HashMap<String, Weak<tokio::sync::Mutex<Contender>>>>,
}

impl Contenders {
    /// The queue for `name`, created on first use.
    pub(crate) fn queue(&self, name: &str) -> Arc<tokio::sync::Mutex<Contender>> {
        let mut map = self.queues.lock().expect("contenders lock");
        if let Some(q) = map.get(name).and_then(Weak::upgrade) {
            return q;
        }
        if map.len() >= 1024 {
            map.retain(|_, w| w.strong_count() > 0);
        }
        let q = Arc::new(tokio::sync::Mutex::new(Contender::default()));
        map.insert(name.to_owned(), Arc::downgrade(&q));
        q
    }
}

/// How long the head blocks on the wake list: the holder's remaining TTL (when known) plus up to 10%
/// (at least 2 ms, at most 250 ms) of jitter so that contenders of several processes do not all ask
/// at the same instant after an expiry; never past `left`.
pub(crate) fn block_for(holder_remaining: Option<Duration>, left: Duration) -> Duration {
    let base = match holder_remaining {
        Some(r) => r,
        None => left,
    };
    let spread = (base / 10).clamp(Duration::from_millis(2), Duration::from_millis(250));
    let jitter = rand::rng().random_range(Duration::ZERO..=spread);
    (base + jitter).min(left)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_time_follows_the_holder_and_never_passes_the_bound() {
        let ms = Duration::from_millis;
        for _ in 0..100 {
            let b = block_for(Some(ms(100)), ms(10_000));
            assert!(b >= ms(100) && b <= ms(110), "{b:?}");
            assert_eq!(block_for(Some(ms(100)), ms(50)), ms(50));
            assert!(block_for(None, ms(300)) <= ms(300));
        }
    }
}
