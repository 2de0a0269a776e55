//! The watcher: the command's parent, which stops the command when `leasehold run` dies, however it dies.
//!
//! Promise: `run` starts the watcher (this binary again, as the hidden `__run-watcher` subcommand, in
//! its own process group) and keeps a Unix socket open to it; the watcher starts the command. When
//! `run` ends for any reason (SIGKILL, the OOM killer, a crash), the kernel closes `run`'s end of the
//! socket, the watcher reads end-of-file and stops the command at once: SIGTERM and SIGCONT to the
//! command's process group and to every process descended from the command, then SIGKILL to whatever
//! is left after `--grace`. Nothing renews the lease once `run` is gone, so the lease lapses within
//! its TTL; its fence tells a fenced resource to refuse whatever the command still sends in between.
//! The watcher is a child subreaper: a descendant whose parent exits is re-parented to it instead of
//! init, so the stop also reaches processes that left the command's group (setsid, double fork).
//!
//! Why a process and a socket: a parent-death signal (`PR_SET_PDEATHSIG`) fires when the *thread*
//! that forked the child exits, and the async runtime's threads come and go, so it would stop a
//! healthy command; setting it in the child also needs `unsafe`. A socket's end-of-file depends on the
//! process only, and all of this is safe code.
//!
//! Limits: if the watcher and `run` are both killed at once (a `kill -9` aimed at both), nothing stops
//! the command. If only the watcher dies, `run` stops the command itself and exits 70. A process that
//! escapes to another subreaper, or one that ignores SIGTERM, lives until the SIGKILL after `--grace`.
//! On a terminal the command stays in `run`'s (foreground) process group so that it can read the
//! terminal and gets Ctrl-C from it; the watcher, in its own group, gets neither, and blocks the
//! terminal and termination signals so that signals aimed at the command's group never stop it.
//!
//! The conversation is one text line per message: the watcher reports `started PID`,
//! `failed CODE MESSAGE`, `exited CODE`, `leftovers N`, `killing` and `stopped`; `run` orders
//! `signal N` and `stop GRACE_MS`.

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::{self, BufRead, BufReader, ErrorKind, Write};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixStream};
use std::os::unix::process::CommandExt;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use crate::exit;

/// Test knob: `LEASEHOLD_RUN_THREAD_CHURN=100ms` makes `run` retire idle runtime threads after half
/// that and start a blocking task every period, so threads come and go all the time; a test uses it
/// to show that nothing about the command's supervision is tied to the thread that started it. The
/// watcher keeps it out of the command's environment.
pub(crate) const THREAD_CHURN_KNOB: &str = "LEASEHOLD_RUN_THREAD_CHURN";

/// The hidden subcommand's arguments, written by [`Watcher::start`] and by nobody else.
#[derive(Debug, clap::Args)]
pub(crate) struct WatcherArgs {
    /// Abstract Unix socket name `run` listens on.
    #[arg(long)]
    socket: String,
    /// Grace between SIGTERM and SIGKILL when `run` dies.
    #[arg(long)]
    grace_ms: u64,
    /// Start the command in this existing process group
    ///
    /// Start the command in this existing process group (`run`'s, on a terminal) instead of its own.
    #[arg(long)]
    join_group: Option<i32>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    command: Vec<OsString>,
}

/// Test knob: the watcher arms a parent-death signal on itself, the design this module rejects, so
/// that a test can show the thread churn it runs under would stop a healthy command.
pub(crate) const PDEATHSIG_KNOB: &str = "LEASEHOLD_TEST_WATCHER_PDEATHSIG";

/// What the watcher tells `run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// The command runs with this pid.
    Started(u32),
    /// The command could not be started; `code` is 127 (not found) or 126 (not executable).
    Failed { code: i32, message: String },
    /// The command exited with this code (128 + N when killed by signal N).
    Exited(i32),
    /// The command had exited but left this many processes behind; they are being stopped.
    Leftovers(usize),
    /// Something outlived the grace period and gets SIGKILL.
    Killing,
    /// Nothing of the command is left; the watcher exits.
    Stopped,
}

