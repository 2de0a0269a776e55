//! The watcher itself: a small synchronous program, no async runtime. It starts the command, reaps
//! it and every orphan below it, passes `run`'s signals on, and stops everything when `run` orders
//! it or is gone.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::os::unix::process::CommandExt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use super::protocol::{Order, Report, PDEATHSIG_KNOB, THREAD_CHURN_KNOB};
use crate::cli::WatcherArgs;
use crate::exit;

/// Runs the watcher; returns its exit code.
pub(crate) fn main(args: WatcherArgs) -> i32 {
    let blocked = match become_watcher() {
        Ok(blocked) => blocked,
        Err(code) => return code,
    };
    // A `run` that died before we connected has closed its listener: then we start nothing.
    let stream = match SocketAddr::from_abstract_name(&args.socket)
        .and_then(|addr| UnixStream::connect_addr(&addr))
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("leasehold: watcher: `run` is gone ({e}); the command was not started");
            return exit::SOFTWARE;
        }
    };
    let reporter = match stream.try_clone() {
        Ok(s) => Reporter(Arc::new(Mutex::new(s))),
        Err(e) => {
            eprintln!("leasehold: watcher: {e}");
            return exit::SOFTWARE;
        }
    };
    let command = match start(&args, &blocked, &reporter) {
        Ok(pid) => pid,
        Err(code) => return code,
    };
    let tree = Arc::new(Tree {
        command,
        group: args.join_group.is_none().then_some(command),
        state: Mutex::new(TreeState::default()),
        changed: Condvar::new(),
    });
    {
        let tree = Arc::clone(&tree);
        let reporter = reporter.clone();
        std::thread::spawn(move || tree.reap(&reporter));
    }
    obey(
        stream,
        &tree,
        &reporter,
        Duration::from_millis(args.grace_ms),
    )
}

/// Blocks the signals that are not ours, names the process and makes it a child subreaper; the
/// signals blocked, or the exit code.
fn become_watcher() -> Result<SigSet, i32> {
    // Terminal, job-control and termination signals are for `run` and the command, not for us: a
    // blocked signal stays pending and stops nothing. SIGTTOU blocked also lets us write our messages
    // to a terminal from a background group. A child inherits the mask, so it is lifted while the
    // command is spawned.
    let mut blocked = SigSet::empty();
    for sig in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
    ] {
        blocked.add(sig);
    }
    if let Err(e) = blocked.thread_block() {
        eprintln!("leasehold: watcher: cannot block signals: {e}");
        return Err(exit::SOFTWARE);
    }
    // Started as /proc/self/exe, it would show as `exe` in ps and top.
    let _ = nix::sys::prctl::set_name(c"leasehold-watch");
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("leasehold: watcher: cannot become a child subreaper: {e}");
        return Err(exit::SOFTWARE);
    }
    if std::env::var_os(PDEATHSIG_KNOB).is_some() {
        let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    }
    Ok(blocked)
}

/// Starts the command (with the signal mask lifted) and reports it started; its pid, or the exit
/// code (0 when the command could not be started: that is reported to `run`).
fn start(args: &WatcherArgs, blocked: &SigSet, reporter: &Reporter) -> Result<Pid, i32> {
    let (program, rest) = args
        .command
        .split_first()
        .expect("clap requires at least one COMMAND word");
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest)
        .env_remove(PDEATHSIG_KNOB)
        .env_remove(THREAD_CHURN_KNOB);
    cmd.process_group(args.join_group.unwrap_or(0));
    let spawned = blocked.thread_unblock().and_then(|()| {
        let spawned = cmd.spawn();
        blocked.thread_block().map(|()| spawned)
    });
    let spawned = match spawned {
        Ok(s) => s,
        Err(e) => {
            eprintln!("leasehold: watcher: cannot set the signal mask: {e}");
            return Err(exit::SOFTWARE);
        }
    };
    let child = match spawned {
        Ok(c) => c,
        Err(e) => {
            let code = match e.kind() {
                ErrorKind::NotFound => exit::NOT_FOUND,
                _ => exit::CANNOT_EXECUTE,
            };
            reporter.send(&Report::Failed {
                code,
                message: e.to_string(),
            });
            return Err(0);
        }
    };
    let command = Pid::from_raw(child.id() as i32);
    // The reaper below collects the command with waitpid(-1); the standard library's handle must not.
    drop(child);
    reporter.send(&Report::Started(command.as_raw() as u32));
    Ok(command)
}

