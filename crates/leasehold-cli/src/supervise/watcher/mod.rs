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
//!
//! Rooms: this file (the conversation's words, the test knobs, the processes that carry a mark),
//! [`parent`] (`run`'s side: starting the watcher, its reports, the orders), [`child`] (the watcher
//! itself, the hidden `__run-watcher` command).

mod child;
mod parent;

use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;

pub(crate) use child::main;
pub(crate) use parent::{Spec, Watcher};

/// Test knob: `LEASEHOLD_RUN_THREAD_CHURN=100ms` makes `run` retire idle runtime threads after half
/// that and start a blocking task every period, so threads come and go all the time; a test uses it
/// to show that nothing about the command's supervision is tied to the thread that started it. The
/// watcher keeps it out of the command's environment.
pub(crate) const THREAD_CHURN_KNOB: &str = "LEASEHOLD_RUN_THREAD_CHURN";

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
}
