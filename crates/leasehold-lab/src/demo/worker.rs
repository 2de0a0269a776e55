//! The demo's worker processes (`leasehold __demo-worker`, roles `setnx` and `token`; `mod.rs` picks
//! the role): the holder that gets crashed (SIGKILL) or paused (SIGSTOP/SIGCONT) for real. Promise: it
//! reports every command it sends, one line each on stdout: `CMD <command>\t<reply>`,
//! `SQL <statement>\t<outcome>`, `SAY <text>`, and cues for the demo as `EVENT <word> [value]`.
//! Limit: its report is narrative only; verdicts come from the data.

use std::time::Duration;

use redis::AsyncCommands as _;

use super::resource::{Counter, READ_SQL};
use super::WorkerArgs;

fn cmd(c: &str, reply: impl std::fmt::Display) {
    println!("CMD {c}\t{reply}");
}
fn sql(s: &str, outcome: impl std::fmt::Display) {
    println!("SQL {s}\t{outcome}");
}
fn say(s: &str) {
    println!("SAY {s}");
}
fn event(s: &str) {
    println!("EVENT {s}");
}

/// A fresh 128-bit random token, as a careful lock uses.
pub(crate) fn token() -> String {
    format!("{:032x}", rand::random::<u128>())
}

async fn connect(url: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    Ok(redis::Client::open(url)?
        .get_multiplexed_async_connection()
        .await?)
}

/// Scene 1: takes the lock with SETNX (no TTL) and works until it is killed.
pub(crate) async fn setnx_holder(args: WorkerArgs) -> anyhow::Result<i32> {
    let mut con = connect(&args.redis).await?;
    let got: bool = con.set_nx(&args.key, "A").await?;
    cmd(
        &format!("SETNX {} A", args.key),
        if got { "(integer) 1" } else { "(integer) 0" },
    );
    if !got {
        event("busy");
        return Ok(1);
    }
    event("acquired");
    say("holds the lock, working...");
    tokio::time::sleep(Duration::from_millis(args.work_ms)).await;
    let _: i64 = con.del(&args.key).await?;
    cmd(&format!("DEL {}", args.key), "(integer) 1");
    event("done");
    Ok(0)
}

/// Scene 3: token lock (SET NX PX) and compare-and-delete release, read-modify-write on the counter
/// with no fence; the demo pauses it between the read and the write.
pub(crate) async fn token_holder(args: WorkerArgs) -> anyhow::Result<i32> {
    let db = args
        .db
        .as_deref()
        .ok_or_else(|| anyhow::anyhow!("--db is required"))?;
    let counter = Counter::open(db).await?;
    let mut con = connect(&args.redis).await?;
    let tok = token();
    let ok: Option<String> = redis::cmd("SET")
        .arg(&args.key)
        .arg(&tok)
        .arg("NX")
        .arg("PX")
        .arg(args.ttl_ms)
        .query_async(&mut con)
        .await?;
    cmd(
        &format!("SET {} {}… NX PX {}", args.key, &tok[..8], args.ttl_ms),
        ok.as_deref().unwrap_or("(nil)"),
    );
    if ok.is_none() {
        event("busy");
        return Ok(1);
    }
    event(&format!("acquired {tok}"));
    let v = counter.read().await?;
    sql(READ_SQL, v);
    event(&format!("read {v}"));
    // The work between read and write; the demo's SIGSTOP lands here.
    tokio::time::sleep(Duration::from_millis(args.work_ms)).await;
    counter.write_unguarded("A", v).await?;
    sql(
        &format!("UPDATE counter SET value = {} WHERE id = 1", v + 1),
        "1 row (nothing at the resource checks the lock)",
    );
    let deleted: i64 = compare_and_delete(&mut con, &args.key, &tok).await?;
    cmd(
        &format!("EVAL compare_and_delete.lua 1 {} {}…", args.key, &tok[..8]),
        if deleted == 1 {
            "(integer) 1".to_owned()
        } else {
            "(integer) 0: not ours any more, the other holder's lock is left alone".to_owned()
        },
    );
    event(&format!("released {deleted}"));
    Ok(0)
}

/// Compare-and-delete (its own `.lua` file): deletes `key` only if it holds `token`.
pub(crate) async fn compare_and_delete(
    con: &mut redis::aio::MultiplexedConnection,
    key: &str,
    token: &str,
) -> redis::RedisResult<i64> {
    static SCRIPT: std::sync::LazyLock<redis::Script> =
        std::sync::LazyLock::new(|| redis::Script::new(include_str!("compare_and_delete.lua")));
    SCRIPT.key(key).arg(token).invoke_async(con).await
}
