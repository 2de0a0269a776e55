//! One side of S1 alone, for a profiler: `leasehold` (`try_acquire` + release of one free name),
//! `leasehold-wait` (`acquire` with a 30 s bound + release) or the baseline (`SET NX PX` + a
//! compare-and-delete script), on a Redis of your choosing, for a time or a number of cycles.
//! `handoff` is S2's path instead: two clients in turn wait for one name, each holding it 5 ms
//! (`HOLD_MS`), so that nearly every release hands it to the other, who was blocked in `BLPOP` (a
//! cycle is one acquisition).
//! `leasehold bench` alternates the sides in one process, which a profiler cannot tell apart; this
//! runs one.
//!
//! ```sh
//! cargo build --profile profiling -p leasehold-lab --example s1_one_side
//! # Instructions per cycle, whatever else the machine does: the difference of two counts.
//! valgrind --tool=callgrind target/profiling/examples/s1_one_side leasehold 200
//! valgrind --tool=callgrind target/profiling/examples/s1_one_side leasehold 1200
//! # The same against a redis-server run under callgrind counts the server's side.
//! S1_URL=redis://127.0.0.1:6400 target/profiling/examples/s1_one_side baseline 1200
//! # Or for a time, say under `perf stat -p`:
//! target/profiling/examples/s1_one_side leasehold 5s
//! ```

use std::time::{Duration, Instant};

use anyhow::Context as _;

/// How long to run: a number of cycles (after 50 warm-up cycles) or a time (after 500 and a pause).
#[derive(Clone, Copy)]
enum Length {
    Cycles(u64),
    Time(Duration),
}

impl Length {
    fn parse(s: &str) -> anyhow::Result<Self> {
        Ok(match s.strip_suffix('s') {
            Some(secs) => Length::Time(Duration::from_secs_f64(
                secs.parse().context("a time is seconds, e.g. 5s")?,
            )),
            None => Length::Cycles(s.parse().context("a number of cycles, or seconds as 5s")?),
        })
    }

    fn warm_up(self) -> u64 {
        match self {
            Length::Cycles(_) => 50,
            Length::Time(_) => 500,
        }
    }

    fn more(self, started: Instant, done: u64) -> bool {
        match self {
            Length::Cycles(n) => done < n,
            Length::Time(d) => started.elapsed() < d,
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(side), Some(length)) = (args.get(1), args.get(2)) else {
        anyhow::bail!(
            "usage: s1_one_side leasehold|leasehold-wait|baseline|handoff CYCLES|SECONDSs"
        );
    };
    let length = Length::parse(length)?;
    let url = std::env::var("S1_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let started;
    let mut done = 0u64;
    match side.as_str() {
        "leasehold" | "leasehold-wait" => {
            let client = leasehold::LeaseClient::connect(&url).await?;
            let opts = leasehold::LeaseOptions::with_ttl(Duration::from_secs(30))?;
            // The try (`try_acquire`) or the waiting acquire (`acquire` with a 30 s bound).
            let wait = (side == "leasehold-wait").then_some(Duration::from_secs(30));
            for _ in 0..length.warm_up() {
                leasehold_cycle(&client, &opts, wait).await?;
            }
            pause(length).await;
            started = Instant::now();
            while length.more(started, done) {
                leasehold_cycle(&client, &opts, wait).await?;
                done += 1;
            }
        }
        "handoff" => {
            let opts = leasehold::LeaseOptions::with_ttl(Duration::from_secs(30))?;
            let (a, b) = (
                leasehold::LeaseClient::connect(&url).await?,
                leasehold::LeaseClient::connect(&url).await?,
            );
            handoffs(&a, &b, &opts, length.warm_up()).await?;
            pause(length).await;
            started = Instant::now();
            while length.more(started, done) {
                handoffs(&a, &b, &opts, 50).await?;
                done += 50;
            }
        }
        "baseline" => {
            let mut con = redis::Client::open(url.as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let release = redis::Script::new(
                "if redis.call('GET', KEYS[1]) == ARGV[1] then \
                 return redis.call('DEL', KEYS[1]) else return 0 end",
            );
            for _ in 0..length.warm_up() {
                baseline_cycle(&mut con, &release).await?;
            }
            pause(length).await;
            started = Instant::now();
            while length.more(started, done) {
                baseline_cycle(&mut con, &release).await?;
                done += 1;
            }
        }
        other => anyhow::bail!("{other:?}: the side is leasehold, leasehold-wait or baseline"),
    }
    let secs = started.elapsed().as_secs_f64();
    println!("{side}: {done} cycles in {secs:.3} s");
    Ok(())
}

/// A timed run starts after a second's pause, so that `perf stat -p` can be attached after the
/// warm-up.
async fn pause(length: Length) {
    if let Length::Time(_) = length {
        eprintln!("pid {}: measuring in 1 s", std::process::id());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// leasehold's acquire (a try, or a wait up to `wait`) and release of one free name.
async fn leasehold_cycle(
    client: &leasehold::LeaseClient,
    opts: &leasehold::LeaseOptions,
    wait: Option<Duration>,
) -> anyhow::Result<()> {
    let lease = match wait {
        None => client.try_acquire("s1-one-side", opts).await?,
        Some(bound) => client.acquire("s1-one-side", opts, bound).await?,
    };
    lease.release().await?;
    Ok(())
}

/// How long each `handoff` acquisition holds: `HOLD_MS` (default 5; longer under a profiler that
/// slows the process, so that the other client is blocked before each release).
fn hold() -> Duration {
    let ms = std::env::var("HOLD_MS").ok().and_then(|v| v.parse().ok());
    Duration::from_millis(ms.unwrap_or(5))
}

/// `n` acquisitions of one name, shared by two clients that wait for it in turn.
async fn handoffs(
    a: &leasehold::LeaseClient,
    b: &leasehold::LeaseClient,
    opts: &leasehold::LeaseOptions,
    n: u64,
) -> anyhow::Result<()> {
    let turns = async |client: &leasehold::LeaseClient| -> anyhow::Result<()> {
        for _ in 0..n / 2 {
            let lease = client
                .acquire("s1-one-side-handoff", opts, Duration::from_secs(30))
                .await?;
            tokio::time::sleep(hold()).await;
            lease.release().await?;
        }
        Ok(())
    };
    tokio::try_join!(turns(a), turns(b))?;
    Ok(())
}

/// The baseline's acquire and release of one free name, as the lab's baseline lock does them.
async fn baseline_cycle(
    con: &mut redis::aio::MultiplexedConnection,
    release: &redis::Script,
) -> anyhow::Result<()> {
    let token = format!("{:032x}", rand::random::<u128>());
    let set: Option<String> = redis::cmd("SET")
        .arg("bench-baseline:s1-one-side")
        .arg(&token)
        .arg("NX")
        .arg("PX")
        .arg(30_000u64)
        .query_async(con)
        .await?;
    anyhow::ensure!(set.is_some(), "the baseline's name was busy");
    let deleted: i64 = release
        .key("bench-baseline:s1-one-side")
        .arg(&token)
        .invoke_async(con)
        .await?;
    anyhow::ensure!(deleted == 1, "the baseline lock was lost");
    Ok(())
}
