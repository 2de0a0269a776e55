//! `leasehold run --once-per PERIOD NAME -- COMMAND` and `leasehold history NAME`: a scheduled job
//! fired on every replica runs once per slot, and what ran in each slot is on record.
//!
//! Promise: as [`leasehold::schedule`]'s: replicas whose clocks are apart by up to half the period
//! claim the same slot; a slot recorded done is not run again; a failed or lost run leaves it open
//! for the next claim, up to `--max-attempts`. The command runs under the slot's lease exactly as
//! `run` runs a command (same supervision, same codes), with `LEASEHOLD_SLOT` (the slot's number)
//! and `LEASEHOLD_SLOT_START` (its start, ms since the epoch) beside `LEASEHOLD_FENCE`.
//!
//! Limit: the record lives in the lease store: a Redis without persistence that restarts forgets
//! it (the slot may run again), and the retention (at least two periods) bounds how far back
//! `history` sees. A job whose effect must happen once per slot records the slot in its own
//! transaction (`leasehold::schedule::record_in`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold::schedule::{self, Claim, Firing, Outcome, Schedule, Slot, SlotRecord};
use leasehold::{LeaseClient, LeaseOptions};

use crate::cli::{HistoryArgs, RunArgs};
use crate::command::{finish, run_command, Ended, Signals};
use crate::duration::show;
use crate::exit;
use crate::inspect::{check_name, connect, fail};

/// The code a slot's last attempt ended with, for `--max-attempts` reached.
fn code_of(r: &SlotRecord) -> i32 {
    match (r.outcome, r.exit_code) {
        (Outcome::Lost | Outcome::Running, _) => exit::LOST,
        (_, Some(code)) if code != 0 => code,
        _ => exit::SOFTWARE,
    }
}

fn ago(unix_ms: u64) -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    show(Duration::from_millis(now.saturating_sub(unix_ms)))
}

/// `run --once-per`: claims the slot of now, runs the command if it is ours, records the outcome.
pub(crate) async fn run(
    args: &RunArgs,
    client: &LeaseClient,
    opts: &LeaseOptions,
    signals: &mut Signals,
) -> i32 {
    if args.permits > 1 {
        eprintln!("leasehold: --once-per runs one command per slot; drop --permits");
        return exit::USAGE;
    }
    let holder = leasehold::election::default_holder();
    let slot = match firing(args, client, opts, &holder).await {
        Ok(slot) => slot,
        Err(code) => return code,
    };
    let claimed = tokio::select! {
        c = schedule::claim(client, &args.name, slot, opts, args.max_attempts, &holder) => c,
        sig = signals.recv() => return crate::command::aborted_settled(client, sig, "the slot stays open").await,
    };
    match claimed {
        Ok(Claim::Run(run)) => run_slot(args, slot, run, signals).await,
        Ok(other) => not_ours(args, slot, other),
        Err(e) => fail(&e),
    }
}

/// The slot this firing is for; a firing past its slot's `--starting-deadline` records the slot
/// missed and gives the code to exit with.
async fn firing(
    args: &RunArgs,
    client: &LeaseClient,
    opts: &LeaseOptions,
    holder: &str,
) -> Result<Slot, i32> {
    let period = args.once_per.expect("called with --once-per");
    let sched = Schedule::every(period)
        .and_then(|s| s.offset(args.offset.unwrap_or(Duration::ZERO)))
        .map_err(|e| fail(&e))?;
    // The store's clock tells a late firing from one early by a skewed clock (see
    // `Schedule::firing`); a store without one leaves the judgement to our own clock.
    let store_now = client
        .store_clock_ms()
        .await
        .ok()
        .flatten()
        .and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| UNIX_EPOCH + Duration::from_millis(ms));
    let deadline = args.starting_deadline.unwrap_or(period);
    match sched.firing(SystemTime::now(), store_now, deadline) {
        Firing::Run(slot) => Ok(slot),
        Firing::Missed(slot) => {
            eprintln!(
                "leasehold: this firing of `{}` is slot {}'s, {} after its start, past --starting-deadline {}: recorded missed, command not run",
                args.name,
                slot.index,
                ago(slot.start_unix_ms),
                show(deadline)
            );
            schedule::mark(
                client,
                &args.name,
                slot,
                Outcome::Missed,
                "deadline",
                opts,
                holder,
            )
            .await
            .map_err(|e| fail(&e))?;
            Err(args.done_exit_code)
        }
    }
}

/// A slot someone else runs, ran, or gave up on: what to say and the code to exit with.
fn not_ours(args: &RunArgs, slot: Slot, claim: Claim) -> i32 {
    match claim {
        Claim::Busy => {
            eprintln!(
                "leasehold: slot {} of `{}` is running elsewhere; command not run",
                slot.index, args.name
            );
            args.supervise.busy_exit_code
        }
        Claim::Done(r) => {
            if args.verbose {
                eprintln!(
                    "leasehold: slot {} of `{}` is done (by {}, {} ago, attempt {}); command not run",
                    slot.index,
                    args.name,
                    r.holder,
                    ago(r.started_unix_ms),
                    r.attempts
                );
            }
            args.done_exit_code
        }
        Claim::Exhausted(r) => {
            eprintln!(
                "leasehold: slot {} of `{}` failed {} time(s), the last {:?} (exit {}); --max-attempts {} reached, command not run",
                slot.index,
                args.name,
                r.attempts,
                r.outcome,
                r.exit_code.map_or("none".to_owned(), |c| c.to_string()),
                args.max_attempts
            );
            code_of(&r)
        }
        _ => exit::SOFTWARE,
    }
}

/// Runs the command under the slot's lease, records its outcome, releases.
async fn run_slot(
    args: &RunArgs,
    slot: Slot,
    run: schedule::SlotRun,
    signals: &mut Signals,
) -> i32 {
    let (lease, record) = run.into_parts();
    if args.verbose {
        eprintln!(
            "leasehold: running slot {} of `{}` (attempt {}, fence {})",
            slot.index,
            args.name,
            record.attempts,
            lease.fence()
        );
    }
    // LEASEHOLD_NAME is the job's name; the slot is beside it.
    let env = vec![
        ("LEASEHOLD_SLOT", slot.index.to_string()),
        ("LEASEHOLD_SLOT_START", slot.start_unix_ms.to_string()),
    ];
    let ended = run_command(args, &lease, signals, env).await;
    let (exit_code, lost) = match &ended {
        Ended::Exited(code) => (*code, false),
        Ended::Lost => (None, true),
        Ended::Failed(code) => (Some(*code), false),
    };
    match schedule::finish_with(&lease, record, exit_code, lost).await {
        Ok(r) if args.verbose => eprintln!(
            "leasehold: slot {} of `{}` recorded {:?}",
            slot.index, args.name, r.outcome
        ),
        Ok(_) => {}
        Err(e) => eprintln!(
            "leasehold: warning: the outcome of slot {} of `{}` could not be recorded ({}); a later run reads it as lost and runs it again",
            slot.index,
            args.name,
            exit::describe(&e)
        ),
    }
    finish(args, lease, ended).await
}

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
        ago(r.started_unix_ms),
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
                println!(
                    "{}",
                    serde_json::to_value(&records).expect("records serialize")
                );
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
