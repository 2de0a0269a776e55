//! Scenes 1-3: the locks people write first, each failing the way the seeds say, for real.
//! Promise: each verdict is computed from Redis replies and the SQLite resource's data at the end of
//! the scene. Limit: timings are chosen so the failure shows on a loaded machine; if a fault landed
//! too late, the verdict says so instead of pretending.

use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::Signal;
use redis::Value;
use tokio::time::Instant;

use super::resource::{Counter, READ_SQL};
use super::stage::{Actor, Stage, Timeline};
use super::worker::{compare_and_delete, token};
use super::Outcome;

const WORKER_REPORT: Duration = Duration::from_secs(15);

/// A Redis reply as `redis-cli` shows it.
pub(crate) fn show(v: &Value) -> String {
    match v {
        Value::Nil => "(nil)".to_owned(),
        Value::Int(n) => format!("(integer) {n}"),
        Value::BulkString(b) => format!("\"{}\"", abbreviate(&String::from_utf8_lossy(b))),
        Value::SimpleString(s) => s.clone(),
        Value::Okay => "OK".to_owned(),
        other => format!("{other:?}"),
    }
}

/// Long tokens shown as their first 8 characters.
pub(crate) fn abbreviate(s: &str) -> String {
    if s.len() > 12 {
        format!("{}…", &s[..8])
    } else {
        s.to_owned()
    }
}

/// Sends `c`, shows it as `shown` with its reply, returns the reply.
pub(crate) async fn send(
    tl: &mut Timeline,
    who: Actor,
    con: &mut redis::aio::MultiplexedConnection,
    shown: &str,
    c: &redis::Cmd,
) -> anyhow::Result<Value> {
    let v: Value = c
        .query_async(con)
        .await
        .with_context(|| format!("redis> {shown}"))?;
    tl.redis(who, shown, &show(&v));
    Ok(v)
}

fn is_ok(v: &Value) -> bool {
    matches!(v, Value::Okay) || matches!(v, Value::SimpleString(s) if s == "OK")
}

fn int(v: &Value) -> i64 {
    match v {
        Value::Int(n) => *n,
        _ => i64::MIN,
    }
}

/// Scene 1: `SETNX` with no TTL; the holder is killed; nobody can take the lock again.
pub(crate) async fn setnx_without_ttl(st: &mut Stage) -> anyhow::Result<Outcome> {
    let key = st.key(1);
    let mut con = st.con.clone();
    let mut tl = Timeline::new(st.style);
    let mut a = st.spawn_worker(
        "setnx",
        &[("key", key.clone()), ("work-ms", "60000".into())],
    )?;
    a.expect(&mut tl, "acquired", WORKER_REPORT).await?;
    tl.say(
        Actor::A,
        "crashes mid-work: the demo sends SIGKILL (think OOM killer, kill -9, power loss)",
    );
    a.signal(Signal::SIGKILL)?;
    let status = a.child.wait().await?;
    let died = Instant::now();
    tl.say(
        Actor::Observer,
        &format!("worker A (pid {}) is gone: {status}", a.pid),
    );

    let try_for = Duration::from_millis(1500);
    let setnx = redis::cmd("SETNX").arg(&key).arg("B").clone();
    let shown = format!("SETNX {key} B");
    let first = send(&mut tl, Actor::B, &mut con, &shown, &setnx).await?;
    let mut refused = u32::from(int(&first) == 0);
    let mut got = int(&first) == 1;
    let mut tries = 1;
    while !got && died.elapsed() < try_for {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let v: i64 = setnx.query_async(&mut con).await?;
        tries += 1;
        if v == 1 {
            got = true;
        } else {
            refused += 1;
        }
    }
    tl.redis(
        Actor::B,
        &format!("SETNX {key} B   (retried every 150 ms, {tries} tries in all)"),
        if got {
            "(integer) 1"
        } else {
            "(integer) 0, every time"
        },
    );
    let pttl = int(&send(
        &mut tl,
        Actor::Observer,
        &mut con,
        &format!("PTTL {key}"),
        redis::cmd("PTTL").arg(&key),
    )
    .await?);
    let holder_dead = !status.success();
    let shown_ok = holder_dead && !got && refused == tries && pttl == -1;
    let verdict = format!(
        "holder dead for {} ms, B refused {refused}/{tries} times, PTTL {pttl} (no expiry): the lock belongs to a dead process, forever",
        died.elapsed().as_millis()
    );
    let cleanup = send(
        &mut tl,
        Actor::Observer,
        &mut con,
        &format!("DEL {key}"),
        redis::cmd("DEL").arg(&key),
    )
    .await?;
    let _ = cleanup;
    tl.say(
        Actor::Observer,
        "only a human deleting the key by hand unsticks it",
    );
    Ok(Outcome {
        shown: shown_ok,
        verdict,
        lesson: "a lock needs a TTL: its holder can die at any moment",
        redis_commands: tl.redis_commands,
    })
}

