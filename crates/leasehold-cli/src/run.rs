//! `leasehold run NAME -- COMMAND`: the command runs only while this process holds the lease, and is
//! stopped when the lease is lost.
//!
//! Promise: the command is started only after the lease was acquired; when the lease is lost (renewal
//! failed until the deadline, `--max-hold` reached, or an operator's forced release) the command (its
//! whole process group when stdin is not a terminal) gets SIGTERM at once and SIGKILL after
//! `--grace`, and `run` exits 76. Limit: between the moment the lease is really gone and the moment
//! the command dies, it still runs (up to the lease's drift allowance plus the grace period, longer if
//! this process itself is paused). Work that must not overlap has to present `LEASEHOLD_FENCE` to a
//! fenced resource. If `run` itself is SIGKILLed, the command keeps running unsupervised while the
//! lease expires after one TTL.

use std::io::{ErrorKind, IsTerminal};
use std::time::Duration;

use leasehold::{Error, Lease, LeaseClient, LeaseOptions, LostReason};
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use tokio::process::Command;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::cli::RunArgs;
use crate::duration::show;
use crate::exit;
use crate::inspect::{check_name, connect};

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
        eprintln!(
            "leasehold: acquired `{}` (fence {}, ttl {})",
            args.name,
            lease.fence(),
            show(args.ttl)
        );
    }
    supervise(&args, lease, &mut signals).await
}

fn lease_options(args: &RunArgs) -> leasehold::Result<LeaseOptions> {
    let mut b = LeaseOptions::builder().ttl(args.ttl);
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

/// Starts the command, forwards signals, stops it when the lease is lost, releases after it exits.
async fn supervise(args: &RunArgs, lease: Lease, signals: &mut Signals) -> i32 {
    let (program, rest) = args
        .command
        .split_first()
        .expect("clap requires at least one COMMAND word");
    let mut cmd = Command::new(program);
    cmd.args(rest)
        .env("LEASEHOLD_NAME", &args.name)
        .env("LEASEHOLD_FENCE", lease.fence().to_string());
    // Not on a terminal (cron, systemd, CI): the command gets its own process group, so a lost lease
    // stops the whole tree, not only the direct child. On a terminal it stays in our group, so it can
    // read the terminal (a background group would be stopped by SIGTTIN) and gets Ctrl-C from it.
    let target = if std::io::stdin().is_terminal() {
        Target::Process
    } else {
        cmd.process_group(0);
        Target::Group
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            };
            eprintln!("leasehold: cannot run {}: {e}", program.to_string_lossy());
            release(args, lease, false).await;
            return code;
        }
    };
    let pid = Pid::from_raw(child.id().expect("a just-spawned child has a pid") as i32);
    let lost = lease.lost();
    let mut lost_reason: Option<LostReason> = None;
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;

    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            reason = lost.fired(), if lost_reason.is_none() => {
                eprintln!(
                    "leasehold: lost lease `{}`: {reason}; sending SIGTERM to the command, SIGKILL in {}",
                    args.name, show(args.grace)
                );
                lost_reason = Some(reason);
                target.send(pid, Signal::SIGTERM);
                kill_at = Some(Instant::now() + args.grace);
            }
            _ = sleep_until_opt(kill_at), if kill_at.is_some() && !killed => {
                eprintln!("leasehold: the command outlived --grace {}; sending SIGKILL", show(args.grace));
                target.send(pid, Signal::SIGKILL);
                killed = true;
            }
            sig = signals.recv() => {
                // On a terminal, Ctrl-C and Ctrl-\ already reached the command from the terminal.
                let from_terminal = matches!(sig, Signal::SIGINT | Signal::SIGQUIT);
                if !(target == Target::Process && from_terminal) {
                    target.send(pid, sig);
                }
            }
        }
    };
    let code = match status {
        Ok(st) => exit_code_of(st),
        Err(e) => {
            eprintln!("leasehold: lost track of the command: {e}");
            exit::SOFTWARE
        }
    };
    if lost_reason.is_some() {
        // The direct child is gone; the rest of its group got SIGTERM too and must not outlive the grace.
        if target == Target::Group {
            reap_group(pid, kill_at.unwrap_or_else(Instant::now)).await;
        }
        release(args, lease, true).await;
        return exit::LOST;
    }
    release(args, lease, false).await;
    code
}

/// Whom `run` signals: the command's own process group, or (on a terminal) the command alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Group,
    Process,
}

impl Target {
    fn send(self, pid: Pid, sig: Signal) {
        let _ = match self {
            Target::Group => killpg(pid, sig),
            Target::Process => kill(pid, sig),
        };
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Waits until the process group is empty, SIGKILLing it at `deadline`.
async fn reap_group(pgid: Pid, deadline: Instant) {
    loop {
        if killpg(pgid, None).is_err() {
            return; // no process left in the group
        }
        if Instant::now() >= deadline {
            let _ = killpg(pgid, Signal::SIGKILL);
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The command's exit code, or 128 + the signal that killed it (as shells report it).
fn exit_code_of(st: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    st.code()
        .or_else(|| st.signal().map(|s| 128 + s))
        .unwrap_or(exit::SOFTWARE)
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
