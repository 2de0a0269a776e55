//! Who holds a lease, on every store: `run --holder LABEL` (default `host:pid`) is shown by
//! `status` and `list`, in text and `--json`, with the time since it holds and its fence; a label
//! with a control character or over the limit is refused before anything is held.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold_testkit::{EtcdCluster, RedisServer};

mod cli_support;
use cli_support::{eventually, wait_with_timeout, BIN};

fn leasehold(store: &str) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_KEY_PREFIX")
        .env("NO_COLOR", "1")
        .env("LEASEHOLD_STORE", store)
        .stdin(Stdio::null());
    c
}

fn holding(store: &str, name: &str, label: Option<&str>, started: &std::path::Path) -> Child {
    let mut c = leasehold(store);
    c.args(["run", "--ttl", "10s"]);
    if let Some(l) = label {
        c.args(["--holder", l]);
    }
    c.args([name, "--", "sh", "-c"])
        .arg(format!("touch {}; sleep 30", started.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn check_store(store: &str) {
    let dir = tempfile::tempdir().unwrap();
    let name = format!("labelled-{:08x}", rand::random::<u32>());
    let started = dir.path().join("started");
    let mut run = holding(store, &name, Some("web-1:4121"), &started);
    assert!(
        eventually(Duration::from_secs(20), || started.exists()),
        "{store}"
    );
    // The label is written right after the acquire; give it a moment on a loaded machine.
    let status = |json: bool| {
        let mut c = leasehold(store);
        c.arg("status");
        if json {
            c.arg("--json");
        }
        let o = c.arg(&name).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    assert!(
        eventually(Duration::from_secs(5), || status(true)
            .contains("web-1:4121")),
        "{store}: {}",
        status(true)
    );
    let v: serde_json::Value = serde_json::from_str(status(true).trim()).unwrap();
    assert_eq!(v["holder"]["label"], "web-1:4121", "{store}: {v}");
    assert_eq!(v["holder"]["fence"], v["fence"], "{store}: {v}");
    assert!(
        v["holder"]["since_unix_ms"].as_u64().unwrap() > 1_700_000_000_000,
        "{v}"
    );
    let text = status(false);
    assert!(text.contains("holder web-1:4121 (for "), "{store}: {text}");
    let o = leasehold(store)
        .args(["list", "--json", "labelled-*"])
        .output()
        .unwrap();
    let list: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let mine = list
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{store}: {list}"));
    assert_eq!(mine["holder"]["label"], "web-1:4121", "{store}: {mine}");
    let o = leasehold(store)
        .args(["list", "labelled-*"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("holder web-1:4121"),
        "{store}"
    );
    let _ = run.kill();
    wait_with_timeout(&mut run, Duration::from_secs(10));

    // The default label: host:pid of the `run` process.
    let started2 = dir.path().join("started2");
    let name2 = format!("{name}-default");
    let mut run = holding(store, &name2, None, &started2);
    assert!(eventually(Duration::from_secs(20), || started2.exists()));
    let pid = run.id();
    assert!(eventually(Duration::from_secs(5), || {
        let o = leasehold(store)
            .args(["status", "--json", &name2])
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap_or_default();
        v["holder"]["label"]
            .as_str()
            .is_some_and(|l| l.ends_with(&format!(":{pid}")))
    }));
    let _ = run.kill();
    wait_with_timeout(&mut run, Duration::from_secs(10));
}

#[test]
fn every_store_shows_who_holds_a_lease() {
    let redis = RedisServer::start().unwrap();
    check_store(&redis.url());
    let pg = leasehold_testkit::postgres_url();
    let o = leasehold(&pg).arg("migrate").output().unwrap();
    assert!(o.status.success(), "{o:?}");
    check_store(&pg);
    let my = std::env::var("LEASEHOLD_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://leasehold:leasehold@127.0.0.1:3306/test".into());
    let o = leasehold(&my).arg("migrate").output().unwrap();
    assert!(o.status.success(), "{o:?}");
    check_store(&my);
    let etcd = EtcdCluster::start_single().unwrap();
    check_store(&etcd.url());
}

#[test]
fn a_bad_label_is_refused_before_anything_is_held() {
    let redis = RedisServer::start().unwrap();
    for (label, why) in [
        ("two\nlines", "control"),
        ("esc\x1b[31m", "control"),
        (&"h".repeat(129) as &str, "129 bytes"),
        ("", "0 bytes"),
    ] {
        let o = leasehold(&redis.url())
            .args(["run", "--holder", label, "badlabel", "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{label:?}: {err}");
        assert!(
            err.contains("holder") && err.contains(why),
            "{label:?}: {err}"
        );
    }
    let o = leasehold(&redis.url())
        .args(["status", "--json", "badlabel"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["held"], false);
}
