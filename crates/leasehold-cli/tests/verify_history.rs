//! `leasehold verify --history-dir` and the checker that shares no code with it
//! (`crates/leasehold-lab/tools/check_history.py`): a few real cells (the counter under a pause,
//! the naive lock that loses updates and the fenced lease that refuses stale writes), every verdict
//! agreed by the checker; then each kind of tampering with a record caught: a holder's interval
//! inserted over another's, a fence moved backwards, a lost write hidden (removed, or rewritten to
//! look right), a write removed from a clean record, a verdict flipped. Garbage is refused with
//! exit 2 naming the file and line.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const CHECKER: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../leasehold-lab/tools/check_history.py"
);

fn check(paths: &[&Path]) -> (i32, String) {
    let out: Output = Command::new("python3")
        .arg(CHECKER)
        .arg("--quiet")
        .args(paths)
        .output()
        .expect("python3 is required for the history checker");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

fn read(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Writes `lines` as a record named like `original` in a directory of its own.
fn write(dir: &Path, case: &str, original: &Path, lines: &[Value]) -> PathBuf {
    let d = dir.join(case);
    std::fs::create_dir_all(&d).unwrap();
    let path = d.join(original.file_name().unwrap());
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, text).unwrap();
    path
}

fn of<'a>(lines: &'a [Value], kind: &'a str) -> impl Iterator<Item = (usize, &'a Value)> + 'a {
    lines
        .iter()
        .enumerate()
        .filter(move |(_, l)| l["record"] == kind)
}

fn record_of(dir: &Path, strategy: &str) -> PathBuf {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .ends_with(&format!("-pause-{strategy}.jsonl"))
        })
        .unwrap_or_else(|| panic!("no record of {strategy} in {}", dir.display()))
}

