//! End to end: `leasehold verify --fault partition` on every lease store (a private redis-server,
//! PostgreSQL, MariaDB and a three-member etcd cluster the harness starts, a SQLite file as the
//! resource), once under each stop rule. The holder's connection is black-holed while the store stays
//! up for the others; its critical section runs long and takes 60% of its longest allowed shutdown to
//! stop once told. Under the old rule (stop when the lease is lost) every unfenced lease overlaps its
//! successor and loses updates; under the new one (`Lease::stopping`) none does; the fenced leases
//! lose nothing either way, by refusing the stale writes. The verdicts are the harness's, counted
//! from the history the database recorded.

use std::process::Command;

use serde_json::Value;

const STRATEGIES: &str = "naive,lease,lease-fence,pg-lease,pg-lease-fence,mysql-lease,mysql-lease-fence,etcd-lease,etcd-lease-fence";

/// Runs the partition cells under `rule` and returns them.
fn run(rule: &str) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cells.json");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["verify", "--fault", "partition", "--workload", "counter"])
        .args(["--strategy", STRATEGIES, "--injections", "2"])
        .args(["--stop-rule", rule, "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "verify --stop-rule {rule} failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    let cells: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(cells.len(), STRATEGIES.split(',').count(), "{stdout}");
    for c in &cells {
        // Every store's servers are the harness's own: a cell that did not run is a failure here.
        assert_eq!(c["status"], "ran", "{c}");
        assert!(c["faults_injected"].as_u64().unwrap() >= 1, "{c}");
    }
    cells
}

fn num(c: &Value, field: &str) -> u64 {
    c[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} in {c}"))
}

#[test]
fn the_old_stop_rule_overlaps_under_a_partition_and_the_new_one_does_not_on_every_store() {
    for (binary, install) in [
        (leasehold_testkit::redis_server_available(), "redis-server"),
        (leasehold_testkit::postgres_server_available(), "postgresql"),
        (
            leasehold_testkit::mariadb_server_available(),
            "mariadb-server",
        ),
        (leasehold_testkit::etcd_available(), "etcd-server"),
    ] {
        assert!(binary, "this test needs {install} installed (./dev setup)");
    }
    let old = run("at-loss");
    for c in &old {
        let strategy = c["strategy"].as_str().unwrap();
        if strategy == "naive" {
            assert!(num(c, "violations") > 0, "{c}");
            continue;
        }
        assert_eq!(c["stop_rule"], "at-loss", "{c}");
        assert!(
            c["note"].as_str().unwrap().contains("on its lease's word"),
            "the cut-off holder stopped on its lease's word: {c}"
        );
        if c["safe_by_design"] == true {
            assert_eq!(num(c, "violations"), 0, "a fenced lease lost writes: {c}");
            assert!(
                num(c, "refused_stale") > 0,
                "the fence refused the late write: {c}"
            );
        } else {
            assert!(
                num(c, "overlapping_holders") > 0 && num(c, "violations") > 0,
                "under the old rule the slow shutdown runs past the hand-over: {c}"
            );
        }
    }
    let new = run("in-time");
    for c in &new {
        let strategy = c["strategy"].as_str().unwrap();
        if strategy == "naive" {
            // The fault bites: a lock that cannot say when to stop still loses updates.
            assert!(num(c, "violations") > 0, "{c}");
            continue;
        }
        assert_eq!(c["stop_rule"], "in-time", "{c}");
        assert_eq!(num(c, "violations"), 0, "{c}");
        assert_eq!(
            num(c, "overlapping_holders"),
            0,
            "the holder's work is gone before anyone else holds the name: {c}"
        );
    }
}
