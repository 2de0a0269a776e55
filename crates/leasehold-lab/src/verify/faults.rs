//! The fault table: what each fault needs from a cell, where it applies, and how it is done.
//!
//! Adding a fault is local: a [`Fault`] variant, its line in [`Fault::needs`], its arm in
//! [`Cell::inject`] (and in [`Cell::arm`] when something must be set up before the target is
//! chosen). Limit: every fault is aimed at one worker caught inside its critical section (or at the
//! lease store it talks to); faults that hit several parts at once are not modelled, except the Redlock
//! clock jump, which needs a cut link and a jumped master together.
//!
//! Which faults apply where: the single-server faults (`redis-restart`, `failover`) are not
//! applicable to Redlock, whose masters are independent servers without replicas (`node-restart`
//! and `node-kill` are their Redlock forms), and the Redlock faults are not applicable to the
//! single-server strategies. The network faults hit all of the target's links (on Redlock, its
//! three proxies). `sentinel-failover` and `cluster-failover` apply to the leases on one deployment
//! (`lease`, `lease-fence`); the hand-made locks speak to one `redis://` server only. The strategies
//! on PostgreSQL and etcd take `none`, `pause`, `kill` and their own store's fault (`pg-restart`,
//! `member-kill`), which acts on the store the harness runs for the whole run (`LeaseStores`); no
//! Redis fault applies to them, the network faults included (their store is reached directly, not
//! through the proxies).

use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{kill, Signal};

use leasehold_testkit::Proxy;

use super::cell::{Cell, CellStatus};
use super::rig::{
    ClusterSetup, Deployment, Needs, RedisSetup, RedlockSetup, SentinelSetup, Servers,
};
use super::rig::{CUT_MASTER, JUMPING_MASTER};
use super::worker::{lock_key, now_ms, Event};
use super::{Fault, Strategy};

impl Fault {
    /// The one table of what each fault needs.
    pub(crate) fn needs(self) -> Needs {
        let any = Needs {
            one_deployment: true,
            redlock: true,
            ..Needs::default()
        };
        let redis = Needs { redis: true, ..any };
        let own = Needs {
            own_redis: true,
            ..redis
        };
        let one_server = Needs {
            redlock: false,
            ..own
        };
        let masters = Needs {
            one_deployment: false,
            ..own
        };
        match self {
            Fault::None | Fault::Pause | Fault::Kill => any,
            Fault::NetDelay | Fault::NetCut | Fault::NetBlackhole => redis,
            Fault::RedisRestart => one_server,
            Fault::Failover => Needs {
                replica: true,
                ..one_server
            },
            Fault::ClockJump => Needs {
                fake_clock: true,
                ..own
            },
            Fault::NodeKill | Fault::NodeRestart => masters,
            Fault::SentinelFailover => Needs {
                deployment: Deployment::Sentinel,
                ..one_server
            },
            Fault::ClusterFailover => Needs {
                deployment: Deployment::Cluster,
                ..one_server
            },
            Fault::PgRestart => Needs {
                pg_store: true,
                ..Needs::default()
            },
            Fault::MemberKill => Needs {
                etcd_store: true,
                ..Needs::default()
            },
        }
    }
}