/// Scene 2's session: its key, the parent's connection and the timeline every command is shown on.
struct BareDel {
    key: String,
    con: redis::aio::MultiplexedConnection,
    tl: Timeline,
}

impl BareDel {
    async fn send(&mut self, who: Actor, shown: &str, c: &redis::Cmd) -> anyhow::Result<Value> {
        send(&mut self.tl, who, &mut self.con, shown, c).await
    }

    /// `SET key who NX PX px`, shown as such.
    async fn set(&mut self, who: Actor, name: &str, px: u64) -> anyhow::Result<Value> {
        let c = redis::cmd("SET")
            .arg(&self.key)
            .arg(name)
            .arg("NX")
            .arg("PX")
            .arg(px)
            .clone();
        let shown = format!("SET {} {name} NX PX {px}", self.key);
        self.send(who, &shown, &c).await
    }

    /// `verb key` (`PTTL`, `GET`, `DEL`), shown as such.
    async fn on_key(&mut self, who: Actor, verb: &str) -> anyhow::Result<Value> {
        let c = redis::cmd(verb).arg(&self.key).clone();
        let shown = format!("{verb} {}", self.key);
        self.send(who, &shown, &c).await
    }
}

/// Scene 2: TTL, but release with a bare `DEL`: a slow holder deletes the next holder's lock.
pub(crate) async fn ttl_and_bare_del(st: &mut Stage) -> anyhow::Result<Outcome> {
    let mut s = BareDel {
        key: st.key(2),
        con: st.con.clone(),
        tl: Timeline::new(st.style),
    };
    let ttl = 400u64;
    let a_work = Duration::from_millis(1000);
    let b_work = Duration::from_millis(1400);

    // A's TTL lets go while A still works; B takes the lock.
    let a_set = s.set(Actor::A, "A", ttl).await?;
    let a_start = Instant::now();
    s.tl.say(
        Actor::A,
        &format!(
            "starts a slow job ({} ms), longer than its {ttl} ms TTL",
            a_work.as_millis()
        ),
    );
    tokio::time::sleep(Duration::from_millis(ttl + 150)).await;
    s.on_key(Actor::Observer, "PTTL").await?;
    let b_set = s.set(Actor::B, "B", 5000).await?;
    let b_start = Instant::now();
    s.tl.say(
        Actor::B,
        &format!(
            "got the lock A's TTL let go; starts its job ({} ms)",
            b_work.as_millis()
        ),
    );

    // A finishes and deletes B's lock; C takes it while B works; B deletes C's.
    tokio::time::sleep_until(a_start + a_work).await;
    let before_del = s.on_key(Actor::Observer, "GET").await?;
    s.tl.say(Actor::A, "finishes and releases the way it always does:");
    let a_del = s.on_key(Actor::A, "DEL").await?;
    s.tl.say(Actor::A, "...but that was B's lock");
    let c_set = s.set(Actor::C, "C", 5000).await?;
    let c_start = Instant::now();
    let b_still_working = c_start < b_start + b_work;
    s.tl.say(
        Actor::C,
        "gets the lock and starts its job, while B is still in the middle of its own",
    );
    tokio::time::sleep_until(b_start + b_work).await;
    let b_end = Instant::now();
    s.tl.say(Actor::B, "finishes");
    s.on_key(Actor::B, "DEL").await?;
    s.tl.say(Actor::B, "...and deletes C's lock in turn");

    let b_deleted_by_a =
        matches!(&before_del, Value::BulkString(b) if b == b"B") && int(&a_del) == 1;
    let overlap = if is_ok(&b_set) && is_ok(&c_set) && b_still_working {
        b_end.duration_since(c_start)
    } else {
        Duration::ZERO
    };
    let shown_ok = is_ok(&a_set) && b_deleted_by_a && !overlap.is_zero();
    Ok(Outcome {
        shown: shown_ok,
        verdict: format!(
            "A's DEL removed a lock holding {}; B and C both held the lock for {} ms at once: two holders",
            show(&before_del),
            overlap.as_millis()
        ),
        lesson: "release must check the token: delete only if the lock is still yours (compare-and-delete)",
        redis_commands: s.tl.redis_commands,
    })
}

