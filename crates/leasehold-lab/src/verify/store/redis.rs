//! Redis as a cell runs on it: one private server (or the user's) behind one proxy per worker
//! slot, Redlock's three masters behind one proxy per worker and master, a Sentinel set, or a
//! Cluster; started per cell, in the deployment the cell's fault needs ([`Want`]).
//!
//! One server and Redlock's masters are reached through the proxies, so a network fault can hit one
//! worker's link. Limit: the Sentinel set and the Cluster are reached directly (their clients learn
//! the nodes' real addresses from the sentinels or the cluster, which a proxy in front cannot
//! rewrite); their faults act on the servers, not on one worker's link. The lock key is looked at
//! from outside (`GET`, `PTTL`), which is how the harness tells a lock that will never expire from
//! one that is merely held; it cannot see a lock's history.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use leasehold_testkit::{Proxy, RedisCluster, RedisServer, SentinelSet};

/// The Redis deployment a fault runs on, for the strategies on one Redis (Redlock strategies always
/// run on their three masters).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Deployment {
    /// One server (with a replica for `failover`).
    #[default]
    Standalone,
    /// A primary and a replica under three sentinels.
    Sentinel,
    /// A Redis Cluster of three masters with a replica each.
    Cluster,
}

/// What a cell's Redis must offer, from its strategy and its fault.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Want {
    /// Redlock's three masters (else one deployment).
    pub(crate) redlock: bool,
    /// The deployment, for the strategies on one Redis.
    pub(crate) deployment: Deployment,
    /// A replica behind a replication link the harness can cut.
    pub(crate) replica: bool,
    /// The primary (for Redlock: one master) runs under a fake wall clock (libfaketime).
    pub(crate) fake_clock: bool,
    /// Worker slots, one proxy each.
    pub(crate) workers: u32,
}

/// Splits a Redis URL into (before host, host:port, after) so the host can be swapped for a proxy.
pub(crate) fn split_redis_url(url: &str) -> anyhow::Result<(String, String, String)> {
    let (scheme, rest) = url
        .split_once("://")
        .with_context(|| format!("--redis {url:?}: expected redis://[user:pass@]host:port[/db]"))?;
    let (auth, hostpart) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let (hostport, tail) = match hostpart.find('/') {
        Some(i) => (&hostpart[..i], &hostpart[i..]),
        None => (hostpart, ""),
    };
    let hostport = if hostport.contains(':') {
        hostport.to_owned()
    } else {
        format!("{hostport}:6379")
    };
    Ok((format!("{scheme}://{auth}"), hostport, tail.to_owned()))
}

/// The Redis deployment of one cell.
#[derive(Debug)]
pub(crate) enum Servers {
    /// One server (or the user's), behind one proxy per worker slot.
    One(Box<RedisSetup>),
    /// Redlock's three independent masters, each behind one proxy per worker slot.
    Redlock(RedlockSetup),
    /// A primary and its replica under three sentinels, reached directly.
    Sentinel(SentinelSetup),
    /// A Redis Cluster (three masters, a replica each), reached directly.
    Cluster(ClusterSetup),
}

impl Servers {
    /// Starts what `want` asks for; `user_redis` is the user's server (`--redis`), used instead of
    /// a private one where one server is asked for.
    pub(crate) async fn start(want: Want, user_redis: Option<&str>) -> anyhow::Result<Self> {
        if want.redlock {
            return Ok(Self::Redlock(RedlockSetup::start(want).await?));
        }
        Ok(match want.deployment {
            Deployment::Standalone => {
                Self::One(Box::new(RedisSetup::start(want, user_redis).await?))
            }
            Deployment::Sentinel => Self::Sentinel(SentinelSetup {
                set: tokio::task::spawn_blocking(SentinelSet::start).await??,
                failing: None,
                down: None,
            }),
            Deployment::Cluster => Self::Cluster(ClusterSetup {
                cluster: tokio::task::spawn_blocking(RedisCluster::start).await??,
                isolated: None,
                down: None,
            }),
        })
    }

