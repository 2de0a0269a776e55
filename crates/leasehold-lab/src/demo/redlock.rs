//! Scene 7: Redlock over three private masters. It survives the crash of one master (that is what it
//! is for); a holder paused past its validity still gives two holders, and the fence, confirmed on a
//! majority, lets the resource refuse the stale one.
//! Promise: every verdict is read from the servers and the resource (lock keys, the counter, its
//! increment log, the stored fence). Limit: the masters run on this machine; the scene shows what
//! the algorithm does, not network partitions between real machines.

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use leasehold::{Fence, LeaseClient, LeaseOptions};
use leasehold_testkit::RedisServer;

use super::fenced::{describe, fenced_db, fenced_increment, Fenced};
use super::resource::{Counter, READ_SQL};
use super::stage::{Actor, Stage, Timeline};
use super::{Outcome, WorkerArgs};

const NAME: &str = "order-47";

fn lease_options(ttl_ms: u64) -> anyhow::Result<LeaseOptions> {
    Ok(LeaseOptions::with_ttl(Duration::from_millis(ttl_ms))?)
}

async fn redlock(masters: &[String]) -> anyhow::Result<LeaseClient> {
    Ok(LeaseClient::redlock(masters)
        .response_timeout(Duration::from_millis(300))
        .connect_timeout(Duration::from_millis(300))
        .connect()
        .await?)
}

/// Whether master `s` holds the lease's lock now.
fn holds(s: &RedisServer, key: &str) -> anyhow::Result<Option<String>> {
    let mut con = s.connection()?;
    Ok(redis::cmd("GET").arg(key).query(&mut con)?)
}

fn short(token: &Option<String>) -> String {
    match token {
        Some(t) => format!("\"{}…\"", &t[..t.len().min(8)]),
        None => "(nil)".to_owned(),
    }
}

/// The worker side of scene 7: a Redlock lease, a read, (paused here), a fenced write, a release.
pub(crate) async fn worker(args: WorkerArgs) -> anyhow::Result<i32> {
    let db = args
        .db
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("--db is required"))?;
    let counter = Counter::open(db).await?;
    let fdb = fenced_db(&counter).await?;
    let client = redlock(&args.master).await?;
    let lease = client
        .try_acquire(&args.key, &lease_options(args.ttl_ms)?)
        .await?;
    let key = client.key_of(&args.key)?;
    println!(
        "CMD EVALSHA acquire.lua 4 {key} … <token> {} on {} masters at once\tgranted by a majority, fence {}",
        args.ttl_ms,
        args.master.len(),
        lease.fence()
    );
    println!("EVENT acquired {}", lease.fence());
    let v = counter.read().await?;
    println!("SQL {READ_SQL}\t{v}");
    println!("EVENT read {v}");
    tokio::time::sleep(Duration::from_millis(args.work_ms)).await;
    let fence = lease.fence();
    let outcome = fenced_increment(&fdb, fence, "A", v).await?;
    println!(
        "SQL begin_fenced(counter, {fence}); UPDATE counter SET value = {} WHERE id = 1; COMMIT\t{}",
        v + 1,
        describe(&outcome, fence)
    );
    match lease.release().await {
        Ok(()) => println!("CMD EVALSHA release.lua on every master\treleased"),
        Err(e) => println!("CMD EVALSHA release.lua on every master\tnot ours any more ({e})"),
    }
    println!(
        "EVENT wrote {}",
        if matches!(outcome, Fenced::Accepted) {
            "accepted"
        } else {
            "refused"
        }
    );
    Ok(0)
}

