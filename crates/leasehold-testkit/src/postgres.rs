//! A private PostgreSQL server on a free loopback port, for tests that must stop, crash or pause the
//! database (the machine's shared PostgreSQL is left alone: other tests use it at the same time).
//!
//! Promise: `initdb` makes a fresh cluster in a temporary directory (on `/dev/shm` when there is
//! one, so that fsync costs nothing); the server listens on 127.0.0.1 only, with `trust`
//! authentication for the `postgres` user; it can be stopped cleanly, crashed (every process of the
//! server SIGKILL-ed at once, the data directory kept, so the next start runs crash recovery),
//! paused and resumed (SIGSTOP/SIGCONT of every process of the server) and started again on the
//! same port with the same data. On drop every process of the server is killed (continued first if
//! paused) and the directory removed, also when a test panics. PostgreSQL refuses to run as root:
//! when the test runs as root, the server runs as the `postgres` OS user.
//! Limit: a test process that is itself SIGKILL-ed leaves the server running. The data directory
//! lives in memory: a crash here is a crash of the server's processes, not of the machine (what
//! the server had written to its files survives, as after a process crash on a real disk).
//!
//! The helpers block the calling thread; from an async test use `tokio::task::block_in_place` on a
//! multi-thread runtime or `spawn_blocking`.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::daemon::{fatal, poll_until, retry_port_clash};
use crate::free_port;

/// How long `initdb`, a start or a stop may take before the helper gives up.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The directory holding `initdb` and `postgres`: `PG_BIN_DIR`, else the newest
/// `/usr/lib/postgresql/<version>/bin` (Debian's layout), else whatever is on `PATH`.
fn bin_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("PG_BIN_DIR") {
        return Some(dir.into());
    }
    let versions = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    versions
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").is_file().then_some((version, bin))
        })
        .max_by_key(|(v, _)| *v)
        .map(|(_, bin)| bin)
}

fn binary(name: &str) -> PathBuf {
    bin_dir()
        .map(|d| d.join(name))
        .unwrap_or_else(|| PathBuf::from(name))
}

/// Whether `initdb` and `postgres` can be run (and, when running as root, whether there is a
/// `postgres` OS user to run them as).
pub fn postgres_server_available() -> bool {
    let runs = Command::new(binary("postgres"))
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    runs && (!running_as_root() || postgres_user().is_some())
}

/// Whether this process runs with effective uid 0 (from `/proc/self/status`; where there is no
/// `/proc`, assume not).
fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

/// The uid and gid of the `postgres` OS user, from `/etc/passwd`.
fn postgres_user() -> Option<(u32, u32)> {
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        match fields.as_slice() {
            ["postgres", _, uid, gid, ..] => Some((uid.parse().ok()?, gid.parse().ok()?)),
            _ => None,
        }
    })
}

/// Settings for a private PostgreSQL server.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct PostgresServerBuilder {
    settings: Vec<(String, String)>,
}

impl PostgresServerBuilder {
    /// Starts the server with `-c name=value` (e.g. `synchronous_commit`, `off`).
    pub fn setting(mut self, name: &str, value: &str) -> Self {
        self.settings.push((name.to_owned(), value.to_owned()));
        self
    }

