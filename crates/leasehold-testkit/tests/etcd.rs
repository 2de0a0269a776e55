//! The etcd topologies do what their helpers say, against real etcd processes.

use std::net::TcpStream;
use std::time::Duration;

use leasehold_testkit::EtcdCluster;

const ELECTION: Duration = Duration::from_secs(30);

/// Whether `/health` answers at all within half a second.
fn answers(addr: std::net::SocketAddr) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = TcpStream::connect_timeout(&addr, Duration::from_millis(500)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let _ = s.write_all(b"GET /health HTTP/1.0\r\n\r\n");
    let mut buf = [0u8; 16];
    matches!(s.read(&mut buf), Ok(n) if n > 0)
}

#[test]
fn a_single_node_serves_stops_answering_while_paused_and_keeps_its_data_across_a_restart() {
    let mut etcd = EtcdCluster::start_single().unwrap();
    let addr = etcd.member(0).client_addr();
    assert_eq!(etcd.endpoints(), addr.to_string());
    assert_eq!(etcd.url(), format!("etcd://{addr}"));
    assert_eq!(etcd.leader().unwrap(), 0);

    etcd.etcdctl(&["put", "k", "v1"]).unwrap();
    assert_eq!(
        etcd.etcdctl(&["get", "k", "--print-value-only"])
            .unwrap()
            .trim(),
        "v1"
    );

    etcd.pause_member(0).unwrap();
    assert!(!answers(addr), "a paused member must not answer");
    etcd.resume_member(0).unwrap();
    assert!(answers(addr));

    etcd.kill_member(0).unwrap();
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
    etcd.restart_member(0).unwrap();
    assert_eq!(
        etcd.etcdctl(&["get", "k", "--print-value-only"])
            .unwrap()
            .trim(),
        "v1",
        "a restarted member keeps its data directory"
    );
}

#[test]
fn three_members_keep_serving_when_the_leader_is_killed_or_paused() {
    let mut etcd = EtcdCluster::start(3).unwrap();
    assert_eq!(etcd.endpoints().split(',').count(), 3);
    etcd.etcdctl(&["put", "before", "1"]).unwrap();

    let old = etcd.wait_for_leader(ELECTION).unwrap();
    etcd.kill_member(old).unwrap();
    let new = etcd.wait_for_leader(ELECTION).unwrap();
    assert_ne!(new, old, "a killed leader must be replaced");
    assert_eq!(
        etcd.etcdctl(&["get", "before", "--print-value-only"])
            .unwrap()
            .trim(),
        "1"
    );
    etcd.etcdctl(&["put", "after", "2"]).unwrap();

    // The killed member rejoins and catches up (read from it alone, without a quorum read).
    etcd.restart_member(old).unwrap();
    let caught_up = |etcd: &EtcdCluster| {
        etcd.member(old)
            .etcdctl(&["get", "after", "--print-value-only", "--consistency=s"])
            .unwrap()
            .trim()
            == "2"
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !caught_up(&etcd) {
        assert!(
            std::time::Instant::now() < deadline,
            "the restarted member never caught up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }

    // A paused leader is replaced as well, and rejoins when continued.
    let leader = etcd.wait_for_leader(ELECTION).unwrap();
    etcd.pause_member(leader).unwrap();
    let other = etcd.wait_for_leader(ELECTION).unwrap();
    assert_ne!(other, leader, "a paused leader must be replaced");
    etcd.etcdctl(&["put", "while-paused", "3"]).unwrap();
    etcd.resume_member(leader).unwrap();
    etcd.wait_until_healthy(ELECTION).unwrap();
    assert_eq!(etcd.wait_for_leader(ELECTION).unwrap(), other);
}
