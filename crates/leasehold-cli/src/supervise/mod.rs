//! The supervision `run`, `run --once-per`, `elect` and a `cron` job's run share: the command under
//! a lease. Each command builds a [`Supervised`] of its own (the name, the command, the grace, what
//! a suspect lease does) and calls [`supervise`], or [`run_command`] then [`finish`] when it records
//! something between the two.
//!
//! Promise: the command is started only after the lease was acquired (and, for a lease handed
//! over with a short first TTL, renewed once). It is stopped before anyone else can hold the name:
//! when renewals fail, the command (its whole process group when stdin is not a terminal, and every
//! process descended from it) gets SIGTERM `--grace` before [`leasehold::Lease::stop_by`] (the
//! holder's conservative estimate of the store's earliest hand-over, less the drift allowance and
//! 100 ms) and SIGKILL at that instant, and `run` exits 76; `--grace` must fit inside the lease
//! ([`leasehold::LeaseOptions::check_shutdown`], else exit 2). A lease lost otherwise (`--max-hold`
//! reached, an operator's forced release) stops the command at once the same way, SIGKILL at the
//! earlier of `--grace` and the stop instant. A lease that becomes suspect (at risk: renewals
//! failing, or the store's clock running fast) is said once on stderr (`--on-suspect warn`, the
//! default) or stops the command the same way, exit 76 too (`--on-suspect stop`). The command's
//! parent is a small watcher process ([`watcher`]): if `run` itself dies, SIGKILL and OOM
//! killer included, the watcher stops the command at once, and nothing renews the lease, which
//! lapses within its TTL. When the command exits, whatever it left running is stopped the same way
//! before the lease is released.
//!
//! Limit: the stop is ordered by this process: if `run` itself is paused past the stop instant, a
//! paused `run` is alive, so its watcher waits, and the command runs on beside the next holder.
//! Work that must not overlap has to present `LEASEHOLD_FENCE` to a fenced resource. A `kill -9`
//! aimed at both `run` and its watcher leaves the command running.
//!
//! Rooms: [`terms`] (what a command asks, how the command ended), [`signals`] (what is passed on, and a signal before the command started), [`watch`] (the
//! running command watched, the stop before hand-over, the fallback without a watcher), [`release`]
//! (the release after it), [`watcher`] (the command's parent process), [`setup`] (the grace that
//! fits the lease, the listener; before connecting), [`hooks`] (`elect --on-lead`/`--on-lose`).

pub(crate) mod hooks;
mod release;
pub(crate) mod setup;
pub(crate) mod signals;
mod terms;
mod watch;
pub(crate) mod watcher;

use std::io::IsTerminal;
use std::time::Duration;

use leasehold::{Fence, Lease};
use nix::unistd::Pid;

use crate::exit;
use release::release;
pub(crate) use signals::{aborted, aborted_settled, Signals};
pub(crate) use terms::{Ended, Supervised};
use watch::{full_ttl_ahead, stop_without_watcher, Supervision, WatcherGone};
use watcher::{Report, Watcher};

/// The churn period, when the test knob is set to a duration.
pub(crate) fn thread_churn() -> Option<Duration> {
    let value = std::env::var(watcher::THREAD_CHURN_KNOB).ok()?;
    crate::duration::parse(&value).ok().filter(|d| !d.is_zero())
}

/// Starts the command through the watcher, forwards signals, stops the command when the lease is
/// lost, stops what it left behind when it exits, and releases. `env` adds to the command's
/// environment (an election's `LEASEHOLD_TERM`).
pub(crate) async fn supervise(
    args: &Supervised<'_>,
    lease: Lease,
    signals: &mut Signals,
    env: Vec<(&'static str, String)>,
) -> i32 {
    let ended = run_command(args, &lease, signals, env).await;
    finish(args, lease, ended).await
}

/// Releases after the command ended (after `--min-hold`, when it ended sooner) and gives the exit
/// code.
pub(crate) async fn finish(args: &Supervised<'_>, lease: Lease, ended: Ended) -> i32 {
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
    args: &Supervised<'_>,
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
    let mut s = Supervision::new(args, lease, terminal);
    if s.watch(&mut watcher, signals).await == WatcherGone::Yes {
        eprintln!(
            "leasehold: the watcher process (pid {}) died; stopping the command (pid {pid}) from here",
            watcher.pid().map(|p| p.to_string()).unwrap_or_else(|| "?".into())
        );
        stop_without_watcher(
            Some(Pid::from_raw(pid as i32)),
            terminal,
            args.name,
            lease.fence(),
            args.grace,
        )
        .await;
    }
    watcher.reap().await;
    s.ended()
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
    args: &Supervised<'_>,
    lease: &Lease,
    env: Vec<(&'static str, String)>,
    terminal: bool,
) -> Result<(Watcher, u32), Ended> {
    let spec = watcher::Spec {
        command: args.command,
        env: [
            ("LEASEHOLD_NAME", args.name.to_owned()),
            ("LEASEHOLD_FENCE", lease.fence().to_string()),
        ]
        .into_iter()
        .chain(env)
        .collect(),
        grace: args.grace,
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
            stop_without_watcher(None, terminal, args.name, lease.fence(), args.grace).await;
            watcher.reap().await;
            Err(Ended::Failed(exit::SOFTWARE))
        }
    }
}

/// Waits until nothing the command of `name` under `fence` started is left (the processes that
/// carry both in their environment), at most `within`: a run dropped before its end counts as
/// ended only then.
pub(crate) async fn until_gone(name: &str, fence: Fence, within: Duration) {
    let marks = [
        format!("LEASEHOLD_NAME={name}"),
        format!("LEASEHOLD_FENCE={fence}"),
    ];
    let until = tokio::time::Instant::now() + within;
    while !watcher::processes_marked(&marks).is_empty() && tokio::time::Instant::now() < until {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
