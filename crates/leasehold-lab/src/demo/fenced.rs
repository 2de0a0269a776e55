//! Scene 4: the same paused holder as scene 3, now with a leasehold lease and a fenced write at the
//! resource: the stale write is refused and the data stays right. With `--database postgres://…`
//! the two holders' fences are also written from outside Rust, by `psql` calling the SQL function
//! `leasehold_fence` in each transaction, and the stale one is refused there too (SQLSTATE LHF01).
//! Promise: the verdict is read from the resource (counter, increment log, stored fence). Limit: the
//! fence protects only writes that go through the fenced path (here, `begin_fenced` or
//! `leasehold_fence`).

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::time::Instant;

use leasehold::db::Database;
use leasehold::{Fence, LeaseClient, LeaseOptions};

use super::naive::wait_until_expired;
use super::resource::{log_increment, Counter, READ_SQL};
use super::stage::{Actor, Stage, Timeline};
use super::{Outcome, WorkerArgs};
use crate::psql::Psql;

/// The fenced resource's name (one row in the fence table).
const RESOURCE: &str = "counter";

/// Outcome of a fenced increment.
#[derive(Debug)]
pub(crate) enum Fenced {
    /// Committed: the fence was at least the stored one.
    Accepted,
    /// Refused: a newer fence was already accepted.
    Stale { current: Fence },
}

/// The resource as leasehold's fenced-write API sees it (its tables are created by `migrate`).
pub(crate) async fn fenced_db(counter: &Counter) -> anyhow::Result<Database> {
    let db = Database::from_sqlite(counter.pool.clone());
    db.migrate().await?;
    Ok(db)
}

/// Writes `read + 1` through leasehold's fenced write: `begin_fenced` stores `fence` only if it is not
/// older than the newest fence the resource accepted, in the same transaction as the business write
/// and its log row; otherwise it fails with `StaleFence` and nothing is written.
pub(crate) async fn fenced_increment(
    db: &Database,
    fence: Fence,
    writer: &str,
    read: i64,
) -> anyhow::Result<Fenced> {
    let mut tx = match db.begin_fenced(RESOURCE, fence).await {
        Ok(tx) => tx,
        Err(leasehold::Error::StaleFence { current, .. }) => return Ok(Fenced::Stale { current }),
        Err(e) => return Err(e.into()),
    };
    let conn = tx
        .sqlite()
        .ok_or_else(|| anyhow::anyhow!("the demo resource is SQLite"))?;
    sqlx::query("UPDATE counter SET value = ? WHERE id = 1")
        .bind(read + 1)
        .execute(&mut *conn)
        .await?;
    log_increment(conn, writer, read).await?;
    tx.commit().await?;
    Ok(Fenced::Accepted)
}

pub(crate) fn describe(f: &Fenced, fence: Fence) -> String {
    match f {
        Fenced::Accepted => format!("committed (fence {fence} >= stored fence)"),
        Fenced::Stale { current } => {
            format!("REFUSED: stale fence, presented {fence}, resource already accepted {current}")
        }
    }
}

fn lease_options(ttl_ms: u64) -> anyhow::Result<LeaseOptions> {
    Ok(LeaseOptions::with_ttl(Duration::from_millis(ttl_ms))?)
}

