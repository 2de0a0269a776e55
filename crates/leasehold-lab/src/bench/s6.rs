//! S6, election hand-over: how long after a leader resigns the waiting candidate leads, against the
//! same hand-over of a plain lease (release to a waiting `acquire`) in the same run, on every store
//! this build can start or reach. The difference is the election's own cost: the leader record
//! written beside the lease once the candidate holds it (one more request).
//!
//! Each round: one client holds the name, the other waits for it (queued in the store for
//! 20 ms first), the holder resigns or releases, and the time until the waiter's call returns is
//! the hand-over. Lease and election rounds alternate, so both see the same machine.
//!
//! Takeover rows beside them: the time from a `resign` to the standby leading, which should be at
//! most 2 round trips, counted two ways: in lease hand-overs (one request and the store's push to
//! the waiter, the `ratio` column: at most 2) and, stricter, in round trips of the lease's protocol
//! (half the median of an uncontended acquire and release), which leave out the waiter's wake-up;
//! and the time from a `kill -9` of the leader, a separate process
//! (`__bench-worker s6-leader`) killed at a random point of its renewal period, to the waiting
//! standby leading, which should be at most the TTL (2 s) and one round trip: the store hands the
//! name on when the dead leader's lease runs out, and the standby should notice within a round
//! trip (it asks again when the remaining TTL it was told has passed, plus a jitter of up to 10%:
//! the row says by how much the slowest takeover passed the TTL).
//!
//! Limit: one waiter; the hand-over of a queue of many is S2's. The figure includes the waiter's
//! wake-up on this machine (the store's push, the task's scheduling). The kill rounds are few (a
//! lease must run out in each): their maximum is the figure, not a tail percentile.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use leasehold::election::Election;
use leasehold::{LeaseClient, LeaseOptions};
use tokio::io::AsyncBufReadExt as _;

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
    /// The store's round trip: half the median of an uncontended acquire and release, milliseconds.
    pub(crate) round_trip_ms: f64,
    /// Election hand-over p50 in those round trips (`election_p50_ms / round_trip_ms`): the
    /// stricter count, without the waiter's wake-up in the unit.
    pub(crate) resign_round_trips: f64,
    /// The TTL of the kill rounds' leases, milliseconds.
    pub(crate) kill_ttl_ms: u64,
    /// Kill rounds: the leader's process killed (SIGKILL) while the standby campaigned.
    pub(crate) kill_rounds: u64,
    /// Takeover after the kill, to the standby leading: p50 and max, milliseconds.
    pub(crate) kill_p50_ms: f64,
    pub(crate) kill_max_ms: f64,
    /// Whether every kill round's takeover was within the TTL and one round trip.
    pub(crate) kill_within_ttl_and_round_trip: bool,
    /// How far the slowest kill round's takeover went past the TTL, milliseconds (negative: inside
    /// it). The standby asks again when the holder's remaining TTL it was told has passed, plus up
    /// to 10% of it (at most 250 ms) of jitter, so this can reach a tenth of the TTL.
    pub(crate) kill_over_ttl_ms: f64,
}

/// The TTL of the kill rounds: etcd keeps a lease at least about 2 s whatever is asked.
const KILL_TTL: Duration = Duration::from_secs(2);

/// How long the waiter sits in the store's queue before the holder lets go.
const QUEUED: Duration = Duration::from_millis(20);

