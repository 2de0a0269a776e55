//! Where a Redlock waiter blocks: the master its last busy answer pointed to, else the first master
//! up in run-id order.
//!
//! Promise: a waiter blocks where its last busy answer pointed (a master that keeps its waiting
//! marker, so the holder's release there wakes it), else on the first master up in run-id order;
//! where it was told to block is taken by its next wait, and entries left by callers that gave up
//! are swept once there are many.
//!
//! Limit: a waiter woken on one master still asks every master again; the wake is a hint.

use std::time::Duration;

use tokio::time::Instant;

use super::RedlockStore;

impl RedlockStore {
    /// Notes where the waiter with `token` blocks next. Entries are taken by the next wait; the
    /// ones a caller left behind (it gave up without waiting) are swept once there are many.
    pub(super) fn note_wait(&self, token: &str, on: Option<usize>) {
        let mut waits = self.inner.waits.lock().expect("waits lock");
        if waits.len() >= 1024 {
            waits.retain(|_, (_, at)| at.elapsed() < Duration::from_secs(60));
        }
        waits.insert(token.to_owned(), (on, Instant::now()));
    }

    /// Where the waiter with `token` was told to block, if its last attempt said.
    pub(super) fn take_wait(&self, token: &str) -> Option<Option<usize>> {
        self.inner
            .waits
            .lock()
            .expect("waits lock")
            .remove(token)
            .map(|(on, _)| on)
    }

    /// The master a waiter with no busy answer to go by blocks on (the next holder of this client
    /// after a grant whose release will wake it): the first in run-id order that is up.
    pub(super) fn wake_node(&self) -> Option<usize> {
        self.inner
            .wake_order
            .iter()
            .copied()
            .find(|&i| self.inner.nodes[i].is_up())
    }
}