/// Carries out `run`'s orders until it orders the stop or is gone; then stops everything of the
/// command (SIGKILL `grace` after SIGTERM) and gives the exit code.
fn obey(stream: UnixStream, tree: &Tree, reporter: &Reporter, grace: Duration) -> i32 {
    let mut lines = BufReader::new(stream).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) => match Order::parse(&line) {
                Some(Order::Signal(sig)) => tree.signal(sig),
                Some(Order::Stop(grace)) => {
                    tree.stop(grace, reporter);
                    reporter.send(&Report::Stopped);
                    return 0;
                }
                None => {}
            },
            // End of file: `run` is gone, whatever killed it.
            Some(Err(_)) | None => {
                if !tree.is_empty() {
                    let name = std::env::var("LEASEHOLD_NAME").unwrap_or_default();
                    eprintln!(
                        "leasehold: `run` for lease `{name}` is gone; stopping its command (pid {}): SIGTERM now, SIGKILL in {}",
                        tree.command,
                        crate::duration::show(grace)
                    );
                }
                tree.stop(grace, reporter);
                return 0;
            }
        }
    }
}

/// The socket to `run`, shared by the reaper thread and the main thread.
#[derive(Debug, Clone)]
struct Reporter(Arc<Mutex<UnixStream>>);

impl Reporter {
    /// Sends a report; a `run` that is gone is not an error here (end-of-file tells the main thread).
    fn send(&self, report: &Report) {
        let line = report.line() + "\n";
        if let Ok(mut s) = self.0.lock() {
            let _ = s.write_all(line.as_bytes());
        }
    }
}

/// The command and everything it started.
#[derive(Debug)]
struct Tree {
    command: Pid,
    /// The command's own process group; `None` on a terminal, where it shares `run`'s.
    group: Option<Pid>,
    state: Mutex<TreeState>,
    changed: Condvar,
}

#[derive(Debug, Default)]
struct TreeState {
    /// The command's exit code, once it was reaped.
    exited: Option<i32>,
    /// No child left: as a subreaper we inherit every orphan below us, so no descendant either.
    empty: bool,
}