    /// The URLs worker `slot` connects with (one per master for Redlock).
    pub(crate) fn urls(&self, slot: u32) -> Vec<String> {
        match self {
            Self::One(r) => vec![r.url(slot)],
            Self::Redlock(r) => r.links[slot as usize]
                .iter()
                .map(|p| format!("redis://{}/", p.addr()))
                .collect(),
            Self::Sentinel(s) => vec![s.set.sentinel_url()],
            Self::Cluster(c) => vec![c.cluster.seed_url()],
        }
    }

    /// The token of a lock in `lock_key` that will never expire (see
    /// [`RedisSetup::lock_without_expiry`]). Only the hand-made locks can leave one, and they run
    /// on one server only: leases always carry their TTL in the same script that takes them.
    pub(crate) async fn lock_without_expiry(&self, lock_key: &str) -> Option<String> {
        match self {
            Self::One(r) => r.lock_without_expiry(lock_key).await,
            _ => None,
        }
    }
}

/// Redlock's three masters for one cell.
#[derive(Debug)]
pub(crate) struct RedlockSetup {
    /// The masters. Master [`JUMPING_MASTER`] runs under a fake wall clock in a clock-jump cell.
    pub(crate) masters: Vec<RedisServer>,
    /// `links[slot][m]`: worker `slot`'s way to master `m`, so that a fault can cut one worker off
    /// one master (the bare majority of the clock-jump schedule) or off all three.
    pub(crate) links: Vec<Vec<Proxy>>,
}

/// The master whose clock jumps in a Redlock clock-jump cell.
pub(crate) const JUMPING_MASTER: usize = 1;
/// The master the holder is cut off from during its acquire in a Redlock clock-jump cell, so that
/// it holds the lease on the bare majority {0, [`JUMPING_MASTER`]}.
pub(crate) const CUT_MASTER: usize = 2;

impl RedlockSetup {
    async fn start(want: Want) -> anyhow::Result<Self> {
        let fake_clock = want.fake_clock;
        let mut masters = Vec::new();
        for m in 0..3 {
            let jumping = fake_clock && m == JUMPING_MASTER;
            masters.push(
                tokio::task::spawn_blocking(move || {
                    let b = server_builder();
                    if jumping {
                        b.fake_clock().start()
                    } else {
                        b.start()
                    }
                })
                .await??,
            );
        }
        let mut links = Vec::new();
        for _ in 0..want.workers {
            let mut of_slot = Vec::new();
            for m in &masters {
                of_slot.push(Proxy::start(([127, 0, 0, 1], m.port()).into()).await?);
            }
            links.push(of_slot);
        }
        Ok(Self { masters, links })
    }

    /// On how many masters the lock in `lock_key` holds the token most of them hold (the holder's,
    /// when one holds a majority), looked at directly; a master that does not answer counts as not
    /// holding it.
    pub(crate) async fn held_on(&self, lock_key: &str) -> usize {
        let mut seen: Vec<String> = Vec::new();
        for m in &self.masters {
            let look = async {
                let client = redis::Client::open(m.url()).ok()?;
                let config = redis::AsyncConnectionConfig::new()
                    .set_connection_timeout(Some(Duration::from_millis(300)))
                    .set_response_timeout(Some(Duration::from_millis(300)));
                let mut con = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .ok()?;
                redis::cmd("GET")
                    .arg(lock_key)
                    .query_async::<Option<String>>(&mut con)
                    .await
                    .ok()?
            };
            if let Some(token) = look.await {
                seen.push(token);
            }
        }
        seen.iter()
            .map(|t| seen.iter().filter(|u| *u == t).count())
            .max()
            .unwrap_or(0)
    }
}

/// A Sentinel-managed primary for one cell, and where its lossy failover stands.
#[derive(Debug)]
pub(crate) struct SentinelSetup {
    pub(crate) set: SentinelSet,
    /// The primary whose replica was isolated by the last arming, to be killed by the injection.
    pub(crate) failing: Option<usize>,
    /// The node killed by the last failover, to be restarted as a replica before the next one.
    pub(crate) down: Option<usize>,
}

/// A Redis Cluster for one cell, and where its lossy failover stands.
#[derive(Debug)]
pub(crate) struct ClusterSetup {
    pub(crate) cluster: RedisCluster,
    /// (master, replica) of the lease's slot, the replica paused and its link closed by the last
    /// arming.
    pub(crate) isolated: Option<(usize, usize)>,
    /// The node killed by the last failover, to be restarted (it rejoins as a replica).
    pub(crate) down: Option<usize>,
}

