//! The command line as the Redis user docs/operations.md documents: every command a user runs works
//! with exactly the documented ACL line, and a user that lacks a command or a key exits 77 with a
//! message naming it (not 69, "unreachable", which a retry loop would retry for ever).

mod cli_support;

use std::process::{Output, Stdio};
use std::time::Duration;

use cli_support::{eventually, leasehold, wait_with_timeout};
use leasehold_testkit::{documented_acl_lines, RedisServer};

/// A private server with the user `leasehold` (password `pw`) created by `line`; the URL to use.
fn server_with_user(line: &str) -> (RedisServer, String) {
    let srv = RedisServer::start().expect("start a private redis-server");
    let line = line.replace(">PASSWORD", ">pw");
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER");
    for w in line.split_whitespace().skip(2) {
        cmd.arg(w);
    }
    let mut con = srv.connection().unwrap();
    let _: () = cmd.query(&mut con).unwrap();
    let url = format!("redis://leasehold:pw@127.0.0.1:{}/", srv.port());
    (srv, url)
}

fn cli(srv: &RedisServer, url: &str, args: &[&str]) -> Output {
    leasehold(srv)
        .env("LEASEHOLD_REDIS_URL", url)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn every_command_works_as_the_documented_user() {
    let lines = documented_acl_lines();
    let (srv, url) = server_with_user(&lines[0]);
    // run: take, renew (a TTL of 1 s renews every third of it), release.
    let o = cli(
        &srv,
        &url,
        &["run", "--ttl", "1s", "acl-job", "--", "sleep", "0.8"],
    );
    assert_eq!(o.status.code(), Some(0), "run: {}", text(&o));
    // A semaphore's permit.
    let o = cli(
        &srv,
        &url,
        &["run", "--permits", "2", "acl-sem", "--", "true"],
    );
    assert_eq!(o.status.code(), Some(0), "run --permits: {}", text(&o));
    // A holder that stays, for status, list and a forced release.
    let mut holder: std::process::Child = leasehold(&srv)
        .env("LEASEHOLD_REDIS_URL", &url)
        .args(["run", "acl-held", "--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        eventually(Duration::from_secs(10), || {
            let o = cli(&srv, &url, &["status", "--json", "acl-held"]);
            o.status.code() == Some(0) && text(&o).contains("\"held\":true")
        }),
        "status never showed the lease held"
    );
    let o = cli(&srv, &url, &["list", "--json", "acl-*"]);
    assert_eq!(o.status.code(), Some(0), "list: {}", text(&o));
    assert!(text(&o).contains("acl-held"), "list: {}", text(&o));
    let o = cli(&srv, &url, &["release", "--force", "acl-held"]);
    assert_eq!(o.status.code(), Some(0), "release --force: {}", text(&o));
    // The forced-out holder's `run` sees its lease lost and stops its command (exit 76).
    let st = wait_with_timeout(&mut holder, Duration::from_secs(30));
    assert_eq!(st.code(), Some(76), "the evicted run");
}

#[test]
fn a_user_without_a_command_or_a_key_exits_77_naming_it() {
    let lines = documented_acl_lines();
    // Without TIME (a `+@read +@write +@scripting` user lacks it).
    let (srv, url) = server_with_user(&lines[0].replace(" +time", ""));
    let o = cli(&srv, &url, &["run", "acl-job", "--", "true"]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(text(&o).contains("TIME"), "names the command: {}", text(&o));
    // Without RENAME (the release's command): refused before the command starts, not after it
    // ran (which used to leave the name busy for the whole TTL and exit 74).
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let (srv, url) = server_with_user(&lines[0].replace(" +rename ", " "));
    let o = cli(
        &srv,
        &url,
        &["run", "acl-job", "--", "touch", marker.to_str().unwrap()],
    );
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    assert!(
        text(&o).contains("RENAME"),
        "names the command: {}",
        text(&o)
    );
    assert!(!marker.exists(), "the command ran: {}", text(&o));
    let mut con = srv.connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "nothing taken: {keys:?}");
    // Keys of another prefix only.
    let (srv, url) = server_with_user(&lines[0].replace("~{leasehold:*", "~{elsewhere:*"));
    let o = cli(&srv, &url, &["run", "acl-job", "--", "true"]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    // A wrong password is a refusal too, not an unreachable store.
    let wrong = url.replace(":pw@", ":not-pw@");
    let o = cli(&srv, &wrong, &["status", "acl-job"]);
    assert_eq!(o.status.code(), Some(77), "{}", text(&o));
    // Nothing was taken by any of these.
    let mut con = srv.connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}
