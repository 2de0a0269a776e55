//! The SVG picture of one cell: one row per worker, its lease intervals as bars, the overlaps in
//! red, the fault windows hatched, accepted writes as ticks (red when they broke the invariant),
//! refused stale writes as crosses, stalled lock waits in orange.
//!
//! Limit: marks less than a pixel apart are drawn as one (a full run's cell has thousands of
//! holds and writes); the tooltip says how many went into a merged bar.

use std::fmt::Write as _;

use super::super::cell::Timeline;
use super::super::checker::Interval;

/// Escapes text for HTML and SVG.
pub(super) fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

const SLOT_COLORS: &[&str] = &[
    "#3b73b9", "#2e9c6a", "#9a5ec4", "#c98a1b", "#1b9bb0", "#b0541b",
];

const WIDTH: f64 = 960.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const ROW_H: f64 = 34.0;
const TOP: f64 = 24.0;

/// One cell's picture being drawn: where a time and a worker's row fall.
struct Canvas<'a> {
    t: &'a Timeline,
    span: f64,
    out: String,
}

impl Canvas<'_> {
    fn x(&self, ms: i64) -> f64 {
        let t = self.t;
        LEFT + (ms - t.start_ms).clamp(0, t.end_ms - t.start_ms) as f64 / self.span
            * (WIDTH - LEFT - RIGHT)
    }

    fn row_y(&self, slot: i64) -> f64 {
        TOP + ROW_H * slot as f64
    }

    /// Milliseconds that make less than a pixel.
    fn pixel_ms(&self) -> i64 {
        ((self.span / (WIDTH - LEFT - RIGHT)) as i64).max(1)
    }
}

/// The picture of timeline `t`.
pub(super) fn svg(t: &Timeline) -> String {
    let mut c = Canvas {
        t,
        span: (t.end_ms - t.start_ms).max(1) as f64,
        out: String::new(),
    };
    let height = TOP + ROW_H * t.slots as f64 + 34.0;
    let _ = write!(
        c.out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" font-family="sans-serif" font-size="11">"#
    );
    c.out.push_str(r##"<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" patternTransform="rotate(45)"><rect width="3" height="6" fill="#999" fill-opacity="0.45"/></pattern></defs>"##);
    rows(&mut c);
    fault_windows(&mut c);
    holds(&mut c);
    overlaps(&mut c);
    writes(&mut c);
    stalls(&mut c);
    refusals(&mut c);
    axis(&mut c);
    c.out.push_str("</svg>");
    c.out
}

fn rows(c: &mut Canvas<'_>) {
    for slot in 0..c.t.slots {
        let y = c.row_y(slot as i64);
        let _ = write!(
            c.out,
            r##"<text x="4" y="{}" fill="#333">worker {slot}</text><line x1="{LEFT}" x2="{}" y1="{}" y2="{}" stroke="#ddd"/>"##,
            y + 17.0,
            WIDTH - RIGHT,
            y + ROW_H - 2.0,
            y + ROW_H - 2.0
        );
    }
}

fn fault_windows(c: &mut Canvas<'_>) {
    for f in &c.t.faults {
        let y = c.row_y(f.slot as i64);
        let (x0, x1) = (c.x(f.start_ms), c.x(f.end_ms));
        let _ = write!(
            c.out,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="url(#hatch)" stroke="#777" stroke-dasharray="3,2"><title>{} injected on worker {}</title></rect><text x="{:.1}" y="{:.1}" fill="#555">{}</text>"##,
            x0,
            y + 2.0,
            (x1 - x0).max(2.0),
            ROW_H - 6.0,
            esc(&f.label),
            f.slot,
            x0 + 2.0,
            y + 12.0,
            esc(&f.label)
        );
    }
}

/// Each worker's holds, less than a pixel apart drawn as one: drawn one by one they made a page of
/// tens of megabytes.
fn holds(c: &mut Canvas<'_>) {
    let t = c.t;
    let gap = c.pixel_ms();
    for slot in 0..t.slots {
        let y = c.row_y(slot as i64);
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
            let (x0, x1) = (c.x(run.start), c.x(run.end));
            let _ = write!(
                c.out,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="12" fill="{color}" fill-opacity="0.75"><title>worker {slot} {what}</title></rect>"#,
                x0,
                y + 14.0,
                (x1 - x0).max(1.0),
            );
        }
    }
}

