//! `leasehold run NAME -- COMMAND`: the command runs only while this process holds the lease, and is
//! stopped when the lease is lost or when this process dies.
//!
//! Promise: the command is started only after the lease was acquired; when the lease is lost (renewal
//! failed until the deadline, `--max-hold` reached, or an operator's forced release) the command (its
//! whole process group when stdin is not a terminal, and every process descended from it) gets
//! SIGTERM at once and SIGKILL after `--grace`, and `run` exits 76. The command's parent is a small
//! watcher process ([`crate::watcher`]): if `run` itself dies, SIGKILL and OOM killer included, the
//! watcher stops the command the same way at once, and nothing renews the lease, which lapses within
//! its TTL. When the command exits, whatever it left running is stopped the same way before the lease
//! is released.
//!
//! Limit: between the moment the lease is really gone and the moment the command dies, it still runs
//! (up to the lease's drift allowance plus the grace period, longer if this process itself is paused:
//! a paused `run` is alive, so its watcher waits). Work that must not overlap has to present
//! `LEASEHOLD_FENCE` to a fenced resource. A `kill -9` aimed at both `run` and its watcher leaves the
//! command running.

use std::io::IsTerminal;
use std::time::Duration;

use leasehold::{Error, Fence, Lease, LeaseClient, LeaseOptions, LostReason};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::cli::RunArgs;
use crate::duration::show;
use crate::exit;
use crate::inspect::{check_name, connect};
use crate::watcher::{self, Order, Report, Watcher};

/// The signals `run` passes on to the command's process group: SIGINT, SIGTERM, SIGHUP, SIGQUIT.
/// Installed before anything else so that a Ctrl-C during the wait for the lease aborts the wait
/// cleanly instead of killing us mid-acquire.
struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
        })
    }

    /// The next signal received. Cancel safe.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}

/// How long `run` waits for the release after the command exited.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `leasehold run`; returns the exit code.
pub(crate) async fn run(args: RunArgs) -> i32 {
    if let Err(code) = check_name(&args.store, &args.name) {
        return code;
    }
    let opts = match lease_options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("leasehold: {e}");
            return exit::USAGE;
        }
    };
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("leasehold: cannot install signal handlers: {e}");
            return exit::SOFTWARE;
        }
    };
    if let Some(addr) = args.metrics_addr {
        if let Err(e) = metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
        {
            eprintln!("leasehold: cannot serve metrics on {addr}: {e}; pick a free address for --metrics-addr");
            return exit::USAGE;
        }
    }

    let client = tokio::select! {
        c = connect(&args.store) => match c { Ok(c) => c, Err(code) => return code },
        sig = signals.recv() => return aborted(sig, "nothing held"),
    };
    let lease = tokio::select! {
        l = acquire(&client, &args, &opts) => match l { Ok(l) => l, Err(code) => return code },
        sig = signals.recv() => return aborted(
            sig,
            &format!("if the acquire had reached the store, the lease expires unrenewed within {}", show(args.ttl)),
        ),
    };
    if args.verbose {
        let permit = if args.permits > 1 {
            format!("one of {} permits of ", args.permits)
        } else {
            String::new()
        };
        eprintln!(
            "leasehold: acquired {permit}`{}` (fence {}, ttl {})",
            args.name,
            lease.fence(),
            show(args.ttl)
        );
    }
    supervise(&args, lease, &mut signals).await
}

fn lease_options(args: &RunArgs) -> leasehold::Result<LeaseOptions> {
    let mut b = LeaseOptions::builder().ttl(args.ttl).permits(args.permits);
    if let Some(max) = args.max_hold {
        b = b.max_hold(max);
    }
    b.build()
}

/// Exit code when a signal arrives before the command was started: nothing to forward it to.
fn aborted(sig: Signal, held: &str) -> i32 {
    eprintln!("leasehold: interrupted by {sig} before the command started; {held}");
    128 + sig as i32
}

async fn acquire(client: &LeaseClient, args: &RunArgs, opts: &LeaseOptions) -> Result<Lease, i32> {
    let result = if args.wait.is_zero() {
        client.try_acquire(&args.name, opts).await
    } else {
        client.acquire(&args.name, opts, args.wait).await
    };
    match result {
        Ok(lease) => Ok(lease),
        Err(Error::Busy { remaining, .. }) => {
            eprintln!(
                "leasehold: `{}` is busy{}; command not run",
                args.name,
                held_for(remaining)
            );
            Err(args.busy_exit_code)
        }
        Err(Error::WaitTimeout { waited, .. }) => {
            // Ask once more how long it stays held, for the operator's next move.
            let remaining = client
                .inspect(&args.name)
                .await
                .ok()
                .and_then(|i| i.ttl_ms)
                .map(Duration::from_millis);
            eprintln!(
                "leasehold: `{}` is still busy after waiting {}{}; command not run",
                args.name,
                show(waited),
                held_for(remaining)
            );
            Err(args.busy_exit_code)
        }
        Err(e) => Err(crate::inspect::fail(&e)),
    }
}

fn held_for(remaining: Option<Duration>) -> String {
    remaining
        .map(|d| format!(" (held by another process for about {} more)", show(d)))
        .unwrap_or_default()
}

/// The churn period, when the test knob is set to a duration.
pub(crate) fn thread_churn() -> Option<Duration> {
    let value = std::env::var(crate::watcher::THREAD_CHURN_KNOB).ok()?;
    crate::duration::parse(&value).ok().filter(|d| !d.is_zero())
}