impl Report {
    fn line(&self) -> String {
        match self {
            Report::Started(pid) => format!("started {pid}"),
            Report::Failed { code, message } => {
                format!("failed {code} {}", message.replace('\n', " "))
            }
            Report::Exited(code) => format!("exited {code}"),
            Report::Leftovers(n) => format!("leftovers {n}"),
            Report::Killing => "killing".to_owned(),
            Report::Stopped => "stopped".to_owned(),
        }
    }

    fn parse(line: &str) -> Option<Report> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        Some(match word {
            "started" => Report::Started(rest.parse().ok()?),
            "failed" => {
                let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
                Report::Failed {
                    code: code.parse().ok()?,
                    message: message.to_owned(),
                }
            }
            "exited" => Report::Exited(rest.parse().ok()?),
            "leftovers" => Report::Leftovers(rest.parse().ok()?),
            "killing" => Report::Killing,
            "stopped" => Report::Stopped,
            _ => return None,
        })
    }
}

/// What `run` tells the watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// Pass this signal on to the command (its group, or the command alone on a terminal).
    Signal(Signal),
    /// Stop everything of the command: SIGTERM now, SIGKILL after the grace; answer `stopped`.
    Stop(Duration),
}

impl Order {
    fn line(self) -> String {
        match self {
            Order::Signal(sig) => format!("signal {}", sig as i32),
            Order::Stop(grace) => format!("stop {}", grace.as_millis()),
        }
    }

