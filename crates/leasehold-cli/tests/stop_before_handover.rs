//! Stop before the hand-over: when the holder's connection to the store goes silent (a proxy
//! black-holes it; the store stays up for everyone else), `leasehold run`, `run --once-per` and
//! `elect` stop their command so that its last process is gone before the successor's command
//! starts, judged from timestamps the commands write themselves (CLOCK_MONOTONIC, one machine).
//!
//! The command is slow to stop: on SIGTERM it goes on for `LINGER` (grace - 0.5 s) before it exits,
//! as a job that flushes or checkpoints does. Each store runs 20 trials per mode under the rule that
//! ships, and the old rule (`--stop-at-deadline`: SIGTERM only once the deadline passed) on a few,
//! which must show the overlap, so that the test is seen to catch it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leasehold_testkit::{EtcdCluster, Proxy, RedisServer};

mod cli_support;
use cli_support::{eventually, BIN};

const TTL: &str = "3s";
const GRACE: &str = "1.5s";
/// How long the command goes on after SIGTERM: grace - 0.5 s.
const LINGER: &str = "1.0";
/// Trials per store and mode under the new rule.
const TRIALS: usize = 20;
/// Trials run at once (this is a 2-core machine: a wave of trials, then the next).
const WAVE: usize = 10;

/// The command: writes `start T`, then `alive T` every 5 ms; on SIGTERM it goes on for LINGER
/// seconds, writes `end T` and exits 0. `T` is CLOCK_MONOTONIC in nanoseconds.
const WRITER: &str = r#"
import os, signal, sys, time
out = open(sys.argv[1], "a", buffering=1)
linger = float(sys.argv[2])
stop_at = [None]
def term(*_):
    if stop_at[0] is None:
        stop_at[0] = time.monotonic_ns() + int(linger * 1e9)
signal.signal(signal.SIGTERM, term)
out.write("start %d\n" % time.monotonic_ns())
if linger < 0:
    sys.exit(0)
while stop_at[0] is None or time.monotonic_ns() < stop_at[0]:
    out.write("alive %d\n" % time.monotonic_ns())
    time.sleep(0.005)
out.write("end %d\n" % time.monotonic_ns())
"#;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Run,
    OncePer,
    Elect,
}

/// Where the store is, for the holder (through its proxy) and for the successor (directly).
trait Store: Send + Sync {
    /// The store's address, for the proxy to forward to.
    fn addr(&self) -> SocketAddr;
    /// A store URL whose host and port are `addr`.
    fn url(&self, addr: SocketAddr) -> String;
}

struct Redis(RedisServer);
impl Store for Redis {
    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.0.port()))
    }
    fn url(&self, addr: SocketAddr) -> String {
        format!("redis://{addr}/")
    }
}

struct Postgres(String);
impl Store for Postgres {
    fn addr(&self) -> SocketAddr {
        "127.0.0.1:5432".parse().unwrap()
    }
    fn url(&self, addr: SocketAddr) -> String {
        // The test database's credentials, with the host and port of `addr`.
        let base = &self.0;
        let at = base.rfind('@').expect("a URL with credentials");
        let slash = base[at..].find('/').map(|i| at + i).unwrap_or(base.len());
        format!("{}@{addr}{}", &base[..at], &base[slash..])
    }
}

struct Etcd(EtcdCluster);
impl Store for Etcd {
    fn addr(&self) -> SocketAddr {
        self.0.client_addrs()[0]
    }
    fn url(&self, addr: SocketAddr) -> String {
        format!("etcd://{addr}")
    }
}

fn leasehold(url: &str) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_KEY_PREFIX")
        .env_remove("LEASEHOLD_RETENTION")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env("LEASEHOLD_STORE", url)
        .stdin(Stdio::null());
    c
}

/// The first and last timestamps of a writer's file, and whether it reached `end`.
#[derive(Debug, Default)]
struct Stamps {
    start: Option<u64>,
    last: Option<u64>,
    ended: bool,
}

fn stamps(path: &Path) -> Stamps {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let mut s = Stamps::default();
    for line in text.lines() {
        let Some((word, t)) = line.split_once(' ') else {
            continue;
        };
        let Ok(t) = t.trim().parse::<u64>() else {
            continue;
        };
        if word == "start" && s.start.is_none() {
            s.start = Some(t);
        }
        s.last = Some(s.last.map_or(t, |l: u64| l.max(t)));
        if word == "end" {
            s.ended = true;
        }
    }
    s
}

