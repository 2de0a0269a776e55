//! The watchdog's timetable, kept apart from its task so that its timing can be tested on its own
//! under paused time: which lease is due for renewal, which has passed its deadline, what a renewal's
//! outcome changes.
//!
//! Promise: a lease's loss fires no later than the first call to [`Schedule::due`] at or after its
//! deadline; at most one renewal per lease is in flight; renewals due within a quarter of their
//! period ride along with one that is due now, so leases taken at slightly different times share
//! round trips. Limit: it only decides; the task sends and calls back.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::LostReason;
use crate::lease::clock::ClockRate;
use crate::lease::state::LeaseState;

/// One renewal's outcome, as the task reports it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// The store reset the TTL.
    Yes,
    /// The store no longer holds our token (with the reason the store gives).
    Lost(LostReason),
    /// The request failed or timed out: try again soon.
    Failed,
}

/// Counts of one settled batch, for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) renewed: u64,
    pub(crate) not_ours: u64,
    pub(crate) failed: u64,
}

#[derive(Debug)]
struct Watched {
    state: Arc<LeaseState>,
    /// When the next renewal is due (`None`: renewal off).
    next_renew: Option<Instant>,
    /// A renewal is on the wire; do not send another.
    in_flight: bool,
    /// The instant under which this entry sits in the timer set.
    timer_at: Instant,
}

impl Watched {
    fn next_event(&self) -> Instant {
        let mut t = self.state.effective_deadline();
        if let (Some(r), false) = (self.next_renew, self.in_flight) {
            t = t.min(r);
        }
        t
    }

    /// A quarter of the renewal period: how early a renewal may ride along.
    fn slack(&self) -> Duration {
        self.state.opts.renew_every.unwrap_or_default() / 4
    }
}

/// Every lease one watchdog watches, ordered by its next event (renewal or deadline).
#[derive(Debug, Default)]
pub(crate) struct Schedule {
    watched: HashMap<u64, Watched>,
    timers: BTreeSet<(Instant, u64)>,
}

impl Schedule {
    /// Leases watched.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.watched.len()
    }

    /// When the task must look again (`None`: nothing watched).
    pub(crate) fn next_wake(&self) -> Option<Instant> {
        self.timers.first().map(|(t, _)| *t)
    }

    /// Starts watching a newly taken lease.
    pub(crate) fn watch(&mut self, state: Arc<LeaseState>) {
        let next_renew = state.first_renewal;
        self.insert(Watched {
            state,
            next_renew,
            in_flight: false,
            timer_at: Instant::now(),
        });
    }

    /// Stops watching (released, or handed to a background release).
    pub(crate) fn forget(&mut self, id: u64) {
        if let Some(w) = self.watched.remove(&id) {
            self.timers.remove(&(w.timer_at, id));
        }
    }

    /// Fires the losses due at `now` and returns the leases to renew now, each marked in flight.
    pub(crate) fn due(&mut self, now: Instant) -> Vec<Arc<LeaseState>> {
        let mut due = Vec::new();
        while let Some(&(at, id)) = self.timers.first() {
            if at > now {
                break;
            }
            self.timers.pop_first();
            let Some(mut w) = self.watched.remove(&id) else {
                continue;
            };
            if w.state.is_done() || w.state.check_time(now).is_some() {
                continue;
            }
            if let (Some(r), false) = (w.next_renew, w.in_flight) {
                if r <= now {
                    w.in_flight = true;
                    due.push(w.state.clone());
                }
            }
            self.insert(w);
        }
        if !due.is_empty() {
            self.ride_along(now, &mut due);
        }
        due
    }

    /// Adds to `due` the renewals that fall due within their own slack: renewing a little early is
    /// harmless, and they share the round trip.
    fn ride_along(&mut self, now: Instant, due: &mut Vec<Arc<LeaseState>>) {
        let widest = due
            .iter()
            .map(|s| s.opts.renew_every.unwrap_or_default() / 4)
            .max();
        let horizon = now + widest.unwrap_or_default();
        let early: Vec<(Instant, u64)> = self
            .timers
            .range(..=(horizon, u64::MAX))
            .filter(|&&(at, id)| {
                at > now
                    && self.watched.get(&id).is_some_and(|w| {
                        !w.in_flight && w.next_renew.is_some_and(|r| r <= now + w.slack())
                    })
            })
            .copied()
            .collect();
        for (at, id) in early {
            self.timers.remove(&(at, id));
            if let Some(mut w) = self.watched.remove(&id) {
                w.in_flight = true;
                due.push(w.state.clone());
                self.insert(w);
            }
        }
    }

    /// Applies the outcomes of renewals sent at `sent_at`; `now` is when they came back, `rate` what
    /// the store's replies taught of its clock rate (the deadline and the next renewal are counted
    /// at it).
    pub(crate) fn settle(
        &mut self,
        sent_at: Instant,
        now: Instant,
        rate: Option<ClockRate>,
        outcomes: impl IntoIterator<Item = (u64, Renewed)>,
    ) -> Tally {
        let mut tally = Tally::default();
        for (id, outcome) in outcomes {
            let Some(mut w) = self.watched.remove(&id) else {
                continue;
            };
            self.timers.remove(&(w.timer_at, id));
            w.in_flight = false;
            let every = w.state.opts.renew_every;
            match outcome {
                Renewed::Yes => {
                    tally.renewed += 1;
                    w.state.extend(sent_at, rate);
                    w.next_renew = every.map(|e| sent_at + w.state.renew_period(e, rate));
                }
                Renewed::Lost(reason) => {
                    tally.not_ours += 1;
                    w.state.fire(reason);
                    continue;
                }
                Renewed::Failed => {
                    tally.failed += 1;
                    w.state.renewal_failed();
                    // Retry soon; the deadline fires the signal if retries keep failing.
                    let every = every.unwrap_or(Duration::from_secs(1));
                    w.next_renew = Some(now + (every / 4).max(Duration::from_millis(5)));
                }
            }
            if !w.state.is_done() {
                self.insert(w);
            }
        }
        tally
    }

    fn insert(&mut self, mut w: Watched) {
        let at = w.next_event();
        w.timer_at = at;
        self.timers.insert((at, w.state.id));
        self.watched.insert(w.state.id, w);
    }
}

