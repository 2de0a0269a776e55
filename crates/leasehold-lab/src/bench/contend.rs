//! The contender loop shared by S2's tasks and S2's worker processes, and the analysis of the holds
//! they record: handoff gaps, cross-contender share, overlapping holds.

use std::time::Duration;

use leasehold::{LeaseClient, LeaseOptions};

use super::baseline::{BaselineHeld, BaselineLock};
use super::floor::FloorWaiter;
use super::measure::{mono_ns, Latencies};

/// Which lock a contender uses.
#[derive(Debug, Clone)]
pub(crate) enum Locker {
    /// leasehold's lease: waits are woken by releases.
    Leasehold {
        client: LeaseClient,
        opts: LeaseOptions,
    },
    /// The baseline lock, polling with jittered pauses.
    Baseline(BaselineLock),
    /// One waiter of the floor of the mechanism: the bare FIFO hand-off.
    Floor(FloorWaiter),
}

/// A lock of any kind while it is held.
enum Held {
    Lease(leasehold::Lease),
    Baseline(BaselineHeld),
    Floor,
}

impl Held {
    /// The fence the hold carries (0 for the locks that have none).
    fn fence(&self) -> u64 {
        match self {
            Held::Lease(lease) => lease.fence().get(),
            Held::Baseline(_) | Held::Floor => 0,
        }
    }
}

impl Locker {
    pub(crate) fn round_trips(&self) -> u64 {
        match self {
            Locker::Leasehold { client, .. } => client.round_trips(),
            Locker::Baseline(b) => b.round_trips(),
            Locker::Floor(w) => w.round_trips(),
        }
    }

    /// Waits for `name` from `now_ns` until `end_ns`: `Ok(None)` when the wait ended first, and then
    /// the contender stops.
    async fn acquire(&self, name: &str, now_ns: u64, end_ns: u64) -> Result<Option<Held>, String> {
        match self {
            Locker::Leasehold { client, opts } => {
                let max_wait = Duration::from_nanos(end_ns - now_ns);
                match client.acquire(name, opts, max_wait).await {
                    Ok(lease) => Ok(Some(Held::Lease(lease))),
                    Err(leasehold::Error::WaitTimeout { .. } | leasehold::Error::Busy { .. }) => {
                        Ok(None)
                    }
                    Err(e) => Err(format!("acquire: {e}")),
                }
            }
            Locker::Baseline(lock) => {
                let key = format!("bench-baseline:{name}");
                match lock.acquire_polling(&key, end_ns).await {
                    Ok(held) => Ok(held.map(Held::Baseline)),
                    Err(e) => Err(format!("acquire: {e:#}")),
                }
            }
            Locker::Floor(waiter) => match waiter.acquire(name, end_ns).await {
                Ok(taken) => Ok(taken.then_some(Held::Floor)),
                Err(e) => Err(format!("acquire: {e:#}")),
            },
        }
    }

    /// Releases `held`: `Ok(false)` when the lock was found lost meanwhile.
    async fn release(&self, name: &str, held: Held) -> Result<bool, String> {
        match (self, held) {
            (_, Held::Lease(lease)) => match lease.release().await {
                Ok(()) => Ok(true),
                Err(leasehold::Error::LeaseLost { .. }) => Ok(false),
                Err(e) => Err(format!("release: {e}")),
            },
            (Locker::Baseline(lock), Held::Baseline(held)) => lock
                .release(held)
                .await
                .map_err(|e| format!("release: {e:#}")),
            (Locker::Floor(waiter), Held::Floor) => waiter
                .release(name)
                .await
                .map(|()| true)
                .map_err(|e| format!("release: {e:#}")),
            _ => Err("release: a hold released through another kind of lock".to_owned()),
        }
    }
}

