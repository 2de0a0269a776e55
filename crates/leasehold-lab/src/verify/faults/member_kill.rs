//! `member-kill`: one member of the three-member etcd lease store, the leader and a follower in
//! turn (the leader first), is killed while a holder is inside its critical section, and restarted
//! after the fault window: a minority lost, which the lease is meant to survive.
//!
//! Limit: one member at a time; losing a majority is not modelled.

use leasehold_testkit::EtcdCluster;

use super::super::cell::Cell;
use super::super::store::etcd::{self, ETCD_MEMBERS};
use super::StoreFault;

/// The fault's line of the fault table (`FAULTS`).
pub(crate) static FAULT: StoreFault = StoreFault {
    name: "member-kill",
    help: "One member of the three-member etcd lease store, the leader and a follower in turn (the leader first), is killed while a holder is inside its critical section, and restarted after the fault window: a minority lost, which the lease is meant to survive",
    store: &etcd::STORE,
    what: "a member of the etcd lease store killed",
    inject: |cell| Box::pin(inject(cell)),
};

/// Kills a member for the fault window. The leader and a follower take turns (the first injection
/// of a cell kills the leader): taking turns by member number would, on a cluster shared by the
/// cells, keep killing the same followers while the leader stays put.
async fn inject(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let turn = cell.injected;
    let stores = &cell.ctx.stores;
    let (member, was_leader) = stores.with(&etcd::STORE, |etcd: &mut EtcdCluster| {
        let leader = etcd.leader()?;
        let member = if turn.is_multiple_of(2) {
            leader
        } else {
            (leader + 1) % ETCD_MEMBERS
        };
        etcd.kill_member(member)?;
        Ok((member, member == leader))
    })?;
    if was_leader {
        cell.leaders_killed += 1;
    }
    tokio::time::sleep(cell.timing.hold).await;
    stores.with(&etcd::STORE, |etcd: &mut EtcdCluster| {
        Ok(etcd.restart_member(member)?)
    })
}
