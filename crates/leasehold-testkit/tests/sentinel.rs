//! The sentinel set does what its helpers say, against real redis-server and sentinel processes.

use std::net::SocketAddr;
use std::time::Duration;

use leasehold_testkit::{Credentials, RedisServer, SentinelSet};

const FAILOVER: Duration = Duration::from_secs(30);

fn connect(url: &str) -> redis::Connection {
    let con = redis::Client::open(url)
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(2))
        .unwrap();
    con.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    con
}

fn node_at(set: &SentinelSet, addr: SocketAddr) -> &RedisServer {
    set.nodes()
        .iter()
        .find(|n| n.port() == addr.port())
        .expect("the address is one of the set's nodes")
}

fn get(con: &mut redis::Connection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query(con).unwrap()
}

fn set(con: &mut redis::Connection, key: &str, value: &str) {
    redis::cmd("SET")
        .arg(key)
        .arg(value)
        .query::<()>(con)
        .unwrap();
}

#[test]
fn lossy_failover_loses_the_write_made_in_the_window_and_keeps_the_one_before() {
    let mut s = SentinelSet::builder()
        .master_name("orders")
        .start()
        .unwrap();
    assert!(s.sentinel_url().starts_with("redis-sentinel://127.0.0.1:"));
    assert!(s.sentinel_url().ends_with("#orders"));
    let old = s.primary_addr().unwrap();
    assert_eq!(old.port(), s.node(0).port(), "node 0 starts as primary");

    let mut con = connect(&node_at(&s, old).url());
    set(&mut con, "before", "1");

    let primary = s.begin_lossy_failover().unwrap();
    assert_eq!(primary, old);
    set(&mut con, "during", "1");
    assert_eq!(get(&mut con, "during").as_deref(), Some("1"));
    drop(con);

    let new = s.finish_lossy_failover(FAILOVER).unwrap();
    assert_ne!(new, old, "the replica must have been promoted");
    assert_eq!(s.primary_addr().unwrap(), new);
    let mut con = connect(&node_at(&s, new).url());
    assert_eq!(
        get(&mut con, "before").as_deref(),
        Some("1"),
        "a write the replica had acknowledged survives the failover"
    );
    assert_eq!(
        get(&mut con, "during"),
        None,
        "the write made while the replica was cut off must be lost"
    );

    // The old primary comes back empty and follows the new one; a second failover is possible.
    let old_index = s
        .nodes()
        .iter()
        .position(|n| n.port() == old.port())
        .unwrap();
    s.restart_node(old_index).unwrap();
    let mut back = connect(&s.node(old_index).url());
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut back)
        .unwrap();
    assert!(info.contains("role:slave"), "{info}");
    assert!(
        info.contains(&format!("master_port:{}", new.port())),
        "{info}"
    );
    assert_eq!(get(&mut back, "before").as_deref(), Some("1"));
}

#[test]
fn credentials_differ_between_data_nodes_and_sentinels_and_a_plain_failover_keeps_data() {
    let mut s = SentinelSet::builder()
        .data_credentials(Credentials::user("app", "data-secret"))
        .sentinel_credentials(Credentials::password("sentinel-secret"))
        .start()
        .unwrap();
    assert!(
        s.sentinel_url()
            .starts_with("redis-sentinel://app:data-secret@127.0.0.1:"),
        "{}",
        s.sentinel_url()
    );

    // Each side refuses the other's credentials and anonymous clients.
    let sentinel = s.sentinel_addrs()[0];
    let anon = redis::Client::open(format!("redis://{sentinel}/"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(1))
        .and_then(|mut c| {
            redis::cmd("SENTINEL")
                .arg("MASTERS")
                .query::<redis::Value>(&mut c)
        });
    assert!(
        anon.is_err(),
        "a sentinel with requirepass must refuse anonymous clients"
    );
    let wrong = redis::Client::open(format!("redis://app:data-secret@{sentinel}/"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(1));
    assert!(
        wrong.is_err(),
        "the data credentials must not open a sentinel"
    );
    let mut scon = connect(&format!("redis://:sentinel-secret@{sentinel}/"));
    let addr: (String, u16) = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg("leasehold")
        .query(&mut scon)
        .unwrap();
    assert_eq!(addr.1, s.node(0).port());
    let anon_data = redis::Client::open(format!("redis://127.0.0.1:{}/", s.node(0).port()))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(1))
        .and_then(|mut c| redis::cmd("GET").arg("x").query::<Option<String>>(&mut c));
    assert!(
        anon_data.is_err(),
        "the data nodes must refuse anonymous clients"
    );

    let mut con = connect(&s.node(0).url());
    set(&mut con, "k", "v");
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut con).unwrap();
    assert_eq!(acked, 1);
    drop(con);

    let old = s.kill_primary().unwrap();
    let new = s.wait_for_failover(FAILOVER).unwrap();
    assert_ne!(new, old);
    let mut con = connect(&node_at(&s, new).url());
    assert_eq!(get(&mut con, "k").as_deref(), Some("v"));
}

#[test]
fn unknown_master_name_and_unreachable_sentinels_are_reproducible_with_a_sentinel_acl_user() {
    let mut s = SentinelSet::builder()
        .data_credentials(Credentials::password("data-secret"))
        .sentinel_credentials(Credentials::user("watcher", "sentinel-secret"))
        .start()
        .unwrap();
    assert!(
        s.sentinel_url_for_master("nope")
            .starts_with("redis-sentinel://:data-secret@127.0.0.1:"),
        "{}",
        s.sentinel_url_for_master("nope")
    );
    assert!(s.sentinel_url_for_master("nope").ends_with("#nope"));
    let sentinel = s.sentinel_addrs()[1];
    let sentinel_url = format!("redis://watcher:sentinel-secret@{sentinel}/");
    let anon = redis::Client::open(format!("redis://{sentinel}/"))
        .unwrap()
        .get_connection_with_timeout(Duration::from_secs(1))
        .and_then(|mut c| {
            redis::cmd("SENTINEL")
                .arg("MASTERS")
                .query::<redis::Value>(&mut c)
        });
    assert!(anon.is_err(), "the sentinel's default user must be off");
    let mut con = connect(&sentinel_url);
    let unknown: Option<(String, u16)> = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg("nope")
        .query(&mut con)
        .unwrap();
    assert_eq!(
        unknown, None,
        "sentinels must not know a name they do not monitor"
    );
    drop(con);

    s.pause_sentinels().unwrap();
    let con = redis::Client::open(sentinel_url.as_str())
        .unwrap()
        .get_connection_with_timeout(Duration::from_millis(300));
    let paused = con.and_then(|mut c| {
        c.set_read_timeout(Some(Duration::from_millis(300)))?;
        redis::cmd("PING").query::<String>(&mut c)
    });
    assert!(paused.is_err(), "a paused sentinel must not answer");
    assert!(s.primary_addr().is_err());
    s.resume_sentinels().unwrap();
    assert_eq!(s.primary_addr().unwrap().port(), s.node(0).port());

    s.kill_sentinels().unwrap();
    for addr in s.sentinel_addrs() {
        let refused = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(1));
        assert!(
            refused.is_err(),
            "a killed sentinel must refuse connections"
        );
    }
    s.restart_sentinels().unwrap();
    assert_eq!(s.primary_addr().unwrap().port(), s.node(0).port());

    // With the ACL user on sentinels and a password on the data nodes, failover still works.
    let old = s.kill_primary().unwrap();
    assert_ne!(s.wait_for_failover(FAILOVER).unwrap(), old);
}
