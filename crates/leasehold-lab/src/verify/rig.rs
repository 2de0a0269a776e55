//! What a run and its cells run on: the run's context and timings, what a fault needs from a
//! cell's servers, a cell's Redis (one private server or the user's, Redlock's three masters, a
//! Sentinel set or a Cluster), its worker processes, and the log of what they said.
//!
//! One server and Redlock's masters are reached through one proxy per worker slot (per master), so
//! a network fault can hit one worker's link. Limit: the Sentinel set and the Cluster are reached
//! directly (their clients learn the nodes' real addresses from the sentinels or the cluster, which a
//! proxy in front cannot rewrite); their faults act on the servers, not on one worker's link. The
//! lock key is looked at from outside (`GET`, `PTTL`), which is how the harness tells a lock that
//! will never expire from one that is merely held; it cannot see a lock's history.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, Command};

use leasehold_testkit::{
    EtcdCluster, PostgresServer, Proxy, RedisCluster, RedisServer, SentinelSet,
};

use super::worker::{now_ms, Event};
use super::{Fault, Strategy, VerifyArgs, Workload};

/// Timings of one cell, derived from the lease TTL. Every cell runs the same timeline: warm-up,
/// then per injection a gap and a fault window, then a cool-down.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub(crate) ttl: Duration,
    pub(crate) warmup: Duration,
    pub(crate) gap: Duration,
    /// How long a fault lasts (and how far a clock jumps): three lease TTLs, so the target's lock
    /// has surely expired and another worker has had time to take it and write.
    pub(crate) hold: Duration,
    pub(crate) cooldown: Duration,
    /// Injections per cell, and for the faults that take seconds each (a Sentinel or Cluster
    /// failover waits for a failure to be detected and a replica elected).
    pub(crate) injections: u32,
    pub(crate) slow_injections: u32,
    /// How long to wait for some worker to reach a write inside its critical section.
    pub(crate) target_wait: Duration,
    /// A lock wait longer than this is a stall. Far above any wait the faults cause by design
    /// (a fault window plus a TTL plus a waiter's jitter, about 1 s at the default TTL).
    pub(crate) stall_after: Duration,
}

/// The shortest lease etcd keeps: one and a half election timeouts rounded up to a second, 2 s
/// with etcd's default timings (which the test cluster uses). A holder's lease lives on in etcd at
/// least this long after its last renewal, whatever TTL it asked for.
pub(crate) const ETCD_MIN_LEASE: Duration = Duration::from_secs(2);

impl Timing {
    pub(crate) fn new(args: &VerifyArgs) -> Self {
        let ttl = Duration::from_millis(args.ttl_ms);
        Self {
            ttl,
            warmup: Duration::from_millis(200).max(ttl),
            gap: Duration::from_millis(100).max(ttl / 2),
            hold: ttl * 3,
            cooldown: Duration::from_millis(200).max(ttl),
            injections: args.injections.unwrap_or(if args.quick { 1 } else { 5 }),
            slow_injections: args.injections.unwrap_or(if args.quick { 1 } else { 2 }),
            target_wait: Duration::from_secs(2).max(ttl * 10),
            stall_after: Duration::from_secs(5).max(ttl * 25),
        }
    }

    /// The timings of a cell of `strategy`. The strategies on PostgreSQL and etcd get as many
    /// injections as the slow failovers (2 in a full run), which keeps the full matrix inside half
    /// an hour. On etcd a fault window must also outlast etcd's own minimum lease
    /// ([`ETCD_MIN_LEASE`]), not only the TTL the workers ask for, or the lease would still stand
    /// in etcd when the window ends and no fault could show.
    pub(crate) fn for_strategy(self, strategy: Strategy) -> Self {
        if !(strategy.on_postgres() || strategy.on_etcd()) {
            return self;
        }
        let fewer = Self {
            injections: self.slow_injections,
            ..self
        };
        if !strategy.on_etcd() {
            return fewer;
        }
        // A waiter may wait out a whole fault window and then etcd's own expiry of the lost
        // holder's lease (and its place in the queue of waiters), twice over for a member kill
        // that also costs an election.
        let hold = ETCD_MIN_LEASE + self.hold;
        Self {
            hold,
            target_wait: self.target_wait.max(hold * 2),
            stall_after: self.stall_after.max((hold + ETCD_MIN_LEASE) * 2),
            ..fewer
        }
    }

