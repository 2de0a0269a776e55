//! The `leasehold` command end to end: the real binary against a private redis-server per test.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::RedisServer;

mod cli_support;
use cli_support::wait_with_timeout;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// `leasehold` with a clean environment for its own variables, talking to `redis`.
fn leasehold(redis: Option<&RedisServer>) -> Command {
    let mut c = Command::new(BIN);
    cli_support::clean_env(&mut c).env("NO_COLOR", "1");
    if let Some(r) = redis {
        c.env("LEASEHOLD_REDIS_URL", r.url());
    }
    c
}

fn run_out(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().expect("leasehold runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn status_json(redis: &RedisServer, name: &str) -> serde_json::Value {
    let o = run_out(leasehold(Some(redis)).args(["status", "--json", name]));
    assert_eq!(o.status.code(), Some(0), "status failed: {}", stderr(&o));
    serde_json::from_str(stdout(&o).trim()).expect("status --json prints one JSON object")
}

/// Polls until `cond` holds, for up to 15 s (the machine may be loaded).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(15);
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Whether process `pid` has a handler for SIGTERM (bit 15 of `SigCgt` in /proc/PID/status).
fn catches_sigterm(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("SigCgt:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|mask| mask & (1 << (15 - 1)) != 0)
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[test]
fn bad_flags_names_and_durations_exit_2_naming_the_problem() {
    // No Redis needed: all of these must be refused before anything is sent.
    let cases: &[(&[&str], &str)] = &[
        (&["run", "--bogus", "x", "--", "true"], "--bogus"),
        (&["run", "--ttl", "30", "x", "--", "true"], "no unit"),
        (
            &["run", "--wait", "soon", "x", "--", "true"],
            "not a duration",
        ),
        (&["run", "--grace=-1s", "x", "--", "true"], "not a duration"),
        (
            &["run", "--max-hold", "", "x", "--", "true"],
            "empty duration",
        ),
        (&["run", "x"], "COMMAND"),
        (&["run", "", "--", "true"], "lease name"),
        (&["run", "a{b}", "--", "true"], "lease name"),
        (&["run", "--ttl", "5ms", "x", "--", "true"], "ttl"),
        (&["run", "--ttl", "400d", "x", "--", "true"], "ttl"),
        (&["run", "--max-hold", "0", "x", "--", "true"], "max hold"),
        (
            &["run", "--busy-exit-code", "300", "x", "--", "true"],
            "--busy-exit-code",
        ),
        (
            &["run", "--metrics-addr", "nowhere", "x", "--", "true"],
            "--metrics-addr",
        ),
        (&["run", "--permits", "0", "x", "--", "true"], "permits"),
        (&["run", "--permits=-1", "x", "--", "true"], "--permits"),
        (
            &["run", "--permits", "99999999999", "x", "--", "true"],
            "--permits",
        ),
        (&["run", "--permits", "5000", "x", "--", "true"], "permits"),
        (
            &["run", "--permits", "three", "x", "--", "true"],
            "--permits",
        ),
        (
            &["run", "--retention", "0s", "x", "--", "true"],
            "retention",
        ),
        (
            &["run", "--retention", "soon", "x", "--", "true"],
            "--retention",
        ),
        (
            &["run", "--on-suspect", "maybe", "x", "--", "true"],
            "--on-suspect",
        ),
        (&["status", ""], "lease name"),
        (&["release", "x"], "--force"),
        (&["list", ""], "pattern"),
        (&["demo", "--scene", "9"], "--scene"),
    ];
    let long_name = "n".repeat(300);
    let mut owned: Vec<(Vec<&str>, &str)> = cases.iter().map(|(a, w)| (a.to_vec(), *w)).collect();
    owned.push((vec!["run", &long_name, "--", "true"], "lease name"));
    owned.push((vec!["run", "tab\tname", "--", "true"], "lease name"));
    for (args, want) in owned {
        // An unreachable Redis: if validation were skipped we would see 69, not 2.
        let o = run_out(
            leasehold(None)
                .args(&args)
                .env("LEASEHOLD_REDIS_URL", "redis://127.0.0.1:1"),
        );
        let err = stderr(&o);
        assert_eq!(
            o.status.code(),
            Some(2),
            "{args:?} should exit 2; stderr: {err}"
        );
        assert!(
            err.contains(want),
            "{args:?}: stderr should name {want:?}: {err}"
        );
        assert!(!err.contains("panicked"), "{args:?} panicked: {err}");
    }
}

#[test]
fn unreachable_redis_exits_69_with_a_clear_message() {
    let port = leasehold_testkit::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let marker = tempfile::tempdir().unwrap();
    let ran = marker.path().join("ran");
    for args in [
        vec![
            "run".to_owned(),
            "--redis".into(),
            url.clone(),
            "job".into(),
            "--".into(),
            "touch".into(),
            ran.display().to_string(),
        ],
        vec![
            "status".to_owned(),
            "--redis".into(),
            url.clone(),
            "job".into(),
        ],
        vec!["list".to_owned(), "--redis".into(), url.clone()],
        vec![
            "release".to_owned(),
            "--force".into(),
            "--redis".into(),
            url.clone(),
            "job".into(),
        ],
    ] {
        let o = run_out(leasehold(None).args(&args));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(69), "{args:?}: {err}");
        assert!(
            err.contains("cannot reach") && err.contains(&port.to_string()),
            "{args:?}: {err}"
        );
    }
    assert!(!ran.exists(), "the command must not run without the lease");
}

#[test]
fn exit_codes_and_signals_of_the_command_pass_through_and_the_lease_is_released() {
    let redis = RedisServer::start().unwrap();
    let o = run_out(leasehold(Some(&redis)).args(["run", "codes", "--", "sh", "-c", "exit 7"]));
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let o =
        run_out(leasehold(Some(&redis)).args(["run", "codes", "--", "sh", "-c", "kill -TERM $$"]));
    assert_eq!(o.status.code(), Some(128 + 15), "{}", stderr(&o));
    let o = run_out(leasehold(Some(&redis)).args(["run", "codes", "--", "/nonexistent/command"]));
    assert_eq!(o.status.code(), Some(127), "{}", stderr(&o));
    assert!(stderr(&o).contains("/nonexistent/command"));
    // The command sees its lease; the lease is free again after each run.
    let o = run_out(leasehold(Some(&redis)).args([
        "run",
        "codes",
        "--",
        "sh",
        "-c",
        "echo \"$LEASEHOLD_NAME $LEASEHOLD_FENCE\"",
    ]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let (name, fence) = out.trim().split_once(' ').expect("name and fence");
    assert_eq!(name, "codes");
    let fence: u64 = fence.parse().expect("LEASEHOLD_FENCE is a number");
    let st = status_json(&redis, "codes");
    assert_eq!(st["held"], false, "released after the command exited: {st}");
    assert_eq!(st["fence"].as_u64(), Some(fence), "{st}");
}

#[test]
fn two_runs_racing_for_one_name_exactly_one_runs_the_other_exits_75() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("ran");
    let script = format!("echo \"$LEASEHOLD_FENCE\" >> {}; sleep 2", log.display());
    let spawn = || {
        leasehold(Some(&redis))
            .args(["run", "--ttl", "10s", "race", "--", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    let mut codes = [a.status.code(), b.status.code()];
    codes.sort();
    assert_eq!(
        codes,
        [Some(0), Some(75)],
        "a: {} b: {}",
        stderr(&a),
        stderr(&b)
    );
    let loser = if a.status.code() == Some(75) { &a } else { &b };
    let err = stderr(loser);
    assert_eq!(err.lines().count(), 1, "one line on stderr: {err}");
    assert!(err.contains("busy") && err.contains("race"), "{err}");
    assert!(err.contains("more"), "says how long it stays held: {err}");
    assert_eq!(
        read(&log).lines().count(),
        1,
        "exactly one command ran: {}",
        read(&log)
    );
}

#[test]
fn busy_exit_code_is_changeable_and_wait_gets_the_lease_after_release() {
    let redis = RedisServer::start().unwrap();
    let mut holder = leasehold(Some(&redis))
        .args(["run", "--ttl", "10s", "q", "--", "sleep", "1.5"])
        .spawn()
        .unwrap();
    eventually("the holder has the lease", || {
        status_json(&redis, "q")["held"] == true
    });
    let o =
        run_out(leasehold(Some(&redis)).args(["run", "--busy-exit-code", "9", "q", "--", "true"]));
    assert_eq!(o.status.code(), Some(9), "{}", stderr(&o));
    // A waiter gets it once the holder's command exits and releases, well before the 10 s TTL.
    let started = Instant::now();
    let o = run_out(leasehold(Some(&redis)).args(["run", "--wait", "8s", "q", "--", "true"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        started.elapsed() < Duration::from_secs(9),
        "took {:?}",
        started.elapsed()
    );
    assert!(holder.wait().unwrap().success());
    // With a short wait and a long holder: 75 after waiting, saying so.
    let mut holder = leasehold(Some(&redis))
        .args(["run", "--ttl", "10s", "q", "--", "sleep", "3"])
        .spawn()
        .unwrap();
    eventually("the holder has the lease", || {
        status_json(&redis, "q")["held"] == true
    });
    let o = run_out(leasehold(Some(&redis)).args(["run", "--wait", "300ms", "q", "--", "true"]));
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    assert!(stderr(&o).contains("after waiting"), "{}", stderr(&o));
    assert!(holder.wait().unwrap().success());
}

#[test]
fn force_release_sends_sigterm_to_the_command_and_run_exits_76() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let got = dir.path().join("got-term");
    let fence_file = dir.path().join("fence");
    let script = format!(
        "echo \"$LEASEHOLD_FENCE\" > {}; trap 'echo got-term > {}; exit 0' TERM; sleep 30 & wait",
        fence_file.display(),
        got.display()
    );
    let mut run = leasehold(Some(&redis))
        .args([
            "run", "--ttl", "1500ms", "--grace", "500ms", "evict", "--", "sh", "-c", &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the command has started", || {
        !read(&fence_file).trim().is_empty()
    });
    let held = status_json(&redis, "evict");
    assert_eq!(held["held"], true, "{held}");
    let fence_a: u64 = read(&fence_file).trim().parse().unwrap();

    let o = run_out(leasehold(Some(&redis)).args(["release", "--force", "--json", "evict"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let forced: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(forced["evicted"], true, "{forced}");
    assert!(
        forced["fence"].as_u64().unwrap() > fence_a,
        "fence advanced past the evicted holder's: {forced}"
    );

    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(76), "{err}");
    assert_eq!(
        read(&got).trim(),
        "got-term",
        "the command got SIGTERM; stderr: {err}"
    );
    assert!(err.contains("lost lease"), "{err}");
}

#[test]
fn max_hold_stops_the_command_and_sigkill_follows_the_grace() {
    let redis = RedisServer::start().unwrap();
    let started = Instant::now();
    // The command ignores SIGTERM: only SIGKILL after --grace stops it.
    let o = run_out(leasehold(Some(&redis)).args([
        "run",
        "--ttl",
        "2s",
        "--max-hold",
        "500ms",
        "--grace",
        "300ms",
        "capped",
        "--",
        "sh",
        "-c",
        "trap '' TERM; sleep 20 & wait; sleep 20",
    ]));
    assert_eq!(o.status.code(), Some(76), "{}", stderr(&o));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    assert!(stderr(&o).contains("SIGKILL"), "{}", stderr(&o));
    assert_eq!(status_json(&redis, "capped")["held"], false);
}

#[test]
fn sigterm_to_run_is_forwarded_and_the_lease_released_after_the_command_exits() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let got = dir.path().join("got");
    let started = dir.path().join("started");
    let script = format!(
        "touch {}; trap 'echo got-term > {}; exit 3' TERM; sleep 30 & wait",
        started.display(),
        got.display()
    );
    let mut run = leasehold(Some(&redis))
        .args(["run", "--ttl", "10s", "fwd", "--", "sh", "-c", &script])
        .spawn()
        .unwrap();
    eventually("the command has started", || started.exists());
    let pid = run.id();
    eventually("run has its signal handlers installed", || {
        catches_sigterm(pid)
    });
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(run.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wait_with_timeout(&mut run, Duration::from_secs(15));
    assert_eq!(status.code(), Some(3), "the command's own exit code");
    assert_eq!(read(&got).trim(), "got-term");
    assert_eq!(
        status_json(&redis, "fwd")["held"],
        false,
        "released, not left to expire"
    );
}

#[test]
fn status_and_list_json_while_held_and_while_free() {
    let redis = RedisServer::start().unwrap();
    let free = status_json(&redis, "inventory");
    assert_eq!(free["name"], "inventory");
    assert_eq!(free["key"], "{leasehold:inventory}:lock");
    assert_eq!(free["fence_key"], "{leasehold:inventory}:fence");
    assert_eq!(free["queue_key"], "{leasehold:inventory}:queue");
    assert_eq!(free["held"], false);
    assert!(free["ttl_ms"].is_null(), "{free}");
    assert!(free.get("fence").is_some(), "{free}");

    let dir = tempfile::tempdir().unwrap();
    let fence_file = dir.path().join("fence");
    let script = format!(
        "echo \"$LEASEHOLD_FENCE\" > {}; sleep 3",
        fence_file.display()
    );
    let mut holder = leasehold(Some(&redis))
        .args([
            "run",
            "--ttl",
            "20s",
            "inventory",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
    eventually("the command has started", || {
        !read(&fence_file).trim().is_empty()
    });
    let held = status_json(&redis, "inventory");
    assert_eq!(held["held"], true, "{held}");
    let ttl = held["ttl_ms"].as_u64().expect("ttl_ms while held");
    assert!(ttl > 0 && ttl <= 20_000, "{held}");
    assert_eq!(
        held["fence"].as_u64(),
        read(&fence_file).trim().parse::<u64>().ok(),
        "{held}"
    );

    let human = run_out(leasehold(Some(&redis)).args(["status", "inventory"]));
    let line = stdout(&human);
    assert!(
        line.contains("held") && line.contains("{leasehold:inventory}:lock"),
        "{line}"
    );

    let o = run_out(leasehold(Some(&redis)).args(["list", "--json", "inv*"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let list: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    let arr = list.as_array().expect("list --json prints an array");
    assert_eq!(arr.len(), 1, "{list}");
    assert_eq!(arr[0]["name"], "inventory");
    assert_eq!(arr[0]["held"], true);
    let o = run_out(leasehold(Some(&redis)).args(["list", "--json", "nomatch*"]));
    assert_eq!(stdout(&o).trim(), "[]");

    assert!(holder.wait().unwrap().success());
    let after = status_json(&redis, "inventory");
    assert_eq!(after["held"], false, "{after}");
    assert!(after["ttl_ms"].is_null(), "{after}");
}

#[test]
fn redis_stopping_mid_run_loses_the_lease_and_stops_the_command() {
    let mut redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let got = dir.path().join("got-term");
    let script = format!(
        "touch {}; trap 'echo got-term > {}; exit 0' TERM; sleep 30 & wait",
        started.display(),
        got.display()
    );
    let mut run = leasehold(Some(&redis))
        .args([
            "run", "--ttl", "1s", "--grace", "400ms", "outage", "--", "sh", "-c", &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the command has started", || started.exists());
    // Renewals now hang; the holder's own deadline passes and the lease counts as lost.
    redis.pause().unwrap();
    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    redis.resume().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(76), "{err}");
    assert_eq!(read(&got).trim(), "got-term", "{err}");
}

#[test]
fn metrics_endpoint_serves_lease_metrics_while_the_command_runs() {
    use std::io::{Read, Write};
    let redis = RedisServer::start().unwrap();
    let port = leasehold_testkit::free_port();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let script = format!("touch {}; sleep 3", started.display());
    let addr = format!("127.0.0.1:{port}");
    let mut run = leasehold(Some(&redis))
        .args([
            "run",
            "--metrics-addr",
            &addr,
            "--ttl",
            "600ms",
            "m",
            "--",
            "sh",
            "-c",
            &script,
        ])
        .spawn()
        .unwrap();
    eventually("the command has started", || started.exists());
    let mut body = String::new();
    eventually("the metrics show an acquisition and a renewal", || {
        body.clear();
        let Ok(mut s) = std::net::TcpStream::connect(&addr) else {
            return false;
        };
        let _ = write!(
            s,
            "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        );
        let _ = s.read_to_string(&mut body);
        body.contains("leasehold_acquisitions_total") && body.contains("leasehold_renewals_total")
    });
    assert!(run.wait().unwrap().success());
}

#[test]
fn sigterm_while_waiting_aborts_the_wait_without_running_the_command() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let mut holder = leasehold(Some(&redis))
        .args(["run", "--ttl", "10s", "w", "--", "sleep", "4"])
        .spawn()
        .unwrap();
    eventually("the holder has the lease", || {
        status_json(&redis, "w")["held"] == true
    });
    let mut waiter = leasehold(Some(&redis))
        .args(["run", "--wait", "20s", "w", "--", "touch"])
        .arg(&ran)
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = waiter.id();
    eventually("the waiter has its signal handlers installed", || {
        catches_sigterm(pid)
    });
    std::thread::sleep(Duration::from_millis(300));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(waiter.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = wait_with_timeout(&mut waiter, Duration::from_secs(10));
    assert_eq!(status.code(), Some(128 + 15));
    assert!(!ran.exists(), "the command must not run");
    assert!(holder.wait().unwrap().success());
}

#[test]
fn the_store_is_chosen_by_url_from_flag_or_environment_and_unknown_schemes_are_refused() {
    let srv = RedisServer::start().expect("redis-server");
    let url = srv.url();
    // --store, its alias --redis, LEASEHOLD_STORE and the older LEASEHOLD_REDIS_URL all reach it.
    let ways: [Vec<(&str, String)>; 4] = [
        vec![("--store", url.clone())],
        vec![("--redis", url.clone())],
        vec![("env:LEASEHOLD_STORE", url.clone())],
        vec![("env:LEASEHOLD_REDIS_URL", url.clone())],
    ];
    for way in ways {
        let mut c = leasehold(None);
        c.arg("status").arg("--json");
        for (k, v) in &way {
            match k.strip_prefix("env:") {
                Some(var) => {
                    c.env(var, v);
                }
                None => {
                    c.arg(k).arg(v);
                }
            }
        }
        let o = run_out(c.arg("job"));
        assert_eq!(o.status.code(), Some(0), "{way:?}: {}", stderr(&o));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(v["store"], "redis", "{way:?}");
    }
    // LEASEHOLD_STORE wins over the older variable.
    let o = run_out(
        leasehold(None)
            .env("LEASEHOLD_STORE", &url)
            .env("LEASEHOLD_REDIS_URL", "redis://127.0.0.1:1")
            .args(["status", "job"]),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // An unknown scheme is bad usage (2), names the schemes this build knows, never shows the
    // password, and runs nothing.
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let o = run_out(leasehold(None).args([
        "run",
        "--store",
        "mongodb://app:s3cret@db/x",
        "job",
        "--",
        "touch",
        &ran.display().to_string(),
    ]));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("redis://") && err.contains("rediss://"),
        "{err}"
    );
    assert!(!err.contains("s3cret"), "{err}");
    assert!(!ran.exists());
}

#[test]
fn etcd_store_runs_a_command_and_serves_status_list_and_force_release() {
    let etcd = leasehold_testkit::EtcdCluster::start_single().expect("etcd (etcd-server)");
    let url = etcd.url();
    let dir = tempfile::tempdir().unwrap();
    let fence_file = dir.path().join("fence");
    let script = format!(
        "echo \"$LEASEHOLD_FENCE\" > {}; trap 'exit 0' TERM; sleep 30 & wait",
        fence_file.display()
    );
    let mut run = leasehold(None)
        .args([
            "run", "--store", &url, "--ttl", "2s", "--grace", "1s", "nightly", "--", "sh", "-c",
            &script,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    eventually("the command has started", || {
        !read(&fence_file).trim().is_empty()
    });
    let fence_a: u64 = read(&fence_file).trim().parse().unwrap();

    let o = run_out(leasehold(None).args(["status", "--json", "--store", &url, "nightly"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let held: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(held["store"], "etcd", "{held}");
    assert_eq!(held["held"], true, "{held}");
    assert_eq!(held["fence"].as_u64(), Some(fence_a), "{held}");
    assert_eq!(held["key"], "leasehold/{nightly}/", "{held}");

    let o = run_out(leasehold(None).args(["list", "--store", &url]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("nightly: held"), "{}", stdout(&o));

    // A second run while it is held: busy.
    let o = run_out(leasehold(None).args(["run", "--store", &url, "nightly", "--", "true"]));
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));

    // The operator evicts the holder: its command is stopped, and the fence moved past it.
    let o =
        run_out(leasehold(None).args(["release", "--force", "--json", "--store", &url, "nightly"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let forced: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(forced["evicted"], true, "{forced}");
    assert!(forced["fence"].as_u64().unwrap() > fence_a, "{forced}");
    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(76), "{err}");

    // Free again: the next run gets it with a larger fence.
    let o = run_out(leasehold(None).args([
        "run",
        "--store",
        &url,
        "nightly",
        "--",
        "sh",
        "-c",
        "echo $LEASEHOLD_FENCE",
    ]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let fence_b: u64 = stdout(&o).trim().parse().unwrap();
    assert!(fence_b > forced["fence"].as_u64().unwrap());
}

#[test]
fn etcd_urls_that_are_wrong_exit_2_and_a_down_cluster_exits_69_without_the_password() {
    let redis = RedisServer::start().unwrap();
    let down = leasehold_testkit::free_port();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = ran.display().to_string();
    for (url, code, says) in [
        (
            format!("etcd://app:s3cret@127.0.0.1:{down}"),
            69,
            "cannot reach",
        ),
        (
            format!("etcd://app:s3cret@127.0.0.1:{}", redis.port()),
            2,
            "not as etcd",
        ),
        ("etcd://app:s3cret@127.0.0.1:99999".to_owned(), 2, "port"),
        ("etcd://app:s3cret@h:1/path".to_owned(), 2, "no path"),
    ] {
        for args in [
            vec!["run", "--store", &url, "job", "--", "touch", &touch],
            vec!["status", "--store", &url, "job"],
        ] {
            let o = run_out(leasehold(None).args(&args));
            let err = stderr(&o);
            assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
            assert!(err.contains(says), "{args:?}: {err}");
            assert!(!err.contains("s3cret"), "{args:?}: {err}");
        }
    }
    assert!(!ran.exists(), "the command must not run without the lease");
}

#[test]
fn run_with_permits_shares_a_name_status_shows_the_holders_and_release_evicts_one() {
    let redis = RedisServer::start().unwrap();
    let spawn_holder = || {
        leasehold(Some(&redis))
            .args([
                "run",
                "--permits",
                "3",
                "--ttl",
                "2s",
                "pool",
                "--",
                "sleep",
                "30",
            ])
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut a = spawn_holder();
    let mut b = spawn_holder();
    eventually("two permits are held", || {
        status_json(&redis, "pool")["holders"]
            .as_array()
            .is_some_and(|h| h.len() == 2)
    });
    let st = status_json(&redis, "pool");
    assert_eq!(st["permits"], 3, "{st}");
    assert_eq!(st["free"], 1, "{st}");
    assert_eq!(st["held"], true, "{st}");
    let human = stdout(&run_out(leasehold(Some(&redis)).args(["status", "pool"])));
    assert!(
        human.contains("semaphore of 3 permits, 2 held, 1 free"),
        "{human}"
    );
    let listed = stdout(&run_out(leasehold(Some(&redis)).args(["list", "--json"])));
    assert!(listed.contains("\"permits\":3"), "{listed}");

    // Another count for the name in use, or a lock on it: bad usage, nothing run.
    for permits in ["2", "1"] {
        let o = run_out(leasehold(Some(&redis)).args([
            "run",
            "--permits",
            permits,
            "pool",
            "--",
            "true",
        ]));
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "--permits {permits}: {err}");
        assert!(err.contains("in use with 3 permits"), "{err}");
    }

    // Evict one holder by its token: that run loses its lease and stops its command (76).
    let token = st["holders"][0]["token"].as_str().unwrap().to_owned();
    let o =
        run_out(leasehold(Some(&redis)).args(["release", "--force", "--token", &token, "pool"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("evicted the holder"), "{}", stdout(&o));
    let codes = [&mut a, &mut b].map(|c| {
        let until = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(st) = c.try_wait().unwrap() {
                return st.code();
            }
            if Instant::now() > until {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    assert_eq!(
        codes.iter().filter(|c| **c == Some(76)).count(),
        1,
        "exactly the evicted run stops: {codes:?}"
    );
    // Every holder.
    let o = run_out(leasehold(Some(&redis)).args(["release", "--force", "pool"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for c in [&mut a, &mut b] {
        let st = wait_with_timeout(c, Duration::from_secs(10));
        assert_eq!(st.code(), Some(76));
    }
    assert_eq!(status_json(&redis, "pool")["held"], false);
}

/// Client connections `redis` counts (`CLIENT LIST TYPE normal`), the one asking included.
fn client_connections(redis: &RedisServer) -> usize {
    let mut con = redis.connection().unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query(&mut con)
        .unwrap();
    list.lines().count()
}

/// While `run` holds a lease on one server it keeps three connections (the multiplexed one, the
/// one for waits, a direct one for its single requests); `--multiplexed-only` (or its variable)
/// keeps it to two. Whatever the flag, the command runs and the lease is released.
#[test]
fn multiplexed_only_keeps_run_to_two_connections() {
    let redis = RedisServer::start().unwrap();
    let mut seen = Vec::new();
    for (flag, var) in [(false, None), (true, None), (false, Some("true"))] {
        let mut c = leasehold(Some(&redis));
        if let Some(v) = var {
            c.env("LEASEHOLD_MULTIPLEXED_ONLY", v);
        }
        c.args(["run", "--ttl", "20s"]);
        if flag {
            c.arg("--multiplexed-only");
        }
        let mut child = c
            .args(["counted", "--", "sleep", "2"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap();
        eventually("the lease is held", || {
            status_json(&redis, "counted")["held"] == true
        });
        // The asking connection aside; the least of a few looks, so that `status`'s connection,
        // closing as it exits, is not counted.
        let least = (0..5)
            .map(|_| {
                std::thread::sleep(Duration::from_millis(50));
                client_connections(&redis)
            })
            .min()
            .unwrap();
        seen.push(least - 1);
        assert!(wait_with_timeout(&mut child, Duration::from_secs(20)).success());
        assert_eq!(status_json(&redis, "counted")["held"], false);
    }
    assert_eq!(
        seen,
        vec![3, 2, 2],
        "connections while held: default, flag, variable"
    );

    // A value of the variable that is neither true nor false: exit 2 naming it, nothing run or held.
    let o = run_out(
        leasehold(Some(&redis))
            .env("LEASEHOLD_MULTIPLEXED_ONLY", "maybe")
            .args(["run", "counted", "--", "sh", "-c", "exit 7"]),
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("LEASEHOLD_MULTIPLEXED_ONLY"),
        "{}",
        stderr(&o)
    );
    assert_eq!(status_json(&redis, "counted")["held"], false);
}