/// Runs S6 on `target`, `rounds` of each kind, alternating, then `kill_rounds` rounds of a leader
/// process (`worker_exe`) killed.
pub(crate) async fn run(
    target: &Target,
    rounds: u64,
    kill_rounds: u64,
    worker_exe: &Path,
) -> anyhow::Result<S6Row> {
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
    // A round trip of the lease's own protocol: half an uncontended acquire and release, each one
    // request (a bare read is no measure: a store may answer it from what the client knows).
    let mut trips = Latencies::default();
    for _ in 0..21 {
        let sent = Instant::now();
        a.try_acquire("s6-trip", &opts)
            .await
            .context("S6: a round trip's acquire")?
            .release()
            .await
            .context("S6: a round trip's release")?;
        trips.record(sent.elapsed() / 2);
    }
    let round_trip = trips.quantile_us(0.5) / 1000.0;
    let mut kills = Vec::new();
    for _ in 0..kill_rounds {
        kills.push(kill_round(target, &prefix, &a, worker_exe).await?);
    }
    kills.sort();
    let kill_ms = |d: Option<&Duration>| round3(d.map_or(0.0, |d| d.as_secs_f64() * 1000.0));
    let bound = KILL_TTL.as_secs_f64() * 1000.0 + round_trip;
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
        round_trip_ms: round3(round_trip),
        resign_round_trips: if round_trip > 0.0 {
            round3(election_p50 / round_trip)
        } else {
            0.0
        },
        kill_ttl_ms: KILL_TTL.as_millis() as u64,
        kill_rounds,
        kill_p50_ms: kill_ms(kills.get(kills.len() / 2)),
        kill_max_ms: kill_ms(kills.last()),
        kill_within_ttl_and_round_trip: kills.iter().all(|d| d.as_secs_f64() * 1000.0 <= bound),
        kill_over_ttl_ms: round3(kill_ms(kills.last()) - KILL_TTL.as_secs_f64() * 1000.0),
    })
}

/// A leader in its own process (`__bench-worker s6-leader`) leads; `standby` campaigns; at a random
/// point of the leader's renewal period the process is killed (SIGKILL): the time from the kill to
/// the standby leading.
async fn kill_round(
    target: &Target,
    prefix: &str,
    standby: &LeaseClient,
    worker_exe: &Path,
) -> anyhow::Result<Duration> {
    let opts = LeaseOptions::with_ttl(KILL_TTL)?;
    let mut child = tokio::process::Command::new(worker_exe)
        .arg("__bench-worker")
        .arg("s6-leader")
        .args(["--redis-url", &target.urls.join(URL_SEPARATOR)])
        .args(["--prefix", prefix])
        .args(["--name", "s6-kill"])
        .args(["--ttl-ms", &KILL_TTL.as_millis().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .context("S6: starting the leader process")?;
    let stdout = child.stdout.take().context("S6: the leader's stdout")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let said = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .context("S6: the leader process did not lead within 10 s")??;
    anyhow::ensure!(
        said.as_deref() == Some("leading"),
        "S6: the leader process said {said:?}"
    );
    let election = Election::new(standby, "s6-kill", &opts)?;
    let waiting = tokio::spawn(async move {
        let l = election.campaign("standby", Duration::from_secs(15)).await;
        (Instant::now(), l)
    });
    let renew = opts.renew_every().unwrap_or(KILL_TTL / 3);
    let after = rand::random_range(0..=renew.as_millis() as u64);
    tokio::time::sleep(QUEUED + Duration::from_millis(after)).await;
    let pid = child.id().context("S6: the leader process is gone")?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .context("S6: killing the leader")?;
    let killed = Instant::now();
    let _ = child.wait().await;
    let (got_at, got) = waiting.await?;
    got.context("S6: the standby's campaign after the kill")?
        .resign()
        .await
        .context("S6: the standby's resignation after the kill")?;
    Ok(got_at.saturating_duration_since(killed))
}

/// Between the store URLs of a leader process's `--redis-url` (Redlock's masters).
const URL_SEPARATOR: &str = " ";

/// The leader process of a kill round: leads `name` and says `leading` on stdout, then renews until
/// it is killed (or its stdin closes, or the lease is lost).
pub(crate) async fn leader(
    urls: &str,
    prefix: &str,
    name: &str,
    opts: LeaseOptions,
) -> anyhow::Result<()> {
    let urls: Vec<String> = urls.split(URL_SEPARATOR).map(str::to_owned).collect();
    let client = connect_any(&urls, prefix).await?;
    let leading = Election::new(&client, name, &opts)?
        .campaign("killed", Duration::from_secs(10))
        .await
        .context("S6: the leader process's campaign")?;
    println!("leading");
    let lost = leading.lost();
    let mut stdin = tokio::io::BufReader::new(tokio::io::stdin()).lines();
    tokio::select! {
        _ = lost.fired() => {}
        _ = async { while let Ok(Some(_)) = stdin.next_line().await {} } => {}
    }
    Ok(())
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