    /// Injections in a cell of `fault`.
    pub(crate) fn injections(&self, fault: Fault) -> u32 {
        if fault.slow() {
            self.slow_injections
        } else {
            self.injections
        }
    }

    /// An estimate of one cell's wall time, for the announcement: the timeline plus what starting
    /// servers and workers and stopping them takes on a busy 2-core machine (a Sentinel set or a
    /// Cluster takes seconds to start, and each of its failovers seconds more).
    /// A store restart or an etcd member's restart takes about a second.
    pub(crate) fn estimate(&self, fault: Fault, strategy: Strategy) -> Duration {
        let t = self.for_strategy(strategy);
        let (start, per_injection) = if fault.slow() {
            (Duration::from_secs(4), Duration::from_secs(5))
        } else if matches!(fault, Fault::PgRestart | Fault::MemberKill) {
            (Duration::from_millis(300), Duration::from_millis(1_000))
        } else {
            (Duration::from_millis(300), Duration::from_millis(60))
        };
        start + t.warmup + (t.gap + t.hold + per_injection) * t.injections(fault) + t.cooldown
    }
}

/// Everything shared by the cells of one run.
#[derive(Debug)]
pub(crate) struct RunContext {
    pub(crate) exe: PathBuf,
    pub(crate) database: String,
    pub(crate) run_id: String,
    pub(crate) user_redis: Option<String>,
    pub(crate) workers: u32,
    pub(crate) timing: Timing,
    /// The PostgreSQL and etcd lease stores, started at their first cell.
    pub(crate) stores: LeaseStores,
    /// Keeps the default SQLite file alive for the run.
    pub(crate) _tmp: Option<tempfile::TempDir>,
}

/// The lease stores that are not Redis: a private PostgreSQL server and a three-member etcd
/// cluster, each started once per run at its first cell and shared by the cells after it (each
/// cell's leases under its own key prefix), since making a PostgreSQL cluster or an etcd cluster
/// takes seconds. They are the harness's own, so `pg-restart` and `member-kill` act on them for
/// real; the run's database (the resource) is never one of them. Cells run one at a time, and a
/// fault leaves its store running again, so a cell starts from a healthy store.
#[derive(Debug, Default)]
pub(crate) struct LeaseStores {
    pub(crate) postgres: Mutex<Option<PostgresServer>>,
    pub(crate) etcd: Mutex<Option<EtcdCluster>>,
}

/// Members of the etcd lease store: three, so that one can be lost.
pub(crate) const ETCD_MEMBERS: usize = 3;

impl LeaseStores {
    /// The URL of `strategy`'s lease store, started if it is not yet; `None` for a strategy whose
    /// lease is on Redis (or that takes none).
    pub(crate) async fn url_for(&self, strategy: Strategy) -> anyhow::Result<Option<String>> {
        if strategy.on_postgres() {
            let running = self
                .postgres
                .lock()
                .ok()
                .and_then(|pg| pg.as_ref().map(|s| s.url()));
            if let Some(url) = running {
                return Ok(Some(url));
            }
            let server = tokio::task::spawn_blocking(PostgresServer::start)
                .await?
                .context("cannot start a private PostgreSQL for the lease store")?;
            let url = server.url();
            let db = leasehold::db::Database::connect(&url).await?;
            db.migrate().await?;
            db.close().await;
            if let Ok(mut pg) = self.postgres.lock() {
                *pg = Some(server);
            }
            return Ok(Some(url));
        }
        if strategy.on_etcd() {
            let running = self
                .etcd
                .lock()
                .ok()
                .and_then(|e| e.as_ref().map(|c| c.url()));
            if let Some(url) = running {
                return Ok(Some(url));
            }
            let cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(ETCD_MEMBERS))
                .await?
                .context("cannot start an etcd cluster for the lease store")?;
            let url = cluster.url();
            if let Ok(mut etcd) = self.etcd.lock() {
                *etcd = Some(cluster);
            }
            return Ok(Some(url));
        }
        Ok(None)
    }
}

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

