//! `leasehold demo` end to end: it runs, finishes within a minute, exits 0, and prints every scene's
//! verdict as shown; piped output has no colour codes.

use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn demo_runs_every_scene_and_each_shows_its_claim() {
    let started = Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("demo")
        .env_remove("NO_COLOR")
        .output()
        .expect("leasehold demo runs");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    for n in 1..=8 {
        assert!(
            out.contains(&format!("Scene {n}/8.")),
            "scene {n} missing:\n{out}"
        );
        assert!(
            out.contains(&format!("Verdict {n}: ✔ shown")),
            "verdict {n} missing:\n{out}"
        );
    }
    for must in [
        "SETNX",
        "PTTL",
        "DEL",
        "SIGSTOP",
        "SIGCONT",
        "REFUSED: stale fence",
        "UNIQUE",
        "SIGKILL",
        "no majority",
        "+switch-master",
        "its work is gone",
        "before B led",
        "8/8 scenes",
    ] {
        assert!(out.contains(must), "{must:?} missing:\n{out}");
    }
    assert!(!out.contains('\x1b'), "no colour when piped");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );
}

#[test]
fn demo_verdicts_fail_when_the_claim_is_not_shown() {
    // Scene 3 claims that a paused holder's stale write corrupts the data. Point the worker executable at
    // a program that is not a leasehold worker: the scene cannot show its claim and must say so, and
    // the demo must exit non-zero rather than print a canned verdict.
    let o = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["demo", "--scene", "3", "--worker-exe", "/bin/true"])
        .output()
        .expect("leasehold demo runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("Verdict 3: ✘ NOT shown"), "{out}");
}

#[test]
fn demo_without_redis_server_says_how_to_get_one() {
    let o = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .arg("demo")
        .env("REDIS_SERVER_BIN", "/nonexistent/redis-server")
        .output()
        .expect("leasehold demo runs");
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(69), "{err}");
    assert!(
        err.contains("redis-server is not installed") && err.contains("--redis"),
        "{err}"
    );
}

#[test]
fn demo_on_a_shared_redis_leaves_it_as_it_found_it() {
    let redis = leasehold_testkit::RedisServer::start().unwrap();
    let mut con = redis.connection().unwrap();
    redis::cmd("SET")
        .arg("someone-else")
        .arg("1")
        .query::<()>(&mut con)
        .unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "demo",
            "--redis",
            &redis.url(),
            "--scene",
            "2",
            "--scene",
            "4",
        ])
        .output()
        .expect("leasehold demo runs");
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{out}");
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert_eq!(keys, vec!["someone-else".to_owned()], "{out}");
}

/// Scene 4 with a PostgreSQL: the two holders' fences are also written by `psql` through the SQL
/// function `leasehold_fence`, and A's stale one is refused there (SQLSTATE LHF01), read from the
/// counter psql wrote; the scene's schema is gone afterwards.
#[test]
fn scene_four_with_a_database_refuses_the_stale_fence_from_psql_too() {
    let url = leasehold_testkit::postgres_url();
    let o = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["demo", "--scene", "4", "--database", &url])
        .output()
        .expect("leasehold demo runs");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "stdout:\n{out}\nstderr:\n{err}");
    for must in [
        "psql: BEGIN; SELECT leasehold_fence('counter',",
        "LHF01",
        "leasehold: stale fence for counter",
        "refused A's fence too (LHF01)",
        "Verdict 4: ✔ shown",
    ] {
        assert!(out.contains(must), "{must:?} missing:\n{out}");
    }
    let left = Command::new("psql")
        .args(["-X", "-t", "-A", "-d", &url, "-c"])
        .arg("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'leasehold_demo_%'")
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&left.stdout).trim(), "0");
}

#[test]
fn a_database_that_is_not_postgres_is_refused_before_anything_starts() {
    let o = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["demo", "--database", "mysql://root@localhost/test"])
        .output()
        .expect("leasehold demo runs");
    let out = String::from_utf8_lossy(&o.stdout);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_ne!(o.status.code(), Some(0), "{out}");
    assert!(
        err.contains("--database") && err.contains("postgres://"),
        "{err}"
    );
    assert!(!out.contains("Scene 1/8"), "{out}");
}
