//! End to end: `leasehold verify` on the PostgreSQL and etcd lease stores, with real worker
//! processes, a private PostgreSQL and a three-member etcd cluster. Without the fence a lease on
//! either store must lose updates when its holder pauses past it; with the fence it must not, in
//! the same cells, because the resource refused the stale holder; and the fenced lease must lose
//! nothing through a PostgreSQL restart or the loss of one etcd member.

use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

/// The runs share two cores with everything else: one at a time, so neither measures the other's
/// load.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `leasehold verify` with `args` and returns its cells; the run must exit 0 (no strategy
/// documented as safe showed a violation or a stall) within `limit_s`.
fn verify(args: &[&str], limit_s: u64) -> Vec<Value> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !leasehold_testkit::redis_server_available() {
        panic!("redis-server is required by `leasehold verify` (apt-get install -y redis-server)");
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cells.json");
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("verify")
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "verify failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        elapsed.as_secs() < limit_s,
        "took {elapsed:?}\nstdout:\n{stdout}"
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

fn cell<'a>(cells: &'a [Value], fault: &str, strategy: &str) -> &'a Value {
    cells
        .iter()
        .find(|c| c["fault"] == fault && c["strategy"] == strategy)
        .unwrap_or_else(|| panic!("no cell {fault} × {strategy}"))
}

/// The unfenced lease lost updates under `pause`; the fenced one lost none because the resource
/// refused the stale holder, and lost none under `store_fault` either.
fn assert_fence_decides(cells: &[Value], bare: &str, fenced: &str, store_fault: &str) {
    let b = cell(cells, "pause", bare);
    assert_eq!(b["status"], "ran", "{b}");
    assert!(b["faults_injected"].as_u64().unwrap() >= 1, "{b}");
    assert!(
        b["violations"].as_u64().unwrap() > 0,
        "{bare} must lose updates under a pause: {b}"
    );
    let f = cell(cells, "pause", fenced);
    assert_eq!(f["status"], "ran", "{f}");
    assert!(f["faults_injected"].as_u64().unwrap() >= 1, "{f}");
    assert_eq!(f["violations"], 0, "{f}");
    // Zero because the resource refused the stale holder, not because nothing happened.
    assert!(f["refused_stale"].as_u64().unwrap() > 0, "{f}");
    let s = cell(cells, store_fault, fenced);
    assert_eq!(s["status"], "ran", "{s}");
    assert!(s["faults_injected"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(s["violations"], 0, "{s}");
}

#[test]
fn a_lease_on_postgres_loses_updates_under_a_pause_and_its_fence_loses_none() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "pg-lease,pg-lease-fence",
            "--fault",
            "pause,pg-restart",
            "--injections",
            "3",
        ],
        60,
    );
    assert_fence_decides(&cells, "pg-lease", "pg-lease-fence", "pg-restart");
}

#[test]
fn a_lease_on_etcd_loses_updates_under_a_pause_and_its_fence_loses_none() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "etcd-lease,etcd-lease-fence",
            "--fault",
            "pause,member-kill",
            "--injections",
            "2",
        ],
        60,
    );
    assert_fence_decides(&cells, "etcd-lease", "etcd-lease-fence", "member-kill");
    // A minority lost: the lease survives it, and nobody waits for the lock past the stall limit.
    let m = cell(&cells, "member-kill", "etcd-lease");
    assert_eq!(m["stalls"], 0, "{m}");
}
