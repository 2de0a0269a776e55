//! The running command watched: the watcher's reports, the lease's stop instant (stop before
//! hand-over: SIGTERM `--grace` before it, SIGKILL at it), its loss, its health, and the signals
//! passed on; and the fallback that stops the command from here when the watcher itself died.

use std::time::Duration;

use leasehold::{Fence, Lease, LeaseHealth, LostReason, Stop};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::time::Instant;

use super::signals::Signals;
use super::terms::{Ended, Supervised};
use super::watcher::{self, Order, Report, Watcher};
use crate::cli::OnSuspect;
use crate::duration::show;
use crate::exit;

/// Whether the watcher process went away without saying the command is gone.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum WatcherGone {
    Yes,
    No,
}

/// What happened so far to a running command and its lease.
pub(super) struct Supervision<'a> {
    args: &'a Supervised<'a>,
    lease: &'a Lease,
    terminal: bool,
    /// Warned of (or stopped for) a suspect lease: once per run.
    suspect_seen: bool,
    stopped_suspect: bool,
    lost_reason: Option<LostReason>,
    exited: Option<i32>,
    /// A stop was ordered (SIGTERM sent, SIGKILL to follow).
    stopping: bool,
    /// Stopped because the lease was about to lapse (the stop-before-hand-over rule).
    stopped_early: bool,
}

impl<'a> Supervision<'a> {
    /// Nothing happened yet.
    pub(super) fn new(args: &'a Supervised<'a>, lease: &'a Lease, terminal: bool) -> Self {
        Supervision {
            args,
            lease,
            terminal,
            suspect_seen: false,
            stopped_suspect: false,
            lost_reason: None,
            exited: None,
            stopping: false,
            stopped_early: false,
        }
    }

    /// How the command ended, once [`watch`](Self::watch) returned.
    pub(super) fn ended(&self) -> Ended {
        if self.lost_reason.is_some() || self.stopped_suspect || self.stopped_early {
            return Ended::Lost;
        }
        Ended::Exited(self.exited)
    }

    /// Watches until the watcher says everything is gone (or is gone itself): its reports, the
    /// lease's stop instant, its loss, its health, and the signals to pass on.
    pub(super) async fn watch(
        &mut self,
        watcher: &mut Watcher,
        signals: &mut Signals,
    ) -> WatcherGone {
        let (args, lease) = (self.args, self.lease);
        let lost = lease.lost();
        let mut health = lease.health();
        let early_stop_off = args.stop_at_deadline;
        loop {
            let running = !self.stopping && self.exited.is_none();
            tokio::select! {
                report = watcher.next() => match report {
                    Some(Report::Stopped) => return WatcherGone::No,
                    None => return WatcherGone::Yes,
                    Some(report) => self.reported(watcher, report).await,
                },
                stop = lease.stopping(args.grace), if !early_stop_off && running => {
                    self.stop_before_lapse(watcher, stop).await;
                }
                // The old rule (`--stop-at-deadline`), and the reason of a loss once stopping.
                reason = lost.fired(), if self.lost_reason.is_none() && self.exited.is_none() => {
                    self.lost(watcher, reason).await;
                }
                now = health.at_risk(), if !self.suspect_seen && self.lost_reason.is_none() && running => {
                    self.at_risk(watcher, now).await;
                }
                sig = signals.recv() => {
                    // On a terminal, Ctrl-C and Ctrl-\ already reached the command from the terminal.
                    let from_terminal = matches!(sig, Signal::SIGINT | Signal::SIGQUIT);
                    if !(self.terminal && from_terminal) {
                        watcher.send(Order::Signal(sig)).await;
                    }
                }
            }
        }
    }

    /// Orders the stop, SIGKILL `grace` after SIGTERM.
    async fn stop(&mut self, watcher: &mut Watcher, grace: Duration) {
        watcher.send(Order::Stop(grace)).await;
        self.stopping = true;
    }

    async fn reported(&mut self, watcher: &mut Watcher, report: Report) {
        let grace = self.args.grace;
        match report {
            Report::Exited(code) => {
                self.exited = Some(code);
                if !self.stopping {
                    // Whatever the command left running in its group or below it must not
                    // outlive the lease either.
                    self.stop(watcher, grace).await;
                }
            }
            Report::Leftovers(n) => eprintln!(
                "leasehold: the command exited but left {n} process(es) running; sending them SIGTERM, SIGKILL in {}",
                show(grace)
            ),
            Report::Killing => eprintln!(
                "leasehold: the command outlived --grace {}; sending SIGKILL",
                show(grace)
            ),
            Report::Started(_) | Report::Failed { .. } | Report::Stopped => {}
        }
    }

