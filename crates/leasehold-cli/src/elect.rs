//! `leasehold elect NAME -- COMMAND` and `leasehold leader NAME`: an election on the lease store,
//! the command run while leading under `run`'s supervision, and who leads.
//!
//! Promise: the command starts only once this candidate leads and its record (value, holder, term)
//! is written; it gets LEASEHOLD_TERM, the leadership's fence. It is stopped as `run` stops a
//! command when the leadership is lost, and when it ends the leadership is resigned at once, so the
//! next candidate leads within a round trip. With `--again` the candidate then queues again, until a
//! signal (SIGTERM, SIGINT, SIGHUP, SIGQUIT) ends it: the signal goes to the command, the leadership
//! is resigned as soon as the command is gone, and `elect` exits without campaigning again. When
//! renewals fail it is stopped as `run` stops a command (before the store may hand the leadership
//! on). With `--again`, a failed campaign (an outage, a grant that came too late) sends it back to
//! standby, and `--on-lead`/`--on-lose` run hooks as the leadership comes and goes.
//!
//! Limit: as `run`'s: if `elect` itself is paused past the stop instant, a deposed leader's command
//! runs on beside the next; only writes fenced with LEASEHOLD_TERM are refused at once. `leader` is
//! a snapshot for operators and health checks, never a basis for
//! deciding who may write.

use std::time::Duration;

use leasehold::election::{leader_of, Election, Leader, Leadership};
use leasehold::Error;

use crate::cli::{ElectArgs, LeaderArgs, RunArgs};
use crate::command::{aborted, aborted_settled, supervise, Signals};
use crate::duration::show;
use crate::exit;
use crate::hooks::Hook;
use crate::inspect::{check_name, connect, fail};
use crate::setup::{prepare, serve_health, Prepared};

