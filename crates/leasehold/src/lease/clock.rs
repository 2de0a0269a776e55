//! The store's clock against ours: how fast the store's clock advances per second of the holder's
//! own, learned from the store's time carried by its replies (Redis: `TIME` in the acquire and
//! renewal scripts).
//!
//! Every reply that carries the store's time is a sample: the local instant the request was sent,
//! the local instant the reply came back, and the store's time in between. Two samples bound the
//! rate: the store's elapsed time over the local time between the first reply and the second send
//! (the shortest local interval that can hold both store readings) is the highest rate the samples
//! allow; over the midpoints, the likeliest.
//!
//! Promise: [`ClockRate::high`] is never below the true rate while the store's clock runs steadily
//! (a store clock stepped forward between two samples reads as fast: the safe side, since the store
//! expires keys by that clock too). A reading that goes backwards (the store's clock stepped back, or
//! another node answered) starts the learning over.
//! Limit: nothing is known before two samples, at least [`MIN_BASELINE`] apart, have come back; the
//! rate is an average over up to [`WINDOW`], so it follows a change of rate within that long.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Shortest local interval between two samples that gives a reading: under it, the round trips'
/// uncertainty would swamp the rate.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) const MIN_BASELINE: Duration = Duration::from_millis(50);

/// The longest interval the rate is averaged over; older samples are forgotten.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) const WINDOW: Duration = Duration::from_secs(600);

/// Samples kept as the older end of the interval, spaced at least `WINDOW / ANCHORS` apart.
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
const ANCHORS: usize = 16;

/// The store's clock rate against the holder's: store seconds per local second. A store of its own
/// (outside the crate) that learns its clock's rate returns one from
/// [`Store::clock_rate`](crate::lease::store::Store::clock_rate).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ClockRate {
    /// The likeliest rate (over the samples' midpoints).
    pub mid: f64,
    /// The highest rate the samples allow (over the shortest local interval that holds them); the
    /// holder counts its deadline at this one.
    pub high: f64,
}

impl ClockRate {
    /// A rate of `mid` store seconds per local second at likeliest, `high` at most.
    pub fn new(mid: f64, high: f64) -> Self {
        ClockRate { mid, high }
    }

    /// By how much the store's clock runs faster than ours, in parts per million (0 when it is not
    /// faster).
    pub(crate) fn fast_per_million(&self) -> u32 {
        let ppm = ((self.mid - 1.0) * 1e6).round();
        if ppm.is_finite() && ppm > 0.0 {
            ppm.min(f64::from(u32::MAX)) as u32
        } else {
            0
        }
    }

    /// `local` counted at this rate, for a deadline: a local interval the store's clock covers in no
    /// more than `local` of its own (never longer than `local`).
    pub(crate) fn scale_down(&self, local: Duration) -> Duration {
        if self.high.is_finite() && self.high > 1.0 {
            local.div_f64(self.high)
        } else {
            local
        }
    }
}

/// One reply that carried the store's time.
#[derive(Debug, Clone, Copy)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
struct Sample {
    sent: Instant,
    received: Instant,
    /// The store's time, in microseconds.
    store_us: i64,
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))]
impl Sample {
    fn mid(&self) -> Instant {
        self.sent + self.received.saturating_duration_since(self.sent) / 2
    }
}

#[derive(Debug, Default)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
struct Samples {
    /// Older samples, oldest first: the far end of the interval.
    anchors: VecDeque<Sample>,
    /// The newest sample.
    latest: Option<Sample>,
}