/// What a trial's holder and successor share.
struct Spec<'a> {
    mode: Mode,
    name: &'a str,
    script: &'a Path,
    /// The old stop rule (`--stop-at-deadline`).
    old: bool,
}

/// The command line of the holder (or, with `successor`, of the successor) of a trial.
fn command(t: &Spec<'_>, url: &str, out: &Path, linger: &str, successor: bool) -> Command {
    let mut c = leasehold(url);
    c.arg(if t.mode == Mode::Elect {
        "elect"
    } else {
        "run"
    });
    c.args(["--ttl", TTL, "--grace", GRACE]);
    if t.old {
        c.arg("--stop-at-deadline");
    }
    match (t.mode, successor) {
        (Mode::Run | Mode::Elect, true) => {
            c.args(["--wait", "20s"]);
        }
        (Mode::OncePer, _) => {
            c.args(["--once-per", "1h", "--max-attempts", "5"]);
        }
        _ => {}
    }
    c.arg(t.name)
        .arg("--")
        .arg("python3")
        .arg(t.script)
        .arg(out)
        .arg(linger);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

/// One trial's verdict: how far the holder's last stamp is before the successor's first (negative:
/// they overlapped), and the holder's stderr for the report.
#[derive(Debug)]
struct Trial {
    gap_ms: f64,
    holder_ended_cleanly: bool,
    holder_code: Option<i32>,
    log: String,
}

fn wait(child: &mut Child, within: Duration) -> Option<i32> {
    let until = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st.code();
        }
        if Instant::now() > until {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn stderr_of(child: &mut Child) -> String {
    use std::io::Read;
    let mut s = String::new();
    if let Some(mut e) = child.stderr.take() {
        let _ = e.read_to_string(&mut s);
    }
    s
}

fn trial(
    rt: &tokio::runtime::Runtime,
    store: &dyn Store,
    mode: Mode,
    old: bool,
    dir: &Path,
    script: &Path,
    i: usize,
) -> Trial {
    let proxy = rt.block_on(Proxy::start(store.addr())).unwrap();
    let via_proxy = store.url(proxy.addr());
    let direct = store.url(store.addr());
    let name = format!("sbh-{:?}-{}-{i}-{:08x}", mode, old, rand::random::<u32>()).to_lowercase();
    let spec = Spec {
        mode,
        name: &name,
        script,
        old,
    };
    let (a_out, b_out) = (dir.join(format!("{name}.a")), dir.join(format!("{name}.b")));

    let mut a = command(&spec, &via_proxy, &a_out, LINGER, false)
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(20), || stamps(&a_out).start.is_some()),
        "the holder's command never started: {}",
        {
            let _ = a.kill();
            stderr_of(&mut a)
        }
    );
    // Past the first renewal, so that the deadline counts from a renewal, not the acquire.
    std::thread::sleep(Duration::from_millis(1200));
    proxy.blackhole();

    // The successor: a waiting run or candidate; for --once-per, a replica fired again and again
    // until it runs the slot (exit 0 once its command ran).
    let mut b_log = String::new();
    match mode {
        Mode::Run | Mode::Elect => {
            let mut b = command(&spec, &direct, &b_out, "-1", true).spawn().unwrap();
            let code = wait(&mut b, Duration::from_secs(30));
            b_log = stderr_of(&mut b);
            assert_eq!(code, Some(0), "successor: {b_log}");
        }
        Mode::OncePer => {
            let until = Instant::now() + Duration::from_secs(30);
            while stamps(&b_out).start.is_none() && Instant::now() < until {
                let mut b = command(&spec, &direct, &b_out, "-1", true).spawn().unwrap();
                let _ = wait(&mut b, Duration::from_secs(30));
                b_log = stderr_of(&mut b);
                std::thread::sleep(Duration::from_millis(30));
            }
        }
    }
    let holder_code = wait(&mut a, Duration::from_secs(30));
    let log = stderr_of(&mut a);
    proxy.restore();
    drop(proxy);
    let (sa, sb) = (stamps(&a_out), stamps(&b_out));
    let b_start = sb
        .start
        .unwrap_or_else(|| panic!("the successor never ran its command: {b_log}"));
    let a_last = sa.last.expect("the holder wrote stamps");
    Trial {
        gap_ms: (b_start as f64 - a_last as f64) / 1e6,
        holder_ended_cleanly: sa.ended,
        holder_code,
        log,
    }
}

