use std::io;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Whether a `redis-server` binary can be started (`REDIS_SERVER_BIN` or `redis-server` on `PATH`).
pub fn redis_server_available() -> bool {
    Command::new(binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn binary() -> PathBuf {
    std::env::var_os("REDIS_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("redis-server"))
}

/// Where a `libfaketime.so.1` is: `LEASEHOLD_LIBFAKETIME` if set, else the first found of Debian's
/// multiarch directories (`/usr/lib/<triplet>/faketime/`) and the usual `/usr/lib`, `/usr/lib64` and
/// `/usr/local/lib` install places. `None` when libfaketime is not installed (Debian: `apt-get install
/// -y faketime`).
pub fn libfaketime_path() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("LEASEHOLD_LIBFAKETIME") {
        return Some(PathBuf::from(p)).filter(|p| p.is_file());
    }
    let mut dirs: Vec<PathBuf> = std::fs::read_dir("/usr/lib")
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path().join("faketime"))
        .collect();
    dirs.sort();
    dirs.extend(
        [
            "/usr/lib/faketime",
            "/usr/lib64/faketime",
            "/usr/local/lib/faketime",
        ]
        .map(PathBuf::from),
    );
    dirs.into_iter()
        .map(|d| d.join("libfaketime.so.1"))
        .find(|p| p.is_file())
}

/// Settings for a private `redis-server`.
#[derive(Debug, Clone, Default)]
#[must_use]
pub struct RedisServerBuilder {
    port: Option<u16>,
    acl_user: Option<(String, String)>,
    password: Option<String>,
    replica_of: Option<u16>,
    fake_clock: bool,
    clock_rate: Option<f64>,
    frozen_at_us: Option<u64>,
    extra: Vec<String>,
}

impl RedisServerBuilder {
    /// Listen on this port instead of a free one.
    pub fn port(mut self, port: u16) -> Self {
        self.port = Some(port);
        self
    }

    /// Create ACL user `user` with `password` and all permissions, and disable the passwordless
    /// `default` user.
    pub fn acl_user(mut self, user: &str, password: &str) -> Self {
        self.acl_user = Some((user.to_owned(), password.to_owned()));
        self
    }

    /// Require `password` for the `default` user (`requirepass`); [`RedisServer::url`] and
    /// [`RedisServer::connection`] then carry it.
    pub fn password(mut self, password: &str) -> Self {
        self.password = Some(password.to_owned());
        self
    }

    /// Start as a replica of the server on `primary_port`.
    pub fn replica_of(mut self, primary_port: u16) -> Self {
        self.replica_of = Some(primary_port);
        self
    }

    /// Runs the server under libfaketime, so that [`RedisServer::jump_clock`] can move its wall clock
    /// (and only its wall clock: its monotonic clock stays real). [`start`](Self::start) fails with a
    /// clear error when libfaketime is not installed (see [`libfaketime_path`]).
    pub fn fake_clock(mut self) -> Self {
        self.fake_clock = true;
        self
    }

    /// Runs the server's wall clock at `rate` times real time (2.0: twice as fast), under
    /// libfaketime as [`fake_clock`](Self::fake_clock) does (the monotonic clock stays real). Redis
    /// expires keys by its wall clock, so a key's TTL runs out `rate` times sooner than a correct
    /// clock says, and `TIME` advances at that rate.
    pub fn clock_rate(mut self, rate: f64) -> Self {
        self.fake_clock = true;
        self.clock_rate = Some(rate);
        self
    }

    /// Runs the server under libfaketime with its wall clock stopped at `at_us` (µs since 1970):
    /// `TIME` answers that and no key expires until [`RedisServer::set_frozen_clock`] moves it, so a
    /// test decides exactly when time passes (a model-based test compares the server's replies with
    /// a model's at the same instants). The monotonic clock stays real.
    pub fn frozen_clock(mut self, at_us: u64) -> Self {
        self.fake_clock = true;
        self.frozen_at_us = Some(at_us);
        self
    }

    /// Any other `redis-server` argument, e.g. `--maxclients`.
    pub fn arg(mut self, arg: impl Into<String>) -> Self {
        self.extra.push(arg.into());
        self
    }

    /// Starts the server and waits until it answers `PING` (or, with an ACL user, until it accepts
    /// connections).
    pub fn start(self) -> io::Result<RedisServer> {
        let dir = tempfile::Builder::new()
            .prefix("leasehold-redis-")
            .tempdir()?;
        crate::reaper::remove_at_exit(dir.path());
        let port = self.port.unwrap_or_else(crate::free_port);
        let mut server = RedisServer {
            child: None,
            port,
            dir,
            builder: self,
            paused: false,
            clock_offset: Duration::ZERO,
        };
        if server.builder.fake_clock {
            server.write_clock_offset()?;
        }
        server.spawn()?;
        Ok(server)
    }
}

/// A private `redis-server` on 127.0.0.1, killed on drop. It keeps nothing on disk (`--save ""`,
/// `--appendonly no`), so [`restart`](Self::restart) brings it back empty, as a real restart without
/// persistence does.
#[derive(Debug)]
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: tempfile::TempDir,
    builder: RedisServerBuilder,
    paused: bool,
    /// How far [`jump_clock`](Self::jump_clock) has moved the wall clock so far; it survives a
    /// restart, as a wrong clock on a real host would.
    clock_offset: Duration,
}

