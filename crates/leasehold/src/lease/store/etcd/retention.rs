//! The etcd lease that a name's fence record is attached to, so that the record of a name no longer
//! used goes after the retention instead of staying forever.
//!
//! One such lease per client per period (a quarter of the retention, at least a second), granted
//! with a TTL of retention + period and never kept alive: a record written while a lease is current
//! outlives that write by at least the retention. The fence is the cluster's revision, which only
//! grows whether the record is there or not, so a record that went takes no fence back with it.
//!
//! Promise: a record attached to the lease [`RetentionLease::get`] returns outlives its write by at
//! least the retention (the lease was granted no later than the write, serves writes for one
//! period, and lives retention + period); concurrent writers share one grant per period.
//!
//! Limit: a record goes at most about retention + period after its last write, not at exactly the
//! retention; a cluster restored from an older snapshot may have lost the current lease, which the
//! store must notice and [`RetentionLease::forget`].

use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

/// The current retention lease of one client.
#[derive(Debug)]
pub(crate) struct RetentionLease {
    retention: Duration,
    /// The lease in use and when it was granted (before the request was sent).
    current: Mutex<Option<(i64, Instant)>>,
}

impl RetentionLease {
    pub(crate) fn new(retention: Duration) -> Self {
        RetentionLease {
            retention,
            current: Mutex::new(None),
        }
    }

    /// How long one lease serves new writes.
    fn period(&self) -> Duration {
        (self.retention / 4).max(Duration::from_secs(1))
    }

    /// The TTL to grant a new lease with, in whole seconds (rounded up).
    pub(crate) fn ttl_s(&self) -> i64 {
        let ttl = self.retention + self.period();
        i64::try_from(ttl.as_millis().div_ceil(1000)).unwrap_or(i64::MAX)
    }

    /// The lease to attach a record to now: the current one while it serves, else the one `grant`
    /// returns (the etcd lease id), which becomes current. Concurrent callers share one grant.
    pub(crate) async fn get<F, Fut, E>(&self, grant: F) -> Result<i64, E>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<i64, E>>,
    {
        let mut current = self.current.lock().await;
        if let Some((id, at)) = *current {
            if at.elapsed() < self.period() {
                return Ok(id);
            }
        }
        let at = Instant::now();
        let id = grant().await?;
        *current = Some((id, at));
        Ok(id)
    }

    /// Forgets the current lease (etcd said it is gone: a cluster restored from an older snapshot).
    pub(crate) async fn forget(&self) {
        *self.current.lock().await = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_outlives_every_write_it_serves_by_the_retention() {
        for secs in [1, 7, 3_600] {
            let r = RetentionLease::new(Duration::from_secs(secs));
            // A write at the end of the period still has the retention left.
            let left = Duration::from_secs(r.ttl_s() as u64) - r.period();
            assert!(left >= Duration::from_secs(secs), "{secs}: {left:?}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_grant_per_period() {
        let r = RetentionLease::new(Duration::from_secs(8));
        let mut grants = 0;
        let mut next = || {
            grants += 1;
            let id = grants;
            async move { Ok::<i64, ()>(id) }
        };
        assert_eq!(r.get(&mut next).await, Ok(1));
        assert_eq!(r.get(&mut next).await, Ok(1));
        tokio::time::advance(Duration::from_millis(1_999)).await;
        assert_eq!(r.get(&mut next).await, Ok(1));
        tokio::time::advance(Duration::from_millis(2)).await;
        assert_eq!(r.get(&mut next).await, Ok(2));
        r.forget().await;
        assert_eq!(r.get(&mut next).await, Ok(3));
    }
}
