//! End to end: `leasehold verify --fault eviction`, memory pressure on an evicting Redis with
//! leasehold opted in. The bare lease must lose updates when the server evicts its lock key; the
//! fenced lease must not, in the same cells, because the resource refused the evicted holder.

mod verify_support;

use verify_support::{cell, verify};

#[test]
fn eviction_costs_the_bare_lease_updates_and_the_fenced_lease_none() {
    let cells = verify(
        &[
            "--workload",
            "counter",
            "--strategy",
            "lease,lease-fence,redlock",
            "--fault",
            "eviction",
            "--injections",
            "3",
        ],
        90,
    );
    let bare = cell(&cells, "eviction", "lease");
    assert_eq!(bare["status"], "ran", "{bare}");
    assert_eq!(bare["faults_injected"], 3, "{bare}");
    assert!(
        bare["note"]
            .as_str()
            .unwrap_or_default()
            .contains("injections saw the server evict the holder's lock key"),
        "{bare}"
    );
    assert!(
        bare["violations"].as_u64().unwrap() > 0,
        "the bare lease must lose updates when its key is evicted: {bare}"
    );
    let fenced = cell(&cells, "eviction", "lease-fence");
    assert_eq!(fenced["status"], "ran", "{fenced}");
    assert_eq!(fenced["violations"], 0, "{fenced}");
    assert!(fenced["refused_stale"].as_u64().unwrap() > 0, "{fenced}");
    // Redlock's masters are independent servers; the fault is defined on one.
    assert_eq!(
        cell(&cells, "eviction", "redlock")["status"],
        "not-applicable"
    );
}