/// What one store's replies taught about its clock. Shared by every lease of a client on that store.
/// Only the Redis store (one server) feeds one.
#[derive(Debug, Default)]
#[cfg_attr(not(feature = "redis"), allow(dead_code))]
pub(crate) struct ClockWatch {
    samples: Mutex<Samples>,
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))]
impl ClockWatch {
    /// Records a reply sent at `sent`, received at `received`, that read the store's clock as
    /// `store_us` microseconds.
    pub(crate) fn sample(&self, sent: Instant, received: Instant, store_us: i64) {
        let s = Sample {
            sent,
            received: received.max(sent),
            store_us,
        };
        let mut g = self.samples.lock().expect("clock samples lock");
        if let Some(latest) = g.latest {
            if store_us < latest.store_us || s.sent < latest.sent {
                if s.sent >= latest.sent {
                    // The store's clock went back (a step, or another node): learn again.
                    g.anchors.clear();
                    g.latest = Some(s);
                }
                // A reply to an older request that arrived late: nothing new.
                return;
            }
            let spacing = WINDOW / ANCHORS as u32;
            let newest_anchor = g.anchors.back().map(|a| a.sent);
            if newest_anchor.is_none_or(|a| latest.sent.saturating_duration_since(a) >= spacing) {
                g.anchors.push_back(latest);
            }
        }
        g.latest = Some(s);
        // Forget anchors older than the window, keeping one that still gives a reading.
        while g.anchors.len() > 1
            && s.sent.saturating_duration_since(g.anchors[1].received) >= WINDOW
        {
            g.anchors.pop_front();
        }
        while g.anchors.len() > ANCHORS {
            g.anchors.pop_front();
        }
    }

    /// The rate learned so far; `None` before two samples far enough apart came back.
    pub(crate) fn rate(&self) -> Option<ClockRate> {
        let g = self.samples.lock().expect("clock samples lock");
        let latest = g.latest?;
        let mut rate = rate_between(g.anchors.front()?, &latest)?;
        // Each anchor bounds the rate; the tightest bound holds (a slow round trip widens one).
        for a in g.anchors.iter().skip(1) {
            if let Some(r) = rate_between(a, &latest) {
                rate.high = rate.high.min(r.high);
            }
        }
        Some(rate)
    }
}

#[cfg_attr(not(feature = "redis"), allow(dead_code))]
fn rate_between(a: &Sample, b: &Sample) -> Option<ClockRate> {
    let shortest = b.sent.checked_duration_since(a.received)?;
    if shortest < MIN_BASELINE {
        return None;
    }
    let store = u64::try_from(b.store_us - a.store_us).ok()?;
    let store = Duration::from_micros(store).as_secs_f64();
    let mid = b.mid().saturating_duration_since(a.mid()).as_secs_f64();
    Some(ClockRate {
        mid: store / mid,
        high: store / shortest.as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn two_samples_bound_the_rate_and_the_bound_covers_the_round_trip() {
        let w = ClockWatch::default();
        let t0 = Instant::now();
        assert_eq!(w.rate(), None);
        // The store's clock runs twice as fast as ours; each round trip takes 2 ms.
        w.sample(t0, t0 + ms(2), 1_000_000 + 2_000);
        assert_eq!(w.rate(), None, "one sample says nothing");
        w.sample(t0 + ms(20), t0 + ms(22), 1_000_000 + 42_000);
        assert_eq!(w.rate(), None, "under the minimal baseline");
        w.sample(t0 + ms(1_000), t0 + ms(1_002), 1_000_000 + 2_002_000);
        let r = w.rate().unwrap();
        assert!((r.mid - 2.0).abs() < 1e-9, "{r:?}");
        assert!(r.high >= 2.0 && r.high < 2.01, "{r:?}");
        assert_eq!(r.fast_per_million(), 1_000_000);
        assert!(r.scale_down(ms(1_000)) <= ms(500));
    }

    #[test]
    fn a_clock_that_goes_back_starts_over_and_a_late_reply_changes_nothing() {
        let w = ClockWatch::default();
        let t0 = Instant::now();
        w.sample(t0, t0, 5_000_000);
        w.sample(t0 + ms(500), t0 + ms(500), 5_500_000);
        assert!(w.rate().is_some());
        // A reply to a request sent before the latest one: ignored.
        w.sample(t0 + ms(100), t0 + ms(600), 5_100_000);
        let r = w.rate().unwrap();
        assert!((r.mid - 1.0).abs() < 1e-9, "{r:?}");
        // The store's clock stepped back a second: nothing is known until two new samples.
        w.sample(t0 + ms(700), t0 + ms(700), 4_700_000);
        assert_eq!(w.rate(), None);
        w.sample(t0 + ms(900), t0 + ms(900), 4_900_000);
        assert!((w.rate().unwrap().mid - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_slower_store_clock_never_stretches_a_deadline() {
        let r = ClockRate {
            mid: 0.5,
            high: 0.5,
        };
        assert_eq!(r.scale_down(ms(1_000)), ms(1_000));
        assert_eq!(r.fast_per_million(), 0);
    }
}
