//! `eviction`: memory pressure on an evicting Redis, the cache a team put its locks on. Before the
//! target takes its lock the server is set to `maxmemory-policy allkeys-lru` with `maxmemory` a
//! little above what it holds; while the target holds its lock the fault writes filler keys (1 KiB
//! each) until the server has evicted the lock key (or the fault window ends), then waits out the
//! window, deletes its fillers and sets the server back to `noeviction` without a limit. The lease
//! strategies' workers connect with `allow_eviction(true)` (leasehold refuses such a server
//! otherwise), so the cell measures what the opt-in accepts: a lease whose key vanished.
//!
//! Limit: one server the harness runs (not Redlock, not a Redis given with `--redis`); whether the
//! lock key goes first is the server's approximate LRU's choice, so the fault keeps writing until it
//! has gone, and the note of a cell says how often it did.

use anyhow::Context as _;
use leasehold_testkit::RedisServer;
use tokio::time::Instant;

use super::super::cell::Cell;
use super::super::worker::lock_key;

/// Prefix of the filler keys: outside every key a strategy uses.
const FILLER: &str = "verify-eviction-filler:";

/// Fillers written per round trip.
const PER_ROUND: usize = 100;

/// How far above the server's memory use the limit is set: a few rounds of fillers.
const HEADROOM: u64 = 256 * 1024;

fn primary<'c>(cell: &'c mut Cell<'_>) -> anyhow::Result<&'c RedisServer> {
    cell.redis()?
        .primary
        .as_ref()
        .context("an eviction needs a Redis the harness runs")
}

/// Sets the server to evict (`allkeys-lru`) at a limit a little above its memory use.
pub(super) fn arm(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let server = primary(cell)?;
    tokio::task::block_in_place(|| {
        let mut con = server.connection()?;
        let info: String = redis::cmd("INFO").arg("memory").query(&mut con)?;
        let used = info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .context("INFO memory without used_memory")?;
        redis::pipe()
            .cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory-policy")
            .arg("allkeys-lru")
            .ignore()
            .cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(used + HEADROOM)
            .ignore()
            .query::<()>(&mut con)?;
        Ok(())
    })
}

/// Sets the server back to `noeviction` without a limit (no target was found, or the window ended).
pub(super) fn disarm(cell: &mut Cell<'_>) {
    if let Ok(server) = primary(cell) {
        let _ = tokio::task::block_in_place(|| restore(server));
    }
}

fn restore(server: &RedisServer) -> anyhow::Result<()> {
    let mut con = server.connection()?;
    // The fillers first, so that the server is under its limit when the limit goes.
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{FILLER}*"))
            .arg("COUNT")
            .arg(1_000)
            .query(&mut con)?;
        if !keys.is_empty() {
            redis::cmd("UNLINK").arg(&keys).query::<()>(&mut con)?;
        }
        if next == 0 {
            break;
        }
        cursor = next;
    }
    redis::pipe()
        .cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(0)
        .ignore()
        .cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .ignore()
        .query::<()>(&mut con)?;
    Ok(())
}

/// Writes fillers until the lock key is evicted or `until`; whether it was, and how many fillers.
fn press(server: &RedisServer, lock: Option<&str>, until: Instant) -> anyhow::Result<(bool, u64)> {
    let mut con = server.connection()?;
    let value = vec![b'x'; 1024];
    let mut n = 0u64;
    while Instant::now() < until {
        let mut pipe = redis::pipe();
        for _ in 0..PER_ROUND {
            pipe.cmd("SET")
                .arg(format!("{FILLER}{n}"))
                .arg(&value)
                .ignore();
            n += 1;
        }
        pipe.query::<()>(&mut con)?;
        if let Some(lock) = lock {
            // OBJECT IDLETIME does not touch the key (a GET would make it look recently used).
            let idle: Option<i64> = redis::cmd("OBJECT")
                .arg("IDLETIME")
                .arg(lock)
                .query(&mut con)?;
            if idle.is_none() {
                return Ok((true, n));
            }
        }
    }
    Ok((false, n))
}

/// Presses the server's memory until the holder's lock key is evicted, waits out the fault window,
/// then sets the server back.
pub(super) async fn inject(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let hold = cell.timing.hold;
    let started = Instant::now();
    let lock = lock_key(cell.spec.strategy, cell.spec.key);
    let server = primary(cell)?;
    let (evicted, fillers) =
        tokio::task::block_in_place(|| press(server, lock.as_deref(), started + hold))?;
    tokio::time::sleep_until(started + hold).await;
    let server = primary(cell)?;
    tokio::task::block_in_place(|| restore(server))?;
    if evicted {
        cell.evicted_locks += 1;
    }
    cell.fillers += fillers;
    Ok(())
}