/// One hold as the holder saw it, on the machine-wide clock: from the acquire's reply to just before
/// the release was sent. The lock was held in Redis at least over this interval, so two recorded
/// holds that overlap are two real holders at once.
#[derive(Debug, Clone, Copy, serde::Serialize, serde::Deserialize)]
pub(crate) struct Hold {
    /// Which contender held it.
    pub(crate) contender: u32,
    /// `CLOCK_MONOTONIC` ns when the contender called acquire (its wait began).
    #[serde(default)]
    pub(crate) asked_ns: u64,
    /// `CLOCK_MONOTONIC` ns when the acquire returned.
    pub(crate) acquired_ns: u64,
    /// `CLOCK_MONOTONIC` ns just before the release was sent.
    pub(crate) released_ns: u64,
    /// The fence the lease carried (0 for the baseline, which has none).
    pub(crate) fence: u64,
}

/// What one contender reports at the end.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub(crate) struct ContenderRecord {
    /// Its holds, in order.
    pub(crate) holds: Vec<Hold>,
    /// Errors other than the final wait timeout (the first message is kept).
    pub(crate) errors: u64,
    /// The first error, for the report.
    pub(crate) first_error: Option<String>,
    /// Releases that found the lease already lost.
    pub(crate) lost: u64,
}

impl ContenderRecord {
    fn error(&mut self, e: impl std::fmt::Display) {
        self.errors += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }
}

/// Takes `name` over and over until `end_ns`, holding it for `hold` each time (a blocking sleep on a
/// blocking-pool thread: tokio's timer rounds up to whole milliseconds, which would double a 1 ms
/// hold).
pub(crate) async fn contend(
    locker: Locker,
    name: String,
    contender: u32,
    hold: Duration,
    end_ns: u64,
) -> ContenderRecord {
    let mut rec = ContenderRecord::default();
    // Stop after a run of consecutive errors: a broken connection would otherwise spin.
    let mut consecutive_errors = 0;
    loop {
        let asked_ns = mono_ns();
        if asked_ns >= end_ns || consecutive_errors >= 20 {
            break;
        }
        match locker.acquire(&name, asked_ns, end_ns).await {
            Ok(Some(held)) => {
                let acquired_ns = mono_ns();
                let fence = held.fence();
                sleep_blocking(hold).await;
                let released_ns = mono_ns();
                rec.holds.push(Hold {
                    contender,
                    asked_ns,
                    acquired_ns,
                    released_ns,
                    fence,
                });
                match locker.release(&name, held).await {
                    Ok(true) => consecutive_errors = 0,
                    Ok(false) => rec.lost += 1,
                    Err(e) => {
                        consecutive_errors += 1;
                        rec.error(e);
                    }
                }
            }
            Ok(None) => break,
            Err(e) => {
                consecutive_errors += 1;
                rec.error(e);
            }
        }
    }
    rec
}

async fn sleep_blocking(d: Duration) {
    // A failed join only means the runtime is shutting down; the hold is over either way.
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(d)).await;
}

/// What the recorded holds of all contenders say.
#[derive(Debug, Default)]
pub(crate) struct HoldAnalysis {
    pub(crate) acquisitions: u64,
    /// Release by one holder → acquire by the next holder, whoever it is.
    pub(crate) handoffs: Latencies,
    /// The same, only where the next holder is a different contender.
    pub(crate) cross_handoffs: Latencies,
    /// Holds that began before an earlier-begun hold had ended.
    pub(crate) overlaps: u64,
    /// Holds whose fence was not above the fence of the hold before them.
    pub(crate) fence_regressions: u64,
    /// How long holders actually held (their sleep overshoots the nominal hold).
    pub(crate) hold_times: Latencies,
    /// The longest time from calling acquire to getting the lease, in nanoseconds.
    pub(crate) max_wait_ns: u64,
    /// The most acquisitions by others while one contender waited (from its call of acquire to
    /// its lease). A FIFO lock lets each of the other contenders go first at most once: at most
    /// contenders − 1, whatever the machine's pauses do to the times.
    pub(crate) max_overtakes: u64,
    /// Each contender's acquisitions, by contender (every contender, those with none included).
    pub(crate) per_contender: Vec<u64>,
    pub(crate) errors: u64,
    pub(crate) lost: u64,
    pub(crate) first_error: Option<String>,
}

