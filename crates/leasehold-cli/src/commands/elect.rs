//! `leasehold elect NAME -- COMMAND`: an election on the lease store, the command run while leading
//! under the same supervision as `run`'s ([`crate::supervise`]).
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
//! runs on beside the next; only writes fenced with LEASEHOLD_TERM are refused at once.

use std::time::Duration;

use leasehold::election::{Election, Leadership};
use leasehold::Error;

use crate::cli::ElectArgs;
use crate::duration::show;
use crate::exit;
use crate::store::{check_name, connect, fail};
use crate::supervise::hooks::Hook;
use crate::supervise::setup::{prepare, serve_health, Prepared};
use crate::supervise::{aborted, aborted_settled, supervise, Signals, Supervised};

/// Runs `leasehold elect`; returns the exit code.
pub(crate) async fn elect(mut args: ElectArgs) -> i32 {
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
    let opts = leasehold::LeaseOptions::builder()
        .ttl(args.supervise.ttl)
        .build();
    let Prepared {
        opts,
        mut signals,
        listener,
    } = match prepare(&mut args.supervise, opts) {
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
        supervised: Supervised::new(&args.name, &args.command, &args.supervise, args.verbose),
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
    /// How each term's command is supervised.
    supervised: Supervised<'a>,
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
        let (args, wait) = (self.args, self.args.wait());
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
            &self.supervised,
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
