//! From a finished cell to its result: the workers' events tallied (lease intervals, operations,
//! refusals, stalls), the history checked, the notes written.
//!
//! Limit: the intervals are the holders' own account; only the violations come from the
//! resource's history, the record of what was written.

use std::collections::HashMap;

use super::super::cell::{Cell, CellResult, CellStatus, FaultWindow, Timeline};
use super::super::checker::{self, Interval};
use super::super::faults::member_kill;
use super::super::resource::{HistoryRow, Outcome};
use super::super::worker::Event;
use super::super::Fault;

/// What the workers' events of one cell add up to.
#[derive(Debug, Default)]
struct Tally {
    intervals: Vec<Interval>,
    ops: u64,
    stale: u64,
    guarded: u64,
    /// Stale writes refused: (time, slot, fence).
    refusals: Vec<(i64, u32, i64)>,
    /// Lock waits that gave up: (start, end, slot).
    stall_spans: Vec<(i64, i64, u32)>,
    /// How many of those found the lock held with no expiry.
    no_expiry_stalls: u64,
    failures: u64,
    /// Why each long critical section (`partition`) started to stop: the lease's signal, or "go".
    stopped_by: Vec<String>,
}

impl Tally {
    /// Tallies `events`; a lease still open at the end counts until `cell_end`.
    fn of(events: &[(u32, i64, Event)], cell_end: i64) -> Self {
        let mut t = Self::default();
        let mut open: HashMap<u32, (i64, i64)> = HashMap::new();
        for (slot, recv_ms, ev) in events {
            match ev {
                // A (re)started worker: whatever its predecessor held ended when it was killed.
                Event::Ready => t.close(&mut open, *slot, *recv_ms),
                Event::Acquired { at_ms, fence, .. } => {
                    open.insert(*slot, (*at_ms, *fence));
                }
                Event::Released { at_ms, .. } => t.close(&mut open, *slot, *at_ms),
                Event::Wrote {
                    outcome,
                    at_ms,
                    fence,
                    ..
                } => t.wrote(*outcome, *at_ms, *slot, *fence),
                Event::Stalled {
                    at_ms,
                    waited_ms,
                    lock_ttl_ms,
                    ..
                } => {
                    t.stall_spans
                        .push((*at_ms - *waited_ms as i64, *at_ms, *slot));
                    if *lock_ttl_ms == Some(-1) {
                        t.no_expiry_stalls += 1;
                    }
                }
                Event::Failed { .. } => t.failures += 1,
                Event::Stopping { why, .. } => t.stopped_by.push(why.clone()),
                Event::Held { .. } | Event::Exit { .. } => {}
            }
        }
        for (slot, (s, f)) in open {
            t.intervals.push(Interval {
                slot,
                start_ms: s,
                end_ms: cell_end,
                fence: f,
            });
        }
        t
    }

    /// Ends `slot`'s open lease interval, if it has one, at `end`.
    fn close(&mut self, open: &mut HashMap<u32, (i64, i64)>, slot: u32, end: i64) {
        if let Some((s, f)) = open.remove(&slot) {
            self.intervals.push(Interval {
                slot,
                start_ms: s,
                end_ms: end,
                fence: f,
            });
        }
    }

    fn wrote(&mut self, outcome: Outcome, at_ms: i64, slot: u32, fence: i64) {
        self.ops += 1;
        match outcome {
            Outcome::Stale => {
                self.stale += 1;
                self.refusals.push((at_ms, slot, fence));
            }
            Outcome::Guarded => self.guarded += 1,
            Outcome::Accepted | Outcome::Skipped => {}
        }
    }
}

