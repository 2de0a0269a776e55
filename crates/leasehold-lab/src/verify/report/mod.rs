//! The results as a terminal table and as an HTML page with SVG timelines of who held the lease when.
//!
//! Limit: the timelines draw the holders' own account of their intervals (the lock keeps no history);
//! the writes and their violations on it come from the resource's history. The timelines' SVG is
//! `svg.rs`; each cell's record for an outside checker (`--history-dir`) is `history.rs`.

pub(crate) mod history;
mod svg;

use std::fmt::Write as _;
use std::time::Duration;

use super::cell::{CellResult, CellStatus};
use super::strategy::Strategy;
use super::{Fault, Workload};
use svg::{esc, svg};

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
    let mut p = String::new();
    page_head(&mut p);
    verdict(&mut p, results, command, wall);
    matrix(&mut p, results);
    timelines(&mut p, results);
    all_cells(&mut p, results);
    p.push_str("</table></body></html>\n");
    p
}

fn page_head(p: &mut String) {
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
}

/// The command, the totals, the verdict and how to read the numbers.
fn verdict(p: &mut String, results: &[CellResult], command: &str, wall: Duration) {
    let failed: Vec<&CellResult> = results.iter().filter(|r| r.broke_a_promise()).collect();

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
}

/// Per workload, a table of strategy × fault.
fn matrix(p: &mut String, results: &[CellResult]) {
    use clap::ValueEnum as _;
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
}

/// A timeline per cell that ran, the first and the counter's pause cells open.
fn timelines(p: &mut String, results: &[CellResult]) {
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
}

/// Every cell with every number.
fn all_cells(p: &mut String, results: &[CellResult]) {
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
}