/// Redis for one cell: the server(s) and one proxy per worker slot.
#[derive(Debug)]
pub(crate) struct RedisSetup {
    /// The server the workers' proxies lead to (`None` with the user's Redis, and for a moment
    /// during a failover).
    pub(crate) primary: Option<RedisServer>,
    /// A replica of the primary, reached through `replication`, ready for the next failover.
    pub(crate) replica: Option<RedisServer>,
    /// The replication link, as a proxy the harness can cut.
    pub(crate) replication: Option<Proxy>,
    /// One proxy per worker slot, so a network fault can hit one worker.
    pub(crate) proxies: Vec<Proxy>,
    /// The user's Redis URL (`--redis`), looked at directly.
    user_url: Option<String>,
    url_head: String,
    url_tail: String,
}

impl RedisSetup {
    async fn start(want: Want, user_redis: Option<&str>) -> anyhow::Result<Self> {
        let mut setup = match user_redis {
            Some(url) => {
                let (head, hostport, tail) = split_redis_url(url)?;
                let addr = tokio::net::lookup_host(hostport.as_str())
                    .await
                    .with_context(|| format!("cannot resolve the Redis host {hostport}"))?
                    .next()
                    .with_context(|| format!("no address for the Redis host {hostport}"))?;
                Self::with_proxies(want, addr, None, Some(url.to_owned()), head, tail).await?
            }
            None => {
                let fake_clock = want.fake_clock;
                let primary = tokio::task::spawn_blocking(move || {
                    let mut b = server_builder();
                    if fake_clock {
                        b = b.fake_clock();
                    }
                    b.start()
                })
                .await??;
                let upstream: SocketAddr = ([127, 0, 0, 1], primary.port()).into();
                let head = "redis://".to_owned();
                Self::with_proxies(want, upstream, Some(primary), None, head, "/".into()).await?
            }
        };
        if want.replica {
            setup.ensure_replica().await?;
        }
        Ok(setup)
    }

    async fn with_proxies(
        want: Want,
        upstream: SocketAddr,
        primary: Option<RedisServer>,
        user_url: Option<String>,
        url_head: String,
        url_tail: String,
    ) -> anyhow::Result<Self> {
        let mut proxies = Vec::new();
        for _ in 0..want.workers {
            proxies.push(Proxy::start(upstream).await?);
        }
        Ok(Self {
            primary,
            replica: None,
            replication: None,
            proxies,
            user_url,
            url_head,
            url_tail,
        })
    }

    /// The URL worker `slot` connects to (its own proxy).
    pub(crate) fn url(&self, slot: u32) -> String {
        format!(
            "{}{}{}",
            self.url_head,
            self.proxies[slot as usize].addr(),
            self.url_tail
        )
    }

    /// Starts a replica of the primary behind a fresh replication proxy, unless one is there, and
    /// waits until it has synced: after a failover the promoted server gets a replica of its own, so
    /// the next failover has somewhere to go.
    pub(crate) async fn ensure_replica(&mut self) -> anyhow::Result<()> {
        if self.replica.is_some() {
            return Ok(());
        }
        let primary = self
            .primary
            .as_ref()
            .context("a failover needs a Redis the harness runs")?;
        let replication = Proxy::start(([127, 0, 0, 1], primary.port()).into()).await?;
        let port = replication.port();
        let replica =
            tokio::task::spawn_blocking(move || server_builder().replica_of(port).start())
                .await??;
        // Waited for here, not on the blocking thread, so an interrupted run drops (and stops) the
        // replica at once.
        wait_until_synced(&primary.url(), &replica.url()).await?;
        self.replica = Some(replica);
        self.replication = Some(replication);
        Ok(())
    }

    /// Cuts the replication link: from now on the primary's writes do not reach the replica.
    pub(crate) fn cut_replication(&self) {
        if let Some(p) = &self.replication {
            p.cut();
        }
    }

