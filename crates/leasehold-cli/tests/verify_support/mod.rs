//! Shared by the end-to-end tests of `leasehold verify`: run it, find a cell.

use std::process::Command;
use std::sync::Mutex;

use serde_json::Value;

/// The runs of one test binary share two cores with everything else: one at a time, so neither measures the other's
/// load.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `leasehold verify` with `args` and returns its cells; the run must exit 0 (no strategy
/// documented as safe showed a violation or a stall) within `limit_s`.
pub(crate) fn verify(args: &[&str], limit_s: u64) -> Vec<Value> {
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

pub(crate) fn cell<'a>(cells: &'a [Value], fault: &str, strategy: &str) -> &'a Value {
    cells
        .iter()
        .find(|c| c["fault"] == fault && c["strategy"] == strategy)
        .unwrap_or_else(|| panic!("no cell {fault} × {strategy}"))
}
