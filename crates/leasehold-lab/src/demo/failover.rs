//! Scene 6: a real Sentinel failover loses a lease. A takes the lease through the sentinels while the
//! replica is cut off; the primary dies; the sentinels promote the replica, which never saw A's lock;
//! B takes the same name with a higher fence; A is told (its renewal finds no lock) but writes
//! anyway with its old fence, and the resource refuses it.
//!
//! Promise: the failover is done to real processes (a private primary, replica and three sentinels;
//! SIGSTOP, a closed replication link, SIGKILL, a real election), and the verdict is read from the
//! resource. Limit: it shows that the window exists, not how often a failover lands in it.

use std::time::Duration;

use anyhow::Context as _;
use tokio::time::Instant;

use leasehold::db::Database;
use leasehold::{Lease, LeaseClient, LeaseOptions};
use leasehold_testkit::SentinelSet;

use super::fenced::{describe, fenced_db, fenced_increment, Fenced};
use super::resource::{Counter, READ_SQL};
use super::stage::{Actor, Stage, Timeline};
use super::Outcome;

/// How long the sentinels get to elect and promote (a split vote costs 4 s more).
const FAILOVER: Duration = Duration::from_secs(30);

/// Runs a blocking testkit helper off the runtime's threads.
async fn off_runtime<T: Send + 'static>(
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    Ok(tokio::task::spawn_blocking(f).await??)
}

/// Scene 6.
pub(crate) async fn sentinel_failover_loses_a_lease(st: &mut Stage) -> anyhow::Result<Outcome> {
    let name = "order-46";
    let mut tl = Timeline::new(st.style);
    let set = off_runtime(SentinelSet::start)
        .await
        .context("cannot start a private Sentinel set (primary, replica, 3 sentinels)")?;
    let url = set.sentinel_url();
    let old = set.primary_addr()?;
    tl.say(
        Actor::Observer,
        &format!(
            "a private Sentinel set: primary {old}, one replica, three sentinels (quorum 2); clients connect with {url}"
        ),
    );
    let db = st.db_path(6);
    let counter = Counter::open(&db).await?;
    let fdb = fenced_db(&counter).await?;
    let prefix = st.lease_prefix();
    let connect = |url: String, prefix: String| async move {
        LeaseClient::builder(url)
            .key_prefix(prefix)
            .response_timeout(Duration::from_secs(1))
            .connect_timeout(Duration::from_secs(1))
            .connect()
            .await
    };
    let a_client = connect(url.clone(), prefix.clone()).await?;
    let keys = leasehold::lease::store::redis::keys::LeaseKeys::new(a_client.key_prefix(), name)?;

    // Cut the replica off: what the primary accepts from now on never reaches it.
    let (set, _) = off_runtime(move || {
        let mut set = set;
        let p = set.begin_lossy_failover()?;
        Ok((set, p))
    })
    .await?;
    tl.say(
        Actor::Observer,
        "the replica is stopped (SIGSTOP) and its replication link closed: writes reach the primary only",
    );
    let opts = LeaseOptions::builder()
        .ttl(Duration::from_secs(15))
        .renew_every(Duration::from_millis(500))
        .build()?;
    let a = a_client.try_acquire(name, &opts).await?;
    let fence_a = a.fence();
    tl.redis(
        Actor::A,
        &format!(
            "EVALSHA acquire.lua 1 {} <token> 15000 ...   (on primary {old})",
            keys.lock
        ),
        &format!("fence {fence_a}; \"OK\" from the primary, not yet on any replica"),
    );
    let read_a = counter.read().await?;
    tl.sql(Actor::A, READ_SQL, &read_a.to_string());

    let failing_over = Instant::now();
    let (set, new) = off_runtime(move || {
        let mut set = set;
        let new = set.finish_lossy_failover(FAILOVER)?;
        Ok((set, new))
    })
    .await?;
    tl.say(
        Actor::Observer,
        &format!(
            "primary {old} SIGKILLed; the sentinels promote the replica {new} after {} ms (+switch-master). It never saw A's lock",
            failing_over.elapsed().as_millis()
        ),
    );

    let b_client = connect(url.clone(), prefix.clone()).await?;
    let (b, b_outcome) = b_takes_and_writes(
        &mut tl,
        &fdb,
        &counter,
        &b_client,
        &a,
        (name, &opts),
        &keys.lock,
        &new,
    )
    .await?;
    let fence_b = b.fence();
    let (lost, reason, a_outcome) =
        a_writes_with_its_old_fence(&mut tl, &fdb, &a, &keys.lock, read_a).await?;
    let _ = a.release().await;
    b.release().await?;
    drop(set);

    let value = counter.read().await?;
    let committed = counter.committed_increments().await?;
    tl.sql(
        Actor::Observer,
        "SELECT value FROM counter; SELECT COUNT(*) FROM increments",
        &format!("{value}; {committed}"),
    );
    let shown = fence_b > fence_a
        && lost
        && matches!(b_outcome, Fenced::Accepted)
        && matches!(a_outcome, Fenced::Stale { .. })
        && value == committed;
    Ok(Outcome {
        shown,
        verdict: format!(
            "the failover lost A's lock and B got the name with fence {fence_b} > A's {fence_a}; A was told ({reason}) and its stale write was refused; counter {value} = {committed} committed increment(s)"
        ),
        lesson: "Sentinel failover is asynchronous: a lease can be lost with the primary; WAIT narrows the window, the fence keeps the data right",
        redis_commands: tl.redis_commands,
    })
}