/// The worker side of scene 4: lease, read, (paused here), fenced write, release.
pub(crate) async fn worker(args: WorkerArgs) -> anyhow::Result<i32> {
    let db = args
        .db
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("--db is required"))?;
    let counter = Counter::open(db).await?;
    let fdb = fenced_db(&counter).await?;
    let mut builder = LeaseClient::builder(args.redis.clone());
    if let Some(p) = &args.key_prefix {
        builder = builder.key_prefix(p.clone());
    }
    let client = builder.connect().await?;
    let lease = client
        .try_acquire(&args.key, &lease_options(args.ttl_ms)?)
        .await?;
    let keys =
        leasehold::lease::store::redis::keys::LeaseKeys::new(client.key_prefix(), &args.key)?;
    println!(
        "CMD EVALSHA acquire.lua 1 {} <token> {} 0 ...\tfence {} (stored in {})",
        keys.lock,
        args.ttl_ms,
        lease.fence(),
        keys.fence
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
        Ok(()) => println!(
            "CMD EVALSHA release.lua 1 {} <token> ...\treleased (handed to the first of {} if any)",
            keys.lock, keys.queue
        ),
        Err(e) => println!(
            "CMD EVALSHA release.lua 1 {} <token> ...\tnot ours any more ({e})",
            keys.lock
        ),
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

/// Scene 4.
pub(crate) async fn fenced_paused_holder(st: &mut Stage) -> anyhow::Result<Outcome> {
    let name = "order-44";
    let prefix = st.lease_prefix();
    let db = st.db_path(4);
    let counter = Counter::open(&db).await?;
    let fdb = fenced_db(&counter).await?;
    let mut con = st.con.clone();
    let mut tl = Timeline::new(st.style);
    let ttl = 600u64;
    let client = LeaseClient::builder(st.redis_url.clone())
        .key_prefix(prefix.clone())
        .connect()
        .await?;
    let keys = leasehold::lease::store::redis::keys::LeaseKeys::new(client.key_prefix(), name)?;
    let mut a = st.spawn_worker(
        "fenced",
        &[
            ("key", name.to_owned()),
            ("key-prefix", prefix.clone()),
            ("db", db.display().to_string()),
            ("ttl-ms", ttl.to_string()),
            ("work-ms", "400".into()),
        ],
    )?;
    let fence_a: Fence = a
        .expect(&mut tl, "acquired", Duration::from_secs(15))
        .await?
        .parse()?;
    a.expect(&mut tl, "read", Duration::from_secs(15)).await?;
    a.signal(Signal::SIGSTOP)?;
    let paused = Instant::now();
    tl.say(
        Actor::A,
        "is paused by SIGSTOP between its read and its write; its renewal watchdog is frozen too",
    );
    let expired = wait_until_expired(&mut con, &keys.lock, Duration::from_secs(5)).await?;
    tl.redis(
        Actor::Observer,
        &format!("PTTL {}", keys.lock),
        if expired { "(integer) -2" } else { "still set" },
    );

    let opts = lease_options(ttl)?;
    let lease_b = client.acquire(name, &opts, Duration::from_secs(5)).await?;
    let fence_b = lease_b.fence();
    tl.redis(
        Actor::B,
        &format!(
            "EVALSHA acquire.lua 1 {} <token> {ttl} <block> ... + BLPOP {}",
            keys.lock,
            keys.wake("<token>")
        ),
        &format!("fence {fence_b}"),
    );
    let v = counter.read().await?;
    tl.sql(Actor::B, READ_SQL, &v.to_string());
    let b_outcome = fenced_increment(&fdb, fence_b, "B", v).await?;
    tl.sql(
        Actor::B,
        &format!(
            "begin_fenced(counter, {fence_b}); UPDATE counter SET value = {} WHERE id = 1; COMMIT",
            v + 1
        ),
        &describe(&b_outcome, fence_b),
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
    let released = lease_b.release().await;
    tl.redis(
        Actor::B,
        &format!("EVALSHA release.lua 1 {} <token> ...", keys.lock),
        if released.is_ok() {
            "released"
        } else {
            "not ours"
        },
    );

    let value = counter.read().await?;
    let committed = counter.committed_increments().await?;
    let stored = leasehold::fence::current(&fdb, RESOURCE)
        .await?
        .map(|f| f.as_i64())
        .unwrap_or(-1);
    tl.sql(
        Actor::Observer,
        "SELECT value FROM counter; SELECT COUNT(*) FROM increments; SELECT fence FROM leasehold_fences",
        &format!("{value}; {committed}; {stored}"),
    );
    let a_writes: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM increments WHERE writer = 'A'")
        .fetch_one(&counter.pool)
        .await?;
    let from_psql = match &st.database {
        Some(url) => Some(from_psql(url, &tl, fence_a, fence_b).await?),
        None => {
            tl.say(
                Actor::Observer,
                "(with --database postgres://… the same two fences are also written by psql, through the SQL function leasehold_fence)",
            );
            None
        }
    };
    let shown_ok = fence_b > fence_a
        && matches!(b_outcome, Fenced::Accepted)
        && a_writes == 0
        && value == committed
        && stored == fence_b.as_i64()
        && from_psql != Some(false);
    let psql_verdict = match from_psql {
        Some(true) => "; from psql, leasehold_fence refused A's fence too (LHF01)",
        Some(false) => "; from psql, leasehold_fence did NOT refuse A's fence as it should",
        None => "",
    };
    Ok(Outcome {
        shown: shown_ok,
        verdict: format!(
            "B's fence {fence_b} > A's {fence_a}; the resource refused A's stale write ({a_writes} committed by A); counter {value} = {committed} committed increment(s): no update lost{psql_verdict}"
        ),
        lesson: "fence at the resource: the lease keeps work efficient, the fence keeps data correct",
        redis_commands: tl.redis_commands,
    })
}

/// The same two fences checked from outside Rust: B's, then A's stale one, each written by a `psql`
/// process in a transaction that calls `leasehold_fence` first, on a PostgreSQL counter in a schema
/// of its own (made by `migrate`, dropped at the end). Whether B's committed, A's was refused and
/// the counter holds B's increment alone.
async fn from_psql(
    url: &str,
    tl: &Timeline,
    fence_a: Fence,
    fence_b: Fence,
) -> anyhow::Result<bool> {
    let schema = format!("leasehold_demo_{:08x}", rand::random::<u32>());
    let db = Database::builder(url)
        .postgres_schema(&schema)
        .max_connections(1)
        .connect()
        .await?;
    db.migrate().await?;
    db.close().await;
    let psql = Psql::new(url, Some(&schema));
    tl.say(
        Actor::Observer,
        &format!("the same two fences from outside Rust: psql writers on PostgreSQL ({schema}), each transaction calling leasehold_fence first"),
    );
    let shown = async {
        psql.run("CREATE TABLE counter (id BIGINT PRIMARY KEY, value BIGINT NOT NULL); INSERT INTO counter VALUES (1, 0);")
            .await?
            .map_err(|e| anyhow::anyhow!("creating the psql counter: {}", e.trim()))?;
        let update = ["UPDATE counter SET value = value + 1 WHERE id = 1".to_owned()];
        let mut outcomes = Vec::new();
        for (who, fence) in [(Actor::B, fence_b), (Actor::A, fence_a)] {
            let outcome = psql.fenced(RESOURCE, fence.as_i64(), &update).await?;
            tl.sql(
                who,
                &format!(
                    "psql: BEGIN; SELECT leasehold_fence('{RESOURCE}', {fence}); {}; COMMIT",
                    update[0]
                ),
                match &outcome {
                    Ok(()) => "COMMIT",
                    Err(refused) => refused,
                },
            );
            outcomes.push(outcome.is_ok());
        }
        let value = psql
            .run("SELECT value FROM counter WHERE id = 1")
            .await?
            .map_err(|e| anyhow::anyhow!("reading the psql counter: {}", e.trim()))?;
        tl.sql(
            Actor::Observer,
            "psql: SELECT value FROM counter WHERE id = 1",
            value.trim(),
        );
        anyhow::Ok(outcomes == [true, false] && value.trim() == "1")
    }
    .await;
    // The schema goes whatever happened; a failure to drop it is not the scene's verdict.
    let _ = psql.run(&format!("DROP SCHEMA {schema} CASCADE")).await;
    shown
}
