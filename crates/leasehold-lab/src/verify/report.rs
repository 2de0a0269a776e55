//! The results as a terminal table and as an HTML page with SVG timelines of who held the lease when.
//!
//! Limit: the timelines draw the holders' own account of their intervals (the lock keeps no history);
//! the writes and their violations on it come from the resource's history.

use std::fmt::Write as _;
use std::time::Duration;

use super::cell::{CellResult, CellStatus, Timeline};
use super::checker::Interval;
use super::{Fault, Strategy, Workload};

fn cell_text(r: &CellResult) -> (String, String, String, String) {
    match r.status {
        CellStatus::Ran => (
            r.operations.to_string(),
            r.faults_injected.to_string(),
            r.violations.map(|v| v.to_string()).unwrap_or_default(),
            r.overlapping_holders
                .map(|v| v.to_string())
                .unwrap_or_else(|| "-".into()),
        ),
        CellStatus::NotApplicable => ("n/a".into(), "n/a".into(), "n/a".into(), "n/a".into()),
        CellStatus::Skipped => ("skipped".into(), "-".into(), "-".into(), "-".into()),
        CellStatus::Error => ("error".into(), "-".into(), "-".into(), "-".into()),
    }
}

/// The plain-text table: one line per cell.
pub(crate) fn table(results: &[CellResult]) -> String {
    let mut rows: Vec<[String; 10]> = vec![[
        "workload".into(),
        "fault".into(),
        "strategy".into(),
        "safe?".into(),
        "ops".into(),
        "faults".into(),
        "violations".into(),
        "overlaps".into(),
        "refused".into(),
        "note".into(),
    ]];
    for r in results {
        let (ops, faults, violations, overlaps) = cell_text(r);
        let mut violations = match r.violations {
            Some(v) if v > 0 => format!("{v} {}", r.violation_kind),
            _ => violations,
        };
        if r.stalled() {
            violations.push_str(" + STALLED");
        }
        let refused = if r.status == CellStatus::Ran {
            format!("{} stale / {} guard", r.refused_stale, r.refused_by_guard)
        } else {
            "-".into()
        };
        let mut note = r.note.clone();
        if note.len() > 70 {
            note.truncate(67);
            note.push_str("...");
        }
        rows.push([
            r.workload.to_string(),
            r.fault.to_string(),
            r.strategy.to_string(),
            if r.safe_by_design {
                "safe".into()
            } else {
                "unsafe".into()
            },
            ops,
            faults,
            violations,
            overlaps,
            refused,
            note,
        ]);
    }
    let mut widths = [0usize; 10];
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    for (i, row) in rows.iter().enumerate() {
        let line: Vec<String> = row
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
        if i == 0 {
            let _ = writeln!(out, "{}", "-".repeat(widths.iter().sum::<usize>() + 2 * 9));
        }
    }
    out
}

