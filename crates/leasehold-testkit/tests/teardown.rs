//! Every topology leaves no process and no directory behind when the test holding it panics, even
//! with some of its processes paused.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use leasehold_testkit::{EtcdCluster, RedisCluster, SentinelSet};
use nix::sys::signal::kill;
use nix::unistd::Pid;

type Seen = (Vec<u32>, Vec<PathBuf>);

/// Starts a topology and panics while holding it, so that it is dropped by the unwinding; returns
/// the pids and directories `record` found while it ran.
fn panic_holding<T>(start: impl FnOnce() -> T, record: impl FnOnce(&T) -> Seen) -> Seen {
    let mut seen = (Vec::new(), Vec::new());
    let res = catch_unwind(AssertUnwindSafe(|| {
        let topology = start();
        seen = record(&topology);
        for pid in &seen.0 {
            assert!(
                kill(Pid::from_raw(*pid as i32), None).is_ok(),
                "{pid} must be running"
            );
        }
        for dir in &seen.1 {
            assert!(dir.is_dir(), "{} must exist", dir.display());
        }
        panic!("a test failing while it holds the topology");
    }));
    assert!(res.is_err());
    seen
}

fn assert_gone((pids, dirs): Seen) {
    assert!(!pids.is_empty() && !dirs.is_empty());
    for pid in pids {
        assert!(
            kill(Pid::from_raw(pid as i32), None).is_err(),
            "process {pid} outlived its topology"
        );
    }
    for dir in dirs {
        assert!(!dir.exists(), "{} outlived its topology", dir.display());
    }
}

#[test]
fn a_sentinel_set_is_torn_down_when_the_test_panics() {
    assert_gone(panic_holding(
        || {
            let mut s = SentinelSet::start().unwrap();
            s.node_mut(1).pause().unwrap();
            s.sentinel_mut(0).pause().unwrap();
            s
        },
        |s| {
            let mut pids: Vec<u32> = s.nodes().iter().filter_map(|n| n.pid()).collect();
            pids.extend(s.sentinels().iter().filter_map(|x| x.pid()));
            let mut dirs: Vec<PathBuf> = s.nodes().iter().map(|n| n.dir().to_owned()).collect();
            dirs.extend(s.sentinels().iter().map(|x| x.dir().to_owned()));
            (pids, dirs)
        },
    ));
}

#[test]
fn a_cluster_is_torn_down_when_the_test_panics() {
    assert_gone(panic_holding(
        || {
            let mut c = RedisCluster::start().unwrap();
            c.node_mut(0).pause().unwrap();
            c
        },
        |c| {
            let pids = c.nodes().iter().filter_map(|n| n.pid()).collect();
            let dirs = c.nodes().iter().map(|n| n.dir().to_owned()).collect();
            (pids, dirs)
        },
    ));
}

#[test]
fn an_etcd_cluster_is_torn_down_when_the_test_panics() {
    assert_gone(panic_holding(
        || {
            let mut e = EtcdCluster::start(3).unwrap();
            e.pause_member(1).unwrap();
            e
        },
        |e| {
            let pids = e.members().iter().filter_map(|m| m.pid()).collect();
            (pids, vec![e.dir().to_owned()])
        },
    ));
}