fn overlaps(c: &mut Canvas<'_>) {
    for run in merge(c.t.overlaps.iter().copied(), c.pixel_ms()) {
        let (x0, x1) = (c.x(run.start), c.x(run.end));
        let _ = write!(
            c.out,
            r##"<rect x="{:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="#e0302a" fill-opacity="0.28"><title>two holders at once</title></rect>"##,
            x0,
            (x1 - x0).max(1.5),
            ROW_H * c.t.slots as f64
        );
    }
}

/// Accepted writes: one path of ticks per worker, one tick per pixel column; the writes that broke
/// the invariant one red line each.
fn writes(c: &mut Canvas<'_>) {
    let t = c.t;
    for slot in 0..t.slots as i64 {
        let y = c.row_y(slot);
        let mut columns: Vec<i64> = t
            .writes
            .iter()
            .filter(|&&(_, writer, bad)| writer == slot && !bad)
            .map(|&(at, _, _)| c.x(at).round() as i64)
            .collect();
        columns.sort_unstable();
        columns.dedup();
        if !columns.is_empty() {
            let mut d = String::new();
            for cx in &columns {
                let _ = write!(d, "M{cx} {:.0}V{:.0}", y + 22.0, y + 30.0);
            }
            let _ = write!(
                c.out,
                r##"<path d="{d}" stroke="#2a8a2a" stroke-width="1"><title>accepted writes</title></path>"##
            );
        }
    }
    for &(at, writer, bad) in &t.writes {
        if !bad {
            continue;
        }
        let (x, y) = (c.x(at), c.row_y(writer));
        let _ = write!(
            c.out,
            r##"<line x1="{0:.1}" x2="{0:.1}" y1="{1:.1}" y2="{2:.1}" stroke="#d0201a" stroke-width="2.5"><title>accepted write that broke the invariant</title></line>"##,
            x,
            y + 14.0,
            y + 30.0,
        );
    }
}

fn stalls(c: &mut Canvas<'_>) {
    for &(a, b, slot) in &c.t.stalls {
        let y = c.row_y(slot as i64);
        let (x0, x1) = (c.x(a), c.x(b));
        let _ = write!(
            c.out,
            r##"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="6" fill="#e08a00" fill-opacity="0.8"><title>worker {slot} waited {} ms for a lock nobody freed</title></rect>"##,
            x0,
            y + 4.0,
            (x1 - x0).max(1.5),
            b - a
        );
    }
}

fn refusals(c: &mut Canvas<'_>) {
    for &(at, slot, fence) in &c.t.refusals {
        let y = c.row_y(slot as i64) + 20.0;
        let cx = c.x(at);
        let _ = write!(
            c.out,
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
}

/// The time axis, and a word when the cell took no lock.
fn axis(c: &mut Canvas<'_>) {
    let t = c.t;
    let axis_y = TOP + ROW_H * t.slots as f64 + 14.0;
    let total = t.end_ms - t.start_ms;
    let step = [100, 250, 500, 1000, 2000, 5000, 10_000]
        .into_iter()
        .find(|s| total / s <= 12)
        .unwrap_or(20_000);
    let mut tick = 0;
    while tick <= total {
        let x = c.x(t.start_ms + tick);
        let _ = write!(
            c.out,
            r##"<text x="{:.1}" y="{axis_y}" fill="#666" text-anchor="middle">{}</text>"##,
            x,
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
            c.out,
            r##"<text x="{LEFT}" y="{}" fill="#666">no lock: only the writes and what the database refused</text>"##,
            axis_y + 14.0
        );
    }
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
