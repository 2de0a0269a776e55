//! A private MariaDB (or MySQL) server on a free loopback port, for tests that must stop, crash or
//! pause the database (the machine's shared server is left alone: other tests use it at the same
//! time).
//!
//! Promise: `mariadb-install-db` (or `mysql_install_db`) makes a fresh data directory in a temporary
//! directory (on `/dev/shm` when there is one, so that fsync costs nothing); the server listens on
//! 127.0.0.1 only, with a user `root` that needs no password from 127.0.0.1 and a database `test`
//! (made by an init file at every start); it can be stopped cleanly, crashed (SIGKILL, the data
//! kept, so the next start runs InnoDB's crash recovery), paused and resumed (SIGSTOP/SIGCONT) and
//! started again on the same port with the same data. On drop the server is killed (continued first
//! if paused) and the directory removed, also when a test panics. Run as root, the server runs as
//! root (`--user=root`), which MariaDB allows when asked explicitly.
//! Limit: a test process that is itself SIGKILL-ed leaves the server running.
//!
//! The helpers block the calling thread; from an async test use `tokio::task::block_in_place` on a
//! multi-thread runtime or `spawn_blocking`.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::daemon::{fatal, poll_until, retry_port_clash};
use crate::free_port;

/// How long installing, a start or a stop may take before the helper gives up.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

/// The SQL run at every start: the user tests log in as, and their database.
const INIT_SQL: &str = "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1';
GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;
CREATE DATABASE IF NOT EXISTS test;
";

/// The first of `names` found in `/usr/sbin`, `/usr/bin`, `/usr/local/{s,}bin`, else the first name
/// (looked up on `PATH`).
fn binary(names: &[&str]) -> PathBuf {
    for name in names {
        for dir in ["/usr/sbin", "/usr/bin", "/usr/local/sbin", "/usr/local/bin"] {
            let path = Path::new(dir).join(name);
            if path.is_file() {
                return path;
            }
        }
    }
    PathBuf::from(names[0])
}

fn server_binary() -> PathBuf {
    binary(&["mariadbd", "mysqld"])
}

fn install_binary() -> PathBuf {
    binary(&["mariadb-install-db", "mysql_install_db"])
}

