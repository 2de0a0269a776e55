//! What a data node is, from one `INFO` (no `CONFIG` permission needed): its role (a replica is
//! refused: a lease there and one on its primary are two holders), its memory limit and eviction
//! policy (a policy that can drop lease keys is refused unless the caller opted in), and how many
//! keys it evicted so far (growth is a metric, and names the reason a lease was lost).
//!
//! Promise: asked at connect on every data node (one server, the Sentinel primary, every Cluster
//! master, every Redlock master) and again on the watchdog's slow cadence, never on the acquire
//! path. Limit: a policy changed to an evicting one between two looks is seen at the next look (a
//! few seconds); a key evicted in between is found lost at its next renewal.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use tokio::time::Instant;

use redis::aio::ConnectionLike;
use redis::RedisResult;

use crate::error::{Error, Result};

/// What `INFO` says about one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct NodeFacts {
    /// `redis_mode`: `standalone`, `cluster`, `sentinel`.
    pub(crate) mode: Option<String>,
    /// `role`: `master` or `slave`.
    pub(crate) role: String,
    /// `maxmemory` in bytes (0: no limit).
    pub(crate) maxmemory: u64,
    /// `maxmemory_policy`.
    pub(crate) policy: String,
    /// `evicted_keys` since the server started.
    pub(crate) evicted_keys: u64,
    /// `redis_version`, major and minor (`None` when the server does not say).
    pub(crate) version: Option<(u32, u32)>,
    /// `run_id`: random per server process (empty when the server does not say).
    pub(crate) run_id: String,
}

impl NodeFacts {
    /// Reads the fields of an `INFO` reply.
    pub(crate) fn parse(info: &str) -> Self {
        let mut f = NodeFacts::default();
        for line in info.lines() {
            let Some((k, v)) = line.trim().split_once(':') else {
                continue;
            };
            match k {
                "redis_mode" => f.mode = Some(v.to_owned()),
                "role" => f.role = v.to_owned(),
                "maxmemory" => f.maxmemory = v.parse().unwrap_or(0),
                "maxmemory_policy" => f.policy = v.to_owned(),
                "evicted_keys" => f.evicted_keys = v.parse().unwrap_or(0),
                "run_id" => f.run_id = v.to_owned(),
                "redis_version" => {
                    let mut parts = v.split('.').map(str::parse::<u32>);
                    if let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) {
                        f.version = Some((major, minor));
                    }
                }
                _ => {}
            }
        }
        f
    }

    /// Whether the node may drop lease keys under memory pressure: a memory limit and a policy other
    /// than `noeviction` (`allkeys-*` evicts any key; `volatile-*` evicts keys with a TTL, which every
    /// lease key has, so lease keys are its first victims).
    pub(crate) fn can_evict(&self) -> bool {
        self.maxmemory > 0 && !self.policy.is_empty() && self.policy != "noeviction"
    }

    /// Whether the node is a replica (read-only or writable).
    pub(crate) fn is_replica(&self) -> bool {
        self.role == "slave" || self.role == "replica"
    }
}

/// Asks `INFO` (the default sections: server, memory, stats, replication) and `TIME`.
///
/// # Errors
///
/// The driver's error; `NOPERM` becomes [`Error::Denied`] naming `INFO` through the caller's
/// mapping.
pub(crate) async fn facts<C: ConnectionLike>(con: &mut C) -> RedisResult<NodeFacts> {
    // `TIME` rides along: every acquisition runs it inside a script, where a denial would not name
    // it; asked here, a user without it is refused at connect naming `TIME`.
    let asked: RedisResult<(String, (String, String))> =
        redis::pipe().cmd("INFO").cmd("TIME").query_async(con).await;
    match asked {
        Ok((info, _time)) => Ok(NodeFacts::parse(&info)),
        // A sentinel answers INFO but knows no TIME: its INFO alone lets the caller say that this
        // URL names a sentinel rather than fail on the missing command.
        Err(e) if e.to_string().contains("unknown command 'TIME'") => {
            let info: String = redis::cmd("INFO").query_async(con).await?;
            Ok(NodeFacts::parse(&info))
        }
        Err(e) => Err(e),
    }
}

