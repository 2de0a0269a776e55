//! `elect` while the store does not answer, as a user meets it: a private redis-server frozen with
//! SIGSTOP while one candidate leads and another stands by. With `--again` both stay candidates
//! through any outage and someone leads within a round trip of the store's answer (not a TTL
//! later, behind a lease nobody leads under); the health endpoints answer at once from what the
//! process knows, with how fresh it is.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::RedisServer;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

mod cli_support;
use cli_support::http::{free_addr, probe};
use cli_support::{eventually, leasehold, wait_with_timeout};

/// A candidate whose command appends its term to `led-WHO` and runs until SIGTERM.
fn candidate(redis: &RedisServer, dir: &Path, who: &str, health: Option<&str>) -> Child {
    let led = dir.join(format!("led-{who}"));
    let mut c = leasehold(redis);
    c.args([
        "elect", "--again", "--ttl", "3s", "--value", who, "--holder", who,
    ]);
    if let Some(addr) = health {
        c.args(["--health", addr]);
    }
    c.args(["outage", "--", "sh", "-c"])
        .arg(format!(
            "echo $LEASEHOLD_TERM >> {}; trap 'exit 0' TERM; while :; do sleep 0.05; done",
            led.display()
        ))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("stderr-{who}"))).unwrap())
        .spawn()
        .unwrap()
}

fn terms(dir: &Path, who: &str) -> Vec<u64> {
    std::fs::read_to_string(dir.join(format!("led-{who}")))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Candidates killed when the test ends, passed or failed.
struct Reap(Vec<u32>);

impl Drop for Reap {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGKILL);
        }
    }
}

fn alive(c: &mut Child) -> bool {
    c.try_wait().unwrap().is_none()
}

fn leader(redis: &RedisServer) -> serde_json::Value {
    let o = leasehold(redis)
        .args(["leader", "--json", "outage"])
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).unwrap_or(serde_json::Value::Null)
}

fn stop(children: &mut [&mut Child]) {
    for c in children.iter_mut() {
        let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
    }
    for c in children.iter_mut() {
        wait_with_timeout(c, Duration::from_secs(15));
    }
}

fn stderr(dir: &Path, who: &str) -> String {
    std::fs::read_to_string(dir.join(format!("stderr-{who}"))).unwrap_or_default()
}

#[test]
fn elect_again_returns_to_standby_after_a_long_outage_and_someone_leads_at_once() {
    let mut redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut a = candidate(&redis, d, "a", None);
    assert!(eventually(Duration::from_secs(10), || terms(d, "a").len() == 1));
    let mut b = candidate(&redis, d, "b", None);
    let _reap = Reap(vec![a.id(), b.id()]);
    std::thread::sleep(Duration::from_millis(500));

    // Frozen for 7 s, more than twice the TTL: A's leadership cannot survive it.
    redis.pause().unwrap();
    std::thread::sleep(Duration::from_secs(7));
    redis.resume().unwrap();
    let resumed = Instant::now();

    // Someone leads, with its record written, well within a TTL of the store's answer.
    let mut led_after = None;
    while resumed.elapsed() < Duration::from_secs(10) {
        let l = leader(&redis);
        if l["value"].is_string() {
            led_after = Some(resumed.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let led_after = led_after.unwrap_or_else(|| {
        panic!(
            "nobody led within 10 s of the store's answer\na: {}\nb: {}",
            stderr(d, "a"),
            stderr(d, "b")
        )
    });
    assert!(
        led_after < Duration::from_millis(2000),
        "a leader took {led_after:?} after the store answered (a lease held by nobody who leads?)\na: {}\nb: {}",
        stderr(d, "a"),
        stderr(d, "b")
    );
    // Both are still candidates: --again survives the outage, whatever it was granted meanwhile.
    std::thread::sleep(Duration::from_secs(4));
    assert!(alive(&mut a), "A gave up: {}", stderr(d, "a"));
    assert!(alive(&mut b), "B gave up: {}", stderr(d, "b"));
    // The name is held only by whoever leads: the record matches the holder.
    let l = leader(&redis);
    assert!(l["value"].is_string(), "held with no leader record: {l}");
    let all: Vec<u64> = [terms(d, "a"), terms(d, "b")].concat();
    assert!(
        all.contains(&l["term"].as_u64().unwrap()),
        "the leader's term is one a command ran under: {l} {all:?}"
    );
    stop(&mut [&mut a, &mut b]);
}

/// The bound every health answer is held to here (docs/election.md states it).
const ANSWER_BOUND: Duration = Duration::from_millis(500);

#[test]
fn health_endpoints_answer_at_once_while_the_store_is_silent() {
    let mut redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (ha, hb) = (free_addr(), free_addr());
    let mut a = candidate(&redis, d, "a", Some(&ha));
    assert!(eventually(Duration::from_secs(10), || terms(d, "a").len() == 1));
    let mut b = candidate(&redis, d, "b", Some(&hb));
    let _reap = Reap(vec![a.id(), b.id()]);
    assert!(eventually(Duration::from_secs(10), || {
        probe(&hb, "/leader").1.contains("\"value\":\"a\"")
    }));

    redis.pause().unwrap();
    let frozen = Instant::now();
    let mut slowest = Duration::ZERO;
    let mut seen_stale = String::new();
    while frozen.elapsed() < Duration::from_millis(2500) {
        for (addr, lead) in [(&ha, true), (&hb, false)] {
            let (code, body, took) = probe(addr, "/leader");
            slowest = slowest.max(took);
            assert_eq!(
                code,
                if lead { 200 } else { 503 },
                "{addr} /leader while the store is frozen ({:?} in): {body}",
                frozen.elapsed()
            );
            let v: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
            assert_eq!(v["self"], lead, "{body}");
            assert!(
                v["as_of_ms"].is_u64(),
                "the answer says how fresh it is: {body}"
            );
            if v["as_of_ms"].as_u64().unwrap() > 1000 {
                seen_stale = body.clone();
            }
            let (code, body, took) = probe(addr, "/healthz");
            slowest = slowest.max(took);
            assert!(code == 200 || code == 503, "{addr} /healthz: {code} {body}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    redis.resume().unwrap();
    assert!(
        slowest < ANSWER_BOUND,
        "a health answer took {slowest:?} while the store was silent"
    );
    assert!(
        !seen_stale.is_empty(),
        "as_of_ms grows while the store is silent"
    );
    stop(&mut [&mut a, &mut b]);
    let _: PathBuf = d.to_path_buf();
}
