//! A rolling update of an elected service, as Kubernetes' Deployment controller runs one with its
//! defaults (3 replicas, `maxSurge` 1, `maxUnavailable` 0): a new pod joins; an old pod is stopped
//! (SIGTERM) only once the new one passes the readiness probe docs/election.md gives (`/healthz`);
//! repeat until every pod is new. Real `elect --again` processes on a private redis-server: the
//! rollout finishes, there is never more than one leader (judged from the stamps the leaders'
//! commands write), the leadership moves at most once per old pod, and the `--on-lead` /
//! `--on-lose` hooks follow it. A probe on `/leader` instead would never pass on a standby: the
//! rollout would stall, which is why it is not the readiness probe.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::RedisServer;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

mod cli_support;
use cli_support::http::free_addr;
use cli_support::{eventually, leasehold, wait_with_timeout};

/// `GET path`: the status (0 when nothing answers).
fn get(addr: &str, path: &str) -> u16 {
    cli_support::http::get(addr, path).0
}

struct Pod {
    name: String,
    health: String,
    child: Child,
}

/// A pod that fails its test is not left campaigning: killed on drop.
impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_pod(redis: &RedisServer, dir: &Path, name: &str, hook: &Path) -> Pod {
    let health = free_addr();
    let stamps = dir.join(format!("lead-{name}"));
    let child = leasehold(redis)
        .args([
            "elect", "--again", "--ttl", "3s", "--health", &health, "--value", name,
        ])
        .arg("--on-lead")
        .arg(hook)
        .arg("--on-lose")
        .arg(hook)
        .args(["rollout", "--", "sh", "-c"])
        .arg(format!(
            "echo \"start $(date +%s%N) $LEASEHOLD_TERM\" >> {s}; \
             trap 'echo \"end $(date +%s%N)\" >> {s}; exit 0' TERM; \
             while :; do sleep 0.05; done",
            s = stamps.display()
        ))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join(format!("stderr-{name}"))).unwrap())
        .spawn()
        .unwrap();
    Pod {
        name: name.to_owned(),
        health,
        child,
    }
}

/// The readiness probe the recipe documents.
fn ready(p: &Pod) -> bool {
    get(&p.health, "/healthz") == 200
}

/// Every leadership as (start, end, term, pod), from the leaders' own stamps.
fn leaderships(dir: &Path, pods: &[String]) -> Vec<(u128, u128, u64, String)> {
    let mut out = Vec::new();
    for pod in pods {
        let text = std::fs::read_to_string(dir.join(format!("lead-{pod}"))).unwrap_or_default();
        let mut open: Option<(u128, u64)> = None;
        for line in text.lines() {
            let f: Vec<&str> = line.split(' ').collect();
            match f[0] {
                "start" => open = Some((f[1].parse().unwrap(), f[2].parse().unwrap())),
                "end" => {
                    let (s, term) = open.take().expect("an end after a start");
                    out.push((s, f[1].parse().unwrap(), term, pod.clone()));
                }
                _ => {}
            }
        }
        if let Some((s, term)) = open {
            out.push((s, u128::MAX, term, pod.clone()));
        }
    }
    out.sort();
    out
}