/// The oldest Redis the lease scripts run on: they take a free lock with `SET ... NX GET`, which
/// Redis accepts from 7.0 on.
pub(crate) const OLDEST_REDIS: (u32, u32) = (7, 0);

/// Refuses a server older than [`OLDEST_REDIS`], a replica, and an evicting node unless
/// `allow_eviction`.
///
/// # Errors
///
/// [`Error::Misconfigured`] naming the node and what to do.
pub(crate) fn check(node: &str, facts: &NodeFacts, allow_eviction: bool) -> Result<()> {
    if let Some((major, minor)) = facts.version.filter(|v| *v < OLDEST_REDIS) {
        return Err(Error::Misconfigured {
            what: format!("Redis node `{node}`"),
            found: format!(
                "it runs Redis {major}.{minor}; leasehold's lease scripts need Redis {}.{} or later (they take a free lock with SET ... NX GET)",
                OLDEST_REDIS.0, OLDEST_REDIS.1
            ),
            fix: "upgrade the server to Redis 7.0 or later".into(),
        });
    }
    if facts.is_replica() {
        return Err(replica(node));
    }
    if facts.can_evict() && !allow_eviction {
        return Err(evicting(node, facts));
    }
    Ok(())
}

/// The error for a data node that is a replica.
pub(crate) fn replica(node: &str) -> Error {
    Error::Misconfigured {
        what: format!("Redis node `{node}`"),
        found: "it is a replica (INFO replication says role:slave); a lease taken on a replica and one taken on its primary would be two holders of one name".into(),
        fix: "point the URL at the primary, or use redis-sentinel://...#<master> so that leasehold finds the primary and follows it across failovers".into(),
    }
}

/// The error for a node that can evict lease keys.
pub(crate) fn evicting(node: &str, facts: &NodeFacts) -> Error {
    Error::Misconfigured {
        what: format!("Redis node `{node}`"),
        found: format!(
            "maxmemory is {} bytes with maxmemory-policy {}, so memory pressure can evict a lease key and give the name a second holder while the first still works",
            facts.maxmemory, facts.policy
        ),
        fix: "set `maxmemory-policy noeviction` on a Redis kept for coordination, or opt in knowingly with --allow-eviction (LeaseClientBuilder::store_options(RedisOptions::default().allow_eviction(true))): a lease whose key is evicted is then reported lost (LostReason::Evicted) at its next renewal".into(),
    }
}

/// What the store keeps knowing about its data nodes between looks.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    /// The evicted keys counted on every node at the last look (summed).
    evicted: AtomicU64,
    /// Whether the last look found a node that can evict (with the opt-in).
    evicting: AtomicBool,
    /// Whether the opt-in warning was logged (once per store).
    warned: AtomicBool,
    /// The last look's verdict when it refused (a replica, or eviction without the opt-in).
    refused: Mutex<Option<Error>>,
    /// When a look last saw the evicted keys grow.
    grew_at: Mutex<Option<Instant>>,
}

