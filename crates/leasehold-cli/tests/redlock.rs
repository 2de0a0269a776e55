//! `leasehold` over a Redlock: `--redis URL` given three times, end to end with the real binary and
//! three private redis-servers.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::{free_port, RedisServer};

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

fn leasehold() -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_STORE")
        .env_remove("LEASEHOLD_KEY_PREFIX")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    c
}

/// `leasehold SUBCOMMAND --redis URL... REST...`: the flags go before any `--`.
fn with(urls: &[String], args: &[&str]) -> Command {
    let mut c = leasehold();
    c.arg(args[0]);
    for u in urls {
        c.arg("--redis").arg(u);
    }
    c.args(&args[1..]);
    c
}

fn out(c: &mut Command) -> Output {
    c.output().expect("leasehold runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn masters() -> (Vec<RedisServer>, Vec<String>) {
    let s: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start().expect("redis-server"))
        .collect();
    let urls = s.iter().map(|s| s.url()).collect();
    (s, urls)
}

fn status(urls: &[String], name: &str) -> serde_json::Value {
    let o = out(&mut with(urls, &["status", "--json", name]));
    assert_eq!(o.status.code(), Some(0), "status: {}", stderr(&o));
    serde_json::from_str(stdout(&o).trim()).unwrap()
}

#[test]
fn run_status_list_and_release_over_three_masters() {
    let (servers, urls) = masters();
    let dir = tempfile::tempdir().unwrap();
    let fence_file = dir.path().join("fence");
    let script = format!(
        "echo \"$LEASEHOLD_FENCE\" > {}; sleep 30",
        fence_file.display()
    );
    let mut holder = with(
        &urls,
        &["run", "--ttl", "5s", "nightly", "--", "sh", "-c", &script],
    )
    .spawn()
    .unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    while std::fs::read_to_string(&fence_file)
        .unwrap_or_default()
        .trim()
        .is_empty()
    {
        assert!(Instant::now() < until, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let st = status(&urls, "nightly");
    assert_eq!(st["store"], "redlock", "{st}");
    assert_eq!(st["held"], true, "{st}");
    assert_eq!(st["key"], "{leasehold:nightly}:lock", "{st}");
    let fence: u64 = std::fs::read_to_string(&fence_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert_eq!(st["fence"].as_u64(), Some(fence), "{st}");
    // Every master holds the lock.
    for s in &servers {
        let mut con = s.connection().unwrap();
        let v: Option<String> = redis::cmd("GET")
            .arg("{leasehold:nightly}:lock")
            .query(&mut con)
            .unwrap();
        assert!(v.is_some());
    }
    // A second run is busy.
    let o = out(&mut with(&urls, &["run", "nightly", "--", "true"]));
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    let o = out(&mut with(&urls, &["list", "--json"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("\"nightly\""), "{}", stdout(&o));
    // The operator's override reaches the majority; the holder stops its command (exit 76).
    let o = out(&mut with(
        &urls,
        &["release", "--force", "--json", "nightly"],
    ));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let forced: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(forced["evicted"], true);
    assert!(forced["fence"].as_u64().unwrap() > fence);
    let until = Instant::now() + Duration::from_secs(20);
    let code = loop {
        if let Some(st) = holder.try_wait().unwrap() {
            break st.code();
        }
        assert!(Instant::now() < until, "the holder did not stop");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(76));
}

#[test]
fn bad_sets_of_masters_exit_2_and_too_few_reachable_exit_69() {
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let touch = ran.display().to_string();
    let dead = || format!("redis://127.0.0.1:{}/", free_port());
    // Even counts: refused before anything is contacted (all unreachable, yet exit 2).
    let o = out(&mut with(
        &[dead(), dead()],
        &["run", "j", "--", "touch", &touch],
    ));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("odd number"), "{}", stderr(&o));
    let (servers, urls) = masters();
    // One server named twice (two spellings): exit 2 naming it.
    let alias = format!("redis://localhost:{}/", servers[0].port());
    let o = out(&mut with(
        &[urls[0].clone(), urls[1].clone(), alias],
        &["run", "j", "--", "touch", &touch],
    ));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("same Redis server"), "{}", stderr(&o));
    // A majority unreachable: exit 69, nothing ran.
    let o = out(&mut with(
        &[urls[0].clone(), dead(), dead()],
        &["run", "j", "--", "touch", &touch],
    ));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(stderr(&o).contains("1 of 3"), "{}", stderr(&o));
    assert!(!ran.exists());
    // Several URLs in LEASEHOLD_STORE, separated by spaces, are a Redlock too.
    let o = out(leasehold()
        .env("LEASEHOLD_STORE", urls.join(" "))
        .args(["status", "--json", "j"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("\"redlock\""), "{}", stdout(&o));
}

#[test]
fn a_master_refusing_the_password_exits_77_not_69() {
    let (s, mut urls) = masters();
    let guarded = RedisServer::builder()
        .password("right-pw")
        .start()
        .expect("redis-server");
    urls[2] = format!("redis://:wrong-pw@127.0.0.1:{}/", guarded.port());
    for args in [vec!["status", "job"], vec!["run", "job", "--", "true"]] {
        let o = out(&mut with(&urls, &args));
        assert_eq!(o.status.code(), Some(77), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("wrong-pw"), "{}", stderr(&o));
    }
    drop(s);
}
