//! `leasehold run --once-per` and `leasehold history`, the real binary against a private
//! redis-server: five replicas whose clocks are 2 s apart either way (libfaketime on each `run`)
//! fire 20 slots of a 5 s schedule, each when its own clock says the slot starts, and each slot
//! runs once; plain `run --wait 0` under the same firing runs a slot several times (what the slot
//! record fixes); a failed run is run again later in the slot and `--max-attempts` bounds that;
//! `history` tells what ran.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leasehold_testkit::RedisServer;

mod cli_support;

/// The schedule's period: twice the widest skew, and then some.
const PERIOD_S: u64 = 5;

/// Slots the skewed replicas fire (the bar: at least 20).
const SLOTS: usize = 20;

/// Each replica's clock against the real one, in seconds.
const SKEWS: [i64; 5] = [-2, -1, 0, 1, 2];

/// `leasehold` with its output kept for the test (stdout thrown away unless asked for).
fn leasehold(redis: &RedisServer) -> Command {
    let mut c = cli_support::leasehold(redis);
    c.stdout(Stdio::null()).stderr(Stdio::piped());
    c
}

/// `leasehold` whose wall clock runs `skew` seconds off (monotonic time untouched).
fn skewed(redis: &RedisServer, skew: i64) -> Command {
    let lib = leasehold_testkit::libfaketime_path()
        .expect("needs libfaketime (apt-get install -y faketime, or set LEASEHOLD_LIBFAKETIME)");
    let mut c = leasehold(redis);
    c.env("LD_PRELOAD", lib)
        .env("FAKETIME", format!("{skew:+}"))
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("FAKETIME_DONT_RESET", "1");
    c
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// The real time of the next slot start at least `ahead` ms away.
fn next_boundary(ahead: u64) -> u64 {
    let p = PERIOD_S * 1000;
    (now_ms() + ahead).div_ceil(p) * p
}

fn sleep_until(ms: u64) {
    let now = now_ms();
    if ms > now {
        std::thread::sleep(Duration::from_millis(ms - now));
    }
}

/// The command: appends `$LEASEHOLD_SLOT` to `runs`, takes 300 ms, exits `code`.
fn job(runs: &Path, code: i32) -> Vec<String> {
    vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo \"$LEASEHOLD_SLOT\" >> {}; sleep 0.3; exit {code}",
            runs.display()
        ),
    ]
}