/// Starts the command through the watcher, forwards signals, stops the command when the lease is
/// lost, stops what it left behind when it exits, and releases.
async fn supervise(args: &RunArgs, lease: Lease, signals: &mut Signals) -> i32 {
    let program = args
        .command
        .first()
        .expect("clap requires at least one COMMAND word")
        .to_string_lossy()
        .into_owned();
    // Not on a terminal (cron, systemd, CI): the command gets its own process group, so a lost lease
    // stops the whole tree, not only the direct child. On a terminal it stays in our group, so it can
    // read the terminal (a background group would be stopped by SIGTTIN) and gets Ctrl-C from it.
    let terminal = std::io::stdin().is_terminal();
    if let Some(every) = thread_churn() {
        tokio::spawn(async move {
            loop {
                let _ = tokio::task::spawn_blocking(|| ()).await;
                tokio::time::sleep(every).await;
            }
        });
    }
    let spec = watcher::Spec {
        command: &args.command,
        env: vec![
            ("LEASEHOLD_NAME", args.name.clone()),
            ("LEASEHOLD_FENCE", lease.fence().to_string()),
        ],
        grace: args.grace,
        terminal,
    };
    let mut watcher = match Watcher::start(spec).await {
        Ok(w) => w,
        Err(e) => {
            eprintln!(
                "leasehold: cannot start the watcher process for the command: {e}; command not run"
            );
            release(args, lease, false).await;
            return exit::SOFTWARE;
        }
    };
    let pid = match watcher.next().await {
        Some(Report::Started(pid)) => pid,
        Some(Report::Failed { code, message }) => {
            eprintln!("leasehold: cannot run {program}: {message}");
            watcher.reap().await;
            release(args, lease, false).await;
            return code;
        }
        _ => {
            // It may have died between starting the command and saying so: look for it.
            eprintln!(
                "leasehold: the watcher process died before reporting the command; stopping whatever it started"
            );
            stop_without_watcher(None, terminal, &args.name, lease.fence(), args.grace).await;
            watcher.reap().await;
            release(args, lease, false).await;
            return exit::SOFTWARE;
        }
    };
    let lost = lease.lost();
    let mut lost_reason: Option<LostReason> = None;
    let mut exited: Option<i32> = None;
    let mut stopping = false;

    let watcher_gone = loop {
        tokio::select! {
            report = watcher.next() => match report {
                Some(Report::Exited(code)) => {
                    exited = Some(code);
                    if !stopping {
                        // Whatever the command left running in its group or below it must not
                        // outlive the lease either.
                        watcher.send(Order::Stop(args.grace)).await;
                        stopping = true;
                    }
                }
                Some(Report::Leftovers(n)) => eprintln!(
                    "leasehold: the command exited but left {n} process(es) running; sending them SIGTERM, SIGKILL in {}",
                    show(args.grace)
                ),
                Some(Report::Killing) => eprintln!(
                    "leasehold: the command outlived --grace {}; sending SIGKILL",
                    show(args.grace)
                ),
                Some(Report::Stopped) => break false,
                Some(Report::Started(_) | Report::Failed { .. }) => {}
                None => break true,
            },
            reason = lost.fired(), if lost_reason.is_none() && exited.is_none() => {
                eprintln!(
                    "leasehold: lost lease `{}`: {reason}; sending SIGTERM to the command, SIGKILL in {}",
                    args.name, show(args.grace)
                );
                lost_reason = Some(reason);
                watcher.send(Order::Stop(args.grace)).await;
                stopping = true;
            }
            sig = signals.recv() => {
                // On a terminal, Ctrl-C and Ctrl-\ already reached the command from the terminal.
                let from_terminal = matches!(sig, Signal::SIGINT | Signal::SIGQUIT);
                if !(terminal && from_terminal) {
                    watcher.send(Order::Signal(sig)).await;
                }
            }
        }
    };
    if watcher_gone {
        eprintln!(
            "leasehold: the watcher process (pid {}) died; stopping the command (pid {pid}) from here",
            watcher.pid().map(|p| p.to_string()).unwrap_or_else(|| "?".into())
        );
        stop_without_watcher(
            Some(Pid::from_raw(pid as i32)),
            terminal,
            &args.name,
            lease.fence(),
            args.grace,
        )
        .await;
    }
    watcher.reap().await;
    if lost_reason.is_some() {
        release(args, lease, true).await;
        return exit::LOST;
    }
    release(args, lease, false).await;
    exited.unwrap_or(exit::SOFTWARE)
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

async fn release(args: &RunArgs, lease: Lease, already_lost: bool) {
    // The command is done; do not hang on a store that stopped answering. The TTL cleans up. A lost
    // lease's release is a courtesy (it frees a max-hold lease early), so it gets less patience.
    let patience = if already_lost {
        RELEASE_TIMEOUT / 5
    } else {
        RELEASE_TIMEOUT
    };
    let result = match tokio::time::timeout(patience, lease.release()).await {
        Ok(r) => r,
        Err(_) => {
            eprintln!(
                "leasehold: warning: the store did not answer the release within {}; the lease expires by itself within {}",
                show(patience),
                show(args.ttl)
            );
            return;
        }
    };
    match result {
        Ok(()) => {
            if args.verbose {
                eprintln!("leasehold: released `{}`", args.name);
            }
        }
        Err(Error::LeaseLost { .. }) if already_lost => {}
        Err(e @ Error::LeaseLost { .. }) => {
            eprintln!("leasehold: warning: {e}; the command finished, but may have overlapped with another holder at its end");
        }
        Err(e) => {
            eprintln!(
                "leasehold: warning: release failed ({}); the lease expires by itself within {}",
                exit::describe(&e),
                show(args.ttl)
            );
        }
    }
}