    fn parse(line: &str) -> Option<Order> {
        let (word, rest) = line.split_once(' ')?;
        match word {
            "signal" => Signal::try_from(rest.parse::<i32>().ok()?)
                .ok()
                .map(Order::Signal),
            "stop" => Some(Order::Stop(Duration::from_millis(rest.parse().ok()?))),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------------
// `run`'s side.

/// How long `run` waits for a freshly started watcher to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What `run` asks the watcher to start.
#[derive(Debug)]
pub(crate) struct Spec<'a> {
    pub(crate) command: &'a [OsString],
    pub(crate) env: Vec<(&'static str, String)>,
    pub(crate) grace: Duration,
    /// On a terminal: keep the command in `run`'s process group.
    pub(crate) terminal: bool,
}

/// `run`'s handle on its watcher.
#[derive(Debug)]
pub(crate) struct Watcher {
    process: tokio::process::Child,
    reports: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>,
    orders: tokio::net::unix::OwnedWriteHalf,
}

impl Watcher {
    /// Starts the watcher, which starts the command; returns once the watcher is connected. The
    /// first report is [`Report::Started`] or [`Report::Failed`].
    pub(crate) async fn start(spec: Spec<'_>) -> io::Result<Watcher> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!("leasehold-run/{}/{nanos:08x}", std::process::id());
        let listener =
            std::os::unix::net::UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name)?)?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(listener)?;

        // /proc/self/exe is this very binary even if the file was replaced since `run` started.
        let mut cmd = tokio::process::Command::new("/proc/self/exe");
        cmd.arg0("leasehold")
            .arg("__run-watcher")
            .arg("--socket")
            .arg(&name)
            .arg("--grace-ms")
            .arg(spec.grace.as_millis().to_string());
        if spec.terminal {
            cmd.arg("--join-group")
                .arg(nix::unistd::getpgrp().as_raw().to_string());
        }
        cmd.arg("--").args(spec.command);
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        // Its own process group: signals aimed at the command's group (or at the terminal's
        // foreground group) do not reach it.
        cmd.process_group(0);
        // Spawning blocks until the child has executed; keep it off the async threads. (The thread
        // it runs on is retired later, which is exactly what a parent-death signal would not survive.)
        let mut process = tokio::task::spawn_blocking(move || cmd.spawn())
            .await
            .map_err(io::Error::other)??;
        let pid = process.id().map(|p| p as i32);
        let deadline = tokio::time::sleep(CONNECT_TIMEOUT);
        tokio::pin!(deadline);
        let stream = loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, _) = accepted?;
                    // Anyone on the machine can connect to an abstract socket; only our child counts.
                    if stream.peer_cred().ok().and_then(|c| c.pid()) == pid && pid.is_some() {
                        break stream;
                    }
                }
                status = process.wait() => {
                    return Err(io::Error::other(format!("it exited before connecting ({})", status?)));
                }
                _ = &mut deadline => {
                    let _ = process.start_kill();
                    return Err(io::Error::new(ErrorKind::TimedOut, format!("it did not connect within {CONNECT_TIMEOUT:?}")));
                }
            }
        };
        let (read, write) = stream.into_split();
        use tokio::io::AsyncBufReadExt;
        Ok(Watcher {
            process,
            reports: tokio::io::BufReader::new(read).lines(),
            orders: write,
        })
    }

    /// The watcher's pid.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.id()
    }

    /// The next report; `None` once the watcher is gone. Cancel safe.
    pub(crate) async fn next(&mut self) -> Option<Report> {
        loop {
            match self.reports.next_line().await {
                Ok(Some(line)) => {
                    if let Some(report) = Report::parse(&line) {
                        return Some(report);
                    }
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Sends an order; a watcher that is gone shows up as `None` from [`Watcher::next`].
    pub(crate) async fn send(&mut self, order: Order) {
        use tokio::io::AsyncWriteExt;
        let line = order.line() + "\n";
        let _ = self.orders.write_all(line.as_bytes()).await;
    }

    /// Waits (briefly) for the watcher process to exit, so that it is not left as a zombie.
    pub(crate) async fn reap(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.process.wait()).await;
    }
}

// ---------------------------------------------------------------------------------------------------
// The watcher's side: a small synchronous program, no async runtime.

/// Runs the watcher; returns its exit code.
pub(crate) fn main(args: WatcherArgs) -> i32 {
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
        return exit::SOFTWARE;
    }
    // Started as /proc/self/exe, it would show as `exe` in ps and top.
    let _ = nix::sys::prctl::set_name(c"leasehold-watch");
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("leasehold: watcher: cannot become a child subreaper: {e}");
        return exit::SOFTWARE;
    }
    if std::env::var_os(PDEATHSIG_KNOB).is_some() {
        let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    }
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
            return exit::SOFTWARE;
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
            return 0;
        }
    };
    let command = Pid::from_raw(child.id() as i32);
    // The reaper below collects the command with waitpid(-1); the standard library's handle must not.
    drop(child);
    reporter.send(&Report::Started(command.as_raw() as u32));

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

    let grace = Duration::from_millis(args.grace_ms);
    let mut lines = BufReader::new(stream).lines();
    loop {
        match lines.next() {
            Some(Ok(line)) => match Order::parse(&line) {
                Some(Order::Signal(sig)) => tree.signal(sig),
                Some(Order::Stop(grace)) => {
                    tree.stop(grace, &reporter);
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
                        "leasehold: `run` for lease `{name}` is gone; stopping its command (pid {command}): SIGTERM now, SIGKILL in {}",
                        crate::duration::show(grace)
                    );
                }
                tree.stop(grace, &reporter);
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

/// Processes (pid, process group) whose environment holds every one of `marks` (`KEY=value`), from
/// `/proc/PID/environ`: the environment each started with, inherited by what it started.
pub(crate) fn processes_marked(marks: &[String]) -> Vec<(Pid, Pid)> {
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        if !marks.iter().all(|m| vars.contains(&m.as_bytes())) {
            continue;
        }
        if let Ok(group) = nix::unistd::getpgid(Some(Pid::from_raw(pid))) {
            found.push((Pid::from_raw(pid), group));
        }
    }
    found
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
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
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
    use super::*;

    #[test]
    fn reports_and_orders_survive_their_line_form() {
        for r in [
            Report::Started(42),
            Report::Failed {
                code: 127,
                message: "No such file or directory (os error 2)".into(),
            },
            Report::Exited(143),
            Report::Leftovers(3),
            Report::Killing,
            Report::Stopped,
        ] {
            assert_eq!(Report::parse(&r.line()), Some(r.clone()), "{r:?}");
        }
        for o in [
            Order::Signal(Signal::SIGHUP),
            Order::Stop(Duration::from_millis(1500)),
        ] {
            assert_eq!(Order::parse(&o.line()), Some(o), "{o:?}");
        }
        assert_eq!(Report::parse("started x"), None);
        assert_eq!(Order::parse("signal 999"), None);
    }

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
