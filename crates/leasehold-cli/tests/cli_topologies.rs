//! The `leasehold` command on Sentinel and on Redis Cluster: the URL forms work from the flag and
//! the environment, a lossy failover stops the command with exit 76, and bad topology input exits
//! 2 (unknown master, no master name, the wrong URL for the server) or 69 (nothing answers).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::{RedisCluster, RedisServer, SentinelSet};

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

fn leasehold() -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_STORE")
        .env_remove("LEASEHOLD_KEY_PREFIX")
        .env("NO_COLOR", "1");
    c
}

fn run_out(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().expect("leasehold runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn held(url: &str, name: &str) -> bool {
    let o = run_out(leasehold().args(["status", "--json", "--store", url, name]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["held"] == true
}

#[test]
fn through_sentinel_a_lossy_failover_stops_the_command_with_76_and_bad_input_exits_2_or_69() {
    let mut set = SentinelSet::start().expect("start a sentinel set");
    let url = set.sentinel_url();

    // Works from the environment, like any store URL.
    let o = run_out(
        leasehold()
            .env("LEASEHOLD_STORE", &url)
            .args(["run", "quick", "--", "true"]),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // A lease whose write the failover loses: the command is stopped, exit 76.
    set.begin_lossy_failover().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ran = dir.path().join("ran");
    let mut run = leasehold()
        .args([
            "run", "--store", &url, "--ttl", "15s", "--grace", "1s", "nightly", "--",
        ])
        .args(["sh", "-c", &format!("touch {}; sleep 60", ran.display())])
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    while !(ran.exists() && held(&url, "nightly")) {
        assert!(Instant::now() < until, "the command never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    set.finish_lossy_failover(Duration::from_secs(30)).unwrap();
    let until = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(st) = run.try_wait().unwrap() {
            break st;
        }
        if Instant::now() > until {
            let _ = run.kill();
            panic!("leasehold run did not stop after the lease was lost");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(76));

    // Bad input: exit 2, nothing run.
    let nothing = dir.path().join("nothing");
    let touch = nothing.display().to_string();
    let unknown = set.sentinel_url_for_master("nope");
    let no_master = format!("redis-sentinel://{}", set.sentinel_hosts());
    for bad in [unknown.as_str(), no_master.as_str()] {
        let o = run_out(leasehold().args(["run", "--store", bad, "job", "--", "touch", &touch]));
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
        assert!(stderr(&o).contains("master"), "{}", stderr(&o));
    }
    // Nothing answers: exit 69.
    set.kill_sentinels().unwrap();
    let o = run_out(leasehold().args(["status", "--store", &url, "job"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
    assert!(!nothing.exists());
}

#[test]
fn on_a_cluster_run_status_and_list_work_and_the_wrong_url_for_the_server_exits_2() {
    let cluster = RedisCluster::start().expect("start a redis cluster");
    let url = cluster.seed_url();
    let o = run_out(leasehold().args(["run", "--store", &url, "spread", "--", "true"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run_out(leasehold().args(["list", "--json", "--store", &url]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let listed: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|i| i["name"] == "spread"),
        "{listed}"
    );
    assert!(!held(&url, "spread"));

    // A plain URL to a cluster node, and a cluster URL to a plain server: exit 2, naming the fix.
    let o = run_out(leasehold().args(["status", "--store", &cluster.node(0).url(), "job"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("redis-cluster://"), "{}", stderr(&o));
    let standalone = RedisServer::start().unwrap();
    let wrong = format!("redis-cluster://127.0.0.1:{}", standalone.port());
    let o = run_out(leasehold().args(["status", "--store", &wrong, "job"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("redis://"), "{}", stderr(&o));
    // No seed answers: exit 69.
    let gone = format!(
        "redis-cluster://127.0.0.1:{}",
        leasehold_testkit::free_port()
    );
    let o = run_out(leasehold().args(["status", "--store", &gone, "job"]));
    assert_eq!(o.status.code(), Some(69), "{}", stderr(&o));
}