impl Tree {
    /// Collects every child (the command, and orphans re-parented to us) until none is left.
    fn reap(&self, reporter: &Reporter) {
        loop {
            match waitpid(None::<Pid>, None) {
                Ok(WaitStatus::Exited(pid, code)) if pid == self.command => {
                    self.command_exited(code, reporter)
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == self.command => {
                    self.command_exited(128 + sig as i32, reporter)
                }
                Ok(_) | Err(Errno::EINTR) => {}
                Err(_) => {
                    // ECHILD: nothing left, and nothing can appear (only our descendants could be
                    // re-parented to us, and there are none).
                    self.update(|s| s.empty = true);
                    return;
                }
            }
        }
    }

    fn command_exited(&self, code: i32, reporter: &Reporter) {
        self.update(|s| s.exited = Some(code));
        reporter.send(&Report::Exited(code));
    }

    fn update(&self, f: impl FnOnce(&mut TreeState)) {
        if let Ok(mut s) = self.state.lock() {
            f(&mut s);
        }
        self.changed.notify_all();
    }

    fn is_empty(&self) -> bool {
        self.state.lock().map(|s| s.empty).unwrap_or(true)
    }

    fn has_exited(&self) -> bool {
        self.state
            .lock()
            .map(|s| s.exited.is_some())
            .unwrap_or(true)
    }

    /// Waits until the tree is empty or `deadline` passes; true if empty.
    fn wait_empty(&self, deadline: Instant) -> bool {
        let Ok(mut s) = self.state.lock() else {
            return true;
        };
        while !s.empty {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            s = match self.changed.wait_timeout(s, deadline - now) {
                Ok((s, _)) => s,
                Err(_) => return true,
            };
        }
        true
    }

    /// Passes a signal from `run` on: to the command's group, or on a terminal to the command alone
    /// (as long as it was not reaped, so that its pid cannot belong to someone else).
    fn signal(&self, sig: Signal) {
        match self.group {
            Some(g) => {
                let _ = killpg(g, sig);
            }
            None if !self.has_exited() => {
                let _ = kill(self.command, sig);
            }
            None => {}
        }
    }

    /// Sends `sig` to the command's group and to every descendant outside it (each process once).
    fn send_all(&self, sig: Signal) {
        if let Some(g) = self.group {
            let _ = killpg(g, sig);
        }
        for p in descendants(Pid::this()) {
            if Some(p.group) != self.group {
                let _ = kill(p.pid, sig);
            }
        }
    }

    /// SIGTERM (and SIGCONT, so that a stopped process can act on it) to everything of the command
    /// now, SIGKILL after `grace`; returns when nothing is left.
    fn stop(&self, grace: Duration, reporter: &Reporter) {
        if self.is_empty() {
            return;
        }
        if self.has_exited() {
            let left = descendants(Pid::this())
                .iter()
                .filter(|p| !p.zombie)
                .count();
            if left > 0 {
                reporter.send(&Report::Leftovers(left));
            }
        }
        self.send_all(Signal::SIGTERM);
        self.send_all(Signal::SIGCONT);
        if self.wait_empty(Instant::now() + grace) {
            return;
        }
        reporter.send(&Report::Killing);
        // A process forked between two scans is caught by the next; re-parented orphans stay ours.
        loop {
            self.send_all(Signal::SIGKILL);
            if self.wait_empty(Instant::now() + Duration::from_millis(20)) {
                return;
            }
        }
    }
}

/// A process below the watcher, from `/proc/PID/stat`.
#[derive(Debug, Clone, Copy)]
struct Proc {
    pid: Pid,
    group: Pid,
    zombie: bool,
}

/// Every process descended from `root` (not `root` itself), read from `/proc`.
fn descendants(root: Pid) -> Vec<Proc> {
    let mut children: HashMap<i32, Vec<Proc>> = HashMap::new();
    for pid in super::pids() {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue; // exited since the listing
        };
        // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses, so split after the last ')'.
        let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else {
            continue;
        };
        let mut fields = after.split_whitespace();
        let (Some(state), Some(ppid), Some(pgrp)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (Ok(ppid), Ok(pgrp)) = (ppid.parse::<i32>(), pgrp.parse::<i32>()) else {
            continue;
        };
        children.entry(ppid).or_default().push(Proc {
            pid: Pid::from_raw(pid),
            group: Pid::from_raw(pgrp),
            zombie: state == "Z" || state == "X",
        });
    }
    let mut found = Vec::new();
    let mut queue = vec![root.as_raw()];
    while let Some(parent) = queue.pop() {
        for p in children.remove(&parent).unwrap_or_default() {
            queue.push(p.pid.as_raw());
            found.push(p);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn descendants_finds_a_grandchild_and_not_the_root() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 5 & wait"])
            .process_group(0)
            .spawn()
            .unwrap();
        let me = Pid::this();
        let until = Instant::now() + Duration::from_secs(5);
        let found = loop {
            let d = descendants(me);
            if d.len() >= 2 || Instant::now() > until {
                break d;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = killpg(Pid::from_raw(child.id() as i32), Signal::SIGKILL);
        let _ = child.wait();
        assert!(
            found.iter().any(|p| p.pid.as_raw() == child.id() as i32),
            "{found:?}"
        );
        assert!(found.len() >= 2, "the sleep below sh: {found:?}");
        assert!(found.iter().all(|p| p.pid != me));
    }
}
