//! `member-kill`: one member of the three-member etcd lease store, the leader and a follower in
//! turn (the leader first), is killed while a holder is inside its critical section, and restarted
//! after the fault window: a minority lost, which the lease is meant to survive.
//!
//! Limit: one member at a time; losing a majority is not modelled.

use super::super::cell::Cell;
use super::super::store::{Running, Store, ETCD_MEMBERS};

/// Kills a member for the fault window. The leader and a follower take turns (the first injection
/// of a cell kills the leader): taking turns by member number would, on a cluster shared by the
/// cells, keep killing the same followers while the leader stays put.
pub(super) async fn inject(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let turn = cell.injected;
    let stores = &cell.ctx.stores;
    let (member, was_leader) = stores.with(Store::Etcd, |running| {
        let Running::Etcd(etcd) = running else {
            anyhow::bail!("member-kill needs the harness's etcd lease store");
        };
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
    stores.with(Store::Etcd, |running| match running {
        Running::Etcd(etcd) => Ok(etcd.restart_member(member)?),
        _ => anyhow::bail!("member-kill needs the harness's etcd lease store"),
    })
}
