//! `--history-dir`: each cell's record as one JSON Lines file, for a checker that shares no code
//! with leasehold or this lab (`crates/leasehold-lab/tools/check_history.py`) to judge on its own.
//!
//! Promise: the file holds the cell's verdict as the lab reached it and everything that verdict was
//! reached from: every write the resource accepted (its history table, as read back), every
//! holder's interval with its fence, the stale writes refused, the lock waits that stalled, the
//! fault windows. Limit: the intervals are the holders' own account (a worker's clock, read when it
//! was told it held the lock and when it sent its release), the writes' times the database's
//! clock; nothing here is signed, so the file proves agreement between two judges, not that the
//! run happened.
//!
//! Format (version 1), one JSON object a line, `record` saying which:
//! `cell` first (`index`, `workload`, `fault`, `strategy`, `status`, `locks`, `fenced`,
//! `safe_by_design`, `start_ms`, `end_ms`, `verdict`), then `write`s in acceptance order (`seq`,
//! `at_ms`, `item`, `old`, `new`, `writer`, `fence`), `interval`s (`slot`, `start_ms`, `end_ms`,
//! `fence`), `refused` (`at_ms`, `slot`, `fence`), `stall` (`slot`, `start_ms`, `end_ms`) and
//! `fault` (`slot`, `start_ms`, `end_ms`, `label`) lines.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use serde_json::json;

use super::super::cell::{CellResult, CellStatus};

/// The version of the format above, in every `cell` line.
const FORMAT: u32 = 1;

/// Makes `dir` (and its parents) and checks that a file can be written there, before any cell runs.
pub(crate) fn prepare(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| {
        format!(
            "cannot create --history-dir {}: give a directory this user can write to",
            dir.display()
        )
    })?;
    let probe = dir.join(".leasehold-verify-probe");
    std::fs::write(&probe, b"").with_context(|| {
        format!(
            "cannot write into --history-dir {}: give a directory this user can write to",
            dir.display()
        )
    })?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// The file of cell `index` (0-based) in `dir`: `007-counter-pause-lease-fence.jsonl`.
fn file_of(dir: &Path, index: usize, r: &CellResult) -> PathBuf {
    dir.join(format!(
        "{index:03}-{}-{}-{}.jsonl",
        r.workload, r.fault, r.strategy
    ))
}

/// Writes cell `index`'s record into `dir`; returns the file's path.
pub(crate) fn write_cell(dir: &Path, index: usize, r: &CellResult) -> anyhow::Result<PathBuf> {
    let path = file_of(dir, index, r);
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(&path).with_context(|| format!("cannot write {}", path.display()))?,
    );
    for line in lines(index, r) {
        serde_json::to_writer(&mut out, &line)?;
        out.write_all(b"\n")?;
    }
    out.flush()
        .with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// The record's lines: the cell with its verdict, then what the verdict was reached from.
fn lines(index: usize, r: &CellResult) -> Vec<serde_json::Value> {
    let timeline = r.timeline.as_ref();
    let mut lines = vec![json!({
        "record": "cell",
        "format": FORMAT,
        "index": index,
        "workload": r.workload,
        "fault": r.fault,
        "strategy": r.strategy,
        "status": r.status,
        "locks": r.strategy.locks(),
        "fenced": r.strategy.fenced(),
        "safe_by_design": r.safe_by_design,
        "start_ms": timeline.map(|t| t.start_ms),
        "end_ms": timeline.map(|t| t.end_ms),
        "verdict": {
            "violations": r.violations,
            "violation_kind": r.violation_kind,
            "overlapping_holders": r.overlapping_holders,
            "fence_regressions": r.fence_regressions,
            "stalls": r.stalls,
            "lock_without_expiry": r.lock_without_expiry,
            "accepted_writes": r.accepted_writes,
            "failed": r.broke_a_promise(),
        },
    })];
    if r.status != CellStatus::Ran {
        return lines;
    }
    lines.extend(r.accepted.iter().map(|w| {
        json!({"record": "write", "seq": w.seq, "at_ms": w.at_ms, "item": w.item,
               "old": w.old, "new": w.new, "writer": w.writer, "fence": w.fence})
    }));
    let Some(t) = timeline else { return lines };
    lines.extend(t.intervals.iter().map(|i| {
        json!({"record": "interval", "slot": i.slot, "start_ms": i.start_ms,
               "end_ms": i.end_ms, "fence": i.fence})
    }));
    lines.extend(t.refusals.iter().map(|(at_ms, slot, fence)| {
        json!({"record": "refused", "at_ms": at_ms, "slot": slot, "fence": fence})
    }));
    lines.extend(t.stalls.iter().map(|(start_ms, end_ms, slot)| {
        json!({"record": "stall", "slot": slot, "start_ms": start_ms, "end_ms": end_ms})
    }));
    lines.extend(t.faults.iter().map(|f| {
        json!({"record": "fault", "slot": f.slot, "start_ms": f.start_ms,
               "end_ms": f.end_ms, "label": f.label})
    }));
    lines
}
