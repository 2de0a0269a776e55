//! The fault table: what each fault needs from a cell, where it applies, and how it is done.
//!
//! Adding a fault is local: a [`Fault`] variant, its line in [`Fault::needs`], its arm in
//! [`Cell::inject`] (and in [`Cell::arm`] when something must be set up before the target is
//! chosen). Limit: every fault is aimed at one worker caught inside its critical section (or at the
//! Redis it talks to); faults that hit several parts at once are not modelled.

use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{kill, Signal};

use super::harness::{Cell, CellStatus};
use super::rig::RedisSetup;
use super::worker::Event;
use super::{Fault, Strategy};

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
    /// The primary runs under a fake wall clock (libfaketime).
    pub(crate) fake_clock: bool,
}

impl Fault {
    /// The one table of what each fault needs.
    pub(crate) fn needs(self) -> Needs {
        let none = Needs::default();
        let redis = Needs {
            redis: true,
            ..none
        };
        let own = Needs {
            own_redis: true,
            ..redis
        };
        match self {
            Fault::None | Fault::Pause | Fault::Kill => none,
            Fault::NetDelay | Fault::NetCut | Fault::NetBlackhole => redis,
            Fault::RedisRestart => own,
            Fault::Failover => Needs {
                replica: true,
                ..own
            },
            Fault::ClockJump => Needs {
                fake_clock: true,
                ..own
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
    if needs.redis && !strategy.uses_redis() {
        return Some((
            CellStatus::NotApplicable,
            "not applicable: this strategy uses no Redis".into(),
        ));
    }
    if needs.own_redis && user_redis {
        return Some((
            CellStatus::Skipped,
            "skipped: needs a Redis the harness runs itself (--redis was given)".into(),
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
        self.redis
            .as_mut()
            .context("this fault needs the strategy's Redis")
    }

    /// Sets up what must already be true when the target takes its lock.
    pub(crate) async fn arm(&mut self, fault: Fault) -> anyhow::Result<()> {
        if fault == Fault::Failover {
            // A fresh replica after each failover; then the primary's writes (the target's lock
            // among them) stop reaching it.
            let redis = self.redis()?;
            redis.ensure_replica().await?;
            redis.cut_replication();
            self.replication_cut_ms = Some(super::worker::now_ms());
        }
        Ok(())
    }

    /// Applies `fault` to the worker in `slot`, which is stopped at its hold point inside its
    /// critical section, for the fault window. Returns whether that worker is still there to be
    /// told to go on (a killed one is replaced instead).
    pub(crate) async fn inject(&mut self, fault: Fault, slot: u32) -> anyhow::Result<bool> {
        let t = self.ctx.timing;
        let i = slot as usize;
        match fault {
            Fault::None => {}
            Fault::Pause => {
                // Stops the whole process, its lease renewal with it.
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
                self.failover_ms = Some(super::worker::now_ms());
                self.redis()?.fail_over().await?;
                // The evidence for a stall: what the promoted replica says of the lock.
                self.check_lock("on the promoted replica").await;
                tokio::time::sleep_until(started + t.hold).await;
            }
            Fault::NetDelay => {
                let proxy = &self.redis()?.proxies[i];
                proxy.set_delay(t.ttl * 2);
                tokio::time::sleep(t.hold).await;
                proxy.set_delay(Duration::ZERO);
            }
            Fault::NetCut => {
                let proxy = &self.redis()?.proxies[i];
                proxy.cut();
                tokio::time::sleep(t.hold).await;
                proxy.restore();
            }
            Fault::NetBlackhole => {
                let proxy = &self.redis()?.proxies[i];
                proxy.blackhole();
                tokio::time::sleep(t.hold).await;
                proxy.restore();
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
        }
        Ok(true)
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
