//! What the fault files reach through a cell: its Redis in the shape a fault needs, a worker's
//! links, and the wait after a promotion that Sentinel and Cluster failovers share.
//!
//! Limit: a fault asking for a deployment the cell does not run gets an error, not a substitute.

use std::time::Duration;

use leasehold_testkit::Proxy;

use super::super::cell::Cell;
use super::super::store::redis::{ClusterSetup, RedisSetup, RedlockSetup, SentinelSetup, Servers};
use super::super::worker::Event;

impl Cell<'_> {
    /// The cell's one Redis server (or the user's).
    pub(super) fn redis(&mut self) -> anyhow::Result<&mut RedisSetup> {
        match self.redis.as_mut() {
            Some(Servers::One(r)) => Ok(r.as_mut()),
            _ => anyhow::bail!("this fault needs the strategy's one Redis server"),
        }
    }

    /// Redlock's three masters.
    pub(super) fn masters(&mut self) -> anyhow::Result<&mut RedlockSetup> {
        match self.redis.as_mut() {
            Some(Servers::Redlock(r)) => Ok(r),
            _ => anyhow::bail!("this fault needs Redlock's masters"),
        }
    }

    /// The cell's Sentinel set.
    pub(super) fn sentinel(&mut self) -> anyhow::Result<&mut SentinelSetup> {
        match self.redis.as_mut() {
            Some(Servers::Sentinel(s)) => Ok(s),
            _ => anyhow::bail!("this fault needs a Sentinel set"),
        }
    }

    /// The cell's Redis Cluster.
    pub(super) fn cluster(&mut self) -> anyhow::Result<&mut ClusterSetup> {
        match self.redis.as_mut() {
            Some(Servers::Cluster(c)) => Ok(c),
            _ => anyhow::bail!("this fault needs a Redis Cluster"),
        }
    }

    /// Worker `slot`'s links to its lock store: its one proxy to Redis, or its proxies to the three
    /// Redlock masters, or its proxies to a run-wide store (a `partition` cell's).
    pub(super) fn links(&mut self, slot: u32) -> anyhow::Result<Vec<&Proxy>> {
        let i = slot as usize;
        Ok(match self.redis.as_ref() {
            Some(Servers::One(r)) => vec![&r.proxies[i]],
            Some(Servers::Redlock(r)) => r.links[i].iter().collect(),
            None if self.store_links.len() > i => self.store_links[i].proxies.iter().collect(),
            _ => {
                anyhow::bail!("this fault needs a lock store reached through the harness's proxies")
            }
        })
    }

    /// The rest of a Sentinel or Cluster failover's window once the replica is promoted: the
    /// failover itself takes seconds, longer than the window, so the target is held until another
    /// worker has found the new primary and written (at most 5 s), and at least the window.
    pub(super) async fn after_promotion(&mut self, slot: u32, started: tokio::time::Instant) {
        let since = self.log.len();
        self.log
            .wait_for(since, Duration::from_secs(5), |s, ev| {
                s != slot && matches!(ev, Event::Wrote { .. })
            })
            .await;
        tokio::time::sleep_until(started + self.timing.hold).await;
    }
}