/// Runs `n` trials, `WAVE` at a time.
fn trials(store: Arc<dyn Store>, mode: Mode, old: bool, n: usize) -> Vec<Trial> {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("writer.py");
    std::fs::write(&script, WRITER).unwrap();
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    );
    let mut done = Vec::new();
    let mut next = 0;
    while next < n {
        let wave: Vec<_> = (next..(next + WAVE).min(n))
            .map(|i| {
                let (rt, store, dir, script) = (
                    rt.clone(),
                    store.clone(),
                    dir.path().to_path_buf(),
                    script.clone(),
                );
                std::thread::spawn(move || trial(&rt, &*store, mode, old, &dir, &script, i))
            })
            .collect();
        next += wave.len();
        done.extend(wave.into_iter().map(|t| t.join().expect("trial")));
    }
    done
}

fn summary(t: &[Trial]) -> String {
    let gaps: Vec<String> = t.iter().map(|t| format!("{:.0}", t.gap_ms)).collect();
    format!(
        "gaps (ms, successor's start - holder's last stamp): [{}]",
        gaps.join(", ")
    )
}

/// Every trial under the new rule: the holder's command is gone before the successor's starts,
/// it was given its grace (it ended by itself, not by SIGKILL), and `run` said why and exited 76.
fn assert_stopped_before(store: Arc<dyn Store>, mode: Mode) {
    let t = trials(store, mode, false, TRIALS);
    let s = summary(&t);
    for (i, t) in t.iter().enumerate() {
        assert!(
            t.gap_ms > 0.0,
            "{mode:?} trial {i} overlapped by {:.0} ms: {s}\n{}",
            -t.gap_ms,
            t.log
        );
        assert!(
            t.holder_ended_cleanly,
            "{mode:?} trial {i}: the command was killed before its grace ran out: {s}\n{}",
            t.log
        );
        assert_eq!(t.holder_code, Some(76), "{mode:?} trial {i}: {}", t.log);
        assert!(
            t.log.contains("about to lapse"),
            "{mode:?} trial {i}: {}",
            t.log
        );
    }
    eprintln!("{mode:?}: {TRIALS} trials, no overlap; {s}");
}

/// The old rule overlaps: the test can see the bug.
fn assert_old_rule_overlaps(store: Arc<dyn Store>, mode: Mode) {
    let t = trials(store, mode, true, 3);
    let s = summary(&t);
    assert!(
        t.iter().all(|t| t.gap_ms < 0.0),
        "{mode:?}: SIGTERM at the deadline with a command that lingers {LINGER} s must overlap its successor: {s}"
    );
    eprintln!("{mode:?} under the old rule: {s}");
}

fn python3() -> bool {
    Command::new("python3")
        .arg("-c")
        .arg("1")
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn on_redis_the_command_is_gone_before_the_successor_starts() {
    assert!(python3(), "the writer runs on python3");
    let store: Arc<dyn Store> = Arc::new(Redis(RedisServer::start().unwrap()));
    for mode in [Mode::Run, Mode::OncePer, Mode::Elect] {
        assert_old_rule_overlaps(store.clone(), mode);
        assert_stopped_before(store.clone(), mode);
    }
}

#[test]
fn on_postgres_the_command_is_gone_before_the_successor_starts() {
    assert!(python3(), "the writer runs on python3");
    let base = leasehold_testkit::postgres_url();
    let o = leasehold(&base).args(["migrate"]).output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let store: Arc<dyn Store> = Arc::new(Postgres(base));
    assert_old_rule_overlaps(store.clone(), Mode::Run);
    for mode in [Mode::Run, Mode::OncePer, Mode::Elect] {
        assert_stopped_before(store.clone(), mode);
    }
}

#[test]
fn on_etcd_the_command_is_gone_before_the_successor_starts() {
    assert!(python3(), "the writer runs on python3");
    let store: Arc<dyn Store> = Arc::new(Etcd(EtcdCluster::start_single().unwrap()));
    assert_old_rule_overlaps(store.clone(), Mode::Run);
    for mode in [Mode::Run, Mode::OncePer, Mode::Elect] {
        assert_stopped_before(store.clone(), mode);
    }
}

/// A grace that cannot fit inside the lease is refused before anything is held, naming the numbers
/// and the fix.
#[test]
fn a_grace_that_does_not_fit_the_lease_is_exit_2() {
    let redis = RedisServer::start().unwrap();
    let o = leasehold(&redis.url())
        .args([
            "run",
            "--ttl",
            "3s",
            "--grace",
            "3s",
            "sbh-nofit",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("grace") && err.contains("at least"), "{err}");
    let o = leasehold(&redis.url())
        .args(["status", "--json", "sbh-nofit"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["held"], false, "nothing was held: {v}");
    let _: PathBuf = PathBuf::new();
}
