//! Turns what the resource accepted into invariant violations, and the holders' intervals into
//! overlaps.
//!
//! Promise: a violation is counted only from rows the database committed (its history table), each
//! attributable to one accepted write. Limit: overlapping holders are counted from the intervals the
//! workers report (the lock has no history of its own); they are informational, not violations.

use std::collections::HashSet;

use super::resource::{HistoryRow, TRANSITIONS};
use super::Workload;

/// The verdict on one history.
#[derive(Debug, Clone, Default)]
pub(crate) struct Verdict {
    /// Writes that broke the workload's invariant (sequence numbers of the history rows).
    pub(crate) violating: HashSet<i64>,
}

impl Verdict {
    pub(crate) fn count(&self) -> u64 {
        self.violating.len() as u64
    }
}

/// What kind of violation the workload counts, for the table.
pub(crate) fn violation_kind(workload: Workload) -> &'static str {
    match workload {
        Workload::Counter => "lost updates",
        Workload::Orders => "duplicate orders",
        Workload::Inventory => "oversold units",
        Workload::Transitions => "illegal transitions",
        Workload::Messages => "double-applied messages",
    }
}

/// Checks a history of accepted writes.
///
/// * counter: every write means "+1"; a write whose new value is not its old value + 1 overwrote
///   someone else's increment (a lost update).
/// * inventory: every write sells one unit; a write that did not take exactly one unit out of the
///   stock sold a unit that was not there (an oversell), as does any write leaving the stock negative.
/// * orders, messages: the second and later accepted rows for one request or message id.
/// * transitions: a row whose (old, new) state pair is not in the declared transition table.
pub(crate) fn check(workload: Workload, history: &[HistoryRow]) -> Verdict {
    let mut verdict = Verdict::default();
    let num = |v: &Option<String>| v.as_deref().and_then(|s| s.parse::<i64>().ok());
    match workload {
        Workload::Counter => {
            for row in history {
                if num(&row.new) != num(&row.old).map(|o| o + 1) {
                    verdict.violating.insert(row.seq);
                }
            }
        }
        Workload::Inventory => {
            for row in history {
                let new = num(&row.new);
                if new != num(&row.old).map(|o| o - 1) || new.is_some_and(|n| n < 0) {
                    verdict.violating.insert(row.seq);
                }
            }
        }
        Workload::Orders | Workload::Messages => {
            let mut seen = HashSet::new();
            for row in history {
                if !seen.insert(row.item.as_str()) {
                    verdict.violating.insert(row.seq);
                }
            }
        }
        Workload::Transitions => {
            for row in history {
                let legal = TRANSITIONS.iter().any(|(from, to)| {
                    row.old.as_deref() == Some(*from) && row.new.as_deref() == Some(*to)
                });
                if !legal {
                    verdict.violating.insert(row.seq);
                }
            }
        }
    }
    verdict
}

/// Accepted writes (in the order the resource accepted them) whose fence is lower than one the
/// resource accepted before: where the resource checks the fence, each is a stale write let through.
pub(crate) fn fence_regressions(history: &[HistoryRow]) -> u64 {
    let mut highest = i64::MIN;
    let mut regressions = 0;
    for row in history {
        if row.fence < highest {
            regressions += 1;
        }
        highest = highest.max(row.fence);
    }
    regressions
}

/// One holder's interval, by its own clock and account.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Interval {
    pub(crate) slot: u32,
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) fence: i64,
}

/// Pairs of intervals of different holders that intersect, and the union of the intersections.
pub(crate) fn overlaps(intervals: &[Interval]) -> (u64, Vec<(i64, i64)>) {
    let mut sorted: Vec<&Interval> = intervals.iter().collect();
    sorted.sort_by_key(|i| i.start_ms);
    let mut pairs = 0u64;
    let mut spans = Vec::new();
    for (i, a) in sorted.iter().enumerate() {
        for b in &sorted[i + 1..] {
            if b.start_ms >= a.end_ms {
                break;
            }
            pairs += 1;
            spans.push((b.start_ms, a.end_ms.min(b.end_ms)));
        }
    }
    (pairs, spans)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(seq: i64, item: &str, old: Option<&str>, new: &str) -> HistoryRow {
        HistoryRow {
            seq,
            at_ms: seq,
            item: item.into(),
            old: old.map(Into::into),
            new: Some(new.into()),
            writer: 0,
            fence: 0,
        }
    }

    #[test]
    fn counter_overwrite_is_a_lost_update() {
        let h = [
            row(1, "1", Some("0"), "1"),
            row(2, "1", Some("1"), "2"),
            row(3, "1", Some("2"), "2"),
        ];
        assert_eq!(check(Workload::Counter, &h).violating, HashSet::from([3]));
    }

    #[test]
    fn duplicates_and_illegal_transitions_are_counted() {
        let h = [
            row(1, "r1", None, "c"),
            row(2, "r2", None, "c"),
            row(3, "r1", None, "c"),
        ];
        assert_eq!(check(Workload::Orders, &h).count(), 1);
        let t = [
            row(1, "1", Some("created"), "paid"),
            row(2, "1", Some("paid"), "shipped"),
            row(3, "1", Some("shipped"), "paid"),
        ];
        assert_eq!(
            check(Workload::Transitions, &t).violating,
            HashSet::from([3])
        );
    }

    #[test]
    fn inventory_sale_without_decrement_is_an_oversell() {
        let h = [row(1, "1", Some("5"), "4"), row(2, "1", Some("4"), "4")];
        assert_eq!(check(Workload::Inventory, &h).count(), 1);
    }

    #[test]
    fn a_fence_lower_than_one_accepted_before_is_a_regression() {
        let fenced = |seq, fence| HistoryRow {
            fence,
            ..row(seq, "1", Some("0"), "1")
        };
        let h = [
            fenced(1, 3),
            fenced(2, 3),
            fenced(3, 5),
            fenced(4, 4),
            fenced(5, 6),
        ];
        assert_eq!(fence_regressions(&h), 1);
        assert_eq!(fence_regressions(&h[..3]), 0);
    }

    #[test]
    fn overlapping_intervals_are_paired() {
        let iv = |slot, s, e| Interval {
            slot,
            start_ms: s,
            end_ms: e,
            fence: 0,
        };
        let (n, spans) = overlaps(&[iv(0, 0, 10), iv(1, 10, 20), iv(2, 15, 30)]);
        assert_eq!(n, 1);
        assert_eq!(spans, vec![(15, 20)]);
    }
}