    /// Makes a cluster with `initdb` and starts it on a free port.
    pub fn start(self) -> io::Result<PostgresServer> {
        let owner = if running_as_root() {
            Some(postgres_user().ok_or_else(|| {
                io::Error::other(
                    "running as root, and PostgreSQL refuses root: a `postgres` OS user is needed",
                )
            })?)
        } else {
            None
        };
        let shm = Path::new("/dev/shm");
        let mut tmp = tempfile::Builder::new();
        tmp.prefix("leasehold-pg-");
        let dir = if shm.is_dir() {
            tmp.tempdir_in(shm)?
        } else {
            tmp.tempdir()?
        };
        crate::reaper::remove_at_exit(dir.path());
        if let Some((uid, gid)) = owner {
            std::os::unix::fs::chown(dir.path(), Some(uid), Some(gid))?;
        }
        let data = dir.path().join("data");
        let mut initdb = Command::new(binary("initdb"));
        initdb
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync"])
            .arg("--no-instructions")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some((uid, gid)) = owner {
            initdb.uid(uid).gid(gid);
        }
        let out = initdb.output()?;
        if !out.status.success() {
            return Err(io::Error::other(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        let mut server = PostgresServer {
            port: 0,
            data,
            log: dir.path().join("postgres.log"),
            owner,
            settings: self.settings,
            child: None,
            paused: false,
            _dir: dir,
        };
        retry_port_clash(|| {
            server.port = free_port();
            server.start_again()
        })?;
        Ok(server)
    }
}

/// A private PostgreSQL server (see the module docs). Its database `postgres` is empty; run
/// leasehold's migrations on it as on any database.
#[derive(Debug)]
pub struct PostgresServer {
    /// The loopback port it listens on, kept across restarts.
    port: u16,
    /// The cluster's data directory, kept across restarts.
    data: PathBuf,
    /// The server's log (appended to across restarts).
    log: PathBuf,
    /// The OS user it runs as when the test runs as root.
    owner: Option<(u32, u32)>,
    /// `-c` settings, applied at every start.
    settings: Vec<(String, String)>,
    /// The postmaster while running; it leads a process group of its own, with every backend in it.
    child: Option<Child>,
    /// Between [`pause`](Self::pause) and [`resume`](Self::resume).
    paused: bool,
    /// Removed on drop.
    _dir: tempfile::TempDir,
}

impl PostgresServer {
    /// A server with default settings.
    pub fn start() -> io::Result<Self> {
        Self::builder().start()
    }

    /// Settings for a server.
    pub fn builder() -> PostgresServerBuilder {
        PostgresServerBuilder::default()
    }

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, e.g. for a [`Proxy`](crate::Proxy) in front of it.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// The postmaster's pid, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it is running (possibly paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// Whether it is paused.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Starts the server again (same port, same data) after [`stop`](Self::stop) or
    /// [`crash`](Self::crash), and returns once it accepts connections (after crash recovery).
    pub fn start_again(&mut self) -> io::Result<()> {
        if self.child.is_some() {
            return Err(io::Error::other("the server is already running"));
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut cmd = Command::new(binary("postgres"));
        cmd.arg("-D")
            .arg(&self.data)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args(["-c", &format!("port={}", self.port)])
            .arg("-c")
            .arg(format!(
                "unix_socket_directories={}",
                self.data.parent().unwrap_or(&self.data).display()
            ))
            .args(["-c", "max_connections=60", "-c", "shared_buffers=16MB"]);
        for (name, value) in &self.settings {
            cmd.arg("-c").arg(format!("{name}={value}"));
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        if let Some((uid, gid)) = self.owner {
            cmd.uid(uid).gid(gid);
        }
        let child = cmd.spawn()?;
        // Its own process group (its backends with it): killed as a group if we end first.
        crate::reaper::watch(child.id(), true);
        self.child = Some(child);
        self.paused = false;
        let port = self.port;
        let pid_file = self.data.join("postmaster.pid");
        let ready = poll_until(SETTLE_TIMEOUT, "PostgreSQL to accept connections", || {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(fatal(format!(
                    "postgres exited ({status}) during start-up: {}",
                    tail.join(" | ")
                )));
            }
            // The postmaster writes "ready" on the pid file's 8th line once it accepts connections
            // (after crash recovery).
            let pid = std::fs::read_to_string(&pid_file).unwrap_or_default();
            let accepting = pid.lines().nth(7).is_some_and(|l| l.trim() == "ready");
            Ok((accepting && TcpStream::connect(("127.0.0.1", port)).is_ok()).then_some(()))
        });
        if let Err(e) = ready {
            self.kill_all();
            // A port taken meanwhile shows in the log; report it so that the caller retries.
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains("could not bind") || log.contains("Address already in use") {
                return Err(io::Error::new(io::ErrorKind::AddrInUse, e.to_string()));
            }
            return Err(e);
        }
        Ok(())
    }

    /// Stops the server cleanly (a fast shutdown: sessions are ended, a checkpoint is written) and
    /// returns once every process has exited.
    pub fn stop(&mut self) -> io::Result<()> {
        self.resume_if_paused();
        self.signal_group(Signal::SIGINT)?;
        self.wait_gone()
    }

    /// Crashes the server: SIGKILL to every one of its processes at once, nothing flushed on the
    /// way down beyond what they had written; the next start runs crash recovery.
    pub fn crash(&mut self) -> io::Result<()> {
        self.kill_all();
        Ok(())
    }

    /// Stops cleanly and starts again on the same port with the same data.
    pub fn restart(&mut self) -> io::Result<()> {
        self.stop()?;
        self.start_again()
    }

    /// Crashes and starts again (crash recovery) on the same port with the same data.
    pub fn crash_restart(&mut self) -> io::Result<()> {
        self.crash()?;
        self.start_again()
    }

    /// SIGSTOP to every process of the server: connections stay open, nothing is answered.
    pub fn pause(&mut self) -> io::Result<()> {
        self.signal_group(Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT to every process of the server.
    pub fn resume(&mut self) -> io::Result<()> {
        self.signal_group(Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    fn resume_if_paused(&mut self) {
        if self.paused {
            let _ = self.resume();
        }
    }

    fn signal_group(&self, sig: Signal) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("the server is not running"))?;
        killpg(Pid::from_raw(pid as i32), sig).map_err(io::Error::from)
    }

    /// Waits until the postmaster has exited and no process of its group is left (a new server
    /// cannot start while old backends still hold the shared memory).
    fn wait_gone(&mut self) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let pgid = Pid::from_raw(child.id() as i32);
        let exited = poll_until(SETTLE_TIMEOUT, "PostgreSQL to stop", || {
            Ok(child.try_wait()?.map(|_| ()))
        });
        if exited.is_err() {
            let _ = killpg(pgid, Signal::SIGKILL);
            child.wait()?;
        }
        poll_until(SETTLE_TIMEOUT, "PostgreSQL's processes to exit", || {
            Ok(matches!(killpg(pgid, None), Err(Errno::ESRCH)).then_some(()))
        })
    }

    fn kill_all(&mut self) {
        if let Some(pid) = self.pid() {
            let pgid = Pid::from_raw(pid as i32);
            let _ = killpg(pgid, Signal::SIGCONT);
            let _ = killpg(pgid, Signal::SIGKILL);
        }
        self.paused = false;
        let _ = self.wait_gone();
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.kill_all();
    }
}
