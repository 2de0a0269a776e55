//! The private PostgreSQL server: it starts, stops, crashes, pauses and starts again on the same
//! port, and leaves no process and no directory behind, even when dropped paused by a panicking
//! test.

use std::net::TcpStream;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use leasehold_testkit::{postgres_server_available, PostgresServer};
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// The pids of the postmaster and its children (the backends and auxiliary processes).
fn server_pids(pg: &PostgresServer) -> Vec<u32> {
    let pid = pg.pid().expect("running");
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    let mut pids = vec![pid];
    pids.extend(
        children
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok()),
    );
    pids
}

/// Whether `pid` runs: it exists and is not a zombie waiting for init to reap it (the server's
/// processes are orphaned when the postmaster dies first).
fn alive(pid: u32) -> bool {
    let zombie = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, rest)| rest.starts_with('Z')))
        .unwrap_or(false);
    kill(Pid::from_raw(pid as i32), None).is_ok() && !zombie
}

#[test]
fn starts_stops_crashes_and_starts_again_on_the_same_port() {
    assert!(
        postgres_server_available(),
        "initdb and postgres must be installed"
    );
    let mut pg = PostgresServer::start().unwrap();
    let port = pg.port();
    assert!(TcpStream::connect(pg.addr()).is_ok());
    assert!(pg.url().ends_with(&format!(":{port}/postgres")));

    let before = server_pids(&pg);
    assert!(before.len() > 1, "a postmaster and its auxiliary processes");
    pg.crash().unwrap();
    assert!(!pg.is_running());
    assert!(
        before.iter().all(|p| !alive(*p)),
        "a crash kills every process"
    );
    assert!(TcpStream::connect(pg.addr()).is_err());
    pg.start_again().unwrap();
    assert_eq!(pg.port(), port);
    assert!(TcpStream::connect(pg.addr()).is_ok());
    let log = std::fs::read_to_string(pg.log_path()).unwrap();
    assert!(
        log.contains("not properly shut down") || log.contains("automatic recovery"),
        "the start after a crash runs recovery: {log}"
    );

    pg.restart().unwrap();
    assert_eq!(pg.port(), port);
    pg.pause().unwrap();
    assert!(pg.is_paused());
    pg.resume().unwrap();
    assert!(TcpStream::connect(pg.addr()).is_ok());
}

#[test]
fn a_paused_server_is_torn_down_when_the_test_panics() {
    let mut seen: (Vec<u32>, PathBuf) = (Vec::new(), PathBuf::new());
    let res = catch_unwind(AssertUnwindSafe(|| {
        let mut pg = PostgresServer::start().unwrap();
        seen = (server_pids(&pg), pg.log_path().parent().unwrap().to_owned());
        pg.pause().unwrap();
        panic!("a test failing while it holds the server");
    }));
    assert!(res.is_err());
    let (pids, dir) = seen;
    assert!(!pids.is_empty());
    for pid in pids {
        assert!(!alive(pid), "process {pid} outlived its server");
    }
    assert!(!dir.exists(), "{} outlived its server", dir.display());
}
