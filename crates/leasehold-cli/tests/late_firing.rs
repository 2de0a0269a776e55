//! A replica that fires `run --once-per` more than half a period late (a timer catching up after a
//! reboot) runs its own slot, not the next one early, so the on-time replica still runs the next
//! slot; past `--starting-deadline` the late firing is recorded missed and runs nothing. Against a
//! private redis-server, the real binary, each replica's clock right (lateness, not skew).
//!
//! Under the nearest-slot rule alone (before the fix) the late firing at 2.5 s into a 4 s slot
//! claimed the next slot 1.5 s early and the on-time replica then found it done: the slot it was
//! late for never ran. The test checks both slots ran, each once, and which firing ran which.

use std::path::Path;
use std::process::{Command, Stdio};

use leasehold_testkit::RedisServer;

mod cli_support;

use cli_support::{now_ms, sleep_until};

const PERIOD_MS: u64 = 4_000;

/// A slot start at least `ahead` ms away.
fn next_boundary(ahead: u64) -> u64 {
    (now_ms() + ahead).div_ceil(PERIOD_MS) * PERIOD_MS
}

/// One firing: `run --once-per 4s` that appends `WHO SLOT` to `runs`.
fn fire(redis: &RedisServer, job: &str, who: &str, runs: &Path, extra: &[&str]) -> (i32, String) {
    let mut c: Command = cli_support::leasehold(redis);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c.args(["run", "--once-per", "4s"])
        .args(extra)
        .arg(job)
        .arg("--");
    c.args([
        "sh",
        "-c",
        &format!("echo \"{who} $LEASEHOLD_SLOT\" >> {}", runs.display()),
    ]);
    let out = c.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_replica_fired_late_runs_its_own_slot_and_never_the_next_one_early() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    let b = next_boundary(500);
    let k = b / PERIOD_MS;
    // Slot k: the on-time replica is down; the late one fires 2.5 s into it (nearer slot k+1).
    sleep_until(b + 2_500);
    let (code, err) = fire(&redis, "report", "late", &runs, &[]);
    assert_eq!(code, 0, "{err}");
    // Slot k+1: the on-time replica fires at its start.
    sleep_until(b + PERIOD_MS + 100);
    let (code, err) = fire(&redis, "report", "on-time", &runs, &[]);
    assert_eq!(code, 0, "{err}");
    let got = lines(&runs);
    assert_eq!(
        got,
        vec![format!("late {k}"), format!("on-time {}", k + 1)],
        "the late firing ran slot k (its own), the on-time one slot k+1; the nearest-slot rule \
         alone would have given `late {}` and no run of k+1 by the on-time replica",
        k + 1
    );

    // Past a starting deadline of 2 s, the late firing is recorded missed and runs nothing.
    let (_d, runs2) = (dir.path().join("x"), dir.path().join("runs2"));
    let b = next_boundary(500);
    let k = b / PERIOD_MS;
    sleep_until(b + 2_500);
    let (code, err) = fire(
        &redis,
        "nightly",
        "late",
        &runs2,
        &["--starting-deadline", "2s"],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("recorded missed"), "{err}");
    assert!(lines(&runs2).is_empty(), "nothing ran: {:?}", lines(&runs2));
    let out = cli_support::leasehold(&redis)
        .args(["history", "--json", "nightly"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0]["slot"]["index"], k, "{records:?}");
    assert_eq!(records[0]["outcome"], "missed", "{records:?}");
    // The next slot is untouched: an on-time firing runs it.
    sleep_until(b + PERIOD_MS + 100);
    let (code, err) = fire(
        &redis,
        "nightly",
        "on-time",
        &runs2,
        &["--starting-deadline", "2s"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(lines(&runs2), vec![format!("on-time {}", k + 1)]);
}
