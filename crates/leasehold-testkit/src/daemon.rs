//! What the topologies share: a child process killed on drop, port-clash retries, and polling.

use std::io;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// How often readiness is polled: short, so that start-up costs what the servers cost and no more.
pub(crate) const POLL: Duration = Duration::from_millis(20);

/// How many times a start is retried when a port picked by [`crate::free_port`] was taken meanwhile.
const PORT_ATTEMPTS: usize = 8;

/// A server process that is SIGCONT-ed (if paused), SIGKILL-ed and reaped on drop.
#[derive(Debug, Default)]
pub(crate) struct Daemon {
    /// `None` once killed (or before the first spawn).
    child: Option<Child>,
    /// Set between SIGSTOP and SIGCONT; a kill continues the process first, as `RedisServer` does,
    /// so a paused process never outlives its handle in the stopped state.
    paused: bool,
}

impl Daemon {
    pub(crate) fn spawn(&mut self, cmd: &mut Command) -> io::Result<()> {
        self.kill()?;
        let child = cmd.spawn()?;
        crate::reaper::watch(child.id(), false);
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub(crate) fn is_paused(&self) -> bool {
        self.paused
    }

    /// `Some(status)` if the process has exited on its own (it is then reaped and forgotten).
    pub(crate) fn exited(&mut self) -> io::Result<Option<std::process::ExitStatus>> {
        let status = match self.child.as_mut() {
            Some(child) => child.try_wait()?,
            None => None,
        };
        if status.is_some() {
            self.child = None;
        }
        Ok(status)
    }

    /// SIGSTOP, returning once every thread is stopped: `kill` returns before a busy
    /// multi-threaded process (etcd) has stopped all its threads, and a request sent in that gap
    /// would still be answered.
    pub(crate) fn pause(&mut self) -> io::Result<()> {
        self.signal(Signal::SIGSTOP)?;
        self.paused = true;
        if let Some(pid) = self.pid() {
            wait_stopped(pid)?;
        }
        Ok(())
    }

    pub(crate) fn resume(&mut self) -> io::Result<()> {
        self.signal(Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    pub(crate) fn kill(&mut self) -> io::Result<()> {
        if let Some(mut child) = self.child.take() {
            if self.paused {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGCONT);
                self.paused = false;
            }
            let _ = child.kill();
            child.wait()?;
        }
        Ok(())
    }

    fn signal(&self, sig: Signal) -> io::Result<()> {
        let child = self
            .child
            .as_ref()
            .ok_or_else(|| io::Error::other("the process is not running"))?;
        kill(Pid::from_raw(child.id() as i32), sig).map_err(io::Error::from)
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// Waits until every thread of `pid` is in the stopped state, as `/proc` shows it (where there is
/// no `/proc`, returns at once).
fn wait_stopped(pid: u32) -> io::Result<()> {
    let tasks = std::path::PathBuf::from(format!("/proc/{pid}/task"));
    if !tasks.is_dir() {
        return Ok(());
    }
    poll_until(Duration::from_secs(5), "process to stop", || {
        for task in std::fs::read_dir(&tasks)? {
            let stat = std::fs::read_to_string(task?.path().join("stat")).unwrap_or_default();
            // The state is the first field after the parenthesised command name.
            let state = stat
                .rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next());
            if !matches!(state, Some('T') | Some('t') | None) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
}

/// Whether a start failed because a port was taken between [`crate::free_port`] and the bind.
pub(crate) fn is_port_clash(err: &io::Error) -> bool {
    let text = err.to_string();
    err.kind() == io::ErrorKind::AddrInUse
        || text.contains("Address already in use")
        || text.contains("address already in use")
}

/// Runs `start` until it succeeds or fails for a reason other than a port clash. `start` must pick
/// fresh ports on each call.
pub(crate) fn retry_port_clash<T>(mut start: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut attempt = 1;
    loop {
        match start() {
            Err(e) if is_port_clash(&e) && attempt < PORT_ATTEMPTS => attempt += 1,
            other => return other,
        }
    }
}

/// Marks an error as final for [`poll_until`]: polling stops at once (a process died, say).
#[derive(Debug)]
struct Fatal(String);

impl std::fmt::Display for Fatal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Fatal {}

/// An error that makes [`poll_until`] give up at once instead of trying again.
pub(crate) fn fatal(message: String) -> io::Error {
    io::Error::other(Fatal(message))
}

/// Polls `check` every [`POLL`] until it returns `Ok(Some(_))`, or fails with the last reason it
/// gave (`Ok(None)` means "not yet", `Err` means "not yet, because …") once `timeout` has passed.
/// An error made by [`fatal`] ends the wait at once.
pub(crate) fn poll_until<T>(
    timeout: Duration,
    what: &str,
    mut check: impl FnMut() -> io::Result<Option<T>>,
) -> io::Result<T> {
    let deadline = Instant::now() + timeout;
    let mut last = String::from("no answer yet");
    loop {
        match check() {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) if e.get_ref().is_some_and(|inner| inner.is::<Fatal>()) => return Err(e),
            Err(e) => last = e.to_string(),
        }
        if Instant::now() >= deadline {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{what}: not done within {timeout:?} (last: {last})"),
            ));
        }
        std::thread::sleep(POLL);
    }
}

/// The `redis-server` binary: `REDIS_SERVER_BIN` or `redis-server` on `PATH`, as for `RedisServer`.
pub(crate) fn redis_server_binary() -> std::path::PathBuf {
    std::env::var_os("REDIS_SERVER_BIN")
        .map(Into::into)
        .unwrap_or_else(|| "redis-server".into())
}

/// A connection for the harness's own queries, with timeouts so that a paused server makes a query
/// fail instead of hanging the test.
pub(crate) fn admin_connection(url: &str) -> io::Result<redis::Connection> {
    let client = redis::Client::open(url).map_err(io::Error::other)?;
    let con = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .map_err(io::Error::other)?;
    con.set_read_timeout(Some(Duration::from_secs(2)))
        .map_err(io::Error::other)?;
    con.set_write_timeout(Some(Duration::from_secs(2)))
        .map_err(io::Error::other)?;
    Ok(con)
}

/// One field of an `INFO` reply (`field:value` lines).
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}
