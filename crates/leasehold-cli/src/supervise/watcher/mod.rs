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
//! Rooms: [`protocol`] (the conversation's words, the test knobs), this file (the processes that
//! carry a mark), [`parent`] (`run`'s side: starting the watcher, its reports, the orders), [`child`] (the watcher
//! itself, the hidden `__run-watcher` command).

mod child;
mod parent;
mod protocol;

use nix::unistd::Pid;

pub(crate) use child::main;
pub(crate) use parent::{Spec, Watcher};
pub(crate) use protocol::{Order, Report, THREAD_CHURN_KNOB};

/// Processes (pid, process group) whose environment holds every one of `marks` (`KEY=value`), from
/// `/proc/PID/environ`: the environment each started with, inherited by what it started.
pub(crate) fn processes_marked(marks: &[String]) -> Vec<(Pid, Pid)> {
    let me = std::process::id() as i32;
    let mut found = Vec::new();
    for pid in pids() {
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

/// The pids `/proc` lists now (none when it cannot be read); a process may exit right after.
fn pids() -> impl Iterator<Item = i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
}