#[test]
fn the_checker_agrees_with_real_cells_and_catches_every_tampering() {
    if !leasehold_testkit::redis_server_available() {
        panic!("redis-server is required for this test (apt-get install -y redis-server)");
    }
    let tmp = tempfile::tempdir().unwrap();
    let records = tmp.path().join("records");
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "verify",
            "--workload",
            "counter",
            "--fault",
            "pause",
            "--strategy",
            "naive,lease-fence",
            "--injections",
            "2",
            "--history-dir",
        ])
        .arg(&records)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, text) = check(&[&records]);
    assert_eq!(code, 0, "the checker disagrees with the lab: {text}");
    assert!(text.contains("2 cells (2 ran)"), "{text}");

    let naive = record_of(&records, "naive");
    let fenced = record_of(&records, "lease-fence");
    let n = read(&naive);
    let f = read(&fenced);
    // What the tampering below relies on: the naive lock lost updates, the fence refused writes.
    assert!(
        n[0]["verdict"]["violations"].as_u64().unwrap() > 0,
        "{}",
        n[0]
    );
    assert_eq!(f[0]["verdict"]["violations"], 0, "{}", f[0]);
    assert!(of(&f, "refused").count() > 0, "{}", f[0]);
    let caught = |case: &str, original: &Path, lines: Vec<Value>, want: &str| {
        let path = write(tmp.path(), case, original, &lines);
        let (code, text) = check(&[&path]);
        assert_eq!(code, 1, "{case}: not caught: {text}");
        assert!(text.contains(want), "{case}: want {want:?} in {text}");
    };

    // An interval of another holder laid over one of holder 0's: two holders at once.
    let mut t = f.clone();
    let (_, first) = of(&f, "interval").find(|(_, i)| i["slot"] == 0).unwrap();
    let mut intruder = first.clone();
    intruder["slot"] = Value::from(1);
    t.push(intruder);
    caught(
        "overlap",
        &fenced,
        t,
        "overlapping_holders: the lab recorded",
    );

    // Two writes' fences swapped: a lower fence accepted after a higher one.
    let mut t = f.clone();
    let writes: Vec<usize> = of(&f, "write").map(|(i, _)| i).collect();
    let (a, b) = (writes[0], *writes.last().unwrap());
    assert_ne!(f[a]["fence"], f[b]["fence"]);
    let fa = t[a]["fence"].clone();
    t[a]["fence"] = t[b]["fence"].clone();
    t[b]["fence"] = fa;
    caught("fence", &fenced, t, "fence_regressions: the lab recorded 0");

    // A lost update removed from the record (and the count of writes made to match).
    let value = |w: &Value, k: &str| w[k].as_str().unwrap().parse::<i64>().unwrap();
    let lost: Vec<usize> = of(&n, "write")
        .filter(|(_, w)| value(w, "new") != value(w, "old") + 1)
        .map(|(i, _)| i)
        .collect();
    assert!(!lost.is_empty());
    let mut t = n.clone();
    t.remove(lost[0]);
    t[0]["verdict"]["accepted_writes"] =
        Value::from(n[0]["verdict"]["accepted_writes"].as_u64().unwrap() - 1);
    caught("lost-removed", &naive, t, "violations: the lab recorded");

    // A lost update rewritten to look like an increment, and the verdict made to match: the next
    // write of the counter no longer follows from it.
    let last_write = of(&n, "write").map(|(i, _)| i).last().unwrap();
    let hidden = *lost.iter().find(|i| **i < last_write).unwrap();
    let mut t = n.clone();
    t[hidden]["new"] = Value::from((value(&n[hidden], "old") + 1).to_string());
    t[0]["verdict"]["violations"] =
        Value::from(n[0]["verdict"]["violations"].as_u64().unwrap() - 1);
    caught(
        "lost-rewritten",
        &naive,
        t,
        "a write is missing or was changed",
    );

    // A write removed from a clean record, its count made to match: the chain breaks.
    let mut t = f.clone();
    t.remove(writes[writes.len() / 2]);
    t[0]["verdict"]["accepted_writes"] =
        Value::from(f[0]["verdict"]["accepted_writes"].as_u64().unwrap() - 1);
    caught(
        "write-removed",
        &fenced,
        t,
        "a write is missing or was changed",
    );

    // A write attributed to another holder than the one that held the lease with its fence.
    let mut t = f.clone();
    let w = writes[writes.len() / 3];
    t[w]["writer"] = Value::from(if f[w]["writer"] == 0 { 1 } else { 0 });
    caught("writer", &fenced, t, "lies in no interval of that holder");

    // Verdicts flipped: the fenced cell said to have failed, the naive one to have lost nothing.
    let mut t = f.clone();
    t[0]["verdict"]["failed"] = Value::from(true);
    caught(
        "failed-flipped",
        &fenced,
        t,
        "failed: the lab recorded true",
    );
    let mut t = n.clone();
    t[0]["verdict"]["violations"] = Value::from(0);
    caught(
        "violations-flipped",
        &naive,
        t,
        "violations: the lab recorded 0",
    );

    // Garbage: exit 2 naming the file and the line.
    let garbage = tmp.path().join("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    let mut text = std::fs::read_to_string(&fenced).unwrap();
    text.push_str("{\"record\": \"write\", \"seq\": \n");
    std::fs::write(garbage.join("x.jsonl"), &text).unwrap();
    let (code, text) = check(&[&garbage]);
    assert_eq!(code, 2, "{text}");
    assert!(
        text.contains("x.jsonl:") && text.contains("not JSON"),
        "{text}"
    );
    let (code, text) = check(&[&tmp.path().join("nowhere")]);
    assert_eq!(code, 2, "{text}");
}

#[test]
fn an_unwritable_history_dir_is_refused_before_any_cell_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["verify", "--quick", "--history-dir"])
        .arg(file.join("sub"))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("--history-dir"), "{err}");
    assert!(
        started.elapsed().as_secs() < 10,
        "it ran cells first: {err}"
    );
}
