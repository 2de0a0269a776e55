//! `leasehold elect` and `leasehold leader`, the real binary against a private redis-server per
//! test: one leader at a time, each term above the last, a hand-over at once when the leader's
//! command ends, a standby that campaigns again (`--again`), SIGTERM resigning, a deposed leader's
//! command stopped (exit 76), and garbage refused before anything is held.

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::RedisServer;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

mod cli_support;

use cli_support::http::{free_addr, get};
use cli_support::{eventually, leasehold, wait_with_timeout};

fn output(redis: &RedisServer, args: &[&str]) -> Output {
    leasehold(redis).args(args).output().unwrap()
}

/// A candidate's scratch files: the command appends `term fence` to `led` each time it starts,
/// and exits once `go` exists (removing it, so the next term waits for a new one).
struct Candidate {
    dir: PathBuf,
    who: &'static str,
}

impl Candidate {
    fn new(root: &Path, who: &'static str) -> Self {
        Candidate {
            dir: root.to_owned(),
            who,
        }
    }

    fn path(&self, what: &str) -> PathBuf {
        self.dir.join(format!("{what}-{}", self.who))
    }

    fn script(&self) -> String {
        format!(
            "echo \"$LEASEHOLD_TERM $LEASEHOLD_FENCE\" >> {led}; trap 'exit 0' TERM; \
             while [ ! -e {go} ]; do sleep 0.02; done; rm -f {go}; exit 0",
            led = self.path("led").display(),
            go = self.path("go").display(),
        )
    }

    fn spawn(&self, redis: &RedisServer, again: bool) -> Child {
        let mut c = leasehold(redis);
        c.args(["elect", "--ttl", "20s", "--grace", "2s", "--value"])
            .arg(format!("{}:8080", self.who))
            .args(["--holder", self.who]);
        if again {
            c.arg("--again");
        }
        c.args(["scheduler", "--", "sh", "-c", &self.script()])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// The terms this candidate led, in order.
    fn terms(&self) -> Vec<u64> {
        std::fs::read_to_string(self.path("led"))
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let mut it = l.split(' ');
                let (term, fence) = (it.next().unwrap(), it.next().unwrap());
                assert_eq!(term, fence, "LEASEHOLD_TERM is the fence");
                term.parse().unwrap()
            })
            .collect()
    }

    fn step_down(&self) {
        std::fs::write(self.path("go"), "").unwrap();
    }
}

fn leader_json(redis: &RedisServer) -> serde_json::Value {
    let out = output(redis, &["leader", "--json", "scheduler"]);
    serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
}

#[test]
fn one_leader_hands_over_at_once_and_a_standby_campaigns_again() {
    let redis = RedisServer::start().unwrap();
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (
        Candidate::new(root.path(), "a"),
        Candidate::new(root.path(), "b"),
    );
    let none = output(&redis, &["leader", "scheduler"]);
    assert_eq!(none.status.code(), Some(3), "nobody leads: exit 3");
    assert!(String::from_utf8_lossy(&none.stdout).contains("no leader"));

    let mut ea = a.spawn(&redis, true);
    assert!(eventually(Duration::from_secs(10), || a.terms().len() == 1));
    let mut eb = b.spawn(&redis, true);
    std::thread::sleep(Duration::from_millis(500));
    assert!(b.terms().is_empty(), "one leader at a time");
    let l = leader_json(&redis);
    assert_eq!(l["value"], "a:8080");
    assert_eq!(l["holder"], "a");
    assert_eq!(l["term"].as_u64(), Some(a.terms()[0]));

    // A's command ends: A resigns at once and B (queued) leads, long before the 20 s TTL.
    let stepped = Instant::now();
    a.step_down();
    assert!(
        eventually(Duration::from_secs(3), || b.terms().len() == 1),
        "B leads within a round trip of A's resignation"
    );
    let took = stepped.elapsed();
    assert!(
        b.terms()[0] > a.terms()[0],
        "{:?} {:?}",
        a.terms(),
        b.terms()
    );
    assert_eq!(leader_json(&redis)["value"], "b:8080");

    // SIGTERM to B: its command is stopped, B resigns and exits; A, campaigning again, leads.
    kill(Pid::from_raw(eb.id() as i32), Signal::SIGTERM).unwrap();
    let st = wait_with_timeout(&mut eb, Duration::from_secs(10));
    assert_eq!(
        st.code(),
        Some(0),
        "the command's own code (it exits 0 on TERM)"
    );
    assert!(eventually(Duration::from_secs(3), || a.terms().len() == 2));
    let (ta, tb) = (a.terms(), b.terms());
    assert!(ta[1] > tb[0], "{ta:?} {tb:?}");
    assert_eq!(leader_json(&redis)["term"].as_u64(), Some(ta[1]));

    kill(Pid::from_raw(ea.id() as i32), Signal::SIGTERM).unwrap();
    wait_with_timeout(&mut ea, Duration::from_secs(10));
    assert!(
        eventually(Duration::from_secs(3), || leader_json(&redis).is_null()),
        "nobody leads once both are gone"
    );
    eprintln!("hand-over after the leader's command ended: {took:?}");
}