/// The `run` settings an election's leadership is supervised with.
fn as_run_args(a: &ElectArgs) -> RunArgs {
    RunArgs {
        store: a.store.clone(),
        wait: match (a.no_wait, a.wait) {
            (true, _) => Duration::ZERO,
            (false, wait) => wait.unwrap_or(Duration::MAX),
        },
        no_wait: a.no_wait,
        max_hold: None,
        min_hold: None,
        once_per: None,
        offset: None,
        starting_deadline: None,
        max_attempts: 1,
        done_exit_code: 0,
        supervise: a.supervise.clone(),
        holder: None,
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
    let (on_lead, on_lose) = match (
        Hook::check("--on-lead", args.on_lead.as_deref()),
        Hook::check("--on-lose", args.on_lose.as_deref()),
    ) {
        (Ok(lead), Ok(lose)) => (lead, lose),
        (Err(code), _) | (_, Err(code)) => return code,
    };
    let mut run_args = as_run_args(&args);
    let opts = leasehold::LeaseOptions::builder()
        .ttl(run_args.supervise.ttl)
        .build();
    let Prepared {
        opts,
        mut signals,
        listener,
    } = match prepare(&mut run_args.supervise, opts) {
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
    let health = match serve_health(listener, &client, &args.name).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    let value = args.value.clone().unwrap_or_else(|| {
        args.holder
            .clone()
            .unwrap_or_else(leasehold::election::default_holder)
    });
    let candidate = Candidate {
        args: &args,
        run_args,
        client,
        election,
        value,
        health,
        on_lead,
        on_lose,
    };
    candidate.stand(&mut signals).await
}

/// A candidate ready to campaign: what each term needs.
struct Candidate<'a> {
    args: &'a ElectArgs,
    run_args: RunArgs,
    client: leasehold::LeaseClient,
    election: Election,
    value: String,
    health: Option<crate::health::Health>,
    on_lead: Option<Hook>,
    on_lose: Option<Hook>,
}

/// What a campaign came to.
enum Campaign {
    Leads(Leadership),
    /// Back to standby (`--again` after an outage).
    Again,
    /// Done: exit with this code.
    Exit(i32),
}

impl Candidate<'_> {
    /// Campaigns, leads, and (with `--again`) campaigns again, until a signal or the end.
    async fn stand(&self, signals: &mut Signals) -> i32 {
        loop {
            let leadership = match self.campaign(signals).await {
                Campaign::Leads(l) => l,
                Campaign::Again => continue,
                Campaign::Exit(code) => return code,
            };
            let code = self.lead(leadership, signals).await;
            if !self.args.again || signals.last().is_some() {
                return code;
            }
            if self.args.verbose {
                eprintln!("leasehold: campaigning for `{}` again", self.args.name);
            }
        }
    }

    /// One campaign, within `--wait`; a signal withdraws it.
    async fn campaign(&self, signals: &mut Signals) -> Campaign {
        let (args, wait) = (self.args, self.run_args.wait);
        let result = tokio::select! {
            l = self.election.campaign(&self.value, wait) => l,
            sig = signals.recv() => return Campaign::Exit(aborted_settled(
                &self.client,
                sig,
                "withdrawn from the campaign (a leadership taken meanwhile is resigned)",
            ).await),
        };
        match result {
            Ok(l) => Campaign::Leads(l),
            Err(Error::Busy { .. } | Error::WaitTimeout { .. }) => {
                eprintln!(
                    "leasehold: did not lead `{}` within {}; command not run",
                    args.name,
                    show(wait)
                );
                Campaign::Exit(args.supervise.busy_exit_code)
            }
            // With --again an outage (or a leadership lost before it was recorded) sends the
            // candidate back to standby, not out: it campaigns again after a pause.
            Err(e) if args.again && standby_after(&e) => {
                eprintln!(
                    "leasehold: campaign for `{}` failed: {}; campaigning again (--again)",
                    args.name,
                    exit::describe(&e)
                );
                tokio::select! {
                    _ = tokio::time::sleep(again_pause()) => Campaign::Again,
                    sig = signals.recv() => Campaign::Exit(aborted(sig, "not a candidate any more")),
                }
            }
            Err(e) => Campaign::Exit(fail(&e)),
        }
    }

    /// One term: advertised, the hooks around it, the command supervised as `run`'s; its code.
    async fn lead(&self, leadership: Leadership, signals: &mut Signals) -> i32 {
        let (args, value) = (self.args, &self.value);
        let term = leadership.term();
        if args.verbose {
            eprintln!(
                "leasehold: leading `{}` (term {term}, value {value:?})",
                args.name
            );
        }
        if let Some(h) = &self.health {
            h.advertising(Some(serde_json::json!({
                "name": args.name,
                "term": term.get(),
                "value": leadership.value(),
                "holder": leadership.holder(),
            })));
            h.holding(Some((leadership.health(), term)));
        }
        if let Some(hook) = &self.on_lead {
            hook.run("lead", &args.name, term.get(), value).await;
        }
        let code = supervise(
            &self.run_args,
            leadership.into_lease(),
            signals,
            vec![("LEASEHOLD_TERM", term.to_string())],
        )
        .await;
        if let Some(hook) = &self.on_lose {
            hook.run("lose", &args.name, term.get(), value).await;
        }
        if let Some(h) = &self.health {
            h.holding(None);
            h.advertising(None);
        }
        if args.verbose {
            eprintln!(
                "leasehold: resigned `{}` (term {term}); the command exited {code}",
                args.name
            );
        }
        code
    }
}

/// Whether a failed campaign sends an `--again` candidate back to standby: an outage, a timeout,
/// a leadership lost before it was recorded. Bad input and refusals (credentials, permissions, a
/// misconfigured store) end it: campaigning again cannot help.
fn standby_after(e: &Error) -> bool {
    matches!(
        e,
        Error::LeaseLost { .. } | Error::Timeout { .. } | Error::NoQuorum { .. }
    ) || matches!(e, Error::Store { kind, .. } if kind.is_retryable())
}

/// The pause before campaigning again after a failed campaign: 200-400 ms, jittered so that
/// candidates that failed together do not come back together.
fn again_pause() -> Duration {
    Duration::from_millis(200 + u64::from(std::process::id() % 200))
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
