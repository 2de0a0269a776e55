//! `leasehold history NAME`: what ran in each slot of a `run --once-per` job (or a `cron` job), as
//! lines, JSON, or Prometheus text. Promise: the records the store keeps, newest first. Limit: a
//! record lives as long as the store keeps the slot's name (at least two periods); a Redis without
//! persistence that restarts forgets them.

use std::time::Duration;

use leasehold::schedule::{self, Outcome, SlotRecord};

use crate::cli::HistoryArgs;
use crate::duration::show;
use crate::output::{print_json, shown_ago};
use crate::store::{check_name, connect, fail};

fn human(r: &SlotRecord) -> String {
    let duration = r
        .duration_ms
        .map(|ms| show(Duration::from_millis(ms)))
        .unwrap_or_else(|| "-".into());
    let code = r
        .exit_code
        .map(|c| c.to_string())
        .unwrap_or_else(|| "-".into());
    format!(
        "{:<12} {:<8} attempts {:<2} exit {:<4} took {:<8} started {} ago, by {}, fence {}",
        r.slot.index,
        format!("{:?}", r.outcome).to_lowercase(),
        r.attempts,
        code,
        duration,
        shown_ago(r.started_unix_ms),
        r.holder,
        r.fence
    )
}

/// The metrics people alert on, for node_exporter's textfile collector.
fn prometheus(job: &str, records: &[SlotRecord]) -> String {
    let label = job.replace('\\', "\\\\").replace('"', "\\\"");
    let last_success = records
        .iter()
        .filter(|r| r.outcome == Outcome::Done)
        .map(|r| r.started_unix_ms + r.duration_ms.unwrap_or(0))
        .max();
    let count = |o: Outcome| records.iter().filter(|r| r.outcome == o).count();
    let mut out = String::new();
    out.push_str(
        "# HELP leasehold_job_last_success_timestamp_seconds When the job last succeeded.\n",
    );
    out.push_str("# TYPE leasehold_job_last_success_timestamp_seconds gauge\n");
    if let Some(ms) = last_success {
        out.push_str(&format!(
            "leasehold_job_last_success_timestamp_seconds{{leasehold_job=\"{label}\"}} {:.3}\n",
            ms as f64 / 1000.0
        ));
    }
    out.push_str("# HELP leasehold_job_slots Slots on record, by outcome.\n");
    out.push_str("# TYPE leasehold_job_slots gauge\n");
    for (name, o) in [
        ("done", Outcome::Done),
        ("failed", Outcome::Failed),
        ("lost", Outcome::Lost),
        ("running", Outcome::Running),
        ("missed", Outcome::Missed),
        ("skipped", Outcome::Skipped),
    ] {
        out.push_str(&format!(
            "leasehold_job_slots{{leasehold_job=\"{label}\",outcome=\"{name}\"}} {}\n",
            count(o)
        ));
    }
    out
}

/// `leasehold history NAME`.
pub(crate) async fn history(args: HistoryArgs) -> i32 {
    if let Err(code) = check_name(&args.store, &args.name) {
        return code;
    }
    let client = match connect(&args.store).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    // The metrics count every slot on record; the listing shows the newest `--limit`.
    let limit = if args.prometheus {
        usize::MAX
    } else {
        args.limit
    };
    match schedule::history(&client, &args.name, limit).await {
        Ok(records) => {
            if args.json {
                print_json(&records);
            } else if args.prometheus {
                print!("{}", prometheus(&args.name, &records));
            } else if records.is_empty() {
                eprintln!("leasehold: no slot of `{}` on record", args.name);
            } else {
                println!(
                    "{:<12} {:<8} (newest first; job `{}`)",
                    "slot", "outcome", args.name
                );
                for r in &records {
                    println!("{}", human(r));
                }
            }
            0
        }
        Err(e) => fail(&e),
    }
}