    /// The lease's stop instant came (or it was lost first): SIGTERM now, SIGKILL at that instant.
    async fn stop_before_lapse(&mut self, watcher: &mut Watcher, stop: Stop) {
        let name = self.args.name;
        let grace = grace_left(self.args, self.lease);
        match stop {
            Stop::Lost(reason) => {
                self.lost_reason = Some(reason);
                eprintln!(
                    "leasehold: lost lease `{name}`: {reason}; sending SIGTERM to the command, SIGKILL in {}",
                    show(grace)
                );
            }
            _ => {
                self.stopped_early = true;
                eprintln!(
                    "leasehold: lease `{name}` is about to lapse: {stop}; sending SIGTERM to the command, SIGKILL in {} (before anyone else can hold the name)",
                    show(grace)
                );
            }
        }
        self.stop(watcher, grace).await;
    }

    async fn lost(&mut self, watcher: &mut Watcher, reason: LostReason) {
        self.lost_reason = Some(reason);
        if !self.stopping {
            let grace = grace_left(self.args, self.lease);
            eprintln!(
                "leasehold: lost lease `{}`: {reason}; sending SIGTERM to the command, SIGKILL in {}",
                self.args.name,
                show(grace)
            );
            self.stop(watcher, grace).await;
        }
    }

    /// A suspect lease: said once, or the command stopped under `--on-suspect stop`.
    async fn at_risk(&mut self, watcher: &mut Watcher, now: LeaseHealth) {
        self.suspect_seen = true;
        let LeaseHealth::Suspect { reason } = now else {
            return;
        };
        let name = self.args.name;
        match self.args.on_suspect {
            OnSuspect::Warn => eprintln!(
                "leasehold: warning: lease `{name}` is at risk: {reason}; the command runs on (its deadline is in {}; --on-suspect stop would stop it now)",
                show(self.lease.remaining())
            ),
            OnSuspect::Stop => {
                let grace = grace_left(self.args, self.lease);
                eprintln!(
                    "leasehold: lease `{name}` is at risk: {reason}; --on-suspect stop: sending SIGTERM to the command, SIGKILL in {}",
                    show(grace)
                );
                self.stopped_suspect = true;
                self.stop(watcher, grace).await;
            }
        }
    }
}

/// The grace a stop ordered now can give: `--grace`, cut so that SIGKILL comes no later than the
/// lease's stop instant (before the store may hand the name on). The old rule
/// (`--stop-at-deadline`) gives the whole grace whatever the lease.
fn grace_left(args: &Supervised<'_>, lease: &Lease) -> Duration {
    let grace = args.grace;
    if args.stop_at_deadline {
        return grace;
    }
    grace.min(lease.stop_by().saturating_duration_since(Instant::now()))
}

/// Before the command starts: a lease handed over with a short first TTL (the hand-off queue's)
/// has its stop instant close until its first renewal; renew once now so that the command starts
/// with the whole grace ahead of it. A renewal that fails means the command does not start.
pub(super) async fn full_ttl_ahead(args: &Supervised<'_>, lease: &Lease) -> Result<(), i32> {
    let ahead = lease.stop_by().saturating_duration_since(Instant::now());
    if args.stop_at_deadline || ahead > args.grace + lease.options().stop_margin() {
        return Ok(());
    }
    match lease.renew().await {
        Ok(()) => Ok(()),
        Err(e) => {
            eprintln!(
                "leasehold: the lease `{}` was handed over with a short first TTL and its first renewal failed: {}; command not run",
                args.name,
                exit::describe(&e)
            );
            Err(exit::for_error(&e, exit::BUSY))
        }
    }
}

/// The fallback when the watcher is gone: the command is init's child now, so we find its processes
/// ourselves. Its process group (off a terminal) and every process whose environment names this
/// holder (`LEASEHOLD_NAME` and `LEASEHOLD_FENCE`, inherited by all it started) get SIGTERM and
/// SIGCONT, then SIGKILL after the grace. Missed: a process that both left the group and was started
/// with a cleared environment.
pub(super) async fn stop_without_watcher(
    command: Option<Pid>,
    terminal: bool,
    name: &str,
    fence: Fence,
    grace: Duration,
) {
    let marks = [
        format!("LEASEHOLD_NAME={name}"),
        format!("LEASEHOLD_FENCE={fence}"),
    ];
    let group = command.filter(|_| !terminal);
    let send = |sig: Signal| {
        if let Some(g) = group {
            let _ = killpg(g, sig);
        }
        for (pid, pgid) in watcher::processes_marked(&marks) {
            // Each process once: the group's members already got it.
            if Some(pgid) != group {
                let _ = kill(pid, sig);
            }
        }
    };
    let alive = || {
        group.is_some_and(|g| killpg(g, None).is_ok())
            || !watcher::processes_marked(&marks).is_empty()
    };
    send(Signal::SIGTERM);
    send(Signal::SIGCONT);
    let deadline = Instant::now() + grace;
    while alive() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    while alive() && Instant::now() < deadline + Duration::from_secs(5) {
        send(Signal::SIGKILL);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