/// What a fault needs from a cell.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Needs {
    /// It acts on the strategy's Redis: not applicable to a strategy without one.
    pub(crate) redis: bool,
    /// It kills, restarts or re-clocks a server: only on servers the harness runs (skipped with
    /// `--redis`).
    pub(crate) own_redis: bool,
    /// A replica behind a replication link the harness can cut.
    pub(crate) replica: bool,
    /// The primary (for Redlock: one master) runs under a fake wall clock (libfaketime).
    pub(crate) fake_clock: bool,
    /// It is defined on one Redis deployment (the single-server strategies).
    pub(crate) one_deployment: bool,
    /// It is defined on Redlock's three masters.
    pub(crate) redlock: bool,
    /// What it runs on, for the single-server strategies.
    pub(crate) deployment: Deployment,
    /// It acts on the PostgreSQL lease store.
    pub(crate) pg_store: bool,
    /// It acts on the etcd lease store.
    pub(crate) etcd_store: bool,
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
    /// Starts what `strategy` under `fault` runs on.
    pub(crate) async fn start(
        ctx: &RunContext,
        needs: Needs,
        strategy: Strategy,
    ) -> anyhow::Result<Self> {
        if strategy.redlock() {
            return Ok(Self::Redlock(
                RedlockSetup::start(ctx, needs.fake_clock).await?,
            ));
        }
        Ok(match needs.deployment {
            Deployment::Standalone => Self::One(Box::new(RedisSetup::start(ctx, needs).await?)),
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
    async fn start(ctx: &RunContext, fake_clock: bool) -> anyhow::Result<Self> {
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
        for _ in 0..ctx.workers {
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
    pub(crate) async fn start(ctx: &RunContext, needs: Needs) -> anyhow::Result<Self> {
        let mut setup = match &ctx.user_redis {
            Some(url) => {
                let (head, hostport, tail) = split_redis_url(url)?;
                let addr = tokio::net::lookup_host(hostport.as_str())
                    .await
                    .with_context(|| format!("cannot resolve the Redis host {hostport}"))?
                    .next()
                    .with_context(|| format!("no address for the Redis host {hostport}"))?;
                Self::with_proxies(ctx, addr, None, Some(url.clone()), head, tail).await?
            }
            None => {
                let fake_clock = needs.fake_clock;
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
                Self::with_proxies(ctx, upstream, Some(primary), None, head, "/".into()).await?
            }
        };
        if needs.replica {
            setup.ensure_replica().await?;
        }
        Ok(setup)
    }

    async fn with_proxies(
        ctx: &RunContext,
        upstream: SocketAddr,
        primary: Option<RedisServer>,
        user_url: Option<String>,
        url_head: String,
        url_tail: String,
    ) -> anyhow::Result<Self> {
        let mut proxies = Vec::new();
        for _ in 0..ctx.workers {
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

/// One worker process and the pipe the harness commands it through.
#[derive(Debug)]
pub(crate) struct WorkerProc {
    pub(crate) child: Child,
    stdin: ChildStdin,
}

impl WorkerProc {
    pub(crate) fn pid(&self) -> Option<Pid> {
        self.child.id().map(|id| Pid::from_raw(id as i32))
    }

    pub(crate) async fn send(&mut self, line: &str) {
        // A worker that is gone cannot be commanded; the caller notices by its missing events.
        let _ = self.stdin.write_all(format!("{line}\n").as_bytes()).await;
        let _ = self.stdin.flush().await;
    }
}

/// Events from all workers of a cell, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct Log {
    pub(crate) events: Mutex<Vec<(u32, i64, Event)>>,
    pub(crate) stderr: Mutex<String>,
}

impl Log {
    pub(crate) fn len(&self) -> usize {
        self.events.lock().map(|e| e.len()).unwrap_or(0)
    }

    pub(crate) fn find_since(&self, since: usize, pred: impl Fn(u32, &Event) -> bool) -> bool {
        self.events
            .lock()
            .map(|e| e.iter().skip(since).any(|(s, _, ev)| pred(*s, ev)))
            .unwrap_or(false)
    }

    pub(crate) async fn wait_for(
        &self,
        since: usize,
        timeout: Duration,
        pred: impl Fn(u32, &Event) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.find_since(since, &pred) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        false
    }

    pub(crate) fn first_held_since(&self, since: usize) -> Option<u32> {
        self.events.lock().ok().and_then(|e| {
            e.iter()
                .skip(since)
                .find(|(_, _, ev)| matches!(ev, Event::Held { .. }))
                .map(|(s, _, _)| *s)
        })
    }

    pub(crate) fn last_op(&self, slot: u32) -> u64 {
        let events = self.events.lock().map(|e| e.clone()).unwrap_or_default();
        events
            .iter()
            .filter(|(s, _, _)| *s == slot)
            .filter_map(|(_, _, ev)| match ev {
                Event::Acquired { op, .. }
                | Event::Held { op }
                | Event::Wrote { op, .. }
                | Event::Failed { op, .. }
                | Event::Stalled { op, .. } => Some(*op),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Who took the lock with `token`, and what became of its release.
    pub(crate) fn lock_taken_with(&self, token: &str) -> Option<LockStory> {
        let events = self.events.lock().ok()?;
        let (i, slot, op, at) = events
            .iter()
            .enumerate()
            .find_map(|(i, (s, _, ev))| match ev {
                Event::Acquired {
                    op,
                    at_ms,
                    token: Some(t),
                    ..
                } if t == token => Some((i, *s, *op, *at_ms)),
                _ => None,
            })?;
        let released = events[i..].iter().find_map(|(s, _, ev)| match ev {
            Event::Released {
                op: o,
                at_ms,
                ok,
                error,
            } if *s == slot && *o == op => Some((*at_ms, error.clone().map_or(Ok(*ok), Err))),
            _ => None,
        });
        Some(LockStory {
            slot,
            op,
            taken_ms: at,
            released,
        })
    }

    pub(crate) fn ready_count(&self) -> usize {
        self.events
            .lock()
            .map(|e| {
                e.iter()
                    .filter(|(_, _, ev)| matches!(ev, Event::Ready))
                    .count()
            })
            .unwrap_or(0)
    }
}

/// One holder's lock, as its worker told it.
#[derive(Debug)]
pub(crate) struct LockStory {
    pub(crate) slot: u32,
    pub(crate) op: u64,
    /// When the lock was taken (after the whole acquire, e.g. `SETNX` then `PEXPIRE`).
    pub(crate) taken_ms: i64,
    /// When the holder released it, and how that went: a lock deleted or not, or the error.
    pub(crate) released: Option<(i64, Result<bool, String>)>,
}

/// What a worker process is started with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkerSpec<'a> {
    pub(crate) workload: Workload,
    pub(crate) strategy: Strategy,
    pub(crate) prefix: &'a str,
    pub(crate) key: &'a str,
}

/// Where a worker takes its lock.
#[derive(Debug, Default)]
pub(crate) struct LockUrls<'a> {
    /// Its Redis URLs: one (through its proxy, or a Sentinel or Cluster URL), or one per Redlock
    /// master.
    pub(crate) redis: Vec<String>,
    /// The lease store's URL when it is not Redis (PostgreSQL, etcd).
    pub(crate) lease_store: Option<&'a str>,
}

/// Starts the worker for `slot`, its events going to `log`.
pub(crate) async fn spawn_worker(
    ctx: &RunContext,
    log: &Arc<Log>,
    spec: WorkerSpec<'_>,
    slot: u32,
    lock: LockUrls<'_>,
    timing: Timing,
    start_op: u64,
) -> anyhow::Result<WorkerProc> {
    let mut cmd = Command::new(&ctx.exe);
    cmd.arg("__verify-worker")
        .args(["--strategy", &spec.strategy.to_string()])
        .args(["--workload", &spec.workload.to_string()])
        .args(["--database", &ctx.database])
        .args(["--prefix", spec.prefix])
        .args(["--key", spec.key])
        .args(["--slot", &slot.to_string()])
        .args(["--ttl-ms", &timing.ttl.as_millis().to_string()])
        .args(["--stall-ms", &timing.stall_after.as_millis().to_string()])
        .args(["--start-op", &start_op.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for url in lock.redis {
        cmd.args(["--redis", &url]);
    }
    if let Some(url) = lock.lease_store {
        cmd.args(["--lease-store", url]);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot spawn the worker {}", ctx.exe.display()))?;
    let stdin = child.stdin.take().context("worker stdin")?;
    let stdout = child.stdout.take().context("worker stdout")?;
    let stderr = child.stderr.take().context("worker stderr")?;
    let events = log.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(ev) = serde_json::from_str::<Event>(&line) {
                if let Ok(mut e) = events.events.lock() {
                    e.push((slot, now_ms(), ev));
                }
            }
        }
    });
    let errors = log.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(mut s) = errors.stderr.lock() {
                if s.len() < 4000 {
                    s.push_str(&format!("worker {slot}: {line}\n"));
                }
            }
        }
    });
    Ok(WorkerProc { child, stdin })
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
