//! `leasehold verify --database postgres://…`: the same checks against PostgreSQL (each cell in its own
//! schema), with fewer cells. The fenced writes go through leasehold's own `Database::begin_fenced`.

use std::process::Command;

use serde_json::Value;

#[test]
fn postgres_resource_keeps_safe_strategies_at_zero_and_shows_the_naive_bug() {
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("cells.json");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["verify", "--database", &leasehold_testkit::postgres_url()])
        .args(["--workload", "counter,transitions", "--fault", "pause"])
        .args([
            "--strategy",
            "naive,lease-fence,db-guards",
            "--injections",
            "1",
        ])
        .arg("--json")
        .arg(&json_path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stdout:\n{}\nstderr:\n{stderr}",
        String::from_utf8_lossy(&out.stdout)
    );
    let cells: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
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
