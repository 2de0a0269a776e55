//! The command under a lease, for `run`, `run --once-per` and `elect`: the signals forwarded to it,
//! starting it through the watcher ([`crate::watcher`]), stopping it when the lease is lost, stopping
//! what it left behind when it exits, and the release after it. `run.rs` says what this promises.

use std::io::IsTerminal;
use std::time::Duration;

use leasehold::{Error, Fence, Lease, LeaseHealth, LostReason, Stop};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::cli::{OnSuspect, RunArgs};
use crate::duration::show;
use crate::exit;
use crate::watcher::{self, Order, Report, Watcher};

/// The signals `run` passes on to the command's process group: SIGINT, SIGTERM, SIGHUP, SIGQUIT.
/// Installed before anything else so that a Ctrl-C during the wait for the lease aborts the wait
/// cleanly instead of killing us mid-acquire.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    /// The last signal received, if any.
    last: Option<Signal>,
    /// Whether [`recv`](Self::recv) hands signals on; `false` for a `cron` run, whose daemon keeps
    /// SIGHUP (reload) and SIGTERM (drain) for itself.
    forward: bool,
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            last: None,
            forward: true,
        })
    }

    /// Handlers whose [`recv`](Self::recv) never returns: the command is told nothing (a `cron`
    /// daemon's run; the daemon handles its own signals).
    pub(crate) fn silent() -> std::io::Result<Self> {
        let mut s = Self::install()?;
        s.forward = false;
        Ok(s)
    }

    /// The next signal received. Cancel safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        if !self.forward {
            return std::future::pending().await;
        }
        let sig = tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        };
        self.last = Some(sig);
        sig
    }

    /// The last signal received so far, if any.
    pub(crate) fn last(&self) -> Option<Signal> {
        self.last
    }
}

/// How long `run` waits for the release after the command exited.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Exit code when a signal arrives before the command was started: nothing to forward it to.
pub(crate) fn aborted(sig: Signal, held: &str) -> i32 {
    eprintln!("leasehold: interrupted by {sig} before the command started; {held}");
    128 + sig as i32
}

/// How long a process interrupted while waiting gives its withdrawal (and any lease taken
/// meanwhile) to reach the store before it exits.
pub(crate) const SETTLE: Duration = Duration::from_secs(2);

/// As [`aborted`], after the client's background clean-ups (the withdrawal from the store's queue
/// of the acquire the signal cancelled) reached the store, within [`SETTLE`].
pub(crate) async fn aborted_settled(
    client: &leasehold::LeaseClient,
    sig: Signal,
    held: &str,
) -> i32 {
    client.settle(SETTLE).await;
    aborted(sig, held)
}

/// The churn period, when the test knob is set to a duration.
pub(crate) fn thread_churn() -> Option<Duration> {
    let value = std::env::var(crate::watcher::THREAD_CHURN_KNOB).ok()?;
    crate::duration::parse(&value).ok().filter(|d| !d.is_zero())
}