/// Whether `fault` can be done to `strategy` here; `None` when it can, else the status and why not.
pub(crate) fn applicability(
    fault: Fault,
    strategy: Strategy,
    user_redis: bool,
) -> Option<(CellStatus, String)> {
    let needs = fault.needs();
    let na = |why: &str| Some((CellStatus::NotApplicable, format!("not applicable: {why}")));
    if needs.pg_store && !strategy.on_postgres() {
        return na("a restart of the PostgreSQL lease store; this strategy takes no lease there");
    }
    if needs.etcd_store && !strategy.on_etcd() {
        return na("a member of the etcd lease store killed; this strategy takes no lease there");
    }
    let store = if strategy.on_postgres() {
        Some("PostgreSQL")
    } else if strategy.on_etcd() {
        Some("etcd")
    } else {
        None
    };
    if let Some(store) = store {
        if matches!(fault, Fault::NetDelay | Fault::NetCut | Fault::NetBlackhole) {
            return na(&format!(
                "the network faults act on the proxies in front of Redis; the {store} lease store is reached directly"
            ));
        }
        if needs.redis {
            return na(&format!(
                "a fault of Redis; this strategy's lease is on {store}"
            ));
        }
        let available = if strategy.on_postgres() {
            leasehold_testkit::postgres_server_available()
        } else {
            leasehold_testkit::etcd_available()
        };
        if !available {
            return Some((
                CellStatus::Skipped,
                format!("skipped: needs {store} installed for a lease store of the harness's own (initdb and postgres, or etcd)"),
            ));
        }
        return None;
    }
    if needs.redis && !strategy.uses_redis() {
        return na("this strategy uses no Redis");
    }
    if strategy.redlock() && !needs.redlock {
        return na(match fault {
            Fault::RedisRestart => "one server restarted; node-restart is its Redlock form",
            Fault::Failover => {
                "Redlock's masters are independent, with no replica to promote; node-kill is its Redlock form"
            }
            _ => "Redlock's masters are independent servers, not a Sentinel set or a Cluster",
        });
    }
    if !strategy.redlock() && !needs.one_deployment && strategy.uses_redis() {
        return na(
            "a fault of one Redlock master among three; redis-restart is its single-server form",
        );
    }
    if needs.deployment != Deployment::Standalone && !strategy.single_lease() {
        return na(
            "the hand-made locks speak to one redis:// server; Sentinel and Cluster need a client that follows the primary",
        );
    }
    if user_redis && (needs.own_redis || strategy.redlock()) {
        return Some((
            CellStatus::Skipped,
            "skipped: needs Redis servers the harness runs itself (--redis was given)".into(),
        ));
    }
    if needs.fake_clock && leasehold_testkit::libfaketime_path().is_none() {
        return Some((
            CellStatus::Skipped,
            "skipped: needs libfaketime (apt-get install -y faketime, or set LEASEHOLD_LIBFAKETIME)"
                .into(),
        ));
    }
    None
}

