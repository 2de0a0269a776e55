//! Scene 8: an elected leader cut off from Redis stops its work before the standby can lead, and
//! a write with its old term that reaches the resource after the hand-over is refused by the fence.
//!
//! Promise: the leader is a real worker process whose connection to Redis goes through a proxy the
//! demo black-holes (Redis stays up for the standby); the verdict is read from what the processes
//! wrote (the instant the leader's work was gone, the instant the standby led) and from the
//! resource (the increments, the stored fence). Limit: the stop before the hand-over needs the
//! leader's process to run; a leader paused past its stop instant (SIGSTOP, a long GC) learns
//! nothing in time, and only the fence covers that, as its late write here shows.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;

use leasehold::election::Election;
use leasehold::{Fence, LeaseClient, LeaseOptions};

use super::fenced::{describe, fenced_db, fenced_increment, Fenced};
use super::resource::{Counter, READ_SQL};
use super::stage::{Actor, Stage, Timeline};
use super::{Outcome, WorkerArgs};

/// The election's name.
const NAME: &str = "scheduler";

/// The lease TTL of the scene's leaders.
const TTL_MS: u64 = 1_500;

/// Milliseconds since the Unix epoch on this machine's clock: both processes write it, so their
/// instants compare.
fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// The shutdown of the leader's work: 60% of the longest its lease allows.
fn shutdown(opts: &LeaseOptions) -> Duration {
    opts.longest_shutdown() * 6 / 10
}

/// The worker side of scene 8: lead, work (a fenced increment every 150 ms) until
/// `Lease::stopping(grace)` says to stop (the grace: the longest shutdown the lease allows), take
/// the shutdown (60% of the grace), say when the work was gone; then,
/// `work_ms` later, one more fenced write with the old term (the deposed leader's straggler).
pub(crate) async fn worker(args: WorkerArgs) -> anyhow::Result<i32> {
    let db = args.db.as_deref().context("--db is required")?;
    let counter = Counter::open(db).await?;
    let fdb = fenced_db(&counter).await?;
    let mut builder = LeaseClient::builder(args.redis.clone());
    if let Some(p) = &args.key_prefix {
        builder = builder.key_prefix(p.clone());
    }
    let client = builder.connect().await?;
    let opts = LeaseOptions::with_ttl(Duration::from_millis(args.ttl_ms))?;
    let leading = Election::new(&client, &args.key, &opts)?
        .campaign("A", Duration::from_secs(10))
        .await?;
    let term = leading.term();
    println!(
        "CMD campaign {} (the lease, then the leader record)\tleading, term {term}",
        args.key
    );
    println!("EVENT leading {term}");
    let shutdown = shutdown(&opts);
    let grace = opts.longest_shutdown();
    let mut writes = 0u32;
    let why = loop {
        tokio::select! {
            stop = leading.lease().stopping(grace) => break stop,
            _ = tokio::time::sleep(Duration::from_millis(150)) => {
                let v = counter.read().await?;
                if matches!(fenced_increment(&fdb, term, "A", v).await?, Fenced::Accepted) {
                    writes += 1;
                }
            }
        }
    };
    println!(
        "SAY {writes} fenced increments with term {term}; then stopping({} ms, its grace) fired: {why}",
        grace.as_millis()
    );
    tokio::time::sleep(shutdown).await;
    println!(
        "SAY its work is gone ({} ms of shutdown: a flush, a checkpoint)",
        shutdown.as_millis()
    );
    println!("EVENT gone {}", now_ms());
    tokio::time::sleep(Duration::from_millis(args.work_ms)).await;
    let v = counter.read().await?;
    let outcome = fenced_increment(&fdb, term, "A", v).await?;
    println!(
        "SQL begin_fenced(counter, {term}); UPDATE counter SET value = {} WHERE id = 1; COMMIT\t{}",
        v + 1,
        describe(&outcome, term)
    );
    println!(
        "EVENT late {}",
        if matches!(outcome, Fenced::Accepted) {
            "accepted"
        } else {
            "refused"
        }
    );
    drop(leading);
    Ok(0)
}

/// A proxy in front of the Redis of `url`, and `url` through it.
async fn proxied(url: &str) -> anyhow::Result<(leasehold_testkit::Proxy, String)> {
    let info = redis::Client::open(url)?.get_connection_info().clone();
    let redis::ConnectionAddr::Tcp(host, port) = info.addr().clone() else {
        anyhow::bail!("scene 8 puts a TCP proxy in front of Redis: give a redis://host:port URL");
    };
    let addr = tokio::net::lookup_host((host.as_str(), port))
        .await?
        .next()
        .with_context(|| format!("cannot resolve {host}"))?;
    let proxy = leasehold_testkit::Proxy::start(addr).await?;
    let through = url.replacen(
        &format!("{host}:{port}"),
        &format!("127.0.0.1:{}", proxy.port()),
        1,
    );
    anyhow::ensure!(through != url, "cannot find {host}:{port} in the Redis URL");
    Ok((proxy, through))
}