/// The result of the finished `cell` whose resource accepted `history`, injected in `windows`,
/// running over `span` (start and end, ms).
pub(super) fn result(
    cell: &mut Cell<'_>,
    fault: Fault,
    history: &[HistoryRow],
    windows: Vec<FaultWindow>,
    span: (i64, i64),
) -> CellResult {
    let workload = cell.spec.workload;
    let strategy = cell.spec.strategy;
    let verdict = checker::check(workload, history);
    let events = cell
        .log
        .events
        .lock()
        .map(|e| e.clone())
        .unwrap_or_default();
    let tally = Tally::of(&events, span.1);
    let (overlap_pairs, overlap_spans) = checker::overlaps(&tally.intervals);
    let note = notes(cell, fault, &tally).join("; ");
    let faults_injected = u64::from(cell.injected);
    let timeline = Timeline {
        start_ms: span.0,
        end_ms: span.1,
        slots: cell.ctx.workers,
        intervals: tally.intervals,
        overlaps: overlap_spans,
        faults: windows,
        writes: history
            .iter()
            .map(|r| (r.at_ms, r.writer, verdict.violating.contains(&r.seq)))
            .collect(),
        refusals: tally.refusals,
        stalls: tally.stall_spans.clone(),
        uses_lock: strategy.locks(),
    };
    CellResult {
        workload,
        fault,
        strategy,
        status: CellStatus::Ran,
        operations: tally.ops,
        faults_injected,
        violations: Some(verdict.count()),
        violation_kind: checker::violation_kind(workload),
        stalls: tally.stall_spans.len() as u64,
        lock_without_expiry: cell.stuck_lock.is_some(),
        accepted_writes: history.len() as u64,
        refused_stale: tally.stale,
        refused_by_guard: tally.guarded,
        overlapping_holders: strategy.locks().then_some(overlap_pairs),
        fence_regressions: strategy
            .leased()
            .then(|| checker::fence_regressions(history)),
        safe_by_design: strategy.safe_by_design(),
        stop_rule: (fault == Fault::Partition && strategy.leased()).then_some(cell.ctx.stop_rule),
        fenced_writer: strategy.fenced().then_some(cell.ctx.fenced_writer),
        note,
        elapsed_ms: 0,
        timeline: Some(timeline),
        accepted: history.to_vec(),
    }
}

/// The cell's notes: the stuck lock's story, what the cell noted while it ran, and what the
/// tally says beyond the numbers.
fn notes(cell: &mut Cell<'_>, fault: Fault, tally: &Tally) -> Vec<String> {
    let injected = cell.injected;
    let mut notes = Vec::new();
    notes.extend(cell.stuck_lock_note());
    notes.append(&mut cell.notes);
    if cell.passed_over > 0 {
        notes.push(format!(
            "{} holders let go untouched: their lease stood on a bare majority of the masters, and this fault is aimed at a lease held on all three",
            cell.passed_over
        ));
    }
    if cell.bare_majorities > 0 {
        notes.push(format!(
            "{} of {injected} injections found the lease held on only 2 of the 3 masters (losing one of a bare majority loses the lease)",
            cell.bare_majorities
        ));
    }
    if fault == Fault::Store(&member_kill::FAULT) && injected > 0 {
        notes.push(format!(
            "{} of {injected} member kills hit the etcd leader",
            cell.leaders_killed
        ));
    }
    if fault == Fault::Partition && !tally.stopped_by.is_empty() {
        let go = tally.stopped_by.iter().filter(|w| *w == "go").count();
        let told = tally.stopped_by.len() - go;
        let mut note = format!(
            "the cut-off holder's long section started its slow shutdown {told} times on its lease's word ({})",
            cell.ctx.stop_rule
        );
        if go > 0 {
            note.push_str(&format!(
                ", {go} at the end of the window (no word from a lease)"
            ));
        }
        if let Some(first) = tally.stopped_by.iter().find(|w| *w != "go") {
            note.push_str(&format!("; first: {first}"));
        }
        notes.push(note);
    }
    if fault == Fault::Eviction && injected > 0 {
        notes.push(format!(
            "{} of {injected} injections saw the server evict the holder's lock key ({} filler keys of 1 KiB written)",
            cell.evicted_locks, cell.fillers
        ));
    }
    if !tally.stall_spans.is_empty() {
        notes.push(format!(
            "{} lock waits gave up after {} ms ({} of them found the lock held with no expiry)",
            tally.stall_spans.len(),
            cell.timing.stall_after.as_millis(),
            tally.no_expiry_stalls
        ));
    }
    if tally.failures > 0 {
        notes.push(format!("{} failed attempts retried", tally.failures));
    }
    notes
}