#[test]
fn a_rolling_update_finishes_with_one_leader_at_a_time() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let events = d.join("hooks");
    let hook = d.join("hook.sh");
    std::fs::write(
        &hook,
        format!(
            "#!/bin/sh\necho \"$LEASEHOLD_EVENT $LEASEHOLD_TERM $LEASEHOLD_VALUE\" >> {}\n",
            events.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&hook, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();

    let mut old: Vec<Pod> = (0..3)
        .map(|i| start_pod(&redis, d, &format!("old{i}"), &hook))
        .collect();
    assert!(eventually(Duration::from_secs(15), || old
        .iter()
        .all(ready)));
    assert!(eventually(Duration::from_secs(15), || {
        old.iter()
            .filter(|p| get(&p.health, "/leader") == 200)
            .count()
            == 1
    }));

    let mut new: Vec<Pod> = Vec::new();
    for i in 0..3 {
        let pod = start_pod(&redis, d, &format!("new{i}"), &hook);
        let started = Instant::now();
        assert!(
            eventually(Duration::from_secs(15), || ready(&pod)),
            "new{i} never became ready: the rollout is stuck"
        );
        // The trap the recipe avoids: as a standby it is not the leader, so a readiness probe on
        // /leader would keep it unready and the controller would never stop an old pod.
        if i == 0 {
            assert_eq!(get(&pod.health, "/leader"), 503, "a standby does not lead");
        }
        eprintln!("new{i} ready after {:?}", started.elapsed());
        new.push(pod);
        // The controller stops the oldest old pod.
        let mut gone = old.remove(0);
        kill(Pid::from_raw(gone.child.id() as i32), Signal::SIGTERM).unwrap();
        let st = wait_with_timeout(&mut gone.child, Duration::from_secs(20));
        assert!(
            st.success() || st.code() == Some(143),
            "{} ended {st}",
            gone.name
        );
    }
    // Every pod is new; one of them leads.
    assert!(eventually(Duration::from_secs(15), || {
        new.iter()
            .filter(|p| get(&p.health, "/leader") == 200)
            .count()
            == 1
    }));
    let names: Vec<String> = (0..3)
        .flat_map(|i| [format!("old{i}"), format!("new{i}")])
        .collect();
    // ... and its command runs (it starts once the --on-lead hook is done).
    assert!(eventually(Duration::from_secs(15), || {
        leaderships(d, &names)
            .last()
            .is_some_and(|l| l.3.starts_with("new") && l.1 == u128::MAX)
    }));
    let led = leaderships(d, &names);
    eprintln!("leaderships (start, end, term, pod): {led:?}");
    assert!(
        led.len() >= 2 && led[0].3.starts_with("old"),
        "an old pod led, and stopping it moved the leadership: {led:?}"
    );
    assert!(
        led.last().unwrap().3.starts_with("new") && led.last().unwrap().1 == u128::MAX,
        "a new pod leads at the end: {led:?}"
    );
    for w in led.windows(2) {
        assert!(
            w[0].1 < w[1].0,
            "two leaders at once: {:?} and {:?}",
            w[0],
            w[1]
        );
        assert!(w[0].2 < w[1].2, "terms increase: {led:?}");
        // A resignation hands over within a round trip or so; a second here would be the
        // hand-over TTL of a waiter that left without telling the store.
        let gap_ms = (w[1].0 - w[0].1) / 1_000_000;
        assert!(
            gap_ms < 500,
            "the leadership took {gap_ms} ms to move: {led:?}"
        );
    }
    assert!(
        led.len() <= 4,
        "the leadership moved more than once per old pod: {led:?}"
    );
    // The hooks followed it: a lead event per leadership, a lose event per ended one.
    let hooks = std::fs::read_to_string(&events).unwrap_or_default();
    for (_, end, term, pod) in &led {
        assert!(hooks.contains(&format!("lead {term} {pod}")), "{hooks}");
        if *end != u128::MAX {
            assert!(
                eventually(Duration::from_secs(5), || std::fs::read_to_string(&events)
                    .unwrap_or_default()
                    .contains(&format!("lose {term} {pod}"))),
                "{hooks}"
            );
        }
    }
    for mut p in new {
        let _ = kill(Pid::from_raw(p.child.id() as i32), Signal::SIGTERM);
        wait_with_timeout(&mut p.child, Duration::from_secs(20));
    }
    let _: PathBuf = d.to_path_buf();
}

#[test]
fn a_hook_that_is_not_executable_is_refused_before_campaigning() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("not-x.sh");
    std::fs::write(&script, "#!/bin/sh\n").unwrap();
    for (flag, program) in [
        ("--on-lead", script.to_string_lossy().into_owned()),
        ("--on-lose", "/nonexistent/hook".to_owned()),
        ("--on-lead", "no-such-hook-anywhere".to_owned()),
    ] {
        let o = leasehold(&redis)
            .args(["elect", flag, &program, "hooked", "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{flag} {program}: {err}");
        assert!(err.contains(flag) && err.contains("executable"), "{err}");
    }
    let o = leasehold(&redis)
        .args(["status", "--json", "hooked"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["held"], false, "nothing was held: {v}");
}
