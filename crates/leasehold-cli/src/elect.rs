//! `leasehold elect NAME -- COMMAND` and `leasehold leader NAME`: an election on the lease store,
//! the command run while leading under `run`'s supervision, and who leads.
//!
//! Promise: the command starts only once this candidate leads and its record (value, holder, term)
//! is written; it gets LEASEHOLD_TERM, the leadership's fence. It is stopped as `run` stops a
//! command when the leadership is lost, and when it ends the leadership is resigned at once, so the
//! next candidate leads within a round trip. With `--again` the candidate then queues again, until a
//! signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT) ends it: the signal goes to the command, the leadership
//! is resigned as soon as the command is gone, and `elect` exits without campaigning again.
//!
//! Limit: as `run`'s: a deposed leader's command runs on until it is stopped (the drift allowance
//! plus --grace, longer if `elect` itself is paused); only writes fenced with LEASEHOLD_TERM are
//! refused at once. `leader` is a snapshot for operators and health checks, never a basis for
//! deciding who may write.

use std::time::Duration;

use leasehold::election::{leader_of, Election, Leader};
use leasehold::Error;

use crate::cli::{ElectArgs, LeaderArgs, RunArgs};
use crate::command::{aborted, supervise};
use crate::duration::show;
use crate::exit;
use crate::inspect::{check_name, connect, fail};
use crate::run::prepare;

/// The `run` settings an election's leadership is supervised with.
fn as_run_args(a: &ElectArgs) -> RunArgs {
    RunArgs {
        store: a.store.clone(),
        wait: a.wait.unwrap_or(Duration::MAX),
        max_hold: None,
        min_hold: None,
        once_per: None,
        offset: None,
        starting_deadline: None,
        max_attempts: 1,
        done_exit_code: 0,
        supervise: a.supervise.clone(),
        permits: 1,
        verbose: a.verbose,
        name: a.name.clone(),
        command: a.command.clone(),
    }
}

/// Runs `leasehold elect`; returns the exit code.
pub(crate) async fn elect(args: ElectArgs) -> i32 {
    if let Err(code) = check_name(&args.store, &args.name) {
        return code;
    }
    let run_args = as_run_args(&args);
    let (opts, mut signals) = match prepare(&run_args) {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    let client = tokio::select! {
        c = connect(&args.store) => match c { Ok(c) => c, Err(code) => return code },
        sig = signals.recv() => return aborted(sig, "not a candidate yet"),
    };
    let election =
        match Election::new(&client, &args.name, &opts).and_then(|e| match &args.holder {
            Some(h) => e.with_holder(h),
            None => Ok(e),
        }) {
            Ok(e) => e,
            Err(e) => return fail(&e),
        };
    let health = match crate::run::serve_health(&args.supervise, &client, &args.name).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let value = args.value.clone().unwrap_or_else(|| {
        args.holder
            .clone()
            .unwrap_or_else(leasehold::election::default_holder)
    });
    loop {
        let leadership = tokio::select! {
            l = election.campaign(&value, run_args.wait) => match l {
                Ok(l) => l,
                Err(Error::Busy { .. } | Error::WaitTimeout { .. }) => {
                    eprintln!(
                        "leasehold: did not lead `{}` within {}; command not run",
                        args.name,
                        show(run_args.wait)
                    );
                    return args.supervise.busy_exit_code;
                }
                Err(e) => return fail(&e),
            },
            sig = signals.recv() => return aborted(
                sig,
                "withdrawn from the campaign (a leadership taken meanwhile is resigned in the background)",
            ),
        };
        let term = leadership.term();
        if args.verbose {
            eprintln!(
                "leasehold: leading `{}` (term {term}, value {value:?})",
                args.name
            );
        }
        if let Some(h) = &health {
            h.holding(Some((leadership.health(), term)));
        }
        let code = supervise(
            &run_args,
            leadership.into_lease(),
            &mut signals,
            vec![("LEASEHOLD_TERM", term.to_string())],
        )
        .await;
        if let Some(h) = &health {
            h.holding(None);
        }
        if args.verbose {
            eprintln!(
                "leasehold: resigned `{}` (term {term}); the command exited {code}",
                args.name
            );
        }
        if !args.again || signals.last().is_some() {
            return code;
        }
        if args.verbose {
            eprintln!("leasehold: campaigning for `{}` again", args.name);
        }
    }
}

/// One line for a leader, or for nobody.
fn human(name: &str, leader: &Option<Leader>) -> String {
    let Some(l) = leader else {
        return format!("{name}: no leader");
    };
    let value = l
        .value
        .as_deref()
        .map(|v| format!("value {v:?}"))
        .unwrap_or_else(|| {
            "no value advertised (held as a plain lease, or not yet written)".into()
        });
    let holder = l
        .holder
        .as_deref()
        .map(|h| format!(", holder {h}"))
        .unwrap_or_default();
    let since = l
        .since_unix_ms
        .and_then(|ms| {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?
                .as_millis();
            let ago = u64::try_from(now).ok()?.checked_sub(ms)?;
            Some(format!(
                ", leading for {}",
                show(Duration::from_millis(ago))
            ))
        })
        .unwrap_or_default();
    let ttl = l
        .ttl_ms
        .map(|ms| format!(", lease {} left", show(Duration::from_millis(ms))))
        .unwrap_or_default();
    format!("{name}: term {}, {value}{holder}{since}{ttl}", l.term)
}

fn print(args: &LeaderArgs, leader: &Option<Leader>) {
    if args.json {
        println!(
            "{}",
            serde_json::to_value(leader).expect("Leader serializes")
        );
    } else {
        println!("{}", human(&args.name, leader));
    }
}

/// `leasehold leader NAME [--watch]`.
pub(crate) async fn leader(args: LeaderArgs) -> i32 {
    if let Err(code) = check_name(&args.store, &args.name) {
        return code;
    }
    let client = match connect(&args.store).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !args.watch {
        return match leader_of(&client, &args.name).await {
            Ok(l) => {
                print(&args, &l);
                if l.is_some() {
                    0
                } else {
                    exit::NO_LEADER
                }
            }
            Err(e) => fail(&e),
        };
    }
    let opts = match leasehold::LeaseOptions::with_ttl(Duration::from_secs(30)) {
        Ok(o) => o,
        Err(e) => return fail(&e),
    };
    let mut observer = match Election::new(&client, &args.name, &opts) {
        Ok(e) => e.observe(),
        Err(e) => return fail(&e),
    };
    loop {
        tokio::select! {
            changed = observer.changed() => match changed {
                Ok(l) => print(&args, &l),
                Err(e) => {
                    // Said once per failure; the observer asks again.
                    eprintln!("leasehold: {}", exit::describe(&e));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
            _ = tokio::signal::ctrl_c() => return 0,
        }
    }
}