impl Cell<'_> {
    fn redis(&mut self) -> anyhow::Result<&mut RedisSetup> {
        match self.redis.as_mut() {
            Some(Servers::One(r)) => Ok(r.as_mut()),
            _ => anyhow::bail!("this fault needs the strategy's one Redis server"),
        }
    }

    fn masters(&mut self) -> anyhow::Result<&mut RedlockSetup> {
        match self.redis.as_mut() {
            Some(Servers::Redlock(r)) => Ok(r),
            _ => anyhow::bail!("this fault needs Redlock's masters"),
        }
    }

    fn sentinel(&mut self) -> anyhow::Result<&mut SentinelSetup> {
        match self.redis.as_mut() {
            Some(Servers::Sentinel(s)) => Ok(s),
            _ => anyhow::bail!("this fault needs a Sentinel set"),
        }
    }

    fn cluster(&mut self) -> anyhow::Result<&mut ClusterSetup> {
        match self.redis.as_mut() {
            Some(Servers::Cluster(c)) => Ok(c),
            _ => anyhow::bail!("this fault needs a Redis Cluster"),
        }
    }

    /// Worker `slot`'s links to Redis: its one proxy, or its proxies to the three Redlock masters.
    fn links(&mut self, slot: u32) -> anyhow::Result<Vec<&Proxy>> {
        let i = slot as usize;
        Ok(match self.redis.as_ref() {
            Some(Servers::One(r)) => vec![&r.proxies[i]],
            Some(Servers::Redlock(r)) => r.links[i].iter().collect(),
            _ => anyhow::bail!("this fault needs a Redis reached through the harness's proxies"),
        })
    }

    /// Sets up what must already be true when the target takes its lock.
    pub(crate) async fn arm(&mut self, fault: Fault) -> anyhow::Result<()> {
        match fault {
            Fault::Failover => {
                // A fresh replica after each failover; then the primary's writes (the target's
                // lock among them) stop reaching it.
                let redis = self.redis()?;
                redis.ensure_replica().await?;
                redis.cut_replication();
                self.replication_cut_ms = Some(now_ms());
            }
            Fault::ClockJump if self.spec.strategy.redlock() => {
                // Every worker's way to one master is cut while they take the lease, so the target
                // holds it on the bare majority {0, JUMPING_MASTER}.
                for slot in &self.masters()?.links {
                    slot[CUT_MASTER].cut();
                }
            }
            Fault::SentinelFailover => {
                let s = self.sentinel()?;
                tokio::task::block_in_place(|| -> anyhow::Result<()> {
                    if let Some(old) = s.down.take() {
                        // Back as a replica of the new primary, synced and seen by every sentinel.
                        s.set.restart_node(old)?;
                    }
                    s.set.begin_lossy_failover()?;
                    s.failing = Some(s.set.primary_index()?);
                    Ok(())
                })?;
                self.replication_cut_ms = Some(now_ms());
            }
            Fault::ClusterFailover => {
                let key = lock_key(self.spec.strategy, self.spec.key)
                    .context("cluster-failover needs a lock key")?;
                let c = self.cluster()?;
                tokio::task::block_in_place(|| -> anyhow::Result<()> {
                    if let Some(old) = c.down.take() {
                        // Back as a replica of its successor.
                        c.cluster.restart_node(old)?;
                    }
                    let master = c.cluster.master_of_key(&key)?;
                    let replica = *c
                        .cluster
                        .replicas_of(master)?
                        .first()
                        .context("the lease's master has no replica")?;
                    // As the Sentinel set's lossy failover: the replica has everything so far, then
                    // is stopped and its link closed on the master's side (a stopped process would
                    // still receive into its socket buffer and apply it on resume).
                    let mut con = c.cluster.node(master).connection()?;
                    let acked: i64 = redis::cmd("WAIT").arg(1).arg(2000).query(&mut con)?;
                    anyhow::ensure!(acked >= 1, "the replica did not acknowledge within 2 s");
                    c.cluster.node_mut(replica).pause()?;
                    redis::cmd("CLIENT")
                        .arg("KILL")
                        .arg("TYPE")
                        .arg("replica")
                        .query::<i64>(&mut con)?;
                    c.isolated = Some((master, replica));
                    Ok(())
                })?;
                self.replication_cut_ms = Some(now_ms());
            }
            _ => {}
        }
        Ok(())
    }

    /// Undoes [`arm`](Self::arm) when no target was found, where leaving it would change the next
    /// injection's conditions: the links cut for a Redlock clock jump, the replica stopped for a
    /// Sentinel or Cluster failover (continued, it reconnects to its primary by itself). A failed
    /// undo is left for the next arming to report.
    pub(crate) fn disarm(&mut self, fault: Fault) {
        match fault {
            Fault::ClockJump => {
                if let Ok(r) = self.masters() {
                    for slot in &r.links {
                        slot[CUT_MASTER].restore();
                    }
                }
            }
            Fault::SentinelFailover => {
                if let Ok(s) = self.sentinel() {
                    if let Some(primary) = s.failing.take() {
                        for i in (0..s.set.nodes().len()).filter(|i| *i != primary) {
                            if s.set.node(i).is_paused() {
                                let _ = s.set.node_mut(i).resume();
                            }
                        }
                    }
                }
            }
            Fault::ClusterFailover => {
                if let Ok(c) = self.cluster() {
                    if let Some((_, replica)) = c.isolated.take() {
                        let _ = c.cluster.node_mut(replica).resume();
                    }
                }
            }
            _ => {}
        }
    }

    /// Applies `fault` to the worker in `slot`, which is stopped at its hold point inside its
    /// critical section, for the fault window. Returns whether that worker is still there to be
    /// told to go on (a killed one is replaced instead).
    pub(crate) async fn inject(&mut self, fault: Fault, slot: u32) -> anyhow::Result<bool> {
        let t = self.timing;
        let i = slot as usize;
        // The Redlock faults take turns among the masters.
        let master = self.injected as usize % 3;
        match fault {
            Fault::NodeKill | Fault::NodeRestart => {
                self.count_bare_majority().await;
            }
            _ => {}
        }
        match fault {
            Fault::None => {}
            Fault::Pause => {
                // Stops the whole process, its lease renewal with it. On etcd the window outlasts
                // etcd's own minimum lease (`Timing::for_strategy`).
                if let Some(pid) = self.workers[i].pid() {
                    kill(pid, Signal::SIGSTOP)?;
                    tokio::time::sleep(t.hold).await;
                    kill(pid, Signal::SIGCONT)?;
                }
            }
            Fault::Kill => {
                let w = &mut self.workers[i];
                w.child.start_kill()?;
                let _ = w.child.wait().await;
                let next = self.log.last_op(slot) + 1;
                let since = self.log.len();
                self.workers[i] = self.spawn(slot, next).await?;
                self.log
                    .wait_for(since, Duration::from_secs(20), |s, ev| {
                        s == slot && matches!(ev, Event::Ready)
                    })
                    .await;
                return Ok(false);
            }
            Fault::RedisRestart => {
                // Without persistence: it comes back empty, every lock and fence forgotten.
                let redis = self.redis()?;
                if let Some(mut server) = redis.primary.take() {
                    let server =
                        tokio::task::spawn_blocking(move || server.restart().map(|_| server))
                            .await??;
                    redis.primary = Some(server);
                }
                tokio::time::sleep(t.hold).await;
            }
            Fault::Failover => {
                let started = tokio::time::Instant::now();
                self.failover_ms = Some(now_ms());
                self.redis()?.fail_over().await?;
                // The evidence for a stall: what the promoted replica says of the lock.
                self.check_lock("on the promoted replica").await;
                tokio::time::sleep_until(started + t.hold).await;
            }
            Fault::NetDelay => {
                // On Redlock, the target's links to all three masters.
                for p in self.links(slot)? {
                    p.set_delay(t.ttl * 2);
                }
                tokio::time::sleep(t.hold).await;
                for p in self.links(slot)? {
                    p.set_delay(Duration::ZERO);
                }
            }
            Fault::NetCut => {
                for p in self.links(slot)? {
                    p.cut();
                }
                tokio::time::sleep(t.hold).await;
                for p in self.links(slot)? {
                    p.restore();
                }
            }
            Fault::NetBlackhole => {
                for p in self.links(slot)? {
                    p.blackhole();
                }
                tokio::time::sleep(t.hold).await;
                for p in self.links(slot)? {
                    p.restore();
                }
            }
            Fault::ClockJump if self.spec.strategy.redlock() => {
                self.redlock_clock_jump(slot).await?;
            }
            Fault::ClockJump => {
                // Past the TTL of any lock held now: Redis expires by its wall clock.
                let redis = self.redis()?;
                let server = redis
                    .primary
                    .as_mut()
                    .context("a clock jump needs a Redis the harness runs")?;
                server.jump_clock(t.hold)?;
                tokio::time::sleep(t.hold).await;
            }
            Fault::NodeKill => {
                // Down for the fault window, then back empty on its port (the proxies lead there).
                let m = &mut self.masters()?.masters[master];
                tokio::task::block_in_place(|| m.kill())?;
                tokio::time::sleep(t.hold).await;
                let m = &mut self.masters()?.masters[master];
                tokio::task::block_in_place(|| m.restart())?;
            }
            Fault::NodeRestart => {
                let m = &mut self.masters()?.masters[master];
                tokio::task::block_in_place(|| m.restart())?;
                tokio::time::sleep(t.hold).await;
            }
            Fault::SentinelFailover => {
                let started = tokio::time::Instant::now();
                self.failover_ms = Some(now_ms());
                let s = self.sentinel()?;
                tokio::task::block_in_place(|| -> anyhow::Result<()> {
                    s.set.finish_lossy_failover(Duration::from_secs(20))?;
                    s.down = s.failing.take();
                    Ok(())
                })?;
                self.after_promotion(slot, started).await;
            }
            Fault::ClusterFailover => {
                let started = tokio::time::Instant::now();
                self.failover_ms = Some(now_ms());
                let c = self.cluster()?;
                let (old, replica) = c.isolated.take().context("cluster-failover not armed")?;
                tokio::task::block_in_place(|| -> anyhow::Result<()> {
                    c.cluster.node_mut(old).kill()?;
                    c.cluster.node_mut(replica).resume()?;
                    c.down = Some(old);
                    c.cluster.wait_until_ok(Duration::from_secs(20))?;
                    Ok(())
                })?;
                self.after_promotion(slot, started).await;
            }
            Fault::PgRestart => {
                // A fast shutdown and a start on the same port and data: the lease rows survive,
                // the holder's renewals fail while it is down, and its lease runs out on the
                // server's clock meanwhile.
                let started = tokio::time::Instant::now();
                let stores = &self.ctx.stores;
                tokio::task::block_in_place(|| -> anyhow::Result<()> {
                    let mut pg = stores
                        .postgres
                        .lock()
                        .map_err(|_| anyhow::anyhow!("poisoned"))?;
                    pg.as_mut()
                        .context("pg-restart needs the harness's PostgreSQL lease store")?
                        .restart()?;
                    Ok(())
                })?;
                tokio::time::sleep_until(started + t.hold).await;
            }
            Fault::MemberKill => {
                // The leader and a follower take turns (the first injection of a cell kills the
                // leader): taking turns by member number would, on a cluster shared by the cells,
                // keep killing the same followers while the leader stays put.
                let turn = self.injected;
                let stores = &self.ctx.stores;
                let (member, was_leader) =
                    tokio::task::block_in_place(|| -> anyhow::Result<(usize, bool)> {
                        let mut etcd = stores
                            .etcd
                            .lock()
                            .map_err(|_| anyhow::anyhow!("poisoned"))?;
                        let etcd = etcd
                            .as_mut()
                            .context("member-kill needs the harness's etcd lease store")?;
                        let leader = etcd.leader()?;
                        let member = if turn % 2 == 0 {
                            leader
                        } else {
                            (leader + 1) % super::rig::ETCD_MEMBERS
                        };
                        etcd.kill_member(member)?;
                        Ok((member, member == leader))
                    })?;
                if was_leader {
                    self.leaders_killed += 1;
                }
                tokio::time::sleep(t.hold).await;
                tokio::task::block_in_place(|| -> anyhow::Result<()> {
                    let mut etcd = stores
                        .etcd
                        .lock()
                        .map_err(|_| anyhow::anyhow!("poisoned"))?;
                    etcd.as_mut()
                        .context("member-kill needs the harness's etcd lease store")?
                        .restart_member(member)?;
                    Ok(())
                })?;
            }
        }
        Ok(true)
    }

    /// Whether the worker in `slot`, stopped at its hold point, is a target `fault` is meant for:
    /// the Redlock master faults are aimed at a lease held on all three masters (the case Redlock
    /// is for); a lease granted by a bare majority is let go and another target chosen.
    pub(crate) async fn suits(&mut self, fault: Fault, _slot: u32) -> bool {
        if !matches!(fault, Fault::NodeKill | Fault::NodeRestart) {
            return true;
        }
        let Some(key) = lock_key(self.spec.strategy, self.spec.key) else {
            return true;
        };
        match self.masters() {
            Ok(r) => r.held_on(&key).await == 3,
            Err(_) => true,
        }
    }

    /// The rest of a Sentinel or Cluster failover's window once the replica is promoted: the
    /// failover itself takes seconds, longer than the window, so the target is held until another
    /// worker has found the new primary and written (at most 5 s), and at least the window.
    async fn after_promotion(&mut self, slot: u32, started: tokio::time::Instant) {
        let since = self.log.len();
        self.log
            .wait_for(since, Duration::from_secs(5), |s, ev| {
                s != slot && matches!(ev, Event::Wrote { .. })
            })
            .await;
        tokio::time::sleep_until(started + self.timing.hold).await;
    }

    /// Counts an injection that finds the target's lease held on fewer than all three masters (an
    /// acquire granted by a bare majority, the third master's reply too late): losing one master of
    /// that majority loses the lease, Redlock's documented limit, not the fault this cell is about.
    async fn count_bare_majority(&mut self) {
        let Some(key) = lock_key(self.spec.strategy, self.spec.key) else {
            return;
        };
        if let Ok(r) = self.masters() {
            if r.held_on(&key).await < 3 {
                self.bare_majorities += 1;
            }
        }
    }

    /// The clock-jump schedule of the Redlock debate. The target holds the lease on the bare
    /// majority {0, JUMPING_MASTER} (`arm` cut everyone's way to CUT_MASTER); JUMPING_MASTER's
    /// wall clock jumps past the TTL, so it expires the target's lock at once; the other workers
    /// get their way to CUT_MASTER back and one reaches the majority {JUMPING_MASTER, CUT_MASTER}.
    /// The target goes on as soon as that worker has written (or after the fault window): by its
    /// own clock its lease may well still be valid, which is the point of the schedule.
    async fn redlock_clock_jump(&mut self, slot: u32) -> anyhow::Result<()> {
        let t = self.timing;
        let since = self.log.len();
        let r = self.masters()?;
        tokio::task::block_in_place(|| r.masters[JUMPING_MASTER].jump_clock(t.hold))?;
        for (other, links) in r.links.iter().enumerate() {
            if other as u32 != slot {
                links[CUT_MASTER].restore();
            }
        }
        self.log
            .wait_for(since, t.hold, |s, ev| {
                s != slot && matches!(ev, Event::Wrote { .. })
            })
            .await;
        self.masters()?.links[slot as usize][CUT_MASTER].restore();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold::lease::{LeaseClient, LeaseOptions};
    use leasehold_testkit::RedisServer;

    /// What a forward clock jump does to a leasehold lease: the lock expires early (Redis expires by
    /// its wall clock), so a second holder gets it while the first still counts on it, and the
    /// fence rule `max(stored + 1, server time in µs)` hands the second holder a fence raised by the
    /// jump. A forward jump only raises fences, so a fenced resource still refuses the first holder.
    #[tokio::test]
    async fn a_forward_clock_jump_expires_a_lease_early_and_only_raises_fences() {
        let mut server =
            tokio::task::spawn_blocking(|| RedisServer::builder().fake_clock().start())
                .await
                .unwrap()
                .expect(
                    "a fake-clock redis-server (needs libfaketime: apt-get install -y faketime)",
                );
        let first = LeaseClient::connect(&server.url()).await.unwrap();
        let second = LeaseClient::connect(&server.url()).await.unwrap();
        let opts = LeaseOptions::with_ttl(Duration::from_secs(30)).unwrap();
        let held = first.try_acquire("job", &opts).await.unwrap();
        assert!(
            second.try_acquire("job", &opts).await.is_err(),
            "the lease is held for 30 s before the jump"
        );

        let jump = Duration::from_secs(60);
        server.jump_clock(jump).unwrap();
        let taken = second
            .try_acquire("job", &opts)
            .await
            .expect("after a 60 s jump the 30 s lease has expired on the server");
        let (old, new) = (held.fence().as_i64(), taken.fence().as_i64());
        assert!(
            new >= old + jump.as_micros() as i64 - 5_000_000,
            "the new fence follows the jumped server clock: {old} -> {new}"
        );
        drop(held);
        taken.release().await.unwrap();
    }
}
