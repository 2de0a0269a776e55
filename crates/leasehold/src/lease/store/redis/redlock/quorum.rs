//! Counting replies of the masters: when a majority says yes, when it can no longer say yes, which
//! fence a grant carries and how long a busy lease stays busy. No I/O here, so every rule is tested
//! on its own.
//!
//! Promise: a "yes" needs a majority of all masters (not of those that answered); a reply that did
//! not come is never counted either way. Limit: it counts what it is told; whether a master's "yes"
//! still holds (its clock, its restarts) is the protocol's concern (`docs/redlock.md`).

use std::collections::HashMap;
use std::time::Duration;

/// Masters needed for a majority of `nodes`.
pub(crate) fn majority(nodes: usize) -> usize {
    nodes / 2 + 1
}

/// What one master answered to one acquire attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum AcquireVote {
    /// Taken there; the fence that master recorded with the lock.
    Taken { fence: u64, waiting: bool },
    /// Held there by someone else (`holder`: a prefix of its token) for `pttl_ms` more.
    Busy { pttl_ms: i64, holder: String },
    /// No answer (error, timeout, not connected): the attempt may or may not have run there.
    Failed,
}

/// The replies to one acquire attempt so far.
#[derive(Debug, Clone)]
pub(crate) struct AcquireTally {
    votes: Vec<Option<AcquireVote>>,
    quorum: usize,
}

/// How an acquire attempt's fence is settled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FenceChoice {
    /// The largest fence recorded by a master that granted the lock: the grant's fence.
    pub(crate) fence: u64,
    /// Masters that granted the lock and already recorded exactly that fence.
    pub(crate) agreeing: usize,
}

impl AcquireTally {
    pub(crate) fn new(nodes: usize) -> Self {
        AcquireTally {
            votes: vec![None; nodes],
            quorum: majority(nodes),
        }
    }

    pub(crate) fn record(&mut self, node: usize, vote: AcquireVote) {
        self.votes[node] = Some(vote);
    }

    fn count(&self, f: impl Fn(&AcquireVote) -> bool) -> usize {
        self.votes.iter().flatten().filter(|v| f(v)).count()
    }

    /// Masters that granted the lock.
    pub(crate) fn taken(&self) -> usize {
        self.count(|v| matches!(v, AcquireVote::Taken { .. }))
    }

    /// Masters that answered (taken or busy).
    pub(crate) fn answered(&self) -> usize {
        self.count(|v| !matches!(v, AcquireVote::Failed))
    }

    fn pending(&self) -> usize {
        self.votes.iter().filter(|v| v.is_none()).count()
    }

    /// Whether the replies still out cannot change the outcome: a majority granted; or it can no
    /// longer, and whether that is "busy" (a majority answered) or "no quorum" (it cannot) is known.
    pub(crate) fn decided(&self) -> bool {
        let (taken, answered, pending) = (self.taken(), self.answered(), self.pending());
        taken >= self.quorum
            || (taken + pending < self.quorum
                && (answered >= self.quorum || answered + pending < self.quorum))
    }

    /// Whether a majority granted the lock.
    pub(crate) fn won(&self) -> bool {
        self.taken() >= self.quorum
    }

    /// The masters the attempt may hold a lock on: granted, failed (it may have run) or still out.
    pub(crate) fn maybe_held(&self) -> Vec<usize> {
        self.votes
            .iter()
            .enumerate()
            .filter(|(_, v)| !matches!(v, Some(AcquireVote::Busy { .. })))
            .map(|(i, _)| i)
            .collect()
    }

    /// The masters that granted, with what they recorded.
    pub(crate) fn granted(&self) -> Vec<(usize, u64, bool)> {
        self.votes
            .iter()
            .enumerate()
            .filter_map(|(i, v)| match v {
                Some(AcquireVote::Taken { fence, waiting }) => Some((i, *fence, *waiting)),
                _ => None,
            })
            .collect()
    }

    /// The grant's fence: the largest recorded by a granting master, and how many recorded it.
    pub(crate) fn fence(&self) -> FenceChoice {
        let granted = self.granted();
        let fence = granted.iter().map(|&(_, f, _)| f).max().unwrap_or(0);
        FenceChoice {
            fence,
            agreeing: granted.iter().filter(|&&(_, f, _)| f == fence).count(),
        }
    }

