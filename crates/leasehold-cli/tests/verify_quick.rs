//! End to end: `leasehold verify --quick` against private redis-server processes and a SQLite file,
//! with real worker processes. Safe strategies must show 0 violations, the naive ones must show the
//! bug under the pause fault, the HTML report must render in a real browser, and every cell's
//! record (`--history-dir`) must agree with the independent history checker.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

fn leasehold() -> Command {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
}

fn cells<'a>(
    json: &'a [Value],
    pred: impl Fn(&Value) -> bool + 'a,
) -> impl Iterator<Item = &'a Value> + 'a {
    json.iter().filter(move |c| pred(c))
}

#[test]
fn quick_run_separates_safe_from_unsafe_and_renders_a_report() {
    if !leasehold_testkit::redis_server_available() {
        panic!("redis-server is required for this test (apt-get install -y redis-server)");
    }
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("cells.json");
    let report_dir = dir.path().join("report");
    let history_dir = dir.path().join("history");
    let started = std::time::Instant::now();
    let out = leasehold()
        .args(["verify", "--quick", "--json"])
        .arg(&json_path)
        .arg("--report")
        .arg(&report_dir)
        .arg("--history-dir")
        .arg(&history_dir)
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "verify --quick failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );
    assert!(
        elapsed.as_secs() < 180,
        "--quick must finish under 3 minutes, took {elapsed:?}"
    );
    assert!(
        stderr.contains("about"),
        "the run must say up front how long it takes: {stderr}"
    );
    assert!(
        stdout.contains("violations"),
        "the table is printed: {stdout}"
    );

    let json: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    for field in [
        "workload",
        "fault",
        "strategy",
        "operations",
        "faults_injected",
        "violations",
        "stalls",
        "lock_without_expiry",
        "safe_by_design",
    ] {
        assert!(
            json.iter().all(|c| c.get(field).is_some()),
            "every cell has {field}"
        );
    }
    let ran = |c: &Value| c["status"] == "ran";

    // Safe by design: exactly the fenced leases (one Redis server, Redlock, an election, PostgreSQL,
    // MariaDB, etcd) and the database guards, all at 0.
    for c in cells(&json, |c| c["safe_by_design"] == true) {
        assert!(
            c["strategy"] == "lease-fence"
                || c["strategy"] == "redlock-fence"
                || c["strategy"] == "election-fence"
                || c["strategy"] == "pg-lease-fence"
                || c["strategy"] == "mysql-lease-fence"
                || c["strategy"] == "etcd-lease-fence"
                || c["strategy"] == "db-guards",
            "{c}"
        );
        if ran(c) {
            assert_eq!(c["violations"], 0, "a safe strategy showed violations: {c}");
        }
    }
    // The harness can see the bug: every naive cell under the pause fault shows violations, with a
    // fault really injected, and so does every other unsafe strategy on the counter.
    let naive_pause: Vec<&Value> =
        cells(&json, |c| c["strategy"] == "naive" && c["fault"] == "pause").collect();
    assert_eq!(naive_pause.len(), 5, "one naive pause cell per workload");
    for c in naive_pause {
        assert!(c["faults_injected"].as_u64().unwrap() >= 1, "{c}");
        assert!(
            c["violations"].as_u64().unwrap() > 0,
            "the naive lock must show the bug under a pause: {c}"
        );
    }
    for s in ["ttl-del", "lease"] {
        let c = cells(&json, |c| {
            c["strategy"] == s && c["fault"] == "pause" && c["workload"] == "counter"
        })
        .next()
        .unwrap();
        assert!(
            c["violations"].as_u64().unwrap() > 0,
            "{s} must show lost updates under a pause: {c}"
        );
    }
    // The fence did its job by refusing stale writes, not because nothing happened: under the
    // pause, and under the two partial faults a client cannot see coming, a network that swallows
    // its packets and a Redis clock that jumps past the TTL.
    for fault in ["pause", "net-blackhole", "clock-jump"] {
        let fenced = cells(&json, |c| {
            c["strategy"] == "lease-fence" && c["fault"] == fault && c["workload"] == "counter"
        })
        .next()
        .unwrap();
        assert_eq!(fenced["status"], "ran", "{fenced}");
        assert!(fenced["faults_injected"].as_u64().unwrap() >= 1, "{fenced}");
        assert!(fenced["refused_stale"].as_u64().unwrap() > 0, "{fenced}");
        let naive = cells(&json, |c| {
            c["strategy"] == "naive" && c["fault"] == fault && c["workload"] == "counter"
        })
        .next()
        .unwrap();
        assert!(
            naive["violations"].as_u64().unwrap() > 0,
            "the naive lock must lose updates under {fault}: {naive}"
        );
    }
    // Cut off from Redis, the unfenced lease's holder stops by `Lease::stopping` (the default stop
    // rule) and its slow shutdown is over before anyone else holds the name.
    for s in ["lease", "lease-fence"] {
        let c = cells(&json, |c| c["strategy"] == s && c["fault"] == "partition")
            .next()
            .unwrap();
        assert_eq!(c["status"], "ran", "{c}");
        assert_eq!(c["stop_rule"], "in-time", "{c}");
        assert!(c["faults_injected"].as_u64().unwrap() >= 1, "{c}");
        assert_eq!(c["violations"], 0, "{c}");
        assert_eq!(c["overlapping_holders"], 0, "{c}");
    }
    // No strategy documented as safe ever leaves the lock unavailable.
    for c in cells(&json, |c| {
        c["safe_by_design"] == true && c["status"] == "ran"
    }) {
        assert_eq!(c["stalls"], 0, "{c}");
        assert_eq!(c["lock_without_expiry"], false, "{c}");
    }
    // The database guards held by refusing the paused worker's stale conditional write.
    let guarded = cells(&json, |c| {
        c["strategy"] == "db-guards" && c["fault"] == "pause" && c["workload"] == "counter"
    })
    .next()
    .unwrap();
    assert!(
        guarded["refused_by_guard"].as_u64().unwrap() > 0,
        "{guarded}"
    );
    // Faults that cannot apply are marked, not counted.
    let na: Vec<&Value> = cells(&json, |c| {
        c["strategy"] == "db-guards" && c["fault"] == "net-cut"
    })
    .collect();
    assert!(!na.is_empty());
    for c in na {
        assert_eq!(c["status"], "not-applicable", "{c}");
        assert!(c["violations"].is_null(), "{c}");
    }

    // Every cell's record, judged by a checker that shares no code with the lab, agrees with the
    // cell's verdict (verify_history.rs shows the checker catching a record tampered with).
    let checked = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../leasehold-lab/tools/check_history.py"
        ))
        .arg("--quiet")
        .arg(&history_dir)
        .output()
        .expect("python3 is required for the history checker");
    let said = String::from_utf8_lossy(&checked.stdout);
    assert_eq!(checked.status.code(), Some(0), "{said}");
    assert!(
        said.contains(&format!("{} cells", json.len())),
        "one record per cell: {said}"
    );

    let page = std::fs::read_to_string(report_dir.join("index.html")).unwrap();
    assert!(page.contains("<svg") && page.contains("two holders at once"));
    screenshot(&report_dir.join("index.html"), dir.path());
}

