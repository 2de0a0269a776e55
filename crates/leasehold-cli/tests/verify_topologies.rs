//! End to end: `leasehold verify` on Redlock's three masters, a Sentinel set and a Redis Cluster,
//! with real worker processes and real faults. Redlock without the fence must lose updates when its
//! holder pauses or a master's clock jumps; with the fence it must not, in the same cells; the
//! fenced lease must lose nothing through a Sentinel or Cluster failover that loses its lock.

use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

/// The two runs share two cores with everything else: one at a time, so neither measures the
/// other's load.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `leasehold verify` with `args` and returns its cells; the run must exit 0 (no strategy
/// documented as safe showed a violation) within `limit_s`.
fn verify(args: &[&str], limit_s: u64) -> Vec<Value> {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    if !leasehold_testkit::redis_server_available() {
        panic!("redis-server is required for this test (apt-get install -y redis-server)");
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

#[test]
fn redlock_loses_updates_under_a_pause_and_a_clock_jump_and_its_fence_loses_none() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "redlock,redlock-fence",
            "--fault",
            "pause,clock-jump",
            "--injections",
            "3",
        ],
        60,
    );
    for fault in ["pause", "clock-jump"] {
        let bare = cell(&cells, fault, "redlock");
        assert_eq!(bare["status"], "ran", "{bare}");
        assert!(bare["faults_injected"].as_u64().unwrap() >= 1, "{bare}");
        assert!(
            bare["violations"].as_u64().unwrap() > 0,
            "Redlock alone must lose updates under {fault}: {bare}"
        );
        let fenced = cell(&cells, fault, "redlock-fence");
        assert_eq!(fenced["status"], "ran", "{fenced}");
        assert!(fenced["faults_injected"].as_u64().unwrap() >= 1, "{fenced}");
        assert_eq!(fenced["violations"], 0, "{fenced}");
        // Zero because the resource refused the stale holder, not because nothing happened.
        assert!(fenced["refused_stale"].as_u64().unwrap() > 0, "{fenced}");
    }
}

#[test]
fn a_fenced_lease_loses_nothing_through_sentinel_and_cluster_failovers() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "lease-fence",
            "--fault",
            "sentinel-failover,cluster-failover",
            "--injections",
            "1",
        ],
        60,
    );
    for fault in ["sentinel-failover", "cluster-failover"] {
        let c = cell(&cells, fault, "lease-fence");
        assert_eq!(c["status"], "ran", "{c}");
        assert_eq!(c["faults_injected"], 1, "{c}");
        assert_eq!(c["violations"], 0, "{c}");
        assert_eq!(c["stalls"], 0, "{c}");
    }
}