/// A free loopback port (bound and released: a tiny race, fine for a test).
#[test]
fn health_endpoints_tell_the_leader_from_a_standby() {
    let redis = RedisServer::start().unwrap();
    let root = tempfile::tempdir().unwrap();
    let (a, b) = (
        Candidate::new(root.path(), "a"),
        Candidate::new(root.path(), "b"),
    );
    let (ha, hb) = (free_addr(), free_addr());
    let spawn = |c: &Candidate, addr: &str| {
        leasehold(&redis)
            .args(["elect", "--ttl", "20s", "--health", addr, "--value"])
            .arg(format!("{}:8080", c.who))
            .args(["scheduler", "--", "sh", "-c", &c.script()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut ea = spawn(&a, &ha);
    assert!(eventually(Duration::from_secs(10), || a.terms().len() == 1));
    let mut eb = spawn(&b, &hb);
    assert!(eventually(Duration::from_secs(5), || {
        std::net::TcpStream::connect(&hb).is_ok()
    }));
    let (code, body) = get(&ha, "/leader");
    assert_eq!(code, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(
        (v["self"].clone(), v["value"].clone()),
        (true.into(), "a:8080".into())
    );
    let (code, body) = get(&hb, "/leader");
    assert_eq!(code, 503, "the standby does not lead: {body}");
    let v: serde_json::Value = serde_json::from_str(body.trim()).unwrap();
    assert_eq!(
        (v["self"].clone(), v["value"].clone()),
        (false.into(), "a:8080".into())
    );
    for addr in [&ha, &hb] {
        let (code, body) = get(addr, "/healthz");
        assert_eq!(code, 200, "{addr}: {body}");
    }
    assert_eq!(get(&ha, "/nothing").0, 404);
    // A hands over: B's endpoint says it leads now.
    a.step_down();
    assert!(eventually(Duration::from_secs(5), || get(&hb, "/leader").0 == 200));
    for c in [&mut ea, &mut eb] {
        let _ = kill(Pid::from_raw(c.id() as i32), Signal::SIGTERM);
        wait_with_timeout(c, Duration::from_secs(10));
    }
}

#[test]
fn a_deposed_leader_is_stopped_and_garbage_is_refused_before_anything_is_held() {
    let redis = RedisServer::start().unwrap();
    let root = tempfile::tempdir().unwrap();
    let a = Candidate::new(root.path(), "a");
    let mut ea = a.spawn(&redis, false);
    assert!(eventually(Duration::from_secs(10), || a.terms().len() == 1));
    let forced = output(&redis, &["release", "--force", "scheduler"]);
    assert!(forced.status.success());
    let st = wait_with_timeout(&mut ea, Duration::from_secs(10));
    assert_eq!(st.code(), Some(76), "the leadership was lost: exit 76");
    let mut stderr = String::new();
    std::io::Read::read_to_string(ea.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(stderr.contains("lost lease `scheduler`"), "{stderr}");
    assert!(leader_json(&redis).is_null());

    for (args, what) in [
        (
            vec!["elect", "--value", "two\nlines", "scheduler", "--", "true"],
            "leader value",
        ),
        (
            vec![
                "elect",
                "--holder",
                &"h".repeat(129),
                "scheduler",
                "--",
                "true",
            ],
            "holder",
        ),
        (vec!["elect", "bad{name", "--", "true"], "lease name"),
        (vec!["leader", "bad{name"], "lease name"),
        (
            vec!["elect", "--ttl", "soon", "scheduler", "--", "true"],
            "soon",
        ),
    ] {
        let out = output(&redis, &args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(what), "{args:?}: {err}");
    }
    let status = output(&redis, &["status", "--json", "scheduler"]);
    let info: serde_json::Value = serde_json::from_slice(&status.stdout).unwrap();
    assert_eq!(info["held"], false, "nothing was left held");
}
