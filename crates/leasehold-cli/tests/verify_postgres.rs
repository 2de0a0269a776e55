//! `leasehold verify --database postgres://…`: the same checks against PostgreSQL (each cell in its own
//! schema), with fewer cells. The fenced writes go through leasehold's own `Database::begin_fenced`,
//! or (`--fenced-writer psql`) through `psql` processes calling the SQL function `leasehold_fence`.

use std::process::Command;

use serde_json::Value;

/// Runs `leasehold verify --database <the test PostgreSQL>` with `args`, expects exit 0 and returns
/// its cells.
fn verify_on_postgres(args: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("cells.json");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["verify", "--database", &leasehold_testkit::postgres_url()])
        .args(args)
        .arg("--json")
        .arg(&json_path)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap()
}

#[test]
fn postgres_resource_keeps_safe_strategies_at_zero_and_shows_the_naive_bug() {
    let cells = verify_on_postgres(&[
        "--workload",
        "counter,transitions",
        "--fault",
        "pause",
        "--strategy",
        "naive,lease-fence,db-guards",
        "--injections",
        "1",
    ]);
    assert_eq!(cells.len(), 6);
    for c in &cells {
        assert_eq!(c["status"], "ran", "{c}");
        assert_eq!(c["faults_injected"], 1, "{c}");
        let v = c["violations"].as_u64().unwrap();
        if c["safe_by_design"] == true {
            assert_eq!(v, 0, "{c}");
        } else {
            assert!(
                v > 0,
                "the naive lock must show the bug on PostgreSQL too: {c}"
            );
        }
    }
}

/// The fence checked from outside Rust: every fenced write is a `psql` process running `BEGIN;
/// SELECT leasehold_fence(…); UPDATE …; COMMIT`. A paused holder's late write is refused (SQLSTATE
/// LHF01) and the counter stays right; the same lease without the check loses updates in the same
/// run, so the cell can see the bug.
#[test]
fn a_psql_writer_calling_leasehold_fence_keeps_the_fenced_lease_at_zero() {
    let cells = verify_on_postgres(&[
        "--fenced-writer",
        "psql",
        "--workload",
        "counter",
        "--fault",
        "pause",
        "--strategy",
        "lease,lease-fence",
        "--injections",
        "2",
    ]);
    assert_eq!(cells.len(), 2);
    let [lease, fenced] = [&cells[0], &cells[1]];
    assert_eq!(lease["strategy"], "lease");
    assert!(lease["fenced_writer"].is_null(), "{lease}");
    assert!(
        lease["violations"].as_u64().unwrap() > 0,
        "the unfenced lease must lose an update under the pause: {lease}"
    );
    assert_eq!(fenced["strategy"], "lease-fence");
    assert_eq!(fenced["fenced_writer"], "psql", "{fenced}");
    assert_eq!(fenced["status"], "ran", "{fenced}");
    assert_eq!(fenced["faults_injected"], 2, "{fenced}");
    assert_eq!(fenced["violations"], 0, "{fenced}");
    assert_eq!(fenced["fence_regressions"], 0, "{fenced}");
    assert!(
        fenced["refused_stale"].as_u64().unwrap() > 0,
        "the paused holder's psql write must be refused by leasehold_fence: {fenced}"
    );
    assert!(fenced["accepted_writes"].as_u64().unwrap() > 0, "{fenced}");
}