    /// Kills the primary, promotes the replica and switches every worker's proxy to it, closing
    /// their connections (clients reconnect, to the new primary).
    pub(crate) async fn fail_over(&mut self) -> anyhow::Result<()> {
        if let Some(mut old) = self.primary.take() {
            tokio::task::spawn_blocking(move || old.kill()).await??;
        }
        let mut replica = self.replica.take().context("no replica to fail over to")?;
        let port = replica.port();
        let promoted =
            tokio::task::spawn_blocking(move || replica.promote().map(|_| replica)).await??;
        self.replication = None;
        self.primary = Some(promoted);
        for p in &self.proxies {
            p.set_upstream(([127, 0, 0, 1], port).into());
            p.reset_connections();
        }
        Ok(())
    }

    /// The Redis the workers' proxies lead to, for the harness's own look.
    fn direct_url(&self) -> Option<String> {
        self.user_url
            .clone()
            .or_else(|| self.primary.as_ref().map(|p| p.url()))
    }

    /// The token of a lock in `lock_key` that will never expire: the same holder's token with no
    /// TTL at two looks 100 ms apart. A live naive holder sets its expiry one round trip after
    /// taking the lock, so one look alone could catch that instant; the same token twice cannot.
    pub(crate) async fn lock_without_expiry(&self, lock_key: &str) -> Option<String> {
        let url = self.direct_url()?;
        let look = || async {
            let client = redis::Client::open(url.as_str()).ok()?;
            let config = redis::AsyncConnectionConfig::new()
                .set_connection_timeout(Some(Duration::from_secs(1)))
                .set_response_timeout(Some(Duration::from_secs(1)));
            let mut con = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .ok()?;
            let (token, pttl): (Option<String>, i64) = redis::pipe()
                .cmd("GET")
                .arg(lock_key)
                .cmd("PTTL")
                .arg(lock_key)
                .query_async(&mut con)
                .await
                .ok()?;
            token.filter(|_| pttl == -1)
        };
        let first = look().await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
        look().await.filter(|second| *second == first)
    }
}

/// A private server as the harness runs it. A diskless full sync starts at once instead of after
/// the default 5 s wait for more replicas, so that arming a failover takes milliseconds.
fn server_builder() -> leasehold_testkit::RedisServerBuilder {
    RedisServer::builder()
        .arg("--repl-diskless-sync-delay")
        .arg("0")
}

/// Waits until the replica has loaded the primary's snapshot *and* received the writes made while
/// it was taken. `master_link_status:up` alone comes too early: the primary sends what it buffered
/// during a full sync only after that, and a cut in between would leave the replica with the
/// snapshot's state (e.g. a lock caught between `SETNX` and its `PEXPIRE`), a different fault than
/// the one meant.
async fn wait_until_synced(primary_url: &str, replica_url: &str) -> anyhow::Result<()> {
    let mut primary = redis::Client::open(primary_url)?
        .get_multiplexed_async_connection()
        .await?;
    let mut replica = redis::Client::open(replica_url)?
        .get_multiplexed_async_connection()
        .await?;
    let offset = |info: &str| -> Option<i64> {
        info.lines()
            .find_map(|l| l.strip_prefix("master_repl_offset:"))
            .and_then(|v| v.trim().parse().ok())
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut target: Option<i64> = None;
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut replica)
            .await?;
        if info.contains("master_link_status:up") {
            match target {
                None => {
                    let p: String = redis::cmd("INFO")
                        .arg("replication")
                        .query_async(&mut primary)
                        .await?;
                    target = offset(&p);
                }
                Some(t) if offset(&info).is_some_and(|r| r >= t) => return Ok(()),
                Some(_) => {}
            }
        }
        if Instant::now() > deadline {
            anyhow::bail!("the replica did not catch up with its primary within 10 s: {info}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls_split_around_the_host() {
        let (h, hp, t) = split_redis_url("redis://u:p@example.org:6380/2").unwrap();
        assert_eq!(
            (h.as_str(), hp.as_str(), t.as_str()),
            ("redis://u:p@", "example.org:6380", "/2")
        );
        let (_, hp, t) = split_redis_url("redis://localhost").unwrap();
        assert_eq!((hp.as_str(), t.as_str()), ("localhost:6379", ""));
        assert!(split_redis_url("localhost:6379").is_err());
    }
}