/// One line of totals over the cells that ran.
pub(crate) fn totals(results: &[CellResult], wall: Duration) -> String {
    let ran: Vec<&CellResult> = results
        .iter()
        .filter(|r| r.status == CellStatus::Ran)
        .collect();
    let sum = |f: fn(&CellResult) -> u64| ran.iter().map(|r| f(r)).sum::<u64>();
    let count = |s: CellStatus| results.iter().filter(|r| r.status == s).count();
    format!(
        "{} cells: {} ran, {} not applicable, {} skipped, {} could not run; {} operations, {} faults injected, {} violations (all in unsafe cells unless FAILED is printed), {} stale writes refused by a fence, {} stalled cells; wall time {:.1} s",
        results.len(),
        ran.len(),
        count(CellStatus::NotApplicable),
        count(CellStatus::Skipped),
        count(CellStatus::Error),
        sum(|r| r.operations),
        sum(|r| r.faults_injected),
        sum(|r| r.violations.unwrap_or(0)),
        sum(|r| r.refused_stale),
        ran.iter().filter(|r| r.stalled()).count(),
        wall.as_secs_f64()
    )
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const SLOT_COLORS: &[&str] = &[
    "#3b73b9", "#2e9c6a", "#9a5ec4", "#c98a1b", "#1b9bb0", "#b0541b",
];

/// The SVG picture of one cell: one row per worker, its lease intervals as bars, the overlaps in
/// red, the fault windows hatched, accepted writes as ticks (red when they broke the invariant),
/// refused stale writes as crosses.
pub(crate) fn svg(t: &Timeline) -> String {
    let width = 960.0;
    let left = 70.0;
    let right = 20.0;
    let row_h = 34.0;
    let top = 24.0;
    let height = top + row_h * t.slots as f64 + 34.0;
    let span = (t.end_ms - t.start_ms).max(1) as f64;
    let x = |ms: i64| {
        left + (ms - t.start_ms).clamp(0, t.end_ms - t.start_ms) as f64 / span
            * (width - left - right)
    };
    let row_y = |slot: i64| top + row_h * slot as f64;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    s.push_str(r##"<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#999" fill-opacity="0.45"/></pattern></defs>"##);
    for slot in 0..t.slots {
        let y = row_y(slot as i64);
        let _ = write!(
            s,
            r##"<text x="4" y="{}" fill="#333">worker {slot}</text><line x1="{left}" x2="{}" y1="{}" y2="{}" stroke="#ddd"/>"##,
            y + 17.0,
            width - right,
            y + row_h - 2.0,
            y + row_h - 2.0
        );
    }
    for f in &t.faults {
        let y = row_y(f.slot as i64);
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="url(#hatch)" stroke="#777" stroke-dasharray="3,2"><title>{} injected on worker {}</title></rect><text x="{:.1}" y="{:.1}" fill="#555">{}</text>"##,
            x(f.start_ms),
            y + 2.0,
            (x(f.end_ms) - x(f.start_ms)).max(2.0),
            row_h - 6.0,
            esc(&f.label),
            f.slot,
            x(f.start_ms) + 2.0,
            y + 12.0,
            esc(&f.label)
        );
    }
    // Holds, overlaps and writes less than a pixel apart are drawn as one: a full run's cell has
    // thousands of each, far below what a pixel can show, and drawn one by one they made a page of
    // tens of megabytes.
    let gap = ((span / (width - left - right)) as i64).max(1);
    for slot in 0..t.slots {
        let y = row_y(slot as i64);
        let color = SLOT_COLORS[slot as usize % SLOT_COLORS.len()];
        let mine: Vec<&Interval> = t.intervals.iter().filter(|iv| iv.slot == slot).collect();
        for run in merge(mine.iter().map(|iv| (iv.start_ms, iv.end_ms)), gap) {
            let what = if run.count == 1 {
                let fence = mine
                    .iter()
                    .find(|iv| iv.start_ms == run.start)
                    .map(|iv| iv.fence)
                    .filter(|f| *f > 0)
                    .map(|f| format!(", fence {f}"))
                    .unwrap_or_default();
                format!(
                    "held the lease {}–{} ms{fence}",
                    run.start - t.start_ms,
                    run.end - t.start_ms
                )
            } else {
                format!(
                    "held the lease {} times between {} and {} ms",
                    run.count,
                    run.start - t.start_ms,
                    run.end - t.start_ms
                )
            };
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="12" fill="{color}" fill-opacity="0.75"><title>worker {slot} {what}</title></rect>"#,
                x(run.start),
                y + 14.0,
                (x(run.end) - x(run.start)).max(1.0),
            );
        }
    }
    for run in merge(t.overlaps.iter().copied(), gap) {
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{top}" width="{:.1}" height="{:.1}" fill="#e0302a" fill-opacity="0.28"><title>two holders at once</title></rect>"##,
            x(run.start),
            (x(run.end) - x(run.start)).max(1.5),
            row_h * t.slots as f64
        );
    }
    for slot in 0..t.slots as i64 {
        let y = row_y(slot);
        // Accepted writes: one path of ticks per worker, one tick per pixel column.
        let mut columns: Vec<i64> = t
            .writes
            .iter()
            .filter(|&&(_, writer, bad)| writer == slot && !bad)
            .map(|&(at, _, _)| x(at).round() as i64)
            .collect();
        columns.sort_unstable();
        columns.dedup();
        if !columns.is_empty() {
            let mut d = String::new();
            for cx in &columns {
                let _ = write!(d, "M{cx} {:.0}V{:.0}", y + 22.0, y + 30.0);
            }
            let _ = write!(
                s,
                r##"<path d="{d}" stroke="#2a8a2a" stroke-width="1"><title>accepted writes</title></path>"##
            );
        }
    }
    for &(at, writer, bad) in &t.writes {
        if !bad {
            continue;
        }
        let _ = write!(
            s,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="#d0201a" stroke-width="2.5"><title>accepted write that broke the invariant</title></line>"##,
            x(at),
            row_y(writer) + 14.0,
            row_y(writer) + 30.0,
        );
    }
    for &(a, b, slot) in &t.stalls {
        let y = row_y(slot as i64);
        let _ = write!(
            s,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="6" fill="#e08a00" fill-opacity="0.8"><title>worker {slot} waited {} ms for a lock nobody freed</title></rect>"##,
            x(a),
            y + 4.0,
            (x(b) - x(a)).max(1.5),
            b - a
        );
    }
    for &(at, slot, fence) in &t.refusals {
        let y = row_y(slot as i64) + 20.0;
        let cx = x(at);
        let _ = write!(
            s,
            r##"<g stroke="#000" stroke-width="2.2"><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"/><line x1="{:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}"/><title>stale write refused (fence {fence})</title></g>"##,
            cx - 5.0,
            y - 5.0,
            cx + 5.0,
            y + 5.0,
            cx - 5.0,
            y + 5.0,
            cx + 5.0,
            y - 5.0
        );
    }
    let axis_y = top + row_h * t.slots as f64 + 14.0;
    let total = t.end_ms - t.start_ms;
    let step = [100, 250, 500, 1000, 2000, 5000, 10_000]
        .into_iter()
        .find(|s| total / s <= 12)
        .unwrap_or(20_000);
    let mut tick = 0;
    while tick <= total {
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{axis_y}" fill="#666" text-anchor="middle">{}</text>"##,
            x(t.start_ms + tick),
            if step >= 1000 {
                format!("{}s", tick / 1000)
            } else {
                format!("{:.1}s", tick as f64 / 1000.0)
            }
        );
        tick += step;
    }
    if !t.uses_lock {
        let _ = write!(
            s,
            r##"<text x="{left}" y="{}" fill="#666">no lock: only the writes and what the database refused</text>"##,
            axis_y + 14.0
        );
    }
    s.push_str("</svg>");
    s
}

