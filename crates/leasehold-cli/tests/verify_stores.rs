//! End to end: `leasehold verify` on the PostgreSQL, MariaDB and etcd lease stores, with real
//! worker processes, a private PostgreSQL, a private MariaDB and a three-member etcd cluster.
//! Without the fence a lease on any of these stores must lose updates when its holder pauses past
//! it; with the fence it must not, in the same cells, because the resource refused the stale
//! holder; and the fenced lease must lose nothing through a PostgreSQL or MariaDB restart or the
//! loss of one etcd member.

mod verify_support;

use serde_json::Value;
use verify_support::{cell, verify};

/// The unfenced lease lost updates under `pause`; the fenced one lost none because the resource
/// refused the stale holder, and lost none under `store_fault` either.
fn assert_fence_decides(cells: &[Value], bare: &str, fenced: &str, store_fault: &str) {
    let b = cell(cells, "pause", bare);
    assert_eq!(b["status"], "ran", "{b}");
    assert!(b["faults_injected"].as_u64().unwrap() >= 1, "{b}");
    assert!(
        b["violations"].as_u64().unwrap() > 0,
        "{bare} must lose updates under a pause: {b}"
    );
    let f = cell(cells, "pause", fenced);
    assert_eq!(f["status"], "ran", "{f}");
    assert!(f["faults_injected"].as_u64().unwrap() >= 1, "{f}");
    assert_eq!(f["violations"], 0, "{f}");
    // Zero because the resource refused the stale holder, not because nothing happened.
    assert!(f["refused_stale"].as_u64().unwrap() > 0, "{f}");
    let s = cell(cells, store_fault, fenced);
    assert_eq!(s["status"], "ran", "{s}");
    assert!(s["faults_injected"].as_u64().unwrap() >= 1, "{s}");
    assert_eq!(s["violations"], 0, "{s}");
}

#[test]
fn a_lease_on_postgres_loses_updates_under_a_pause_and_its_fence_loses_none() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "pg-lease,pg-lease-fence",
            "--fault",
            "pause,pg-restart",
            "--injections",
            "3",
        ],
        60,
    );
    assert_fence_decides(&cells, "pg-lease", "pg-lease-fence", "pg-restart");
}

#[test]
fn a_lease_on_mariadb_loses_updates_under_a_pause_and_its_fence_loses_none() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "mysql-lease,mysql-lease-fence",
            "--fault",
            "pause,mysql-restart",
            "--injections",
            "3",
        ],
        60,
    );
    assert_fence_decides(&cells, "mysql-lease", "mysql-lease-fence", "mysql-restart");
}

#[test]
fn a_lease_on_etcd_loses_updates_under_a_pause_and_its_fence_loses_none() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "etcd-lease,etcd-lease-fence",
            "--fault",
            "pause,member-kill",
            "--injections",
            "2",
        ],
        60,
    );
    assert_fence_decides(&cells, "etcd-lease", "etcd-lease-fence", "member-kill");
    // A minority lost: the lease survives it, and nobody waits for the lock past the stall limit.
    let m = cell(&cells, "member-kill", "etcd-lease");
    assert_eq!(m["stalls"], 0, "{m}");
}
