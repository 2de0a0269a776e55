//! The store's clock as a scheduler reckons by it: every replica that reads the same store's clock
//! agrees on "now" whatever its own clock says, so replicas whose clocks disagree by more than half
//! a period still agree on a slot.
//!
//! A reading is one request ([`LeaseClient::store_clock_ms`]): the store read its clock between the
//! request's send and its reply, so the offset from ours is known within half the round trip (the
//! fastest of up to three readings is kept). Readings are refreshed at most every
//! [`StoreClock::refresh`] (30 s by default), so a thousand jobs cost one request per refresh, not
//! one per job.
//!
//! Promise: [`StoreClock::now_ms`] is the store's time within the reading's half round trip plus
//! what the two clocks drifted apart since the reading (a disciplined clock drifts well under 1 ms in
//! 30 s). Limit: a store with no clock of its own (etcd) or several (Redlock) gives none: the
//! replica's own clock is used, and replicas then agree on a slot only as well as their clocks agree
//! ([`StoreClock::source`] says which).

use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

use crate::error::Result;
use crate::lease::LeaseClient;

/// Where [`StoreClock::now_ms`] gets its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockSource {
    /// The store's clock (Redis `TIME`, PostgreSQL `clock_timestamp()`, MariaDB `NOW(3)`).
    Store,
    /// This replica's clock: the store has none.
    Local,
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    /// Store time minus our time, in milliseconds.
    offset_ms: i64,
    /// Half the round trip of the reading: the offset's uncertainty.
    error_ms: i64,
    /// When it was taken, by the monotonic clock.
    at: Instant,
}

/// The store's time, estimated from readings of its clock; shared by every job of a scheduler.
#[derive(Debug)]
pub struct StoreClock {
    client: LeaseClient,
    refresh: Duration,
    source: Mutex<ClockSource>,
    last: Mutex<Option<Reading>>,
    /// One refresh at a time: the others use the reading it brings.
    refreshing: tokio::sync::Mutex<()>,
}

/// This machine's clock, in milliseconds since the Unix epoch (negative before it).
pub fn local_ms() -> i64 {
    match SystemTime::now().duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

impl StoreClock {
    /// Reads `client`'s store clock once (to learn whether it has one).
    ///
    /// # Errors
    ///
    /// Store errors of the first reading.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn new(client: LeaseClient) -> Result<Self> {
        let clock = StoreClock {
            client,
            refresh: Duration::from_secs(30),
            source: Mutex::new(ClockSource::Local),
            last: Mutex::new(None),
            refreshing: tokio::sync::Mutex::new(()),
        };
        clock.read().await?;
        Ok(clock)
    }

    /// Refreshes the reading at most this often (default 30 s).
    #[must_use]
    pub fn refresh(mut self, every: Duration) -> Self {
        self.refresh = every.max(Duration::from_millis(100));
        self
    }

    /// Which clock [`now_ms`](Self::now_ms) follows.
    pub fn source(&self) -> ClockSource {
        *self.source.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The store's clock minus this machine's, in milliseconds, as last read (0 for a store without
    /// a clock), and its uncertainty.
    pub fn offset_ms(&self) -> (i64, i64) {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        last.map_or((0, 0), |r| (r.offset_ms, r.error_ms))
    }

    /// The store's time now by the last reading, without asking the store.
    pub fn estimate_ms(&self) -> i64 {
        local_ms() + self.offset_ms().0
    }

    /// The store's time now, in milliseconds since the epoch: the last reading, refreshed first
    /// when it is older than [`refresh`](Self::refresh). A refresh that fails keeps the last
    /// reading (logged): a store that is down does not stop the clock.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn now_ms(&self) -> i64 {
        let stale = {
            let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
            last.is_none_or(|r| r.at.elapsed() >= self.refresh)
        };
        if stale && self.source() == ClockSource::Store {
            let _one = self.refreshing.lock().await;
            let still = {
                let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
                last.is_none_or(|r| r.at.elapsed() >= self.refresh)
            };
            if still {
                if let Err(e) = self.read().await {
                    tracing::warn!(error = %e, "reading the store's clock failed; keeping the last reading");
                }
            }
        }
        self.estimate_ms()
    }

    /// Up to three readings; keeps the one with the shortest round trip.
    async fn read(&self) -> Result<()> {
        let mut best: Option<Reading> = None;
        for _ in 0..3 {
            let sent_local = local_ms();
            let sent = Instant::now();
            let Some(store_ms) = self.client.store_clock_ms().await? else {
                *self.source.lock().unwrap_or_else(|p| p.into_inner()) = ClockSource::Local;
                return Ok(());
            };
            let rtt = i64::try_from(sent.elapsed().as_millis()).unwrap_or(i64::MAX);
            let reading = Reading {
                offset_ms: store_ms - (sent_local + rtt / 2),
                error_ms: rtt / 2 + 1,
                at: Instant::now(),
            };
            if best.is_none_or(|b| reading.error_ms < b.error_ms) {
                best = Some(reading);
            }
            if rtt < 5 {
                break;
            }
        }
        *self.source.lock().unwrap_or_else(|p| p.into_inner()) = ClockSource::Store;
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = best;
        Ok(())
    }
}