/// Scene 7.
pub(crate) async fn redlock_scene(st: &mut Stage) -> anyhow::Result<Outcome> {
    let mut tl = Timeline::new(st.style);
    let mut servers: Vec<RedisServer> = (0..3)
        .map(|_| RedisServer::start())
        .collect::<std::io::Result<_>>()?;
    let masters: Vec<String> = servers.iter().map(|s| s.url()).collect();
    tl.say(
        Actor::Observer,
        &format!(
            "three independent redis-server masters on ports {}, {}, {}",
            servers[0].port(),
            servers[1].port(),
            servers[2].port()
        ),
    );

    // Part 1: a master crashes while B holds the lease.
    let b = redlock(&masters).await?;
    let c = redlock(&masters).await?;
    let key = b.key_of(NAME)?;
    let ttl = 600u64;
    let (survived, excluded) = master_crash(&mut tl, &mut servers, (&b, &c), &key, ttl).await?;

    // Part 2: A (a worker process) takes the lease, reads, and is paused past its validity.
    let db = st.db_path(7);
    let counter = Counter::open(&db).await?;
    let fdb = fenced_db(&counter).await?;
    let mut args = vec![
        ("key", NAME.to_owned()),
        ("db", db.display().to_string()),
        ("ttl-ms", ttl.to_string()),
        ("work-ms", "400".to_owned()),
    ];
    args.extend(masters.iter().map(|m| ("master", m.clone())));
    let mut a = st.spawn_worker("redlock", &args)?;
    let fence_a: Fence = a
        .expect(&mut tl, "acquired", Duration::from_secs(15))
        .await?
        .parse()?;
    a.expect(&mut tl, "read", Duration::from_secs(15)).await?;
    a.signal(Signal::SIGSTOP)?;
    let paused = Instant::now();
    tl.say(
        Actor::A,
        "is paused by SIGSTOP between its read and its write; its renewals stop with it",
    );
    let locks = until_free(&servers, &key).await?;
    tl.redis(
        Actor::Observer,
        &format!("GET {key} on each master"),
        &locks.iter().map(short).collect::<Vec<_>>().join(", "),
    );
    let lease_c = c
        .acquire(NAME, &lease_options(ttl)?, Duration::from_secs(5))
        .await?;
    let fence_c = lease_c.fence();
    tl.redis(
        Actor::C,
        &format!("EVALSHA acquire.lua 4 {key} … on 3 masters at once"),
        &format!("granted by a majority, fence {fence_c}: A still thinks it holds the lease"),
    );
    let v = counter.read().await?;
    tl.sql(Actor::C, READ_SQL, &v.to_string());
    let c_outcome = fenced_increment(&fdb, fence_c, "C", v).await?;
    tl.sql(
        Actor::C,
        &format!(
            "begin_fenced(counter, {fence_c}); UPDATE counter SET value = {} WHERE id = 1; COMMIT",
            v + 1
        ),
        &describe(&c_outcome, fence_c),
    );
    a.signal(Signal::SIGCONT)?;
    tl.say(
        Actor::A,
        &format!(
            "resumes after {} ms (SIGCONT) and writes with its old fence {fence_a}",
            paused.elapsed().as_millis()
        ),
    );
    let status = a.finish(&mut tl, Duration::from_secs(15)).await?;
    anyhow::ensure!(status.success(), "worker A failed: {status}");
    lease_c.release().await?;
    tl.redis(Actor::C, "EVALSHA release.lua on every master", "released");

    let value = counter.read().await?;
    let committed = counter.committed_increments().await?;
    let a_writes: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM increments WHERE writer = 'A'")
        .fetch_one(&counter.pool)
        .await?;
    tl.sql(
        Actor::Observer,
        "SELECT value FROM counter; SELECT COUNT(*) FROM increments",
        &format!("{value}; {committed}"),
    );
    let shown = survived
        && excluded
        && fence_c > fence_a
        && matches!(c_outcome, Fenced::Accepted)
        && a_writes == 0
        && value == committed;
    Ok(Outcome {
        shown,
        verdict: format!(
            "a master crash: B kept the lease and C was kept out ({}); a pause: two holders, C's fence {fence_c} > A's {fence_a}, A's stale write refused ({a_writes} committed by A), counter {value} = {committed} committed increment(s)",
            if survived && excluded { "kept" } else { "NOT kept" }
        ),
        lesson: "Redlock survives a crashed master, not a paused holder: fence the resource",
        redis_commands: tl.redis_commands,
    })
}

/// Part 1: a master crashes while B holds the lease; whether B kept it and whether C was kept
/// out.
async fn master_crash(
    tl: &mut Timeline,
    servers: &mut [RedisServer],
    (b, c): (&LeaseClient, &LeaseClient),
    key: &str,
    ttl: u64,
) -> anyhow::Result<(bool, bool)> {
    let lease_b = b.try_acquire(NAME, &lease_options(ttl)?).await?;
    tl.redis(
        Actor::B,
        &format!("EVALSHA acquire.lua 4 {key} … <token> {ttl} on 3 masters at once"),
        &format!("granted by 3 of 3, fence {}", lease_b.fence()),
    );
    servers[2].kill()?;
    tl.say(
        Actor::Observer,
        &format!("SIGKILL the master on port {}", servers[2].port()),
    );
    tokio::time::sleep(Duration::from_millis(3 * ttl)).await;
    let survived = !lease_b.is_lost();
    tl.say(
        Actor::B,
        &format!(
            "{} ms later (3 TTLs): {}",
            3 * ttl,
            if survived {
                "still holds it, renewed on the 2 masters left"
            } else {
                "LOST it"
            }
        ),
    );
    let c_try = c.try_acquire(NAME, &lease_options(ttl)?).await;
    let excluded = matches!(c_try, Err(leasehold::Error::Busy { .. }));
    tl.redis(
        Actor::C,
        &format!("EVALSHA acquire.lua 4 {key} … on 3 masters at once"),
        if excluded {
            "busy on 2, the third is down: no majority, Busy"
        } else {
            "GOT IT: two holders"
        },
    );
    drop(c_try);
    lease_b.release().await?;
    servers[2].restart()?;
    tl.say(
        Actor::Observer,
        &format!(
            "the master on port {} is back, empty; B released",
            servers[2].port()
        ),
    );
    Ok((survived, excluded))
}

/// What each master holds in `key` once none holds it any more (A's lock expired everywhere), or
/// after 5 s.
async fn until_free(servers: &[RedisServer], key: &str) -> anyhow::Result<Vec<Option<String>>> {
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let locks = servers
            .iter()
            .map(|s| holds(s, key))
            .collect::<anyhow::Result<Vec<_>>>()?;
        if locks.iter().all(Option::is_none) || Instant::now() > until {
            return Ok(locks);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
