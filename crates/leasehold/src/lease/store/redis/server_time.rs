//! The server's clock as this client last saw it, so that the scripts on the hot path need not read
//! it (`TIME`): an acquire sends an estimate of the server's time instead, taken from a reply that
//! carried the server's time (an acquire that read `TIME`, any renewal).
//!
//! The estimate is a pair of bounds: the server read its clock somewhere between the request's send
//! and its reply, so `now` on the server lies between `read + (now - received)` (no later than the
//! server's time) and `read + (now - sent)` (no earlier). The fence's floor takes the upper bound (a
//! floor that is too high only makes fences jump); a hand-over's time the lower one (a lease counted
//! from too early only ends too early).
//!
//! Promise: an estimate is at most [`FRESH`] old by this process's monotonic clock, its bounds are
//! widened by [`RATE_SLACK`] of its age (clocks that run at rates up to that far apart stay inside
//! them), and none is given when the wall clock and the monotonic clock disagree about the time
//! since it was taken by more than [`AGREE`] (the process or its machine was suspended, or the wall
//! clock stepped): the caller then sends none and the script reads `TIME`, which refreshes the
//! estimate. Limit: the
//! bounds hold for the server whose clock was read; after a failover to another server they are as
//! good as the two servers' clocks agree, which is what the fence's floor assumed anyway.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

/// Longest an estimate is used before the server's clock is read again (a client that acquires
/// often reads `TIME` once in so long).
pub(crate) const FRESH: Duration = Duration::from_secs(5);

/// How far apart the server's clock and ours may run, as a fraction of the time since the reading:
/// 1,000 parts per million, twice what NTP lets a disciplined clock slew. The bounds widen by this
/// much of their age (5 ms at the most).
pub(crate) const RATE_SLACK: f64 = 1e-3;

/// Largest disagreement between the wall clock and the monotonic clock about the time since the
/// estimate was taken that is still read as the same time passing on both.
pub(crate) const AGREE: Duration = Duration::from_millis(20);

/// A reading slower than this (a loaded machine, a reconnect) is not kept: its bounds are wide.
const SLOW_READING: Duration = Duration::from_millis(50);

/// The server's time now, in microseconds: never later than it (`lo`), never earlier (`hi`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Estimate {
    /// No later than the server's clock now.
    pub(crate) lo: i64,
    /// No earlier than the server's clock now.
    pub(crate) hi: i64,
}

#[derive(Debug, Clone, Copy)]
struct Reading {
    sent: Instant,
    received: Instant,
    wall: SystemTime,
    server_us: i64,
}

/// The last reading of the server's clock, shared by the store's clones.
#[derive(Debug, Default)]
pub(crate) struct ServerTime {
    last: Mutex<Option<Reading>>,
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

impl ServerTime {
    /// Keeps a reading of the server's clock (`server_us`, read between `sent` and `received`), unless
    /// a newer one is kept already or it took too long to be precise.
    pub(crate) fn learn(&self, sent: Instant, received: Instant, server_us: i64) {
        if received.saturating_duration_since(sent) > SLOW_READING {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        if last.is_some_and(|r| r.received >= received) {
            return;
        }
        *last = Some(Reading {
            sent,
            received,
            wall: SystemTime::now(),
            server_us,
        });
    }

    /// The server's time now, or `None` when the last reading is too old, missing, or the clocks
    /// disagree about the time since (the script then reads `TIME`).
    pub(crate) fn estimate(&self) -> Option<Estimate> {
        let r = (*self.last.lock().unwrap_or_else(|p| p.into_inner()))?;
        let now = Instant::now();
        let since = now.saturating_duration_since(r.received);
        if since > FRESH {
            return None;
        }
        let wall_since = SystemTime::now().duration_since(r.wall).ok()?;
        if wall_since.abs_diff(since) > AGREE {
            return None;
        }
        let slack = micros(since.mul_f64(RATE_SLACK));
        Some(Estimate {
            lo: r.server_us.saturating_add(micros(since)) - slack,
            hi: r
                .server_us
                .saturating_add(micros(now.saturating_duration_since(r.sent)))
                .saturating_add(slack),
        })
    }

    /// Forgets the reading (the server may have changed: a reconnect, a failover).
    #[allow(dead_code)]
    pub(crate) fn forget(&self) {
        *self.last.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_estimate_brackets_the_server_clock_and_goes_stale() {
        let t = ServerTime::default();
        assert_eq!(t.estimate(), None, "nothing read yet");
        let received = Instant::now() - Duration::from_millis(1);
        let sent = received - Duration::from_millis(2);
        t.learn(sent, received, 1_000_000_000);
        let e = t.estimate().expect("fresh");
        // The server read 1e9 µs somewhere in [sent, received]: now it is at least 1e9 + (now -
        // received) and at most 1e9 + (now - sent), 2 ms apart.
        assert!(e.lo >= 1_000_000_000 && e.hi >= e.lo + 2_000, "{e:?}");
        assert!(e.hi - e.lo <= 2_100, "{e:?}");
        assert!(
            e.lo >= 1_000_000_000 + 1_000,
            "at least the time since the reply: {e:?}"
        );
        // A slow reading is not kept; an older one does not replace a newer one.
        t.learn(sent, sent + Duration::from_secs(1), 5);
        t.learn(sent, received - Duration::from_millis(1), 7);
        assert!(t.estimate().expect("kept").lo >= 1_000_000_000);
        // Too old: none.
        let old = ServerTime::default();
        let long_ago = Instant::now() - FRESH - Duration::from_millis(10);
        old.learn(long_ago, long_ago + Duration::from_millis(1), 1);
        assert_eq!(old.estimate(), None);
        t.forget();
        assert_eq!(t.estimate(), None);
    }
}
