//! Servers die with their owner: every server this crate starts is also handed to one small
//! watcher process per owning process, which kills what is still running (and removes its
//! scratch directories) when the owner ends, however it ends.
//!
//! Promise: when the process that started the servers exits (normally, by a panic that aborts, by
//! SIGTERM or SIGINT whose default action skips every destructor, or by SIGKILL), the kernel closes
//! its end of a pipe to the watcher; the watcher reads end-of-file, sends SIGCONT and SIGKILL to
//! each server it was told of (its whole process group for servers that have one: PostgreSQL's
//! backends, MariaDB) and removes the registered directories. A server is killed only if the pid
//! still belongs to the process that was started (same start time in `/proc`), so a pid reused
//! since by another process is left alone.
//!
//! Why a watcher and not a parent-death signal: `PR_SET_PDEATHSIG` fires when the *thread* that
//! spawned the child exits (an async runtime's blocking threads come and go, and so do test
//! threads), and setting it needs `unsafe` in the child; a pipe's end-of-file depends on the
//! process alone. The watcher is `sh`, in a process group of its own, deaf to SIGINT, SIGTERM and
//! SIGHUP, so a signal aimed at the owner's group (a Ctrl-C, `timeout`) does not take it first.
//!
//! Limit: a server is killed, not shut down cleanly (nothing of a test server is worth keeping);
//! a watcher that is itself SIGKILLed before its owner leaves the servers to their `Drop`s.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{ChildStdin, Command, Stdio};
use std::sync::Mutex;

/// The watcher's program: collects `pid START GROUP` and `dir PATH` lines until end-of-file, then
/// kills each pid (or group) whose start time still matches and removes each directory.
const WATCHER: &str = r#"
trap '' INT TERM HUP
procs=""
dirs=""
while IFS= read -r line; do
  case "$line" in
    "dir "*) dirs="$dirs
${line#dir }" ;;
    *) procs="$procs
$line" ;;
  esac
done
printf '%s\n' "$procs" | while read -r pid start group; do
  [ -n "$pid" ] || continue
  now=$(sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f20)
  [ "$now" = "$start" ] || continue
  if [ "$group" = 1 ]; then
    kill -CONT -- "-$pid" 2>/dev/null; kill -KILL -- "-$pid" 2>/dev/null
  else
    kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null
  fi
done
[ -z "$dirs" ] || sleep 0.3
# A server killed mid-write (MariaDB) may still be on its way out: try again for a few seconds.
printf '%s\n' "$dirs" | while IFS= read -r d; do
  [ -n "$d" ] || continue
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    rm -rf -- "$d" 2>/dev/null
    [ -e "$d" ] || break
    sleep 0.5
  done
done
"#;

/// The pipe to this process's watcher, once one was started (`None` inside if it could not be).
static WATCHER_PIPE: Mutex<Option<Option<ChildStdin>>> = Mutex::new(None);

/// Sends one line to the watcher, starting it on first use. A watcher that cannot be started (no
/// `sh`) leaves the servers to their `Drop`s, as before.
fn tell(line: &str) {
    let mut pipe = WATCHER_PIPE.lock().unwrap_or_else(|e| e.into_inner());
    let stdin = pipe.get_or_insert_with(|| {
        Command::new("sh")
            .arg("-c")
            .arg(WATCHER)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .ok()
            .and_then(|mut c| c.stdin.take())
    });
    if let Some(s) = stdin {
        let _ = writeln!(s, "{line}");
        let _ = s.flush();
    }
}

/// The start time of `pid` (field 22 of `/proc/PID/stat`, in clock ticks since boot).
fn start_time(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 2..];
    after.split(' ').nth(19).map(str::to_owned)
}

/// Kills `pid` (with its process group when `group`: it leads one of its own) if this process
/// ends before it does.
pub(crate) fn watch(pid: u32, group: bool) {
    if let Some(start) = start_time(pid) {
        tell(&format!("{pid} {start} {}", u8::from(group)));
    }
}

/// Removes `dir` (a server's scratch directory) if this process ends without removing it.
pub(crate) fn remove_at_exit(dir: &Path) {
    if let Some(d) = dir.to_str().filter(|d| !d.contains('\n')) {
        tell(&format!("dir {d}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pid_is_read_with_its_start_time() {
        let me = std::process::id();
        let a = start_time(me).expect("our own start time");
        assert_eq!(start_time(me), Some(a.clone()));
        assert!(a.parse::<u64>().is_ok(), "{a}");
        assert_eq!(start_time(u32::MAX), None);
    }
}