/// The file libfaketime reads the offset from, in the server's directory.
const CLOCK_FILE: &str = "faketime.offset";

/// `YYYY-MM-DD hh:mm:ss.ffffff5` (UTC) of `us` µs since 1970, libfaketime's absolute time.
fn frozen_text(us: u64) -> String {
    let secs = us / 1_000_000;
    let days = i64::try_from(secs / 86_400).unwrap_or(0);
    let rem = secs % 86_400;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        // Half a µs more: libfaketime keeps the time as a double and truncates it to µs, which
        // without it lands one µs early for most values.
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}.{:06}5\n",
        rem / 3600,
        rem / 60 % 60,
        rem % 60,
        us % 1_000_000
    )
}

impl RedisServer {
    /// Starts a server on a free port with default settings.
    pub fn start() -> io::Result<Self> {
        Self::builder().start()
    }

    /// A builder for non-default settings.
    pub fn builder() -> RedisServerBuilder {
        RedisServerBuilder::default()
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>/` (with credentials when an ACL user was configured).
    pub fn url(&self) -> String {
        match &self.builder.acl_user {
            Some((u, p)) => format!("redis://{u}:{p}@127.0.0.1:{}/", self.port),
            None => match &self.builder.password {
                Some(p) => format!("redis://:{p}@127.0.0.1:{}/", self.port),
                None => format!("redis://127.0.0.1:{}/", self.port),
            },
        }
    }

    /// The server's working directory (its log is `redis.log` there).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Whether the server is stopped by [`pause`](Self::pause) and not yet resumed.
    pub fn is_paused(&self) -> bool {
        self.paused
    }

    /// SIGSTOP: the server stops answering; connections stay open and requests hang.
    pub fn pause(&mut self) -> io::Result<()> {
        self.signal(Signal::SIGSTOP)?;
        self.paused = true;
        Ok(())
    }

    /// SIGCONT after [`pause`](Self::pause).
    pub fn resume(&mut self) -> io::Result<()> {
        self.signal(Signal::SIGCONT)?;
        self.paused = false;
        Ok(())
    }

    /// SIGKILL and reap: the server is gone at once, with whatever it had not replicated.
    pub fn kill(&mut self) -> io::Result<()> {
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

    /// Kills the server and starts it again on the same port, empty (no persistence). A replica is
    /// restarted as a replica of the same primary.
    pub fn restart(&mut self) -> io::Result<()> {
        self.kill()?;
        self.spawn()
    }

    /// Makes this server a replica of `primary` and waits until the link is up and the initial sync
    /// is done.
    pub fn replicate_from(&mut self, primary: &RedisServer) -> io::Result<()> {
        self.builder.replica_of = Some(primary.port);
        let mut con = self.connection()?;
        redis::cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(primary.port)
            .query::<()>(&mut con)
            .map_err(io::Error::other)?;
        self.wait_until_synced()
    }

    /// Sets the primary this server replicates from once it is next started by
    /// [`restart`](Self::restart) (`None`: start as a primary), leaving the running process alone.
    /// A restarted node then never shows itself as a primary, even for a moment.
    pub fn set_replica_of_on_restart(&mut self, primary_port: Option<u16>) {
        self.builder.replica_of = primary_port;
    }

    /// Waits (up to 10 s) until this replica reports `master_link_status:up`.
    pub fn wait_until_synced(&self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut con = self.connection()?;
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut con)
                .map_err(io::Error::other)?;
            if info.contains("master_link_status:up") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "replica on port {} did not sync within 10 s: {info}",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Promotes this replica to primary (`REPLICAOF NO ONE`), as a failover does.
    pub fn promote(&mut self) -> io::Result<()> {
        self.builder.replica_of = None;
        let mut con = self.connection()?;
        redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .query::<()>(&mut con)
            .map_err(io::Error::other)
    }

    /// Moves the server's wall clock forward by `by`, at once, as an NTP step or a VM resumed from a
    /// snapshot does (needs [`RedisServerBuilder::fake_clock`]). Jumps add up.
    ///
    /// Redis expires keys by its wall clock, so a key whose TTL is shorter than the jump is gone at
    /// the next look, while its holder (on its own, correct clock) still counts on it. `TIME` and
    /// everything else that reads the wall clock jump as well; the monotonic clock (timers, the
    /// server's cron) does not.
    pub fn jump_clock(&mut self, by: Duration) -> io::Result<()> {
        if !self.builder.fake_clock {
            return Err(io::Error::other(
                "jump_clock needs a server started with RedisServerBuilder::fake_clock()",
            ));
        }
        self.clock_offset += by;
        self.write_clock_offset()
    }

    /// Stops the wall clock of a server started with [`RedisServerBuilder::frozen_clock`] at `at_us`
    /// (µs since 1970; it may go back as well as forward). Takes effect at the server's next clock
    /// reading.
    pub fn set_frozen_clock(&mut self, at_us: u64) -> io::Result<()> {
        if self.builder.frozen_at_us.is_none() {
            return Err(io::Error::other(
                "set_frozen_clock needs a server started with RedisServerBuilder::frozen_clock()",
            ));
        }
        self.builder.frozen_at_us = Some(at_us);
        self.write_clock_offset()
    }

    /// How far the wall clock has been moved forward so far.
    pub fn clock_offset(&self) -> Duration {
        self.clock_offset
    }

    fn write_clock_offset(&self) -> io::Result<()> {
        // libfaketime re-reads the file on every clock call (FAKETIME_NO_CACHE): replace it in one
        // rename so that no call ever sees a half-written file (which it would read as offset 0).
        let tmp = self.dir.path().join(format!("{CLOCK_FILE}.tmp"));
        let rate = self
            .builder
            .clock_rate
            .map(|r| format!(" x{r}"))
            .unwrap_or_default();
        let text = match self.builder.frozen_at_us {
            // libfaketime's absolute form without `@`: the clock stands still at that instant (UTC:
            // the server runs with TZ=UTC then).
            Some(us) => frozen_text(us),
            None => format!("+{:.3}{rate}\n", self.clock_offset.as_secs_f64()),
        };
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, self.dir.path().join(CLOCK_FILE))
    }

    /// A synchronous connection for test set-up and assertions.
    pub fn connection(&self) -> io::Result<redis::Connection> {
        let client = redis::Client::open(self.url()).map_err(io::Error::other)?;
        client
            .get_connection_with_timeout(Duration::from_secs(2))
            .map_err(io::Error::other)
    }

    fn signal(&self, sig: Signal) -> io::Result<()> {
        let child = self
            .child
            .as_ref()
            .ok_or_else(|| io::Error::other("redis-server is not running"))?;
        kill(Pid::from_raw(child.id() as i32), sig).map_err(io::Error::from)
    }

    fn spawn(&mut self) -> io::Result<()> {
        let b = &self.builder;
        let mut cmd = Command::new(binary());
        cmd.current_dir(self.dir.path())
            .args(["--port", &self.port.to_string()])
            .args(["--bind", "127.0.0.1"])
            .args(["--save", ""])
            .args(["--appendonly", "no"])
            .args(["--daemonize", "no"])
            .args(["--logfile", "redis.log"])
            .args(["--dir", &self.dir.path().to_string_lossy()]);
        if let Some((user, pass)) = &b.acl_user {
            let password = format!(">{pass}");
            cmd.args(["--user", user, "on", &password, "~*", "&*", "+@all"])
                .args(["--user", "default", "off"]);
        }
        if let Some(password) = &b.password {
            cmd.args(["--requirepass", password]);
        }
        if let Some(primary) = b.replica_of {
            cmd.args(["--replicaof", "127.0.0.1", &primary.to_string()]);
        }
        cmd.args(&b.extra);
        if b.fake_clock {
            let lib = libfaketime_path().ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "a fake-clock redis-server needs libfaketime: install it (apt-get install -y faketime) or set LEASEHOLD_LIBFAKETIME to its libfaketime.so.1",
                )
            })?;
            // `libc.so.6` after libfaketime: Debian's redis-server allocates through the system
            // jemalloc, which libfaketime cannot start under (jemalloc reads the clock while it
            // initialises, libfaketime initialises through dlsym, whose calloc re-enters jemalloc:
            // the server hangs or crashes at start; libfaketime issue #130). Preloading glibc puts its
            // malloc family ahead of jemalloc's, so the server allocates with glibc and jemalloc is
            // never on that path. Harmless for a server built without jemalloc. The price: the
            // `allocator_*` fields of INFO memory describe an allocator nobody uses (`used_memory`,
            // which Redis counts itself, stays right).
            cmd.env("LD_PRELOAD", format!("{} libc.so.6", lib.display()))
                .env("FAKETIME_TIMESTAMP_FILE", self.dir.path().join(CLOCK_FILE))
                .env("FAKETIME_NO_CACHE", "1")
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
            if b.frozen_at_us.is_some() {
                cmd.env("TZ", "UTC");
            }
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd.spawn().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "could not start {}: {e}; install it (apt-get install -y redis-server) or set REDIS_SERVER_BIN",
                    binary().display()
                ),
            )
        })?;
        crate::reaper::watch(child.id(), false);
        self.child = Some(child);
        self.paused = false;
        self.wait_until_up()
    }

    fn wait_until_up(&mut self) -> io::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut con) = self.connection() {
                if redis::cmd("PING").query::<String>(&mut con).is_ok() {
                    return Ok(());
                }
            }
            if let Some(child) = self.child.as_mut() {
                if let Some(status) = child.try_wait()? {
                    let log = std::fs::read_to_string(self.dir.path().join("redis.log"))
                        .unwrap_or_default();
                    self.child = None;
                    return Err(io::Error::other(format!(
                        "redis-server on port {} exited at start ({status}): {log}",
                        self.port
                    )));
                }
            }
            if Instant::now() > deadline {
                return Err(io::Error::other(format!(
                    "redis-server on port {} did not answer PING within 10 s",
                    self.port
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_comes_back_empty_and_replicas_follow() {
        let mut primary = RedisServer::start().unwrap();
        let mut con = primary.connection().unwrap();
        redis::cmd("SET")
            .arg("k")
            .arg("v")
            .query::<()>(&mut con)
            .unwrap();

        let replica = RedisServer::builder()
            .replica_of(primary.port())
            .start()
            .unwrap();
        replica.wait_until_synced().unwrap();
        let mut rcon = replica.connection().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let v: Option<String> = redis::cmd("GET").arg("k").query(&mut rcon).unwrap();
            if v.as_deref() == Some("v") {
                break;
            }
            assert!(Instant::now() < deadline, "replica never got the key");
            std::thread::sleep(Duration::from_millis(10));
        }

        primary.restart().unwrap();
        let mut con = primary.connection().unwrap();
        let v: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
        assert_eq!(v, None, "a restart without persistence must lose the data");
    }

    #[test]
    fn paused_server_does_not_answer_until_resumed() {
        let mut server = RedisServer::start().unwrap();
        server.pause().unwrap();
        let client = redis::Client::open(server.url()).unwrap();
        let mut con = client.get_connection_with_timeout(Duration::from_millis(200));
        if let Ok(c) = con.as_mut() {
            c.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            assert!(redis::cmd("PING").query::<String>(c).is_err());
        }
        server.resume().unwrap();
        let mut con = server.connection().unwrap();
        assert_eq!(
            redis::cmd("PING").query::<String>(&mut con).unwrap(),
            "PONG"
        );
    }

    fn server_time(con: &mut redis::Connection) -> Duration {
        let (secs, micros): (u64, u64) = redis::cmd("TIME").query(con).unwrap();
        Duration::from_secs(secs) + Duration::from_micros(micros)
    }

    fn now() -> Duration {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
    }

    #[test]
    fn a_clock_jump_expires_keys_early() {
        assert!(
            libfaketime_path().is_some(),
            "libfaketime is required for this test (apt-get install -y faketime)"
        );
        let mut server = RedisServer::builder().fake_clock().start().unwrap();
        let mut con = server.connection().unwrap();
        for key in ["held", "control"] {
            redis::cmd("SET")
                .arg(key)
                .arg("v")
                .arg("PX")
                .arg(60_000)
                .query::<()>(&mut con)
                .unwrap();
        }
        let skew = server_time(&mut con).abs_diff(now());
        assert!(skew < Duration::from_secs(5), "no jump yet: {skew:?}");

        server.jump_clock(Duration::from_secs(30)).unwrap();
        let pttl: i64 = redis::cmd("PTTL").arg("control").query(&mut con).unwrap();
        assert!(
            (0..=30_000).contains(&pttl),
            "30 s of a 60 s TTL must be gone at once, PTTL {pttl}"
        );
        server.jump_clock(Duration::from_secs(40)).unwrap();
        assert_eq!(server.clock_offset(), Duration::from_secs(70));
        let ahead = server_time(&mut con).saturating_sub(now());
        assert!(
            ahead >= Duration::from_secs(65),
            "TIME must run 70 s ahead, runs {ahead:?} ahead"
        );
        // Seconds after it was set, a 60 s key is gone: Redis expires by its wall clock.
        let held: Option<String> = redis::cmd("GET").arg("held").query(&mut con).unwrap();
        assert_eq!(held, None, "the key must expire early after the jump");

        // The offset outlives a restart (the host's clock is still wrong).
        server.restart().unwrap();
        let mut con = server.connection().unwrap();
        assert!(server_time(&mut con).saturating_sub(now()) >= Duration::from_secs(65));
    }

    #[test]
    fn jump_clock_needs_a_fake_clock() {
        let mut server = RedisServer::start().unwrap();
        let err = server.jump_clock(Duration::from_secs(1)).unwrap_err();
        assert!(err.to_string().contains("fake_clock"), "{err}");
    }

    #[test]
    fn acl_user_is_required() {
        let server = RedisServer::builder()
            .acl_user("app", "s3cret")
            .start()
            .unwrap();
        let mut con = server.connection().unwrap();
        assert_eq!(
            redis::cmd("PING").query::<String>(&mut con).unwrap(),
            "PONG"
        );
        let anon = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port())).unwrap();
        let res = anon
            .get_connection_with_timeout(Duration::from_secs(1))
            .and_then(|mut c| redis::cmd("GET").arg("x").query::<Option<String>>(&mut c));
        assert!(res.is_err(), "the default user must be off");
    }
}
