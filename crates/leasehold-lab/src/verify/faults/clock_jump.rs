//! `clock-jump`: the Redis server's wall clock jumps forward past the lease TTL while the lease is
//! held. On Redlock, the schedule of the Redlock debate: the holder's lease on a bare majority (its
//! link to the third master cut during its acquire), one master of that majority jumps, and a
//! second client reaches a majority through it.
//!
//! Limit: forward jumps only (a backward jump only lengthens leases); needs libfaketime.

use anyhow::Context as _;

use super::super::cell::Cell;
use super::super::store::redis::{CUT_MASTER, JUMPING_MASTER};

/// On Redlock, cuts every worker's way to [`CUT_MASTER`] while they take the lease, so the target
/// holds it on the bare majority {0, [`JUMPING_MASTER`]}. Nothing to do on one server.
pub(super) fn arm(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    if cell.spec.strategy.redlock() {
        for slot in &cell.masters()?.links {
            slot[CUT_MASTER].cut();
        }
    }
    Ok(())
}

/// Gives the cut links back when no target was found.
pub(super) fn disarm(cell: &mut Cell<'_>) {
    if let Ok(r) = cell.masters() {
        for slot in &r.links {
            slot[CUT_MASTER].restore();
        }
    }
}

/// Jumps the clock: past the TTL of any lock held now (Redis expires by its wall clock).
pub(super) async fn inject(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    if cell.spec.strategy.redlock() {
        return redlock(cell, slot).await;
    }
    let hold = cell.timing.hold;
    let server = cell
        .redis()?
        .primary
        .as_mut()
        .context("a clock jump needs a Redis the harness runs")?;
    server.jump_clock(hold)?;
    tokio::time::sleep(hold).await;
    Ok(())
}

/// The clock-jump schedule of the Redlock debate. The target holds the lease on the bare majority
/// {0, JUMPING_MASTER} (`arm` cut everyone's way to CUT_MASTER); JUMPING_MASTER's wall clock jumps
/// past the TTL, so it expires the target's lock at once; the other workers get their way to
/// CUT_MASTER back and one reaches the majority {JUMPING_MASTER, CUT_MASTER}. The target goes on as
/// soon as that worker has written (or after the fault window): by its own clock its lease may well
/// still be valid, which is the point of the schedule.
async fn redlock(cell: &mut Cell<'_>, slot: u32) -> anyhow::Result<()> {
    use super::super::worker::Event;
    let t = cell.timing;
    let since = cell.log.len();
    let r = cell.masters()?;
    tokio::task::block_in_place(|| r.masters[JUMPING_MASTER].jump_clock(t.hold))?;
    for (other, links) in r.links.iter().enumerate() {
        if other as u32 != slot {
            links[CUT_MASTER].restore();
        }
    }
    cell.log
        .wait_for(since, t.hold, |s, ev| {
            s != slot && matches!(ev, Event::Wrote { .. })
        })
        .await;
    cell.masters()?.links[slot as usize][CUT_MASTER].restore();
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold::lease::{LeaseClient, LeaseOptions};
    use leasehold_testkit::RedisServer;

    /// What a forward clock jump does to a leasehold lease: the lock expires early (Redis expires by
    /// its wall clock), so a second holder gets it while the first still counts on it, and its fence
    /// is above the first's (the rule is `max(stored + 1, server time in µs)`): a forward jump only
    /// raises fences, so a fenced resource still refuses the first holder. The server time is the
    /// client's estimate for a few seconds after it last read the server's clock; a client that reads
    /// it (a new one, here) mints fences that follow the jumped clock.
    #[tokio::test]
    async fn a_forward_clock_jump_expires_a_lease_early_and_only_raises_fences() {
        let mut server =
            tokio::task::spawn_blocking(|| RedisServer::builder().fake_clock().start())
                .await
                .unwrap()
                .expect(
                    "a fake-clock redis-server (needs libfaketime: apt-get install -y faketime)",
                );
        let first = LeaseClient::connect(&server.url()).await.unwrap();
        let second = LeaseClient::connect(&server.url()).await.unwrap();
        let opts = LeaseOptions::with_ttl(Duration::from_secs(30)).unwrap();
        let held = first.try_acquire("job", &opts).await.unwrap();
        assert!(
            second.try_acquire("job", &opts).await.is_err(),
            "the lease is held for 30 s before the jump"
        );

        let jump = Duration::from_secs(60);
        server.jump_clock(jump).unwrap();
        let taken = second
            .try_acquire("job", &opts)
            .await
            .expect("after a 60 s jump the 30 s lease has expired on the server");
        let (old, new) = (held.fence().as_i64(), taken.fence().as_i64());
        assert!(
            new > old,
            "the second holder's fence is above the first's: {old} -> {new}"
        );
        drop(held);
        taken.release().await.unwrap();
        // A client without an estimate reads the server's (jumped) clock.
        let third = LeaseClient::connect(&server.url()).await.unwrap();
        let later = third.try_acquire("job", &opts).await.unwrap();
        assert!(
            later.fence().as_i64() >= old + jump.as_micros() as i64 - 5_000_000,
            "the fence follows the jumped server clock: {old} -> {}",
            later.fence()
        );
        later.release().await.unwrap();
    }
}