pub(crate) fn analyze(records: &[ContenderRecord]) -> HoldAnalysis {
    let mut a = HoldAnalysis::default();
    let mut holds: Vec<Hold> = Vec::new();
    for r in records {
        a.per_contender.push(r.holds.len() as u64);
        holds.extend_from_slice(&r.holds);
        a.errors += r.errors;
        a.lost += r.lost;
        if a.first_error.is_none() {
            a.first_error.clone_from(&r.first_error);
        }
    }
    holds.sort_by_key(|h| (h.acquired_ns, h.released_ns));
    a.acquisitions = holds.len() as u64;
    let mut latest_release = 0u64;
    for (i, h) in holds.iter().enumerate() {
        a.hold_times
            .record_ns(h.released_ns.saturating_sub(h.acquired_ns));
        a.max_wait_ns = a.max_wait_ns.max(h.acquired_ns.saturating_sub(h.asked_ns));
        // The holds before this one (by acquisition) that began after it asked: all others', since
        // a contender asks again only after its release.
        let before_asking = holds[..i].partition_point(|o| o.acquired_ns <= h.asked_ns);
        a.max_overtakes = a.max_overtakes.max((i - before_asking) as u64);
        if i > 0 && h.acquired_ns < latest_release {
            a.overlaps += 1;
        }
        latest_release = latest_release.max(h.released_ns);
        if let Some(prev) = i.checked_sub(1).map(|j| holds[j]) {
            if h.fence != 0 && h.fence <= prev.fence {
                a.fence_regressions += 1;
            }
            let gap = h.acquired_ns.saturating_sub(prev.released_ns);
            a.handoffs.record_ns(gap);
            if h.contender != prev.contender {
                a.cross_handoffs.record_ns(gap);
            }
        }
    }
    a
}

impl HoldAnalysis {
    /// Adds the analysis of another window of the same contenders (contender `i` is the same
    /// contender in both): counts add up, the longest wait and the most overtakes are the larger.
    /// Handoffs are counted within each window only.
    pub(crate) fn merge(&mut self, other: &HoldAnalysis) {
        self.acquisitions += other.acquisitions;
        self.handoffs.add(&other.handoffs);
        self.cross_handoffs.add(&other.cross_handoffs);
        self.overlaps += other.overlaps;
        self.fence_regressions += other.fence_regressions;
        self.hold_times.add(&other.hold_times);
        self.max_wait_ns = self.max_wait_ns.max(other.max_wait_ns);
        self.max_overtakes = self.max_overtakes.max(other.max_overtakes);
        if self.per_contender.len() < other.per_contender.len() {
            self.per_contender.resize(other.per_contender.len(), 0);
        }
        for (mine, theirs) in self.per_contender.iter_mut().zip(&other.per_contender) {
            *mine += theirs;
        }
        self.errors += other.errors;
        self.lost += other.lost;
        if self.first_error.is_none() {
            self.first_error.clone_from(&other.first_error);
        }
    }