    /// How long the lease stays busy, as far as these replies tell: when one holder has a majority,
    /// until fewer than a majority of its locks remain (the majority-th longest TTL among them);
    /// else the longest TTL of a busy master. `None`: a lock without expiry, or no busy master.
    pub(crate) fn busy_for(&self) -> Option<Duration> {
        let mut by_holder: HashMap<&str, Vec<i64>> = HashMap::new();
        for v in self.votes.iter().flatten() {
            if let AcquireVote::Busy { pttl_ms, holder } = v {
                by_holder.entry(holder.as_str()).or_default().push(*pttl_ms);
            }
        }
        let ms = |p: i64| u64::try_from(p).ok().map(Duration::from_millis);
        for pttls in by_holder.values_mut() {
            if pttls.len() >= self.quorum {
                pttls.sort_unstable_by(|a, b| b.cmp(a));
                if pttls.iter().any(|&p| p < 0) {
                    return None;
                }
                return ms(pttls[self.quorum - 1]);
            }
        }
        let all: Vec<i64> = by_holder.into_values().flatten().collect();
        if all.iter().any(|&p| p < 0) {
            return None;
        }
        all.into_iter().max().and_then(ms)
    }

    /// The master a waiter should block on, taking masters in `order`: the first held by a holder
    /// with a majority (its release pushes a wake-up there), else the first busy one. `None` when
    /// no master answered busy.
    pub(crate) fn block_master(&self, order: &[usize]) -> Option<usize> {
        let holder_of = |i: usize| match &self.votes[i] {
            Some(AcquireVote::Busy { holder, .. }) => Some(holder.as_str()),
            _ => None,
        };
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for h in (0..self.votes.len()).filter_map(holder_of) {
            *counts.entry(h).or_default() += 1;
        }
        let majority_holder = counts
            .into_iter()
            .find(|&(_, n)| n >= self.quorum)
            .map(|(h, _)| h);
        order
            .iter()
            .copied()
            .find(|&i| holder_of(i).is_some() && holder_of(i) == majority_holder)
            .or_else(|| order.iter().copied().find(|&i| holder_of(i).is_some()))
    }

    /// Whether the busy masters are split between holders none of which has a majority while every
    /// master answered: contenders in the middle of attempts that will be undone at once.
    pub(crate) fn split(&self) -> bool {
        if self.count(|v| matches!(v, AcquireVote::Failed)) > 0 || self.pending() > 0 {
            return false;
        }
        let mut by_holder: HashMap<&str, usize> = HashMap::new();
        for v in self.votes.iter().flatten() {
            if let AcquireVote::Busy { holder, .. } = v {
                *by_holder.entry(holder.as_str()).or_default() += 1;
            }
        }
        by_holder.values().all(|&n| n < self.quorum)
    }
}

/// The masters' answers about one held lease (renew, release): yes (it was ours there), no (not
/// ours), or no answer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Votes {
    pub(crate) yes: usize,
    pub(crate) no: usize,
    pub(crate) failed: usize,
}

/// What a majority said about one held lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// A majority said yes.
    Yes,
    /// A majority said no: the lease is gone (a renewal can never bring a majority back).
    No,
    /// Neither: too few answers, or answers split (the caller retries; the holder's deadline fires
    /// if it keeps failing).
    Unknown,
}