/// Starts the command through the watcher, forwards signals, stops the command when the lease is
/// lost, stops what it left behind when it exits, and releases. `env` adds to the command's
/// environment (an election's `LEASEHOLD_TERM`).
pub(crate) async fn supervise(
    args: &RunArgs,
    lease: Lease,
    signals: &mut Signals,
    env: Vec<(&'static str, String)>,
) -> i32 {
    let ended = run_command(args, &lease, signals, env).await;
    finish(args, lease, ended).await
}

/// How the supervised command ended.
pub(crate) enum Ended {
    /// It could not be started or watched; the exit code to give.
    Failed(i32),
    /// The lease was lost (or became suspect under `--on-suspect stop`) and the command was stopped.
    Lost,
    /// It exited with this code (`None`: the watcher could not say).
    Exited(Option<i32>),
}

/// Releases after the command ended (after `--min-hold`, when it ended sooner) and gives the exit
/// code.
pub(crate) async fn finish(args: &RunArgs, lease: Lease, ended: Ended) -> i32 {
    if let (Some(min), Ended::Exited(_)) = (args.min_hold, &ended) {
        let left = min.saturating_sub(lease.held_for());
        if !left.is_zero() {
            // The lease stays renewed meanwhile: ShedLock's lockAtLeastFor.
            let lost = lease.lost();
            tokio::select! {
                _ = tokio::time::sleep(left) => {}
                _ = lost.fired() => {}
            }
        }
    }
    match ended {
        Ended::Failed(code) => {
            release(args, lease, false).await;
            code
        }
        Ended::Lost => {
            release(args, lease, true).await;
            exit::LOST
        }
        Ended::Exited(exited) => {
            let released = release(args, lease, false).await;
            match exited {
                // The command succeeded, the lease stays held until it lapses: not silent, not 0.
                Some(0) if !released => exit::NOT_RELEASED,
                Some(code) => code,
                None => exit::SOFTWARE,
            }
        }
    }
}

/// Starts the command through the watcher and supervises it until it ended; the lease is still
/// held (or lost) afterwards, for the caller to record and release. The steps: the lease renewed
/// once if it was handed over short ([`full_ttl_ahead`]), the command started ([`start`]), every
/// event watched until the watcher says it is all gone ([`Supervision`]), the fallback if the
/// watcher died ([`stop_without_watcher`]).
pub(crate) async fn run_command(
    args: &RunArgs,
    lease: &Lease,
    signals: &mut Signals,
    env: Vec<(&'static str, String)>,
) -> Ended {
    // Not on a terminal (cron, systemd, CI): the command gets its own process group, so a lost lease
    // stops the whole tree, not only the direct child. On a terminal it stays in our group, so it can
    // read the terminal (a background group would be stopped by SIGTTIN) and gets Ctrl-C from it.
    let terminal = std::io::stdin().is_terminal();
    churn_threads();
    if let Err(code) = full_ttl_ahead(args, lease).await {
        return Ended::Failed(code);
    }
    let (mut watcher, pid) = match start(args, lease, env, terminal).await {
        Ok(started) => started,
        Err(ended) => return ended,
    };
    let mut s = Supervision {
        args,
        lease,
        terminal,
        suspect_seen: false,
        stopped_suspect: false,
        lost_reason: None,
        exited: None,
        stopping: false,
        stopped_early: false,
    };
    if s.watch(&mut watcher, signals).await == WatcherGone::Yes {
        eprintln!(
            "leasehold: the watcher process (pid {}) died; stopping the command (pid {pid}) from here",
            watcher.pid().map(|p| p.to_string()).unwrap_or_else(|| "?".into())
        );
        stop_without_watcher(
            Some(Pid::from_raw(pid as i32)),
            terminal,
            &args.name,
            lease.fence(),
            args.supervise.grace,
        )
        .await;
    }
    watcher.reap().await;
    if s.lost_reason.is_some() || s.stopped_suspect || s.stopped_early {
        return Ended::Lost;
    }
    Ended::Exited(s.exited)
}

/// The test knob: a thread of the runtime's pool started and left to expire every so often.
fn churn_threads() {
    if let Some(every) = thread_churn() {
        tokio::spawn(async move {
            loop {
                let _ = tokio::task::spawn_blocking(|| ()).await;
                tokio::time::sleep(every).await;
            }
        });
    }
}

/// Starts the command through the watcher: the watcher and the command's pid, or how it ended
/// (it could not be started; the watcher died before saying, and whatever it started is stopped).
async fn start(
    args: &RunArgs,
    lease: &Lease,
    env: Vec<(&'static str, String)>,
    terminal: bool,
) -> Result<(Watcher, u32), Ended> {
    let spec = watcher::Spec {
        command: &args.command,
        env: [
            ("LEASEHOLD_NAME", args.name.clone()),
            ("LEASEHOLD_FENCE", lease.fence().to_string()),
        ]
        .into_iter()
        .chain(env)
        .collect(),
        grace: args.supervise.grace,
        terminal,
    };
    let mut watcher = Watcher::start(spec).await.map_err(|e| {
        eprintln!(
            "leasehold: cannot start the watcher process for the command: {e}; command not run"
        );
        Ended::Failed(exit::SOFTWARE)
    })?;
    match watcher.next().await {
        Some(Report::Started(pid)) => Ok((watcher, pid)),
        Some(Report::Failed { code, message }) => {
            let program = args
                .command
                .first()
                .map(|p| p.to_string_lossy().into_owned());
            eprintln!(
                "leasehold: cannot run {}: {message}",
                program.unwrap_or_default()
            );
            watcher.reap().await;
            Err(Ended::Failed(code))
        }
        _ => {
            // It may have died between starting the command and saying so: look for it.
            eprintln!(
                "leasehold: the watcher process died before reporting the command; stopping whatever it started"
            );
            stop_without_watcher(
                None,
                terminal,
                &args.name,
                lease.fence(),
                args.supervise.grace,
            )
            .await;
            watcher.reap().await;
            Err(Ended::Failed(exit::SOFTWARE))
        }
    }
}

/// Whether the watcher process went away without saying the command is gone.
#[derive(Debug, PartialEq, Eq)]
enum WatcherGone {
    Yes,
    No,
}

/// What happened so far to a running command and its lease.
struct Supervision<'a> {
    args: &'a RunArgs,
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

impl Supervision<'_> {
    /// Watches until the watcher says everything is gone (or is gone itself): its reports, the
    /// lease's stop instant, its loss, its health, and the signals to pass on.
    async fn watch(&mut self, watcher: &mut Watcher, signals: &mut Signals) -> WatcherGone {
        let (args, lease) = (self.args, self.lease);
        let lost = lease.lost();
        let mut health = lease.health();
        let early_stop_off = args.supervise.stop_at_deadline;
        loop {
            let running = !self.stopping && self.exited.is_none();
            tokio::select! {
                report = watcher.next() => match report {
                    Some(Report::Stopped) => return WatcherGone::No,
                    None => return WatcherGone::Yes,
                    Some(report) => self.reported(watcher, report).await,
                },
                stop = lease.stopping(args.supervise.grace), if !early_stop_off && running => {
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
        let grace = self.args.supervise.grace;
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
        let name = &self.args.name;
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
        let name = &self.args.name;
        match self.args.supervise.on_suspect {
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
fn grace_left(args: &RunArgs, lease: &Lease) -> Duration {
    let grace = args.supervise.grace;
    if args.supervise.stop_at_deadline {
        return grace;
    }
    grace.min(lease.stop_by().saturating_duration_since(Instant::now()))
}

/// Before the command starts: a lease handed over with a short first TTL (the hand-off queue's)
/// has its stop instant close until its first renewal; renew once now so that the command starts
/// with the whole grace ahead of it. A renewal that fails means the command does not start.
async fn full_ttl_ahead(args: &RunArgs, lease: &Lease) -> Result<(), i32> {
    let ahead = lease.stop_by().saturating_duration_since(Instant::now());
    if args.supervise.stop_at_deadline
        || ahead > args.supervise.grace + lease.options().stop_margin()
    {
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
async fn stop_without_watcher(
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

/// Releases after the command exited; whether the lease is free now (or was lost anyway). A failure
/// is printed with the time the lease lapses by itself.
async fn release(args: &RunArgs, lease: Lease, already_lost: bool) -> bool {
    // The command is done; do not hang on a store that stopped answering. The TTL cleans up. A lost
    // lease's release is a courtesy (it frees a max-hold lease early), so it gets less patience.
    let patience = if already_lost {
        RELEASE_TIMEOUT / 5
    } else {
        RELEASE_TIMEOUT
    };
    // The store lets the lease lapse at most a TTL after the last renewal it accepted; the holder's
    // own deadline plus the drift allowance is no earlier than that.
    let lapses = (lease.remaining() + lease.options().drift()).min(args.supervise.ttl);
    let result = match tokio::time::timeout(patience, lease.release()).await {
        Ok(r) => r,
        Err(_) => {
            eprintln!(
                "leasehold: the store did not answer the release of `{}` within {}; the lease stays held until it lapses by itself within {} (exit {})",
                args.name,
                show(patience),
                show(lapses),
                exit::NOT_RELEASED
            );
            return already_lost;
        }
    };
    match result {
        Ok(()) => {
            if args.verbose {
                eprintln!("leasehold: released `{}`", args.name);
            }
            true
        }
        Err(Error::LeaseLost { .. }) if already_lost => true,
        Err(e @ Error::LeaseLost { .. }) => {
            eprintln!("leasehold: warning: {e}; the command finished, but may have overlapped with another holder at its end");
            true
        }
        Err(e) => {
            eprintln!(
                "leasehold: release of `{}` failed: {}; the lease stays held until it lapses by itself within {} (exit {})",
                args.name,
                exit::describe(&e),
                show(lapses),
                exit::NOT_RELEASED
            );
            already_lost
        }
    }
}