    /// The fewest and the most acquisitions of one contender, as fractions of the mean (1.0 when
    /// all had the same share; `(0, 0)` without acquisitions).
    pub(crate) fn share_range(&self) -> (f64, f64) {
        let n = self.per_contender.len();
        let total: u64 = self.per_contender.iter().sum();
        if n == 0 || total == 0 {
            return (0.0, 0.0);
        }
        let mean = total as f64 / n as f64;
        let min = *self.per_contender.iter().min().unwrap_or(&0) as f64;
        let max = *self.per_contender.iter().max().unwrap_or(&0) as f64;
        (min / mean, max / mean)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hold(contender: u32, a: u64, r: u64, fence: u64) -> Hold {
        Hold {
            contender,
            asked_ns: a.saturating_sub(100),
            acquired_ns: a,
            released_ns: r,
            fence,
        }
    }

    #[test]
    fn overlapping_holds_and_cross_handoffs_are_counted() {
        let records = vec![
            ContenderRecord {
                holds: vec![hold(1, 0, 1_000, 1), hold(1, 1_500, 2_500, 2)],
                ..Default::default()
            },
            ContenderRecord {
                // Starts while contender 1's second hold still runs: an overlap.
                holds: vec![hold(2, 2_000, 3_000, 3), hold(2, 5_000, 6_000, 3)],
                ..Default::default()
            },
        ];
        let a = analyze(&records);
        assert_eq!(a.acquisitions, 4);
        assert_eq!(a.overlaps, 1);
        assert_eq!(a.fence_regressions, 1);
        assert_eq!(a.handoffs.len(), 3);
        assert_eq!(a.cross_handoffs.len(), 1);
        assert_eq!(a.max_wait_ns, 100);
        assert_eq!(a.max_overtakes, 0);
        // 2 and 2 acquisitions: both at the mean.
        assert_eq!(a.share_range(), (1.0, 1.0));
    }

    #[test]
    fn windows_merge_into_one_analysis_without_a_handoff_between_them() {
        let first = analyze(&[ContenderRecord {
            holds: vec![hold(0, 1_000, 2_000, 1), hold(0, 2_100, 3_000, 2)],
            ..Default::default()
        }]);
        // The second window starts long after the first: no handoff spans the gap.
        let second = analyze(&[
            ContenderRecord {
                holds: vec![hold(0, 1_000_000, 1_001_000, 3)],
                ..Default::default()
            },
            ContenderRecord {
                holds: vec![hold(1, 1_001_500, 1_002_000, 4)],
                errors: 1,
                first_error: Some("e".into()),
                ..Default::default()
            },
        ]);
        let mut merged = HoldAnalysis::default();
        merged.merge(&first);
        merged.merge(&second);
        assert_eq!(merged.acquisitions, 4);
        assert_eq!(merged.handoffs.len(), 2, "one handoff in each window");
        assert_eq!(merged.cross_handoffs.len(), 1);
        assert_eq!(merged.per_contender, vec![3, 1]);
        assert_eq!(merged.hold_times.len(), 4);
        assert_eq!(merged.errors, 1);
        assert_eq!(merged.first_error.as_deref(), Some("e"));
        assert_eq!(merged.max_wait_ns, 100);
        assert_eq!(merged.overlaps, 0);
    }

    #[test]
    fn shares_are_fractions_of_the_mean() {
        let records = vec![
            ContenderRecord {
                holds: vec![hold(0, 0, 1, 1), hold(0, 2, 3, 2), hold(0, 4, 5, 3)],
                ..Default::default()
            },
            ContenderRecord {
                holds: vec![hold(1, 6, 7, 4)],
                ..Default::default()
            },
        ];
        // 3 and 1 around a mean of 2.
        assert_eq!(analyze(&records).share_range(), (0.5, 1.5));
    }

    #[test]
    fn disjoint_holds_have_no_overlap() {
        let records = vec![ContenderRecord {
            holds: vec![hold(1, 0, 10, 1), hold(2, 10, 20, 2), hold(1, 25, 30, 3)],
            ..Default::default()
        }];
        let a = analyze(&records);
        assert_eq!(a.overlaps, 0);
        assert_eq!(a.fence_regressions, 0);
        assert_eq!(a.cross_handoffs.len(), 2);
    }

    #[test]
    fn overtakes_count_the_others_served_while_one_waited() {
        let at = |contender, asked_ns, acquired_ns| Hold {
            contender,
            asked_ns,
            acquired_ns,
            released_ns: acquired_ns + 5,
            fence: acquired_ns,
        };
        // Contender 0 asks at 1 and is served at 40; 1, 2 and 3 are served in between (2 asked
        // before 0 did, 3 after: both count, the wait is what it is). 1's second hold, asked at
        // 16, is overtaken by 2 and 3, and by 0's.
        let records = vec![
            ContenderRecord {
                holds: vec![at(0, 1, 40)],
                ..Default::default()
            },
            ContenderRecord {
                holds: vec![at(1, 0, 10), at(1, 16, 50)],
                ..Default::default()
            },
            ContenderRecord {
                holds: vec![at(2, 0, 20)],
                ..Default::default()
            },
            ContenderRecord {
                holds: vec![at(3, 5, 30)],
                ..Default::default()
            },
        ];
        assert_eq!(analyze(&records).max_overtakes, 3);
        // Alone, nobody overtakes.
        let alone = vec![ContenderRecord {
            holds: vec![at(0, 0, 1), at(0, 6, 7)],
            ..Default::default()
        }];
        assert_eq!(analyze(&alone).max_overtakes, 0);
    }
}