impl Votes {
    /// The verdict once `nodes` masters were asked, or `None` while the replies still out could
    /// change it.
    pub(crate) fn verdict(&self, nodes: usize) -> Option<Verdict> {
        let q = majority(nodes);
        if self.yes >= q {
            Some(Verdict::Yes)
        } else if self.no >= q {
            Some(Verdict::No)
        } else if self.yes + self.no + self.failed >= nodes {
            Some(Verdict::Unknown)
        } else {
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taken(f: u64) -> AcquireVote {
        AcquireVote::Taken {
            fence: f,
            waiting: false,
        }
    }

    fn busy(p: i64, h: &str) -> AcquireVote {
        AcquireVote::Busy {
            pttl_ms: p,
            holder: h.into(),
        }
    }

    #[test]
    fn a_majority_is_of_all_masters_not_of_those_that_answered() {
        assert_eq!(majority(3), 2);
        assert_eq!(majority(5), 3);
        let mut t = AcquireTally::new(3);
        t.record(0, taken(5));
        assert!(!t.decided(), "one of three, two still out");
        t.record(1, AcquireVote::Failed);
        assert!(!t.decided());
        t.record(2, AcquireVote::Failed);
        assert!(
            t.decided() && !t.won(),
            "one grant of three is not a majority"
        );
        assert_eq!(t.maybe_held(), vec![0, 1, 2]);
    }

    #[test]
    fn the_outcome_is_known_before_the_slowest_master_answers() {
        let mut t = AcquireTally::new(3);
        t.record(2, taken(7));
        t.record(0, taken(9));
        assert!(t.decided() && t.won());
        assert_eq!(
            t.fence(),
            FenceChoice {
                fence: 9,
                agreeing: 1
            }
        );
        let mut t = AcquireTally::new(3);
        t.record(0, busy(100, "aa"));
        t.record(1, busy(90, "aa"));
        assert!(t.decided() && !t.won(), "two busy: no majority possible");
        assert_eq!(t.maybe_held(), vec![2], "only the one still out may hold");
        // Busy and silent: the third tells "busy" from "no quorum".
        let mut t = AcquireTally::new(3);
        t.record(0, busy(100, "aa"));
        t.record(1, AcquireVote::Failed);
        assert!(!t.decided());
        t.record(2, busy(100, "aa"));
        assert!(t.decided() && !t.won() && t.answered() == 2);
    }

    #[test]
    fn fences_agree_when_a_majority_recorded_the_largest() {
        let mut t = AcquireTally::new(5);
        for (i, f) in [(0, 40), (1, 40), (2, 39), (3, 40)] {
            t.record(i, taken(f));
        }
        t.record(4, busy(10, "x"));
        assert_eq!(
            t.fence(),
            FenceChoice {
                fence: 40,
                agreeing: 3
            }
        );
    }

    #[test]
    fn busy_time_follows_a_majority_holder_else_the_longest_lock() {
        let mut t = AcquireTally::new(3);
        t.record(0, busy(300, "h"));
        t.record(1, busy(100, "h"));
        t.record(2, busy(200, "h"));
        // Two of its three locks outlive 200 ms; after that it no longer has a majority.
        assert_eq!(t.busy_for(), Some(Duration::from_millis(200)));
        assert!(!t.split());
        let mut t = AcquireTally::new(3);
        t.record(0, taken(1));
        t.record(1, busy(900, "a"));
        t.record(2, busy(800, "b"));
        assert!(t.split(), "nobody has a majority and everyone answered");
        assert_eq!(t.busy_for(), Some(Duration::from_millis(900)));
        assert_eq!(t.block_master(&[0, 2, 1]), Some(2), "the first busy one");
        let mut t = AcquireTally::new(3);
        t.record(0, busy(50, "stale"));
        t.record(1, busy(900, "h"));
        t.record(2, busy(800, "h"));
        assert_eq!(
            t.block_master(&[0, 1, 2]),
            Some(1),
            "where the majority holder will push its wake-up"
        );
        let mut t = AcquireTally::new(3);
        t.record(0, taken(1));
        t.record(1, AcquireVote::Failed);
        t.record(2, taken(1));
        assert_eq!(t.block_master(&[0, 1, 2]), None);
        let mut t = AcquireTally::new(3);
        t.record(0, busy(-1, "h"));
        t.record(1, busy(5, "h"));
        t.record(2, AcquireVote::Failed);
        assert_eq!(t.busy_for(), None, "a lock without expiry");
        assert!(
            !t.split(),
            "a silent master may hold the rest of a majority"
        );
    }

    #[test]
    fn renewal_verdicts_need_a_majority_either_way() {
        let v = |yes, no, failed| Votes { yes, no, failed }.verdict(3);
        assert_eq!(v(2, 0, 0), Some(Verdict::Yes));
        assert_eq!(v(2, 1, 0), Some(Verdict::Yes));
        assert_eq!(v(0, 2, 0), Some(Verdict::No));
        assert_eq!(v(1, 1, 0), None, "the third decides");
        assert_eq!(v(1, 1, 1), Some(Verdict::Unknown));
        assert_eq!(v(1, 0, 2), Some(Verdict::Unknown));
        assert_eq!(v(0, 1, 2), Some(Verdict::Unknown));
    }
}
