//! S6, election hand-over: how long after a leader resigns the waiting candidate leads, against the
//! same hand-over of a plain lease (release to a waiting `acquire`) in the same run, on every store
//! this build can start or reach. The difference is the election's own cost: the leader record
//! written beside the lease once the candidate holds it (one more request).
//!
//! Each round: one client holds the name, the other waits for it (queued in the store for
//! 20 ms first), the holder resigns or releases, and the time until the waiter's call returns is
//! the hand-over. Lease and election rounds alternate, so both see the same machine.
//!
//! Limit: one waiter; the hand-over of a queue of many is S2's. The figure includes the waiter's
//! wake-up on this machine (the store's push, the task's scheduling).

use std::time::{Duration, Instant};

use anyhow::Context as _;
use leasehold::election::Election;
use leasehold::{LeaseClient, LeaseOptions};

use super::measure::{round3, Latencies};
use super::stores::{connect_any, Target};

/// One store's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct S6Row {
    /// The target's label, as S5's rows (`redis`, `postgres`, `etcd`, ..., `redlock`).
    pub(crate) store: &'static str,
    /// Rounds of each kind.
    pub(crate) rounds: u64,
    /// Lease hand-over, release to the waiter's `acquire` returning: p50 and p99, milliseconds.
    pub(crate) lease_p50_ms: f64,
    pub(crate) lease_p99_ms: f64,
    /// Election hand-over, `resign` to the waiting `campaign` returning: p50 and p99, milliseconds.
    pub(crate) election_p50_ms: f64,
    pub(crate) election_p99_ms: f64,
    /// Election p50 ÷ lease p50.
    pub(crate) ratio: f64,
    /// Whether every waiting candidate led with a term above the previous leader's (must be true).
    pub(crate) terms_increased: bool,
}

/// How long the waiter sits in the store's queue before the holder lets go.
const QUEUED: Duration = Duration::from_millis(20);

/// Runs S6 on `target`, `rounds` of each kind, alternating.
pub(crate) async fn run(target: &Target, rounds: u64) -> anyhow::Result<S6Row> {
    let prefix = format!("s6-{}-{:08x}", std::process::id(), rand::random::<u32>());
    let a = connect_any(&target.urls, &prefix).await?;
    let b = connect_any(&target.urls, &prefix).await?;
    // etcd counts TTLs in whole seconds, with a minimum of about 2 s.
    let opts = LeaseOptions::with_ttl(Duration::from_secs(5))?;
    let (mut lease, mut election) = (Latencies::default(), Latencies::default());
    let mut terms_increased = true;
    let mut last_term = 0;
    for i in 0..rounds {
        let (holder, waiter) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        lease.record(lease_round(holder, waiter, &opts).await?);
        let (took, term) = election_round(holder, waiter, &opts).await?;
        election.record(took);
        terms_increased &= term > last_term;
        last_term = term;
    }
    let ms = |l: &Latencies, q: f64| round3(l.quantile_us(q) / 1000.0);
    let (lease_p50, election_p50) = (ms(&lease, 0.5), ms(&election, 0.5));
    Ok(S6Row {
        store: target.label,
        rounds,
        lease_p50_ms: lease_p50,
        lease_p99_ms: ms(&lease, 0.99),
        election_p50_ms: election_p50,
        election_p99_ms: ms(&election, 0.99),
        ratio: if lease_p50 > 0.0 {
            round3(election_p50 / lease_p50)
        } else {
            0.0
        },
        terms_increased,
    })
}

/// `holder` takes the name, `waiter` queues for it, `holder` releases: the time until the waiter
/// holds it.
async fn lease_round(
    holder: &LeaseClient,
    waiter: &LeaseClient,
    opts: &LeaseOptions,
) -> anyhow::Result<Duration> {
    let held = holder
        .try_acquire("s6-lease", opts)
        .await
        .context("S6: taking the lease")?;
    let (w, o) = (waiter.clone(), opts.clone());
    let waiting = tokio::spawn(async move {
        let l = w.acquire("s6-lease", &o, Duration::from_secs(10)).await;
        (Instant::now(), l)
    });
    tokio::time::sleep(QUEUED).await;
    let let_go = Instant::now();
    held.release().await.context("S6: releasing the lease")?;
    let (got_at, got) = waiting.await?;
    got.context("S6: the waiter's acquire")?
        .release()
        .await
        .context("S6: the waiter's release")?;
    Ok(got_at.saturating_duration_since(let_go))
}

/// The same with an election: `holder` leads, `waiter` campaigns, `holder` resigns. The time and
/// the new leader's term.
async fn election_round(
    holder: &LeaseClient,
    waiter: &LeaseClient,
    opts: &LeaseOptions,
) -> anyhow::Result<(Duration, u64)> {
    let leading = Election::new(holder, "s6-election", opts)?
        .campaign("leader", Duration::ZERO)
        .await
        .context("S6: the first campaign")?;
    let standby = Election::new(waiter, "s6-election", opts)?;
    let waiting = tokio::spawn(async move {
        let l = standby.campaign("standby", Duration::from_secs(10)).await;
        (Instant::now(), l)
    });
    tokio::time::sleep(QUEUED).await;
    let previous = leading.term().get();
    let let_go = Instant::now();
    leading.resign().await.context("S6: resigning")?;
    let (got_at, got) = waiting.await?;
    let next = got.context("S6: the standby's campaign")?;
    let term = next.term().get();
    anyhow::ensure!(
        term > previous,
        "S6: the new leader's term {term} is not above its predecessor's {previous}"
    );
    next.resign()
        .await
        .context("S6: the standby's resignation")?;
    Ok((got_at.saturating_duration_since(let_go), term))
}