#[cfg(test)]
mod tests {
    //! Timing under paused tokio time: nothing here waits for real.

    use super::*;
    use crate::lease::options::LeaseOptions;
    use crate::lease::signal::{LeaseHealth, SuspectReason};
    use crate::lease::state::tests::state;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn opts(ttl: u64, every: u64) -> LeaseOptions {
        LeaseOptions::builder()
            .ttl(ms(ttl))
            .renew_every(ms(every))
            .drift(ms(10))
            .build()
            .unwrap()
    }

    /// One lease (TTL 900 ms, renewed every 300) watched from now.
    fn one_watched() -> (Instant, Schedule, Arc<LeaseState>) {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        let st = Arc::new(state(1, opts(900, 300), t0));
        s.watch(st.clone());
        (t0, s, st)
    }

    /// [`one_watched`] at its first renewal: sent now, 300 ms in.
    async fn one_renewing() -> (Instant, Schedule, Arc<LeaseState>, Instant) {
        let (t0, mut s, st) = one_watched();
        tokio::time::advance(ms(300)).await;
        let sent = Instant::now();
        s.due(sent);
        (t0, s, st, sent)
    }

    fn ids(v: &[Arc<LeaseState>]) -> Vec<u64> {
        let mut ids: Vec<u64> = v.iter().map(|s| s.id).collect();
        ids.sort();
        ids
    }