fn screenshot(page: &Path, dir: &Path) {
    let chromium = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .map(|o| o.status.success())
                .unwrap_or(false)
        })
        .expect("Debian's chromium is required for the report test (apt-get install -y chromium)");
    let png = dir.join("report.png");
    let profile = dir.join("chromium-profile");
    let status = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--window-size=1200,1600",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .unwrap();
    let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
    assert!(
        size > 10_000,
        "no screenshot written ({size} bytes): {}",
        String::from_utf8_lossy(&status.stderr)
    );
    let head = std::fs::read(&png).unwrap();
    assert_eq!(&head[..8], b"\x89PNG\r\n\x1a\n", "the screenshot is a PNG");
}

#[test]
fn garbage_input_is_refused_with_a_clear_error() {
    let out = leasehold()
        .args(["verify", "--database", "mysql://nope"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--database") && err.contains("postgres://"),
        "{err}"
    );
    // MariaDB is refused as the resource, and the error says where it is verified instead.
    assert!(err.contains("mysql-lease"), "{err}");

    let out = leasehold()
        .args(["verify", "--redis", "localhost:6379"])
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--redis"), "{err}");

    let out = leasehold()
        .args(["verify", "--fault", "meteor"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "clap rejects an unknown fault");
    assert!(String::from_utf8_lossy(&out.stderr).contains("meteor"));
}
