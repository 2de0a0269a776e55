//! `leasehold run --once-per PERIOD NAME -- COMMAND`: a scheduled job fired on every replica runs
//! once per slot, and what ran in each slot is on record (`leasehold history`, [`super::history`]).
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

use crate::cli::RunArgs;
use crate::duration::show;
use crate::exit;
use crate::output::shown_ago;
use crate::store::fail;
use crate::supervise::{aborted_settled, finish, run_command, Ended, Signals, Supervised};

/// The code a slot's last attempt ended with, for `--max-attempts` reached.
fn code_of(r: &SlotRecord) -> i32 {
    match (r.outcome, r.exit_code) {
        (Outcome::Lost | Outcome::Running, _) => exit::LOST,
        (_, Some(code)) if code != 0 => code,
        _ => exit::SOFTWARE,
    }
}

/// `run --once-per`: claims the slot of now, runs the command if it is ours, records the outcome.
pub(crate) async fn run(
    args: &RunArgs,
    supervised: &Supervised<'_>,
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
        sig = signals.recv() => return aborted_settled(client, sig, "the slot stays open").await,
    };
    match claimed {
        Ok(Claim::Run(run)) => run_slot(args, supervised, slot, run, signals).await,
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
                shown_ago(slot.start_unix_ms),
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
                    shown_ago(r.started_unix_ms),
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
    supervised: &Supervised<'_>,
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
    let ended = run_command(supervised, &lease, signals, env).await;
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
    finish(supervised, lease, ended).await
}
