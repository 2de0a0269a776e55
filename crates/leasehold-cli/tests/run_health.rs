//! `leasehold run` when the lease is at risk or the store is wrong for it: `--on-suspect warn|stop`,
//! a holder whose own clock runs slow (libfaketime on the `run` process), exit 74 (the command
//! succeeded, the release did not), exit 78 (a replica, an evicting policy). The real binary against
//! a private redis-server per test.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::RedisServer;

mod cli_support;

use cli_support::{eventually, wait_with_timeout};

/// `leasehold` talking to `redis`, stdout thrown away.
fn leasehold(redis: &RedisServer) -> Command {
    let mut c = cli_support::leasehold(redis);
    c.stdout(Stdio::null());
    c
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A scratch directory, the command (touches `started`, notes a SIGTERM in `got-term`, exits 0 once
/// `go` exists) and the file `run`'s stderr goes to.
struct Scene {
    dir: tempfile::TempDir,
}

impl Scene {
    fn new() -> Self {
        Scene {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn script(&self) -> String {
        format!(
            "touch {s}; trap 'echo got-term > {t}; exit 0' TERM; while [ ! -e {g} ]; do sleep 0.05; done; exit 0",
            s = self.path("started").display(),
            t = self.path("got-term").display(),
            g = self.path("go").display(),
        )
    }

    /// `run ARGS NAME -- sh -c SCRIPT`, its stderr to the file `stderr`.
    fn run(&self, mut cmd: Command, args: &[&str], name: &str) -> Child {
        let err = std::fs::File::create(self.path("stderr")).unwrap();
        cmd.arg("run")
            .args(args)
            .arg(name)
            .args(["--", "sh", "-c", &self.script()])
            .stderr(err)
            .spawn()
            .unwrap()
    }

    fn stderr(&self) -> String {
        read(&self.path("stderr"))
    }

    fn started(&self) -> bool {
        eventually(Duration::from_secs(15), || self.path("started").exists())
    }

    fn go(&self) {
        std::fs::write(self.path("go"), "").unwrap();
    }
}

#[test]
fn on_suspect_warn_says_so_once_and_the_command_runs_to_its_end() {
    let mut redis = RedisServer::start().unwrap();
    let scene = Scene::new();
    let mut run = scene.run(
        leasehold(&redis),
        &["--ttl", "8s", "--grace", "2s"],
        "wobbly",
    );
    assert!(scene.started(), "{}", scene.stderr());
    // Renewals hang, then fail: suspect long before the deadline (8 s).
    redis.pause().unwrap();
    let warned = eventually(Duration::from_secs(6), || {
        scene.stderr().contains("is at risk")
    });
    redis.resume().unwrap();
    assert!(
        warned,
        "no warning while the store was stopped: {}",
        scene.stderr()
    );
    // Held again; the command finishes on its own.
    std::thread::sleep(Duration::from_secs(1));
    scene.go();
    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    let err = scene.stderr();
    assert_eq!(status.code(), Some(0), "{err}");
    assert_eq!(
        err.matches("leasehold: warning: lease `wobbly` is at risk")
            .count(),
        1,
        "{err}"
    );
    assert!(err.contains("renewals are failing"), "{err}");
    assert!(
        !scene.path("got-term").exists(),
        "warn does not stop the command: {err}"
    );
}

#[test]
fn on_suspect_stop_stops_the_command_as_a_lost_lease_does_and_exits_76() {
    let mut redis = RedisServer::start().unwrap();
    let scene = Scene::new();
    let mut run = scene.run(
        leasehold(&redis),
        &["--ttl", "8s", "--grace", "2s", "--on-suspect", "stop"],
        "careful",
    );
    assert!(scene.started(), "{}", scene.stderr());
    redis.pause().unwrap();
    let paused = Instant::now();
    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    let took = paused.elapsed();
    redis.resume().unwrap();
    let err = scene.stderr();
    assert_eq!(status.code(), Some(76), "{err}");
    assert!(err.contains("--on-suspect stop: sending SIGTERM"), "{err}");
    assert!(
        !err.contains("lost lease"),
        "stopped while suspect, before any loss: {err}"
    );
    assert_eq!(read(&scene.path("got-term")).trim(), "got-term", "{err}");
    // Stopped while suspect: the renewal due at a third of the TTL failed after its 2 s bound,
    // long before the 8 s deadline would have stopped it (plus the release's short patience).
    assert!(took < Duration::from_secs(12), "{took:?}: {err}");
}

#[test]
fn a_holder_whose_clock_runs_half_speed_is_suspect_and_gives_up_by_the_store_ttl() {
    let Some(lib) = leasehold_testkit::libfaketime_path() else {
        panic!("needs libfaketime (apt-get install -y faketime, or set LEASEHOLD_LIBFAKETIME)");
    };
    let mut redis = RedisServer::start().unwrap();
    let scene = Scene::new();
    let mut cmd = leasehold(&redis);
    // `run` (and what it starts) sees every clock, the monotonic one included, at half speed: its
    // 3 s TTL is 6 s of real time, while the server expires the key after 3 s.
    cmd.env("LD_PRELOAD", &lib)
        .env("FAKETIME", "+0 x0.5")
        .env("FAKETIME_DONT_RESET", "1");
    let mut run = scene.run(cmd, &["--ttl", "3s", "--grace", "1s"], "slow-holder");
    assert!(scene.started(), "{}", scene.stderr());
    // The first renewal (1 s of its clock, 2 s real) carries the server's time: the store's clock
    // runs twice as fast as the holder's.
    let warned = eventually(Duration::from_secs(10), || {
        scene.stderr().contains("faster than this process's")
    });
    assert!(warned, "{}", scene.stderr());
    // Renewed at the store's rate, the lease is kept while the server answers.
    std::thread::sleep(Duration::from_secs(4));
    assert!(run.try_wait().unwrap().is_none(), "{}", scene.stderr());
    let left: i64 = redis::cmd("PTTL")
        .arg("{leasehold:slow-holder}:lock")
        .query(&mut redis.connection().unwrap())
        .unwrap_or(-3);
    // The renewals then stop reaching the store.
    redis.pause().unwrap();
    let paused = Instant::now();
    // Stopped before the hand-over (or, at the latest, when the lease is lost).
    let lost = eventually(Duration::from_secs(12), || {
        let err = scene.stderr();
        err.contains("lost lease") || err.contains("about to lapse")
    });
    let took = paused.elapsed();
    redis.resume().unwrap();
    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    let err = scene.stderr();
    assert!(lost, "{err}");
    assert_eq!(status.code(), Some(76), "{err}");
    // The last renewal was sent at most 1 s (real) before the pause, and the store's TTL of 3 s runs
    // out by then; by its own half-speed clock the holder would wait 6 s real after that renewal.
    assert!(
        took < Duration::from_millis(3_600),
        "gave up {took:?} after the pause (key had {left} ms left); unscaled it would be 5 s or more: {err}"
    );
}

#[test]
fn run_exits_74_when_the_command_succeeded_but_the_release_failed_and_says_when_it_lapses() {
    let mut redis = RedisServer::start().unwrap();
    let scene = Scene::new();
    let mut run = scene.run(leasehold(&redis), &["--ttl", "20s"], "unreleased");
    assert!(scene.started(), "{}", scene.stderr());
    redis.kill().unwrap();
    scene.go();
    let status = wait_with_timeout(&mut run, Duration::from_secs(30));
    let err = scene.stderr();
    assert_eq!(status.code(), Some(74), "{err}");
    assert!(
        err.contains("the lease stays held until it lapses by itself within"),
        "{err}"
    );
    assert!(err.contains("(exit 74)"), "{err}");
    assert!(!scene.path("got-term").exists(), "{err}");
}

#[test]
fn run_exits_78_on_a_replica_and_on_an_evicting_policy_unless_allowed() {
    let primary = RedisServer::start().unwrap();
    let replica = RedisServer::builder()
        .replica_of(primary.port())
        .start()
        .unwrap();
    let scene = Scene::new();
    let mut run = scene.run(leasehold(&replica), &[], "on-replica");
    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    let err = scene.stderr();
    assert_eq!(status.code(), Some(78), "{err}");
    assert!(err.contains("replica"), "{err}");
    assert!(err.contains("primary"), "names the way out: {err}");
    assert!(!scene.path("started").exists(), "nothing ran: {err}");

    let evicting = RedisServer::builder()
        .arg("--maxmemory")
        .arg("4mb")
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start()
        .unwrap();
    let mut run = scene.run(leasehold(&evicting), &[], "on-cache");
    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    let err = scene.stderr();
    assert_eq!(status.code(), Some(78), "{err}");
    assert!(err.contains("allkeys-lru"), "{err}");
    assert!(err.contains("--allow-eviction"), "{err}");
    assert!(!scene.path("started").exists(), "nothing ran: {err}");

    // Opted in: it runs, and says what it accepted.
    scene.go();
    let mut run = scene.run(leasehold(&evicting), &["--allow-eviction"], "on-cache");
    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    let err = scene.stderr();
    assert_eq!(status.code(), Some(0), "{err}");
    assert!(scene.path("started").exists(), "{err}");
}