/// Scene 3: a correct token lock with compare-and-delete; the holder is paused past its lease between
/// its read and its write, and the resource takes the stale write.
pub(crate) async fn token_lock_paused_holder(st: &mut Stage) -> anyhow::Result<Outcome> {
    let key = st.key(3);
    let db = st.db_path(3);
    let counter = Counter::open(&db).await?;
    let mut con = st.con.clone();
    let mut tl = Timeline::new(st.style);
    let ttl = 600u64;
    let mut a = st.spawn_worker(
        "token",
        &[
            ("key", key.clone()),
            ("db", db.display().to_string()),
            ("ttl-ms", ttl.to_string()),
            ("work-ms", "400".into()),
        ],
    )?;
    a.expect(&mut tl, "acquired", WORKER_REPORT).await?;
    a.expect(&mut tl, "read", WORKER_REPORT).await?;
    a.signal(Signal::SIGSTOP)?;
    let paused = Instant::now();
    tl.say(
        Actor::A,
        "is paused by SIGSTOP between its read and its write (a GC pause, a VM migration)",
    );
    let expired = wait_until_expired(&mut con, &key, Duration::from_secs(5)).await?;
    tl.redis(
        Actor::Observer,
        &format!("PTTL {key}"),
        if expired { "(integer) -2" } else { "still set" },
    );
    tl.say(
        Actor::Observer,
        "A's lease expired; Redis has no idea A is alive, and A has no idea it expired",
    );

    let tok_b = token();
    let b_set = send(
        &mut tl,
        Actor::B,
        &mut con,
        &format!("SET {key} {}… NX PX 5000", &tok_b[..8]),
        redis::cmd("SET")
            .arg(&key)
            .arg(&tok_b)
            .arg("NX")
            .arg("PX")
            .arg(5000),
    )
    .await?;
    let v = counter.read().await?;
    tl.sql(Actor::B, READ_SQL, &v.to_string());
    counter.write_unguarded("B", v).await?;
    tl.sql(
        Actor::B,
        &format!("UPDATE counter SET value = {} WHERE id = 1", v + 1),
        "1 row",
    );

    a.signal(Signal::SIGCONT)?;
    tl.say(
        Actor::A,
        &format!(
            "resumes after {} ms (SIGCONT), still believing it holds the lock",
            paused.elapsed().as_millis()
        ),
    );
    let status = a.finish(&mut tl, WORKER_REPORT).await?;
    anyhow::ensure!(status.success(), "worker A failed: {status}");
    let after_a = send(
        &mut tl,
        Actor::Observer,
        &mut con,
        &format!("GET {key}"),
        redis::cmd("GET").arg(&key),
    )
    .await?;
    let b_lock_survived = matches!(&after_a, Value::BulkString(b) if b == tok_b.as_bytes());
    let b_del = compare_and_delete(&mut con, &key, &tok_b).await?;
    tl.redis(
        Actor::B,
        &format!("EVAL compare_and_delete.lua 1 {key} {}…", &tok_b[..8]),
        &format!("(integer) {b_del}"),
    );

    let value = counter.read().await?;
    let committed = counter.committed_increments().await?;
    tl.sql(
        Actor::Observer,
        "SELECT value FROM counter; SELECT COUNT(*) FROM increments",
        &format!("{value}; {committed}"),
    );
    let lost = committed - value;
    let shown_ok = is_ok(&b_set) && b_lock_survived && lost >= 1;
    Ok(Outcome {
        shown: shown_ok,
        verdict: format!(
            "release was safe (B's lock survived A's compare-and-delete: {}), but {committed} increments committed and the counter says {value}: {lost} update lost",
            if b_lock_survived { "yes" } else { "no" }
        ),
        lesson: "a lease cannot survive a pause; the resource itself must refuse the stale writer",
        redis_commands: tl.redis_commands,
    })
}

/// Polls `PTTL key` until the key is gone; `false` if it is still there after `within`.
pub(crate) async fn wait_until_expired(
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
    within: Duration,
) -> anyhow::Result<bool> {
    let until = Instant::now() + within;
    loop {
        let pttl: i64 = redis::cmd("PTTL").arg(key).query_async(con).await?;
        if pttl == -2 {
            return Ok(true);
        }
        if Instant::now() > until {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