    #[tokio::test(start_paused = true)]
    async fn renews_on_its_period_and_extends_from_the_send_time() {
        let (t0, mut s, st) = one_watched();
        assert_eq!(s.next_wake(), Some(t0 + ms(300)));
        tokio::time::advance(ms(299)).await;
        assert!(s.due(Instant::now()).is_empty());
        tokio::time::advance(ms(1)).await;
        let sent = Instant::now();
        assert_eq!(ids(&s.due(sent)), vec![1]);
        // In flight: not sent again, however often the task looks.
        tokio::time::advance(ms(200)).await;
        assert!(s.due(Instant::now()).is_empty());
        let t = s.settle(sent, Instant::now(), None, [(1, Renewed::Yes)]);
        assert_eq!(t.renewed, 1);
        assert_eq!(st.validity_deadline(), sent + ms(890));
        assert_eq!(s.next_wake(), Some(sent + ms(300)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_store_cannot_delay_the_loss() {
        let (t0, mut s, st) = one_watched();
        tokio::time::advance(ms(300)).await;
        assert_eq!(s.due(Instant::now()).len(), 1);
        // The renewal never comes back. At the deadline (900 - 10 drift) the signal fires.
        tokio::time::advance(ms(589)).await;
        s.due(Instant::now());
        assert!(!st.signal.is_fired());
        assert_eq!(s.next_wake(), Some(t0 + ms(890)));
        tokio::time::advance(ms(1)).await;
        s.due(Instant::now());
        assert_eq!(st.signal.reason(), Some(LostReason::DeadlinePassed));
        assert_eq!(s.len(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_is_retried_at_a_quarter_period() {
        let (t0, mut s, st, sent) = one_renewing().await;
        tokio::time::advance(ms(20)).await;
        let t = s.settle(sent, Instant::now(), None, [(1, Renewed::Failed)]);
        assert_eq!(t.failed, 1);
        assert_eq!(
            st.health_now(),
            LeaseHealth::Suspect {
                reason: SuspectReason::RenewalFailing
            }
        );
        assert_eq!(s.next_wake(), Some(t0 + ms(320 + 75)));
        tokio::time::advance(ms(75)).await;
        let sent = Instant::now();
        assert_eq!(s.due(sent).len(), 1);
        // The retry gets through: held again.
        s.settle(sent, sent, None, [(1, Renewed::Yes)]);
        assert_eq!(st.health_now(), LeaseHealth::Held);
    }

    #[tokio::test(start_paused = true)]
    async fn a_fast_store_clock_brings_the_deadline_and_the_next_renewal_forward() {
        let (_, mut s, st, sent) = one_renewing().await;
        let twice = ClockRate {
            mid: 2.0,
            high: 2.0,
        };
        s.settle(sent, sent, Some(twice), [(1, Renewed::Yes)]);
        // By the store's clock: a 900 ms TTL (less drift) is 445 ms of ours, a 300 ms period 150.
        assert_eq!(st.validity_deadline(), sent + ms(445));
        assert_eq!(s.next_wake(), Some(sent + ms(150)));
        assert!(st.health_now().is_suspect());
        // The store stops answering: the loss comes at the store's TTL, not at twice it.
        tokio::time::advance(ms(150)).await;
        assert_eq!(s.due(Instant::now()).len(), 1);
        tokio::time::advance(ms(295)).await;
        s.due(Instant::now());
        assert_eq!(st.signal.reason(), Some(LostReason::DeadlinePassed));
    }

    #[tokio::test(start_paused = true)]
    async fn not_ours_fires_at_once_and_stops_watching() {
        let (_, mut s, st, sent) = one_renewing().await;
        s.settle(sent, sent, None, [(1, Renewed::Lost(LostReason::NotOurs))]);
        assert_eq!(st.signal.reason(), Some(LostReason::NotOurs));
        assert_eq!((s.len(), s.next_wake()), (0, None));
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_due_soon_ride_along_and_later_ones_wait() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        s.watch(Arc::new(state(1, opts(900, 300), t0)));
        // Due 60 ms later: within a quarter period (75 ms), rides along.
        s.watch(Arc::new(state(2, opts(900, 300), t0 + ms(60))));
        // Due 100 ms later: waits for its own turn.
        s.watch(Arc::new(state(3, opts(900, 300), t0 + ms(100))));
        tokio::time::advance(ms(300)).await;
        assert_eq!(ids(&s.due(Instant::now())), vec![1, 2]);
        tokio::time::advance(ms(100)).await;
        assert_eq!(ids(&s.due(Instant::now())), vec![3]);
    }

    #[tokio::test(start_paused = true)]
    async fn max_hold_stops_renewal_and_fires() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        let o = LeaseOptions::builder()
            .ttl(ms(900))
            .renew_every(ms(300))
            .max_hold(ms(500))
            .build()
            .unwrap();
        let st = Arc::new(state(1, o, t0));
        s.watch(st.clone());
        tokio::time::advance(ms(300)).await;
        let sent = Instant::now();
        s.due(sent);
        s.settle(sent, sent, None, [(1, Renewed::Yes)]);
        assert_eq!(s.next_wake(), Some(t0 + ms(500)));
        tokio::time::advance(ms(200)).await;
        assert!(s.due(Instant::now()).is_empty());
        assert_eq!(st.signal.reason(), Some(LostReason::MaxHoldReached));
    }

    #[tokio::test(start_paused = true)]
    async fn forgotten_and_released_leases_are_not_renewed() {
        let t0 = Instant::now();
        let mut s = Schedule::default();
        let a = Arc::new(state(1, opts(900, 300), t0));
        let b = Arc::new(state(2, opts(900, 300), t0));
        s.watch(a);
        s.watch(b.clone());
        s.forget(1);
        b.released.store(true, std::sync::atomic::Ordering::Release);
        tokio::time::advance(ms(300)).await;
        assert!(s.due(Instant::now()).is_empty());
        assert_eq!(s.len(), 0);
    }
}