/// Scene 8.
pub(crate) async fn deposed_leader(st: &mut Stage) -> anyhow::Result<Outcome> {
    let prefix = st.lease_prefix();
    let db = st.db_path(8);
    let counter = Counter::open(&db).await?;
    let fdb = fenced_db(&counter).await?;
    let mut tl = Timeline::new(st.style);
    let (proxy, through) = proxied(&st.redis_url).await?;
    let opts = LeaseOptions::with_ttl(Duration::from_millis(TTL_MS))?;
    let shutdown = shutdown(&opts);
    let late_after = Duration::from_millis(TTL_MS + 500);
    let mut a = st.spawn_worker_at(
        &through,
        "elect",
        &[
            ("key", NAME.to_owned()),
            ("key-prefix", prefix.clone()),
            ("db", db.display().to_string()),
            ("ttl-ms", TTL_MS.to_string()),
            ("work-ms", late_after.as_millis().to_string()),
        ],
    )?;
    let term_a: Fence = a
        .expect(&mut tl, "leading", Duration::from_secs(15))
        .await?
        .parse()?;
    tl.say(
        Actor::A,
        &format!(
            "leads with a {TTL_MS} ms lease; its work takes {} ms to stop once told (60% of the longest shutdown its lease allows)",
            shutdown.as_millis()
        ),
    );
    let client = LeaseClient::builder(st.redis_url.clone())
        .key_prefix(prefix.clone())
        .connect()
        .await?;
    let standby = Election::new(&client, NAME, &opts)?;
    let mut b_tl = tl.twin();
    let campaign = tokio::spawn(async move {
        let led = standby.campaign("B", Duration::from_secs(15)).await;
        let at = now_ms();
        if let Ok(l) = &led {
            b_tl.redis(
                Actor::B,
                &format!("campaign {NAME} (waiting since A led)"),
                &format!("leading, term {}", l.term()),
            );
        }
        (led, at)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxy.blackhole();
    tl.say(
        Actor::Observer,
        "black-holes A's connection to Redis (Redis stays up for B): A's renewals go unanswered",
    );
    let gone_ms: i64 = a
        .expect(&mut tl, "gone", Duration::from_secs(15))
        .await?
        .parse()?;
    let (led, led_ms) = campaign.await?;
    let leader_b = led.context("B's campaign")?;
    let term_b = leader_b.term();
    tl.say(
        Actor::Observer,
        &format!("A's work was gone {} ms before B led", led_ms - gone_ms),
    );
    let v = counter.read().await?;
    tl.sql(Actor::B, READ_SQL, &v.to_string());
    let b_outcome = fenced_increment(&fdb, term_b, "B", v).await?;
    let b_wrote_ms = now_ms();
    tl.sql(
        Actor::B,
        &format!(
            "begin_fenced(counter, {term_b}); UPDATE counter SET value = {} WHERE id = 1; COMMIT",
            v + 1
        ),
        &describe(&b_outcome, term_b),
    );
    tl.say(
        Actor::A,
        &format!(
            "deposed, still has a write with term {term_a} in flight (a retry, a stray thread); it reaches the resource {} ms after A's work stopped",
            late_after.as_millis()
        ),
    );
    let late = a.expect(&mut tl, "late", Duration::from_secs(15)).await?;
    let late_ms = now_ms();
    let status = a.finish(&mut tl, Duration::from_secs(15)).await?;
    anyhow::ensure!(status.success(), "worker A failed: {status}");
    proxy.restore();
    leader_b.resign().await.context("B's resignation")?;
    tl.redis(Actor::B, &format!("resign {NAME}"), "resigned");

    let value = counter.read().await?;
    let committed = counter.committed_increments().await?;
    let stored = leasehold::fence::current(&fdb, "counter")
        .await?
        .map(|f| f.as_i64())
        .unwrap_or(-1);
    tl.sql(
        Actor::Observer,
        "SELECT value FROM counter; SELECT COUNT(*) FROM increments; SELECT fence FROM leasehold_fences",
        &format!("{value}; {committed}; {stored}"),
    );
    let stopped_first = gone_ms < led_ms;
    let shown = stopped_first
        && term_b > term_a
        && matches!(b_outcome, Fenced::Accepted)
        && late == "refused"
        && late_ms > b_wrote_ms
        && value == committed
        && stored == term_b.as_i64();
    Ok(Outcome {
        shown,
        verdict: format!(
            "A's work was gone {} ms before B led (term {term_b} > {term_a}); A's late write with term {term_a} was {late}; counter {value} = {committed} committed increment(s)",
            led_ms - gone_ms
        ),
        lesson: "a leader that stops by Lease::stopping is gone before the hand-over; a fence catches the write that still slips through",
        redis_commands: tl.redis_commands,
    })
}