/// Fires one replica per skew at `boundary` by its own clock (real time `boundary - skew`), each
/// running `args`; their outputs, in skew order.
fn fire(redis: &RedisServer, boundary: u64, args: &[String]) -> Vec<Output> {
    let handles: Vec<_> = SKEWS
        .iter()
        .map(|&skew| {
            let mut cmd = skewed(redis, skew);
            cmd.args(args);
            let at = (boundary as i64 - skew * 1000) as u64;
            std::thread::spawn(move || {
                sleep_until(at);
                cmd.output().unwrap()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

/// Fires one replica per skew at the same real time `at`: their clocks read `at + skew`, on both
/// sides of a slot boundary when `at` is one (floor division would split them over two slots).
fn fire_together(redis: &RedisServer, at: u64, args: &[String]) -> Vec<Output> {
    let handles: Vec<_> = SKEWS
        .iter()
        .map(|&skew| {
            let mut cmd = skewed(redis, skew);
            cmd.args(args);
            std::thread::spawn(move || {
                sleep_until(at);
                cmd.output().unwrap()
            })
        })
        .collect();
    handles.into_iter().map(|h| h.join().unwrap()).collect()
}

fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn once_per(name: &str, extra: &[&str], command: Vec<String>) -> Vec<String> {
    let mut v: Vec<String> = ["run", "--once-per", &format!("{PERIOD_S}s")]
        .iter()
        .map(|s| s.to_string())
        .collect();
    v.extend(extra.iter().map(|s| s.to_string()));
    v.push(name.into());
    v.push("--".into());
    v.extend(command);
    v
}

fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let runs = dir.path().join("runs");
    (dir, runs)
}

#[test]
fn five_skewed_replicas_run_each_slot_once_where_plain_run_repeats_it() {
    let redis = RedisServer::start().unwrap();
    let (_dir, runs) = scratch();
    let args = once_per("report", &[], job(&runs, 0));
    let mut slots = Vec::new();
    for _ in 0..SLOTS {
        // Far enough ahead that the earliest replica (2 s fast) fires in the future.
        let boundary = next_boundary(2_500);
        slots.push((boundary / 1000 / PERIOD_S).to_string());
        let outs = fire(&redis, boundary, &args);
        for (skew, out) in SKEWS.iter().zip(&outs) {
            let code = out.status.code();
            assert!(
                code == Some(0) || code == Some(75),
                "skew {skew}: {out:?} {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    // Fired at one real instant on a boundary, their clocks on both sides of it: one slot. The slot
    // before it never ran, so a replica that counted itself into it would run it.
    let boundary = next_boundary(500) + PERIOD_S * 1000;
    slots.push((boundary / 1000 / PERIOD_S).to_string());
    for out in fire_together(&redis, boundary, &args) {
        assert!(matches!(out.status.code(), Some(0 | 75)), "{out:?}");
    }
    assert_eq!(lines(&runs), slots, "each slot ran once, in its own slot");

    // history: every slot done, newest first, by one of the replicas.
    let out = leasehold(&redis)
        .args(["history", "--json", "--limit", "100", "report"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    let shown: Vec<String> = records
        .iter()
        .map(|r| r["slot"]["index"].to_string())
        .collect();
    let mut newest_first = slots.clone();
    newest_first.reverse();
    assert_eq!(shown, newest_first);
    for r in &records {
        assert_eq!(r["outcome"], "done", "{r}");
        assert_eq!(r["exit_code"], 0);
        assert_eq!(r["attempts"], 1);
        assert!(r["duration_ms"].as_u64().unwrap() >= 250, "{r}");
    }
    let prom = leasehold(&redis)
        .args(["history", "--prometheus", "report"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let prom = String::from_utf8_lossy(&prom.stdout);
    assert!(
        prom.contains("leasehold_job_last_success_timestamp_seconds{leasehold_job=\"report\"}"),
        "{prom}"
    );
    assert!(prom.contains(&format!(
        "leasehold_job_slots{{leasehold_job=\"report\",outcome=\"done\"}} {}",
        SLOTS + 1
    )));

    // The same firing with plain `run --wait 0`: the lock is free again by the time the slower
    // clocks fire, so the slot runs again.
    let (_dir2, plain_runs) = scratch();
    let mut plain: Vec<String> = vec!["run".into(), "report-plain".into(), "--".into()];
    plain.extend(job(&plain_runs, 0));
    fire(&redis, next_boundary(2_500), &plain);
    assert!(
        lines(&plain_runs).len() >= 2,
        "a plain lease runs one scheduled run several times: {:?}",
        lines(&plain_runs)
    );
}

#[test]
fn a_failed_run_is_run_again_in_its_slot_and_max_attempts_bounds_it() {
    let redis = RedisServer::start().unwrap();
    let (dir, runs) = scratch();
    // Fails on its first run, succeeds after: a replica firing later in the slot runs it again.
    let flag = dir.path().join("failed-once");
    let flaky = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo run >> {r}; if [ ! -e {f} ]; then touch {f}; exit 3; fi; exit 0",
            r = runs.display(),
            f = flag.display()
        ),
    ];
    let boundary = next_boundary(1_000);
    sleep_until(boundary);
    let args = once_per("flaky", &["--max-attempts", "2"], flaky);
    let run_once = || {
        let out = leasehold(&redis).args(&args).output().unwrap();
        out.status.code()
    };
    assert_eq!(
        run_once(),
        Some(3),
        "the first attempt fails with its own code"
    );
    assert_eq!(run_once(), Some(0), "the second runs it again and succeeds");
    assert_eq!(run_once(), Some(0), "then it is done: not run");
    assert_eq!(lines(&runs).len(), 2);

    // Always failing, two attempts: the third firing runs nothing and says why. A slot of its
    // own, so that all three fire well inside it.
    sleep_until(next_boundary(500));
    let (_d, always) = scratch();
    let args = once_per("broken", &["--max-attempts", "2"], job(&always, 4));
    let codes: Vec<_> = (0..3)
        .map(|_| leasehold(&redis).args(&args).output().unwrap())
        .collect();
    assert_eq!(codes[0].status.code(), Some(4));
    assert_eq!(codes[1].status.code(), Some(4));
    assert_eq!(codes[2].status.code(), Some(4), "the last attempt's code");
    let err = String::from_utf8_lossy(&codes[2].stderr);
    assert!(err.contains("--max-attempts 2 reached"), "{err}");
    assert_eq!(lines(&always).len(), 2, "two attempts, no more");
    let out = leasehold(&redis)
        .args(["history", "--json", "broken"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(records[0]["outcome"], "failed");
    assert_eq!(records[0]["attempts"], 2);
    assert_eq!(records[0]["exit_code"], 4);

    // The command killed by SIGKILL: a failure like another, run again later in the slot.
    sleep_until(next_boundary(500));
    let (d, killed) = scratch();
    let flag = d.path().join("killed-once");
    let dies = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo run >> {r}; if [ ! -e {f} ]; then touch {f}; kill -9 $$; fi; exit 0",
            r = killed.display(),
            f = flag.display()
        ),
    ];
    let args = once_per("killed", &[], dies);
    let first = leasehold(&redis).args(&args).output().unwrap();
    assert_ne!(first.status.code(), Some(0), "{first:?}");
    assert_eq!(
        leasehold(&redis)
            .args(&args)
            .output()
            .unwrap()
            .status
            .code(),
        Some(0)
    );
    assert_eq!(lines(&killed).len(), 2, "run again after the SIGKILL");

    // `run` itself SIGKILLed mid-run: its watcher stops the command, the record still says
    // running; once the lease lapses (1 s) the next replica counts the attempt lost and runs it.
    sleep_until(next_boundary(500));
    let (d, crashed) = scratch();
    let started = d.path().join("started");
    let slow = vec![
        "sh".into(),
        "-c".into(),
        format!(
            "echo run >> {r}; touch {s}; sleep 30",
            r = crashed.display(),
            s = started.display()
        ),
    ];
    let args = once_per("crashed", &["--ttl", "1s", "--grace", "400ms"], slow);
    let mut runner = leasehold(&redis).args(&args).spawn().unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(5);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < until,
            "the first attempt never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    runner.kill().unwrap();
    runner.wait().unwrap();
    std::thread::sleep(Duration::from_millis(1_300));
    let fast = once_per("crashed", &["--ttl", "1s"], job(&crashed, 0));
    let second = leasehold(&redis).args(&fast).output().unwrap();
    assert_eq!(second.status.code(), Some(0), "{second:?}");
    assert_eq!(
        lines(&crashed).len(),
        2,
        "the crashed attempt was run again"
    );
    let out = leasehold(&redis)
        .args(["history", "--json", "crashed"])
        .stdout(Stdio::piped())
        .output()
        .unwrap();
    let records: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (
            records[0]["outcome"].clone(),
            records[0]["attempts"].clone()
        ),
        ("done".into(), 2.into())
    );

    // Garbage: refused with exit 2 before anything runs.
    for bad in [
        vec!["run", "--once-per", "0s", "j", "--", "true"],
        vec![
            "run",
            "--once-per",
            "1h",
            "--offset",
            "2h",
            "j",
            "--",
            "true",
        ],
        vec![
            "run",
            "--once-per",
            "1h",
            "--max-attempts",
            "0",
            "j",
            "--",
            "true",
        ],
        vec!["run", "--once-per", "1h", "--wait", "5s", "j", "--", "true"],
        vec!["run", "--offset", "1h", "j", "--", "true"],
        vec!["history", "bad{name"],
    ] {
        let out = leasehold(&redis).args(&bad).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad:?}: {out:?}");
    }
}
