//! End to end: `leasehold verify` on Redlock's three masters, a Sentinel set and a Redis Cluster,
//! with real worker processes and real faults. Redlock without the fence must lose updates when its
//! holder pauses or a master's clock jumps; with the fence it must not, in the same cells; the
//! fenced lease must lose nothing through a Sentinel or Cluster failover that loses its lock.

mod verify_support;

use verify_support::{cell, verify};

#[test]
fn redlock_loses_updates_under_a_pause_and_a_clock_jump_and_its_fence_loses_none() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "redlock,redlock-fence",
            "--fault",
            "pause,clock-jump",
            "--injections",
            "3",
        ],
        60,
    );
    for fault in ["pause", "clock-jump"] {
        let bare = cell(&cells, fault, "redlock");
        assert_eq!(bare["status"], "ran", "{bare}");
        assert!(bare["faults_injected"].as_u64().unwrap() >= 1, "{bare}");
        assert!(
            bare["violations"].as_u64().unwrap() > 0,
            "Redlock alone must lose updates under {fault}: {bare}"
        );
        let fenced = cell(&cells, fault, "redlock-fence");
        assert_eq!(fenced["status"], "ran", "{fenced}");
        assert!(fenced["faults_injected"].as_u64().unwrap() >= 1, "{fenced}");
        assert_eq!(fenced["violations"], 0, "{fenced}");
        // Zero because the resource refused the stale holder, not because nothing happened.
        assert!(fenced["refused_stale"].as_u64().unwrap() > 0, "{fenced}");
    }
}

#[test]
fn a_fenced_lease_loses_nothing_through_sentinel_and_cluster_failovers() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "lease-fence",
            "--fault",
            "sentinel-failover,cluster-failover",
            "--injections",
            "1",
        ],
        60,
    );
    for fault in ["sentinel-failover", "cluster-failover"] {
        let c = cell(&cells, fault, "lease-fence");
        assert_eq!(c["status"], "ran", "{c}");
        assert_eq!(c["faults_injected"], 1, "{c}");
        assert_eq!(c["violations"], 0, "{c}");
        assert_eq!(c["stalls"], 0, "{c}");
    }
}
