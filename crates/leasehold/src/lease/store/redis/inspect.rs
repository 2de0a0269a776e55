//! Reading the Redis store without touching it: `status` (inspect) and `list`.
//!
//! Promise: nothing is written (every read, and the check for keys leasehold did not write, is a
//! plain read or a read-only script); `status` gives each name asked its holder or live permits
//! (told from expired ones by the server's time, not this client's), its last fence and queue
//! length, and marks a name whose keys leasehold did not write with a problem instead of guessing;
//! `list` uses `SCAN` (never `KEYS`) on every master and matches names in the client.
//!
//! Limit: a read is a snapshot, and not an atomic one: a name's reads are pipelined, not a
//! transaction, so another client's command may fall between them; `SCAN` may miss a name that
//! appears or goes while it runs; a holder may change right after it. A name appears in `list`
//! only while one of its keys exists (its fence key lasts the retention).

use std::collections::BTreeSet;

use super::errors::within;
use super::keys::{glob_escape, LeaseKeys};
use super::{scripts, RedisStore};
use crate::error::{Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::{HolderInfo, LeaseInfo};
use crate::lease::Glob;

impl RedisStore {
    /// Reads each name's lock, fence, queue length and semaphore holders in one pipeline per 200
    /// names (with the server's time, to tell live permits from expired ones). Only reads.
    /// Splits `names` into the healthy ones and an entry for each with a key leasehold did not
    /// write (check.lua, read-only, one pipeline).
    async fn sort_out_foreign<'n>(
        &self,
        names: &[&'n str],
    ) -> Result<(Vec<&'n str>, Vec<LeaseInfo>)> {
        let invs: Vec<_> = names
            .iter()
            .map(|n| scripts::check(&self.lock_key(n)))
            .collect();
        let mut con = self.shared.clone();
        let replies = within(
            Phase::Inspect,
            self.limit(),
            scripts::pipeline(&mut con, invs, None),
        )
        .await?;
        let (mut healthy, mut bad) = (Vec::new(), Vec::new());
        for (name, reply) in names.iter().zip(replies) {
            match reply
                .and_then(scripts::foreign_of)
                .map_err(super::errors::redis_error(Phase::Inspect))?
            {
                None => healthy.push(*name),
                Some((key, found)) => {
                    let mut info = LeaseInfo::free(name, self.lock_key(name));
                    info.problem = Some(super::errors::foreign_key(&key, &found).to_string());
                    bad.push(info);
                }
            }
        }
        Ok((healthy, bad))
    }

    pub(super) async fn inspect_keys(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        let mut out = Vec::with_capacity(names.len());
        let bad = |e: redis::RedisError| super::errors::redis_error(Phase::Inspect)(e);
        for chunk in names.chunks(200) {
            let (chunk, foreign) = self.sort_out_foreign(chunk).await?;
            out.extend(foreign);
            let keys: Vec<LeaseKeys> = chunk.iter().map(|n| self.keys(n)).collect();
            let pipe = read_pipeline(&keys);
            let mut con = self.shared.clone();
            let values: Vec<redis::Value> =
                within(Phase::Inspect, self.limit(), pipe.query_async(&mut con)).await?;
            if values.len() != 1 + PER_NAME * keys.len() {
                return Err(bad(scripts::bad_reply("inspect", "short pipeline reply")));
            }
            let mut it = values.into_iter();
            let (secs, micros): (i64, i64) =
                redis::from_redis_value(it.next().unwrap_or(redis::Value::Nil))
                    .map_err(|e| bad(e.into()))?;
            let now_ms = secs * 1000 + micros / 1000;
            for (name, keys) in chunk.iter().zip(keys) {
                let mut next = || it.next().unwrap_or(redis::Value::Nil);
                let info = read_one(name, keys.lock, now_ms, &mut next).map_err(bad)?;
                out.push(info);
            }
        }
        // In the order asked (the names with foreign keys were set aside first).
        let order: std::collections::HashMap<&str, usize> =
            names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        out.sort_by_key(|i| order.get(i.name.as_str()).copied());
        Ok(out)
    }

    /// `SCAN`, never `KEYS`, on every master of a cluster. A name appears once it has been acquired
    /// (while its fence key lasts) or while someone holds it (its lock key, or a semaphore's holders).
    pub(super) async fn list_names(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        let tag_start = format!("{{{}:", self.prefix);
        // Every key under the prefix: the pattern is matched here ([`Glob`], the matcher of every
        // store), not by the server's glob.
        let matcher = format!("{}*", glob_escape(&tag_start));
        let glob = Glob::new(pattern);
        let mut names = BTreeSet::new();
        // A cluster keeps each name on the master of its slot: scan every master.
        let masters = within(Phase::Inspect, self.limit(), self.shared.masters()).await?;
        for mut con in masters {
            let mut cursor: u64 = 0;
            loop {
                let mut cmd = redis::cmd("SCAN");
                cmd.arg(cursor)
                    .arg("MATCH")
                    .arg(&matcher)
                    .arg("COUNT")
                    .arg(1000);
                let (next, keys): (u64, Vec<String>) =
                    within(Phase::Inspect, self.limit(), cmd.query_async(&mut con)).await?;
                for key in keys {
                    let Some(rest) = key.strip_prefix(&tag_start) else {
                        continue;
                    };
                    let name = rest
                        .strip_suffix("}:lock")
                        .or_else(|| rest.strip_suffix("}:fence"))
                        .or_else(|| rest.strip_suffix("}:holders"))
                        .or_else(|| rest.strip_suffix("}:queue"))
                        .or_else(|| rest.strip_suffix("}:permits"));
                    if let Some(name) = name.filter(|n| {
                        glob.matches(n) && crate::lease::names::validate_name(n).is_ok()
                    }) {
                        names.insert(name.to_owned());
                    }
                }
                cursor = next;
                if cursor == 0 {
                    break;
                }
            }
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.inspect_keys(&names).await
    }
}

/// Commands per name in the inspect pipeline ([`read_pipeline`]).
const PER_NAME: usize = 7;

/// `TIME`, then the [`PER_NAME`] reads of each name's keys, as one pipeline.
fn read_pipeline(keys: &[LeaseKeys]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME");
    for k in keys {
        pipe.cmd("PTTL")
            .arg(&k.lock)
            .cmd("GET")
            .arg(&k.lock)
            .cmd("GET")
            .arg(&k.fence)
            .cmd("ZCARD")
            .arg(&k.queue)
            .cmd("GET")
            .arg(&k.permits)
            .cmd("ZRANGE")
            .arg(&k.holders)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .cmd("HGETALL")
            .arg(&k.held);
    }
    pipe
}

/// One name's lease from its [`PER_NAME`] replies (`next` yields them in order), read against the
/// server's time `now_ms`: a lock's holder, or a semaphore's live permits.
fn read_one(
    name: &str,
    lock: String,
    now_ms: i64,
    next: &mut dyn FnMut() -> redis::Value,
) -> redis::RedisResult<LeaseInfo> {
    let pttl: i64 = redis::from_redis_value(next())?;
    let token: Option<String> = redis::from_redis_value(next())?;
    let fence: Option<String> = redis::from_redis_value(next())?;
    let waiting: u64 = redis::from_redis_value(next())?;
    let permits: Option<u32> = redis::from_redis_value(next())?;
    let by_expiry: Vec<(String, f64)> = redis::from_redis_value(next())?;
    let fences: std::collections::HashMap<String, u64> = redis::from_redis_value(next())?;
    let mut info = LeaseInfo::free(name, lock);
    // The record (scripts/names.lua) begins with the fence; a bare number is a fence too.
    info.fence = fence.and_then(|f| f.split(':').next()?.parse().ok());
    info.waiting = waiting;
    match (token, permits) {
        (Some(token), _) => {
            // `<token>:q` while waiters are queued behind the holder.
            let token = token.strip_suffix(":q").map(str::to_owned).unwrap_or(token);
            info.ttl_ms = u64::try_from(pttl).ok();
            info.holders.push(HolderInfo {
                token,
                ttl_ms: info.ttl_ms,
                fence: None,
            });
        }
        (None, Some(n)) if n > 1 => {
            info.permits = n;
            info.holders = by_expiry
                .into_iter()
                .map(|(token, until)| (token, until as i64))
                .filter(|(_, until)| *until > now_ms)
                .map(|(token, until)| HolderInfo {
                    fence: fences.get(&token).copied().map(Fence::new),
                    ttl_ms: u64::try_from(until - now_ms).ok(),
                    token,
                })
                .collect();
            info.ttl_ms = info.holders.first().and_then(|h| h.ttl_ms);
        }
        (None, _) => {}
    }
    info.held = !info.holders.is_empty();
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn glob_metacharacters_in_the_prefix_are_literal() {
        assert_eq!(glob_escape("{a*b?[c]}"), "{a\\*b\\?\\[c\\]}");
    }
}