/// Whether a MariaDB server can be installed and run here.
pub fn mariadb_server_available() -> bool {
    let runs = Command::new(server_binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    runs && install_binary().is_file()
}

/// MySQL/MariaDB URL for tests: `LEASEHOLD_TEST_MYSQL_URL`, else the local default
/// `mysql://leasehold:leasehold@127.0.0.1:3306/test` (the server `./dev setup` starts).
pub fn mysql_url() -> String {
    std::env::var("LEASEHOLD_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://leasehold:leasehold@127.0.0.1:3306/test".to_owned())
}

/// Whether this process runs with effective uid 0 (from `/proc/self/status`).
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

/// A private MariaDB server (see the module docs).
#[derive(Debug)]
pub struct MariaDbServer {
    /// The loopback port it listens on, kept across restarts.
    port: u16,
    /// The data directory, kept across restarts.
    data: PathBuf,
    /// The temporary directory holding the data, the socket, the init file and the log.
    base: PathBuf,
    /// The server's log (appended to across restarts).
    log: PathBuf,
    /// The server while running.
    child: Option<Child>,
    /// Between [`pause`](Self::pause) and [`resume`](Self::resume).
    paused: bool,
    /// Removed on drop.
    _dir: tempfile::TempDir,
}

impl MariaDbServer {
    /// Installs a data directory and starts the server on a free port.
    pub fn start() -> io::Result<Self> {
        let shm = Path::new("/dev/shm");
        let mut tmp = tempfile::Builder::new();
        tmp.prefix("leasehold-mariadb-");
        let dir = if shm.is_dir() {
            tmp.tempdir_in(shm)?
        } else {
            tmp.tempdir()?
        };
        crate::reaper::remove_at_exit(dir.path());
        let base = dir.path().to_path_buf();
        let data = base.join("data");
        install(&data)?;
        std::fs::write(base.join("init.sql"), INIT_SQL)?;
        let mut server = MariaDbServer {
            port: 0,
            data,
            log: base.join("server.log"),
            base,
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

    /// Its port on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`, e.g. for a [`Proxy`](crate::Proxy) in front of it.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `mysql://root@127.0.0.1:<port>/test`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/test", self.port)
    }

    /// The server's pid, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether it is running (possibly paused).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
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
        let mut cmd = Command::new(server_binary());
        cmd.arg("--no-defaults")
            .arg(format!("--datadir={}", self.data.display()))
            .arg(format!("--socket={}", self.base.join("sock").display()))
            .arg(format!("--pid-file={}", self.base.join("pid").display()))
            .arg(format!(
                "--init-file={}",
                self.base.join("init.sql").display()
            ))
            .arg(format!("--port={}", self.port))
            .args(["--bind-address=127.0.0.1", "--skip-name-resolve"])
            .args(["--innodb-buffer-pool-size=32M", "--max-connections=200"])
            .args(["--skip-log-bin", "--innodb-flush-log-at-trx-commit=1"]);
        if running_as_root() {
            cmd.arg("--user=root");
        }
        cmd.stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0);
        let child = cmd.spawn()?;
        // Its own process group (its backends with it): killed as a group if we end first.
        crate::reaper::watch(child.id(), true);
        self.child = Some(child);
        self.paused = false;
        if let Err(e) = self.wait_ready() {
            self.kill_all();
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains("Address already in use") || log.contains("Can't start server: Bind") {
                return Err(io::Error::new(io::ErrorKind::AddrInUse, e.to_string()));
            }
            return Err(e);
        }
        Ok(())
    }

    /// Waits for "ready for connections" in the log of this start and an open port.
    fn wait_ready(&mut self) -> io::Result<()> {
        let port = self.port;
        let starts_before = count_ready(&self.log);
        poll_until(SETTLE_TIMEOUT, "MariaDB to accept connections", || {
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                let log = std::fs::read_to_string(&self.log).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                return Err(fatal(format!(
                    "mariadbd exited ({status}) during start-up: {}",
                    tail.join(" | ")
                )));
            }
            let ready = count_ready(&self.log) > starts_before;
            Ok((ready && TcpStream::connect(("127.0.0.1", port)).is_ok()).then_some(()))
        })
    }

    /// Stops the server cleanly (SIGTERM: sessions are ended, InnoDB shuts down) and returns once it
    /// has exited.
    pub fn stop(&mut self) -> io::Result<()> {
        self.resume_if_paused();
        self.signal(Signal::SIGTERM)?;
        self.wait_gone()
    }

    /// Crashes the server: SIGKILL, nothing flushed beyond what it had written; the next start runs
    /// crash recovery.
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

    /// SIGSTOP: connections stay open, nothing is answered.
    pub fn pause(&mut self) -> io::Result<()> {
        self.signal(Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT.
    pub fn resume(&mut self) -> io::Result<()> {
        self.signal(Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    fn resume_if_paused(&mut self) {
        if self.paused {
            let _ = self.resume();
        }
    }

    fn signal(&self, sig: Signal) -> io::Result<()> {
        let pid = self
            .pid()
            .ok_or_else(|| io::Error::other("the server is not running"))?;
        kill(Pid::from_raw(pid as i32), sig).map_err(io::Error::from)
    }

    fn wait_gone(&mut self) -> io::Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let exited = poll_until(SETTLE_TIMEOUT, "MariaDB to stop", || {
            Ok(child.try_wait()?.map(|_| ()))
        });
        if exited.is_err() {
            let _ = child.kill();
            child.wait()?;
        }
        Ok(())
    }

    fn kill_all(&mut self) {
        if let Some(pid) = self.pid() {
            let pid = Pid::from_raw(pid as i32);
            let _ = kill(pid, Signal::SIGCONT);
            let _ = kill(pid, Signal::SIGKILL);
        }
        self.paused = false;
        let _ = self.wait_gone();
    }
}

impl Drop for MariaDbServer {
    fn drop(&mut self) {
        self.kill_all();
    }
}

/// How many times the server said it is ready in `log` (one per start).
fn count_ready(log: &Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .matches("ready for connections")
        .count()
}

/// Makes a data directory with the system tables.
fn install(data: &Path) -> io::Result<()> {
    let mut cmd = Command::new(install_binary());
    cmd.arg("--no-defaults")
        .arg(format!("--datadir={}", data.display()))
        .args(["--auth-root-authentication-method=normal", "--skip-test-db"])
        .arg("--skip-name-resolve")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    if running_as_root() {
        cmd.arg("--user=root");
    }
    let out = cmd.output()?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "{} failed: {}",
            install_binary().display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}
