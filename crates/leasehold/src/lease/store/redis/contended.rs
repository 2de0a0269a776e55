//! Which names this client last found busy, so that the first step of its next waiting acquire on
//! such a name joins the queue at once instead of trying first (a try there is three commands and a
//! round trip spent to hear "busy"). A name whose step took it free is tried first again.
//!
//! Promise: a name marked busy reads back busy until a step of its own marks it free or another
//! name takes its slot; a name's mark is cleared only by that name; the table is a fixed 2 KiB per
//! client, whatever the number of names, and shared by its clones without locks.
//!
//! Limit: a hint, lossy by design: one slot per hash of the name in a fixed table, so two names
//! whose hashes share a slot overwrite each other's mark. A wrong hint costs one round trip (a try
//! that finds the name busy, or a queue step that finds it free: that step's three commands more);
//! both paths take the same lease, so correctness never depends on it.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

/// Slots of the table (a power of two): 2 KiB per client.
const SLOTS: usize = 256;

/// The table: each slot holds the hash of the name last marked busy there, or 0.
#[derive(Debug)]
pub(super) struct Contended {
    slots: Box<[AtomicU64]>,
}

impl Default for Contended {
    fn default() -> Self {
        Contended {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Contended {
    /// The name's hash, never 0 (the empty slot).
    fn hash(name: &str) -> u64 {
        let mut h = DefaultHasher::new();
        name.hash(&mut h);
        h.finish() | 1
    }

    fn slot(&self, hash: u64) -> &AtomicU64 {
        &self.slots[(hash >> 32) as usize % SLOTS]
    }

    /// Whether `name` was found busy by the last waiting acquire that marked it.
    pub(super) fn is(&self, name: &str) -> bool {
        let h = Self::hash(name);
        self.slot(h).load(Ordering::Relaxed) == h
    }

    /// Marks `name` busy (`true`) or free (`false`; a mark of another name in its slot stays).
    pub(super) fn mark(&self, name: &str, busy: bool) {
        let h = Self::hash(name);
        let slot = self.slot(h);
        if busy {
            slot.store(h, Ordering::Relaxed);
        } else {
            let _ = slot.compare_exchange(h, 0, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_read_back_and_cleared_only_by_its_name() {
        let c = Contended::default();
        assert!(!c.is("a"));
        c.mark("a", true);
        assert!(c.is("a"));
        assert!(!c.is("b"));
        c.mark("b", false);
        assert!(c.is("a"));
        c.mark("a", false);
        assert!(!c.is("a"));
    }
}