/// Spans merged where less than `gap` apart, with how many went into each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Run {
    start: i64,
    end: i64,
    count: usize,
}

fn merge(spans: impl Iterator<Item = (i64, i64)>, gap: i64) -> Vec<Run> {
    let mut spans: Vec<(i64, i64)> = spans.collect();
    spans.sort_unstable();
    let mut runs: Vec<Run> = Vec::new();
    for (start, end) in spans {
        match runs.last_mut() {
            Some(last) if start <= last.end + gap => {
                last.end = last.end.max(end);
                last.count += 1;
            }
            _ => runs.push(Run {
                start,
                end,
                count: 1,
            }),
        }
    }
    runs
}

fn badge(r: &CellResult) -> String {
    if r.status == CellStatus::Ran && r.stalled() {
        return format!(
            r#"<td class="stall" title="{} ops, {} faults injected; {} lock waits gave up{}">{} + stalled</td>"#,
            r.operations,
            r.faults_injected,
            r.stalls,
            if r.lock_without_expiry {
                "; lock held with no expiry"
            } else {
                ""
            },
            r.violations.unwrap_or(0)
        );
    }
    match (r.status, r.violations) {
        (CellStatus::Ran, Some(0)) => format!(
            r#"<td class="ok" title="{} ops, {} faults injected">0</td>"#,
            r.operations, r.faults_injected
        ),
        (CellStatus::Ran, Some(v)) => format!(
            r#"<td class="bad" title="{} ops, {} faults injected">{v}</td>"#,
            r.operations, r.faults_injected
        ),
        (CellStatus::NotApplicable, _) => {
            r#"<td class="na" title="not applicable">n/a</td>"#.into()
        }
        (CellStatus::Skipped, _) => {
            format!(r#"<td class="na" title="{}">skipped</td>"#, esc(&r.note))
        }
        _ => format!(r#"<td class="err" title="{}">error</td>"#, esc(&r.note)),
    }
}

/// The whole HTML page.
pub(crate) fn html(results: &[CellResult], command: &str, wall: Duration) -> String {
    use clap::ValueEnum as _;
    let failed: Vec<&CellResult> = results.iter().filter(|r| r.broke_a_promise()).collect();
    let mut p = String::new();
    p.push_str(r##"<!doctype html><html lang="en"><head><meta charset="utf-8"><title>leasehold verify</title><style>
body{font-family:system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{margin:0 0 4px 0;font-size:26px} h2{margin-top:28px;font-size:19px} h3{font-size:15px;margin:14px 0 4px}
.verdict{padding:8px 12px;border-radius:6px;display:inline-block;font-weight:600}
.pass{background:#e4f5e4;color:#1d6b1d}.fail{background:#fde2e1;color:#a31b15}
table{border-collapse:collapse;margin:6px 0 14px 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:center;font-size:13px}
th{background:#f3f3f3} td.ok{background:#dff3df} td.bad{background:#f7c9c6;font-weight:700} td.na{color:#999;background:#fafafa} td.err{background:#ffe9b3} td.stall{background:#ffd08a;font-weight:700}
td.name{text-align:left;font-family:monospace} .legend span{margin-right:16px;font-size:13px}
.sw{display:inline-block;width:14px;height:10px;vertical-align:middle;margin-right:4px}
details{margin:4px 0} summary{cursor:pointer;font-family:monospace}
code{background:#f3f3f3;padding:1px 4px}
</style></head><body>"##);
    let _ = write!(
        p,
        "<h1>leasehold verify</h1><p><code>{}</code></p><p>{}.</p>",
        esc(command),
        esc(&totals(results, wall))
    );
    if failed.is_empty() {
        p.push_str(
            r#"<p class="verdict pass">Every strategy documented as safe showed 0 violations and no stall.</p>"#,
        );
    } else {
        let _ = write!(
            p,
            r#"<p class="verdict fail">{} cell(s) of a strategy documented as safe showed violations or a stall.</p>"#,
            failed.len()
        );
    }
    p.push_str("<p>Each number is the invariant violations counted from what the database accepted (its history table), not from what the workers claimed. Green: 0. Red: the strategy let bad data in. Orange, <i>+ stalled</i>: the lock stopped being free for anyone (a lock wait gave up, or the lock was held with no expiry), a liveness failure counted apart from the data. <b>safe</b> marks the strategies leasehold documents as safe by design (a lease or a Redlock lease whose fence the resource checks, database guards).</p>");

    let faults: Vec<Fault> = Fault::value_variants()
        .iter()
        .copied()
        .filter(|f| results.iter().any(|r| r.fault == *f))
        .collect();
    let strategies: Vec<Strategy> = Strategy::value_variants()
        .iter()
        .copied()
        .filter(|s| results.iter().any(|r| r.strategy == *s))
        .collect();
    p.push_str("<h2>Violations: strategy × fault, per workload</h2>");
    for w in Workload::value_variants() {
        let cells: Vec<&CellResult> = results.iter().filter(|r| r.workload == *w).collect();
        if cells.is_empty() {
            continue;
        }
        let _ = write!(
            p,
            "<h3>{w} — {}</h3><table><tr><th>strategy</th>",
            super::checker::violation_kind(*w)
        );
        for f in &faults {
            let _ = write!(p, "<th>{f}</th>");
        }
        p.push_str("</tr>");
        for s in &strategies {
            let _ = write!(
                p,
                r#"<tr><td class="name">{s}{}</td>"#,
                if s.safe_by_design() {
                    " <b>safe</b>"
                } else {
                    ""
                }
            );
            for f in &faults {
                match cells.iter().find(|r| r.strategy == *s && r.fault == *f) {
                    Some(r) => p.push_str(&badge(r)),
                    None => p.push_str(r#"<td class="na"></td>"#),
                }
            }
            p.push_str("</tr>");
        }
        p.push_str("</table>");
    }

    p.push_str("<h2>Timelines: who held the lease when</h2>");
    p.push_str(r##"<p class="legend"><span><span class="sw" style="background:#3b73b9"></span>a worker holding the lease (its own account)</span><span><span class="sw" style="background:#e0302a;opacity:.4"></span>two holders at once</span><span><span class="sw" style="background:repeating-linear-gradient(45deg,#999 0 3px,#fff 3px 6px)"></span>fault</span><span><span class="sw" style="background:#2a8a2a;width:3px"></span>accepted write</span><span><span class="sw" style="background:#d0201a;width:4px"></span>write that broke the invariant</span><span><b>✕</b> stale write refused by the fence</span><span><span class="sw" style="background:#e08a00"></span>a lock wait that gave up (stall)</span></p>"##);
    let mut first = true;
    for r in results {
        let Some(t) = &r.timeline else { continue };
        let open = (r.fault == Fault::Pause && r.workload == Workload::Counter) || first;
        first = false;
        let _ = write!(
            p,
            "<details{}><summary>{} × {} × {} — {} {}, {}, {} stale writes refused</summary>{}</details>",
            if open { " open" } else { "" },
            r.workload,
            r.fault,
            r.strategy,
            r.violations.unwrap_or(0),
            r.violation_kind,
            r.overlapping_holders
                .map(|o| format!("{o} overlapping holder pairs"))
                .unwrap_or_else(|| "no lock".into()),
            r.refused_stale,
            svg(t)
        );
    }

    p.push_str("<h2>All cells</h2><table><tr><th>workload</th><th>fault</th><th>strategy</th><th>safe by design</th><th>operations</th><th>faults injected</th><th>violations</th><th>stalls</th><th>overlapping holders</th><th>accepted</th><th>refused stale</th><th>refused by guard</th><th>note</th></tr>");
    for r in results {
        let (ops, faults, _, overlaps) = cell_text(r);
        let _ = write!(
            p,
            r#"<tr><td class="name">{}</td><td class="name">{}</td><td class="name">{}</td><td>{}</td><td>{ops}</td><td>{faults}</td>{}<td>{}</td><td>{overlaps}</td><td>{}</td><td>{}</td><td>{}</td><td style="text-align:left">{}</td></tr>"#,
            r.workload,
            r.fault,
            r.strategy,
            if r.safe_by_design { "yes" } else { "no" },
            badge(r),
            r.stalls,
            r.accepted_writes,
            r.refused_stale,
            r.refused_by_guard,
            esc(&r.note)
        );
    }
    p.push_str("</table></body></html>\n");
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_closer_than_the_gap_are_drawn_as_one() {
        let runs = merge([(10, 20), (0, 5), (21, 30), (40, 50)].into_iter(), 2);
        assert_eq!(
            runs,
            vec![
                Run {
                    start: 0,
                    end: 5,
                    count: 1
                },
                Run {
                    start: 10,
                    end: 30,
                    count: 2
                },
                Run {
                    start: 40,
                    end: 50,
                    count: 1
                },
            ]
        );
    }
}