impl Watch {
    /// Takes a look at all data nodes (`(node, facts)`) and returns how many keys they evicted since
    /// the last look. Logs the opt-in warning once, and a refusal every time it is found.
    pub(crate) fn observe(&self, looked: &[(String, NodeFacts)], allow_eviction: bool) -> u64 {
        let total: u64 = looked.iter().map(|(_, f)| f.evicted_keys).sum();
        let before = self.evicted.swap(total, Ordering::Relaxed);
        let any_evicting = looked.iter().any(|(_, f)| f.can_evict());
        self.evicting.store(any_evicting, Ordering::Relaxed);
        let mut refused = None;
        for (node, f) in looked {
            // A role seen changing at run time is a failover, which the topology follows (a write to
            // a demoted node is refused READONLY): only the connect refuses a replica.
            if f.can_evict() && !allow_eviction {
                let e = evicting(node, f);
                refused = Some(e);
            } else if f.can_evict() && !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(node = %node, policy = %f.policy, maxmemory = f.maxmemory, "this Redis may evict lease keys (allowed by allow_eviction): a lease whose key is evicted is lost at its next renewal, and the name may have had two holders until then");
            }
        }
        if let Some(why) = &refused {
            tracing::error!(error = %why, "a Redis data node is not fit for leases; new acquisitions are refused until it is fixed");
        }
        *self.refused.lock().expect("watch lock") = refused;
        // A node restarted (its counter began again) counts what it evicted since.
        let grew = if total >= before {
            total - before
        } else {
            total
        };
        if grew > 0 {
            *self.grew_at.lock().expect("watch lock") = Some(Instant::now());
        }
        grew
    }

    /// Whether a look since `since` saw evicted keys grow.
    pub(crate) fn evicted_since(&self, since: Instant) -> bool {
        self.grew_at
            .lock()
            .expect("watch lock")
            .is_some_and(|at| at >= since)
    }

    /// The refusal the last look found (a node became a replica, or started evicting without the
    /// opt-in): acquisitions are refused with it. No I/O.
    pub(crate) fn refusal(&self) -> Option<Error> {
        self.refused
            .lock()
            .expect("watch lock")
            .as_ref()
            .map(|e| match e {
                Error::Misconfigured { what, found, fix } => Error::Misconfigured {
                    what: what.clone(),
                    found: found.clone(),
                    fix: fix.clone(),
                },
                other => Error::invalid("redis data node", other.to_string()),
            })
    }

    /// Whether the last look saw a node that can evict.
    pub(crate) fn evicting(&self) -> bool {
        self.evicting.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn info_says_role_and_policy() {
        let f = NodeFacts::parse(
            "# Server\r\nredis_mode:standalone\r\nrun_id:5f2c\r\n# Memory\r\nmaxmemory:1048576\r\nmaxmemory_policy:volatile-lru\r\n# Stats\r\nevicted_keys:7\r\n# Replication\r\nrole:master\r\n",
        );
        assert_eq!(f.mode.as_deref(), Some("standalone"));
        assert!(f.can_evict() && !f.is_replica());
        assert_eq!(f.evicted_keys, 7);
        assert_eq!(f.run_id, "5f2c", "Redlock tells masters apart by it");
        let e = check("redis://h:1", &f, false).unwrap_err().to_string();
        assert!(
            e.contains("volatile-lru")
                && e.contains("noeviction")
                && e.contains("--allow-eviction"),
            "{e}"
        );
        assert!(check("redis://h:1", &f, true).is_ok());
        let f = NodeFacts::parse("maxmemory:0\r\nmaxmemory_policy:allkeys-lru\r\nrole:slave\r\n");
        assert!(!f.can_evict() && f.is_replica());
        let e = check("redis://h:1", &f, true).unwrap_err().to_string();
        assert!(
            e.contains("replica") && e.contains("redis-sentinel://"),
            "{e}"
        );
        let f = NodeFacts::parse("maxmemory:100\r\nmaxmemory_policy:noeviction\r\nrole:master\r\n");
        assert!(!f.can_evict());
    }

    #[test]
    fn a_server_older_than_redis_7_is_refused_naming_its_version() {
        let old = NodeFacts::parse("# Server\r\nredis_version:6.2.14\r\nrole:master\r\n");
        assert_eq!(old.version, Some((6, 2)));
        let e = check("redis://h:1", &old, true).unwrap_err().to_string();
        assert!(e.contains("6.2") && e.contains("7.0 or later"), "{e}");
        for ok in [
            "redis_version:7.0.15",
            "redis_version:7.4.1",
            "redis_version:8.0.0",
            "role:master",
        ] {
            let f = NodeFacts::parse(ok);
            assert!(check("redis://h:1", &f, false).is_ok(), "{ok}");
        }
    }
}