/// B takes the name on the new primary, while A still believes it holds it, and writes with its
/// fence.
#[allow(clippy::too_many_arguments)]
async fn b_takes_and_writes(
    tl: &mut Timeline,
    fdb: &Database,
    counter: &Counter,
    b_client: &LeaseClient,
    a: &Lease,
    (name, opts): (&str, &LeaseOptions),
    lock_key: &str,
    new: &std::net::SocketAddr,
) -> anyhow::Result<(Lease, Fenced)> {
    let b = b_client.try_acquire(name, opts).await?;
    let fence_b = b.fence();
    tl.redis(
        Actor::B,
        &format!(
            "EVALSHA acquire.lua 1 {} <token> 15000 ...   (on the new primary {new})",
            lock_key
        ),
        &format!(
            "fence {fence_b}: taken, while A still believes it holds it ({} left by A's clock)",
            if a.is_lost() {
                "none".to_owned()
            } else {
                format!("{} ms", a.remaining().as_millis())
            }
        ),
    );
    let read_b = counter.read().await?;
    tl.sql(Actor::B, READ_SQL, &read_b.to_string());
    let b_outcome = fenced_increment(fdb, fence_b, "B", read_b).await?;
    tl.sql(
        Actor::B,
        &format!(
            "begin_fenced(counter, {fence_b}); UPDATE counter SET value = {} WHERE id = 1; COMMIT",
            read_b + 1
        ),
        &describe(&b_outcome, fence_b),
    );
    Ok((b, b_outcome))
}

/// A's watchdog finds the lock gone and fires A's lost signal; A ignores it and writes with its old
/// fence. Whether the signal fired, why, and what the resource did with the write.
async fn a_writes_with_its_old_fence(
    tl: &mut Timeline,
    fdb: &Database,
    a: &Lease,
    lock_key: &str,
    read_a: i64,
) -> anyhow::Result<(bool, String, Fenced)> {
    let fence_a = a.fence();
    let lost = tokio::time::timeout(Duration::from_secs(10), a.lost().fired()).await;
    let reason = match &lost {
        Ok(reason) => reason.to_string(),
        Err(_) => "not fired within 10 s".to_owned(),
    };
    tl.redis(
        Actor::A,
        &format!(
            "EVALSHA renew.lua 1 {} <token> 15000   (the watchdog, on the new primary)",
            lock_key
        ),
        &format!("0: not ours. A's lost signal: {reason}"),
    );
    tl.say(
        Actor::A,
        &format!("ignores the signal and writes with its old fence {fence_a}"),
    );
    let a_outcome = fenced_increment(fdb, fence_a, "A", read_a).await?;
    tl.sql(
        Actor::A,
        &format!(
            "begin_fenced(counter, {fence_a}); UPDATE counter SET value = {} WHERE id = 1; COMMIT",
            read_a + 1
        ),
        &describe(&a_outcome, fence_a),
    );
    Ok((lost.is_ok(), reason, a_outcome))
}
