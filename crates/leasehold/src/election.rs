//! Leader election whose **term is a fence**: one candidate of a name leads at a time, and every new
//! leader's term is strictly greater than every earlier leader's, so a resource that checks the term
//! ([`Database::begin_fenced`](crate::db::Database::begin_fenced) and the other fenced writes) refuses
//! a deposed leader that still acts.
//!
//! An election is a lease under the election's name, taken by [`Election::campaign`] (which waits as
//! [`LeaseClient::acquire`] does: in the store's FIFO hand-off where it has one, woken by the release,
//! never polling), plus a small record the leader writes beside it
//! ([`Lease::write_note`]): the value it advertises (an address, an id), its term, its holder
//! identity and since when it leads. [`Election::leader`] reads who leads without campaigning;
//! [`Election::observe`] follows changes; [`Leadership::proclaim`] changes the advertised value
//! without an election; [`Leadership::resign`] releases, and the next candidate in the queue leads
//! within about one round trip, not a TTL.
//!
//! Promise: as the lease's: while no leader pauses past its deadline and the store keeps its data,
//! at most one candidate leads a name; a leader is told (its [`LostSignal`]) as soon as its
//! leadership is no longer safe, and ([`Leadership::health`]) when it is at risk before that; the
//! term never goes backwards. The record [`Election::leader`] reports belongs to the current leader
//! (it is matched to the holder by term or token), or its value is `None` (a leader that has not
//! written one yet, or a plain lease on the same name).
//!
//! Limit: a leader paused past its lease, or a failover that lost the lock write, gives two
//! leaders for a while, as it gives two holders of a lease; only a resource that checks the term
//! keeps the data right. [`Election::observe`] learns of a change within about one round trip where
//! the store pushes changes (Redis, PostgreSQL, etcd), but a notice can be lost (a dropped
//! connection), so it also reads every [`DEFAULT_SAFETY_EVERY`] and at the lease's known end; a store
//! that cannot push (MariaDB/MySQL, Redlock) is read every [`DEFAULT_OBSERVE_EVERY`]. What it reports
//! is for dashboards, routing and health checks, never for deciding who may write.
//!
//! # Example: lead, advertise an address, step down on loss
//!
//! ```no_run
//! use std::time::Duration;
//! use leasehold::election::Election;
//! use leasehold::{LeaseClient, LeaseOptions};
//!
//! # async fn serve(_term: leasehold::Fence) {}
//! # async fn example() -> leasehold::Result<()> {
//! let client = LeaseClient::connect("redis://127.0.0.1:6379/").await?;
//! let opts = LeaseOptions::with_ttl(Duration::from_secs(10))?;
//! let election = Election::new(&client, "scheduler", &opts)?;
//! let leadership = election.campaign("10.0.0.5:8080", Duration::MAX).await?;
//! let lost = leadership.lost();
//! tokio::select! {
//!     // Present the term to the resource, so that it refuses this leader once deposed.
//!     _ = serve(leadership.term()) => leadership.resign().await?,
//!     reason = lost.fired() => eprintln!("deposed: {reason}"),
//! }
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lease::recorded::{self, is_holders, unix_ms, Recorded};
use crate::lease::store::{Changes, LeaseInfo};
use crate::lease::{HealthWatch, Lease, LeaseClient, LeaseHealth, LeaseOptions, LostSignal};
use tokio::time::Instant;

/// Longest advertised value, in bytes: what is left of a note for it beside the term, the holder
/// identity and the time.
pub const MAX_VALUE_LEN: usize = 512;

/// Longest holder identity, in bytes.
pub const MAX_HOLDER_LEN: usize = 128;

/// How often [`Observer`] reads a store that cannot push changes (MariaDB/MySQL, Redlock, a store
/// of your own without [`Store::changes`](crate::lease::store::Store::changes)), unless told
/// otherwise ([`Observer::every`]): a change there is seen up to this late (plus one read).
pub const DEFAULT_OBSERVE_EVERY: Duration = Duration::from_millis(250);

/// How often [`Observer`] reads a store that pushes changes (Redis, PostgreSQL, etcd) besides on
/// each notice and at the lease's known end, unless told otherwise ([`Observer::safety_every`]):
/// what bounds the delay when a notice is lost.
pub const DEFAULT_SAFETY_EVERY: Duration = Duration::from_secs(2);

/// Read this long after the lease's remaining TTL as last read, so that the read lands after the
/// store's expiry: a lapsed lease is a change nobody announces.
const AFTER_END: Duration = Duration::from_millis(5);

/// An election on one name, through one client. Cheap to clone.
///
/// # Examples
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> leasehold::Result<()> {
/// use std::time::Duration;
/// use leasehold::election::Election;
/// use leasehold::{LeaseClient, LeaseOptions};
///
/// let client = LeaseClient::connect("redis://127.0.0.1:6379/").await?;
/// let opts = LeaseOptions::with_ttl(Duration::from_secs(5))?;
/// let election = Election::new(&client, "doc-election", &opts)?;
/// let leadership = election.campaign("10.0.0.5:8080", Duration::from_secs(5)).await?;
/// // Anyone can read who leads, and the term to expect from it.
/// let leader = election.leader().await?.expect("someone leads");
/// assert_eq!(leader.value.as_deref(), Some("10.0.0.5:8080"));
/// assert_eq!(leader.term, leadership.term());
/// leadership.resign().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    client: LeaseClient,
    name: String,
    opts: LeaseOptions,
    holder: String,
}

/// Who leads a name, as [`Election::leader`] read it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct Leader {
    /// The election's name.
    pub name: String,
    /// The leader's term: its lease's fence.
    pub term: Fence,
    /// The value it advertises (`None`: it has written none yet, or the name is held by a plain
    /// lease, not a candidate).
    pub value: Option<String>,
    /// Its holder identity (host name, process id and a random id unless the candidate chose
    /// one; `None` as for `value`).
    pub holder: Option<String>,
    /// When it became leader, in milliseconds since the Unix epoch by the leader's clock.
    pub since_unix_ms: Option<u64>,
    /// Its lease's remaining TTL as the store judged it, in milliseconds.
    pub ttl_ms: Option<u64>,
}

/// The record a leader writes beside its lease, as JSON in the lease's note.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct Record {
    /// The record's format.
    election: u32,
    term: u64,
    value: String,
    holder: String,
    since_unix_ms: u64,
    /// The first 12 hex digits of the leader's lease token: matches the record to the holder where
    /// the store reports holders' tokens (Redis, Redlock), whose fence alone may not.
    tag: String,
}

impl Record {
    /// Whether this is a record of this format.
    fn is_valid(&self) -> bool {
        self.election == 1
    }

    /// Whether this record is the current holder's ([`is_holders`]).
    fn is_of(&self, info: &LeaseInfo) -> bool {
        is_holders(info, self.term, &self.tag)
    }
}

/// This process's default holder identity: `host:pid:random`.
pub fn default_holder() -> String {
    format!(
        "{}:{:08x}",
        crate::lease::holder::default_label(),
        rand::random::<u32>()
    )
}

fn check_text(what: &'static str, s: &str, max: usize) -> Result<()> {
    if s.len() > max {
        return Err(Error::invalid(
            what,
            format!(
                "{} bytes is over the {max}-byte limit; advertise a pointer (an address, an id)",
                s.len()
            ),
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(Error::invalid(
            what,
            "control characters are refused (they would garble `leasehold leader` output)",
        ));
    }
    Ok(())
}

impl Election {
    /// An election on `name` (a lease name) through `client`, whose leaders hold a lease with
    /// `opts` (its TTL bounds how long a crashed leader keeps the others waiting).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad name, or options for more than one permit (a leader is one).
    pub fn new(client: &LeaseClient, name: &str, opts: &LeaseOptions) -> Result<Self> {
        client.check_name(name)?;
        if opts.permits() > 1 {
            return Err(Error::invalid(
                "election options",
                "an election has one leader: use options with one permit",
            ));
        }
        Ok(Election {
            client: client.clone(),
            name: name.to_owned(),
            opts: opts.clone(),
            holder: default_holder(),
        })
    }

    /// The holder identity this candidate shows when it leads (default [`default_holder`]): at
    /// most [`MAX_HOLDER_LEN`] bytes, no control characters. Shown to anyone who can read the
    /// store: put nothing secret there.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for one too long or with control characters.
    pub fn with_holder(mut self, holder: &str) -> Result<Self> {
        check_text("holder", holder, MAX_HOLDER_LEN)?;
        self.holder = holder.to_owned();
        Ok(self)
    }

    /// The election's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Campaigns: waits up to `max_wait` to lead (`Duration::MAX`: for as long as it takes; zero:
    /// one try), then writes the leader record with `value` (at most [`MAX_VALUE_LEN`] bytes, no
    /// control characters). The wait is the lease's: FIFO where the store queues waiters, woken by
    /// the leader's release or resignation.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad value (before anything is sent) or a store that keeps no notes;
    /// [`Error::Busy`] (zero wait) or [`Error::WaitTimeout`] when another candidate still leads;
    /// [`Error::LeaseLost`] when the leadership was lost before its record was written; store
    /// errors. Whatever fails after the lease was taken releases it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: cancelled while waiting, it leaves the queue; cancelled after it took the lease,
    /// the lease is released in the background.
    pub async fn campaign(&self, value: &str, max_wait: Duration) -> Result<Leadership> {
        check_text("leader value", value, MAX_VALUE_LEN)?;
        let lease = if max_wait.is_zero() {
            self.client.try_acquire(&self.name, &self.opts).await?
        } else {
            loop {
                match self.client.acquire(&self.name, &self.opts, max_wait).await {
                    // A wait past the client's longest (a year) goes on: `Duration::MAX` is for
                    // as long as it takes.
                    Err(Error::WaitTimeout { .. }) if max_wait > crate::lease::client::MAX_WAIT => {
                    }
                    other => break other?,
                }
            }
        };
        let record = Record {
            election: 1,
            term: lease.fence().get(),
            value: value.to_owned(),
            holder: self.holder.clone(),
            since_unix_ms: unix_ms(),
            tag: recorded::tag(lease.token()),
        };
        let leadership = Leadership {
            held: Recorded::new(lease, record),
        };
        if let Err(e) = leadership.held.write().await {
            // Give the lease back now (compare-and-delete: harmless if it already lapsed), so the
            // next candidate does not wait out a TTL behind a leader that never was.
            let (lease, _) = leadership.held.into_parts();
            let _ = tokio::time::timeout(self.opts.ttl, lease.release()).await;
            return Err(e);
        }
        crate::lease::metrics::election("elected");
        Ok(leadership)
    }

    /// Who leads now, without campaigning (`None`: nobody).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a store that keeps no notes; store errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>> {
        leader_of(&self.client, &self.name).await
    }

    /// Follows the leader of the name: [`Observer::changed`] completes with each change (a new
    /// leader, a new value, nobody). Where the store pushes changes it reads on each notice, at the
    /// lease's known end and every [`DEFAULT_SAFETY_EVERY`]; elsewhere every
    /// [`DEFAULT_OBSERVE_EVERY`] (see [`Observer::every`], [`Observer::safety_every`]).
    pub fn observe(&self) -> Observer {
        Observer {
            client: self.client.clone(),
            name: self.name.clone(),
            every: DEFAULT_OBSERVE_EVERY,
            safety_every: DEFAULT_SAFETY_EVERY,
            last: None,
            changes: None,
            subscribe_at: None,
            push: true,
            next_read: None,
        }
    }
}

/// Who leads `name` in `client`'s store (`None`: nobody). What [`Election::leader`] and the CLI's
/// `leasehold leader` read.
///
/// # Errors
///
/// [`Error::Invalid`] for a bad name or a store that keeps no notes; store errors.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub async fn leader_of(client: &LeaseClient, name: &str) -> Result<Option<Leader>> {
    let info = client.inspect_store(name).await?;
    if !info.held {
        return Ok(None);
    }
    let record = recorded::read(client, name, |r: &Record| r.is_valid() && r.is_of(&info)).await?;
    let term = match (&record, info.fence) {
        (Some(r), _) => Fence::new(r.term),
        (None, Some(f)) => f,
        (None, None) => Fence::new(0),
    };
    Ok(Some(Leader {
        name: name.to_owned(),
        term,
        value: record.as_ref().map(|r| r.value.clone()),
        holder: record.as_ref().map(|r| r.holder.clone()),
        since_unix_ms: record.as_ref().map(|r| r.since_unix_ms),
        ttl_ms: info.ttl_ms,
    }))
}

/// This candidate leads: it holds the election's lease. Renewed in the background while alive;
/// [`resign`](Self::resign) to hand over at once. Dropping it resigns in the background.
#[must_use = "leadership ends when dropped; hold it while leading"]
#[derive(Debug)]
pub struct Leadership {
    /// The election's lease and the leader record beside it.
    held: Recorded<Record>,
}

impl Leadership {
    /// The term: this leadership's fence, strictly greater than every earlier leader's. Present it
    /// to fenced resources ([`crate::fence`]) so that they refuse this leader once it is deposed.
    pub fn term(&self) -> Fence {
        self.held.lease().fence()
    }

    /// The value this leader advertises.
    pub fn value(&self) -> &str {
        &self.held.record().value
    }

    /// The holder identity it shows.
    pub fn holder(&self) -> &str {
        &self.held.record().holder
    }

    /// The lease behind the leadership (its remaining time, its options, its token).
    pub fn lease(&self) -> &Lease {
        self.held.lease()
    }

    /// Fires when the leadership is lost (as the lease's [`LostSignal`]).
    pub fn lost(&self) -> LostSignal {
        self.held.lease().lost()
    }

    /// The leadership's health (as the lease's [`HealthWatch`]): suspect before it is lost.
    pub fn health(&self) -> HealthWatch {
        self.held.lease().health()
    }

    /// Its health now.
    pub fn health_now(&self) -> LeaseHealth {
        self.held.lease().health_now()
    }

    /// Changes the advertised value, without an election: the term stays.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad value (nothing sent); [`Error::LeaseLost`] when the leadership
    /// is gone (nothing written); store errors (the old value may still be advertised).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the write may or may not land; the value kept here changes only once it did.
    pub async fn proclaim(&mut self, value: &str) -> Result<()> {
        check_text("leader value", value, MAX_VALUE_LEN)?;
        self.held.update(|r| value.clone_into(&mut r.value)).await
    }

    /// Steps down: releases the lease, so that the next candidate (the first in the store's queue)
    /// leads within about one round trip.
    ///
    /// # Errors
    ///
    /// As [`Lease::release`]: [`Error::LeaseLost`] when the leadership was already lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if cancelled before the store answered, the release is handed to the background.
    pub async fn resign(self) -> Result<()> {
        crate::lease::metrics::election("resigned");
        self.into_lease().release().await
    }

    /// The lease itself, for code that supervises a leadership as it supervises a lease (the
    /// command line's `elect` runs it as `run` runs a lease): releasing it resigns, losing it is
    /// losing the leadership.
    pub fn into_lease(self) -> Lease {
        self.held.into_parts().0
    }
}

/// Follows who leads a name ([`Election::observe`]).
///
/// Promise: on a store that pushes changes (Redis, PostgreSQL, etcd) a change is reported within
/// about one round trip of it: a new leader, a new value, a resignation, a forced release, and a
/// lapsed lease (read at its known end; etcd pushes that too). A notice can be lost (a dropped
/// connection, a server restart): the change is then seen at the next read of the safety interval
/// ([`Observer::safety_every`], default [`DEFAULT_SAFETY_EVERY`]) at the latest. A store that cannot
/// push is read every [`Observer::every`] (default [`DEFAULT_OBSERVE_EVERY`]).
///
/// Limit: what it reports is a reading, already old when it arrives; never decide who may write by
/// it (present the term to a fenced resource instead). Changes that come close together may be
/// reported as one (the last), and a plain lease taking the name is reported by the next read of
/// the safety interval (only the election's record and releases are announced).
#[derive(Debug)]
pub struct Observer {
    client: LeaseClient,
    name: String,
    /// The read interval where the store cannot push.
    every: Duration,
    /// The read interval besides notices where it can: bounds the delay of a lost notice.
    safety_every: Duration,
    last: Option<Option<Leader>>,
    /// The store's notices for the name, while subscribed.
    changes: Option<Changes>,
    /// When to try subscribing again after the store could not (`None`: at the next read).
    subscribe_at: Option<Instant>,
    /// Whether to subscribe at all ([`Observer::polled`]).
    push: bool,
    /// When the next read is due unless a notice comes first (`None`: at once, as on the first call
    /// or after a read that was cut off).
    next_read: Option<Instant>,
}

impl Observer {
    /// Reads a store that cannot push changes every `every` (at least 10 ms) instead of
    /// [`DEFAULT_OBSERVE_EVERY`].
    pub fn every(mut self, every: Duration) -> Self {
        self.every = every.max(Duration::from_millis(10));
        self
    }

    /// Reads a store that pushes changes every `every` (at least 10 ms) besides on each notice,
    /// instead of [`DEFAULT_SAFETY_EVERY`]: the longest a lost notice delays a change.
    pub fn safety_every(mut self, every: Duration) -> Self {
        self.safety_every = every.max(Duration::from_millis(10));
        self
    }

    /// Never subscribes: reads every [`every`](Self::every) on any store, as observers did before
    /// stores pushed changes (a baseline to compare with, or a network that drops the store's
    /// pushes).
    pub fn polled(mut self) -> Self {
        self.push = false;
        self.changes = None;
        self
    }

    /// The leader as last reported (`None` before the first report).
    pub fn last(&self) -> Option<&Option<Leader>> {
        self.last.as_ref()
    }

    /// Whether the store pushes this observer its changes now (known after the first
    /// [`changed`](Self::changed)); `false`: it reads every [`every`](Self::every).
    pub fn is_pushed(&self) -> bool {
        self.changes.is_some()
    }

    /// Completes with the leader when it differs from the last one reported (the first call
    /// reports the current one at once): a new term, a new value, or nobody (`None`). The remaining
    /// TTL alone is no change. After a report, the next call waits for the next read's reason (a
    /// notice, the lease's end, the interval) before it reads.
    ///
    /// # Errors
    ///
    /// Store errors, as [`Election::leader`]; the observer stays usable (call again).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a change not yet reported is reported by the next call (a notice that came
    /// while no call was waiting is kept; a read cut off is made again). Dropping the observer ends
    /// its subscription.
    pub async fn changed(&mut self) -> Result<Option<Leader>> {
        loop {
            if let Some(next) = self.next_read {
                self.wait(next).await;
                self.next_read = None;
            }
            // Subscribed before the read, so that no change after the read goes unnoticed.
            self.subscribe().await;
            let now = leader_of(&self.client, &self.name).await?;
            let read_at = Instant::now();
            let interval = if self.changes.is_some() {
                self.safety_every
            } else {
                self.every
            };
            // The lease's known end: a lapse is a change nobody announces.
            let end = now
                .as_ref()
                .and_then(|l| l.ttl_ms)
                .map(|ms| Duration::from_millis(ms) + AFTER_END);
            self.next_read = Some(read_at + end.map_or(interval, |e| e.min(interval)));
            let same = |a: &Option<Leader>, b: &Option<Leader>| match (a, b) {
                (None, None) => true,
                (Some(a), Some(b)) => a.term == b.term && a.value == b.value,
                _ => false,
            };
            if !self.last.as_ref().is_some_and(|last| same(last, &now)) {
                self.last = Some(now.clone());
                return Ok(now);
            }
        }
    }

    /// Opens the store's notices when there are none and it is time to try.
    async fn subscribe(&mut self) {
        if !self.push
            || self.changes.is_some()
            || self.subscribe_at.is_some_and(|at| Instant::now() < at)
        {
            return;
        }
        match self.client.changes(&self.name).await {
            Ok(Some(c)) => {
                self.changes = Some(c);
                self.subscribe_at = None;
            }
            Ok(None) | Err(_) => {
                self.subscribe_at = Some(Instant::now() + self.safety_every);
            }
        }
    }

    /// Waits for the next read: a notice, or `next` (the lease's known end or the interval).
    async fn wait(&mut self, next: Instant) {
        let Some(changes) = self.changes.as_mut() else {
            tokio::time::sleep_until(next).await;
            return;
        };
        tokio::select! {
            alive = changes.notice() => {
                if !alive {
                    // The store stopped pushing: read now, subscribe again later.
                    self.changes = None;
                    self.subscribe_at = Some(Instant::now() + self.safety_every);
                }
            }
            () = tokio::time::sleep_until(next) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::store::{HolderInfo, MAX_NOTE_LEN};

    fn record(term: u64, tag: &str) -> Record {
        Record {
            election: 1,
            term,
            value: "10.0.0.5:8080".into(),
            holder: "h:1:0".into(),
            since_unix_ms: 1,
            tag: tag.into(),
        }
    }

    #[test]
    fn a_record_fits_a_note_at_its_limits_and_reads_back() {
        let r = Record {
            value: "v".repeat(MAX_VALUE_LEN),
            holder: "h".repeat(MAX_HOLDER_LEN),
            term: u64::MAX,
            since_unix_ms: u64::MAX,
            ..record(1, "0123456789ab")
        };
        let bytes = recorded::encode(&r);
        assert!(bytes.len() <= MAX_NOTE_LEN, "{} bytes", bytes.len());
        assert_eq!(recorded::decode::<Record>(&bytes), Some(r));
        assert_eq!(recorded::decode::<Record>(b"not json"), None);
        let other = Record {
            election: 2,
            ..record(1, "0123456789ab")
        };
        let other = recorded::decode::<Record>(&recorded::encode(&other));
        assert!(
            !other.is_some_and(|r| r.is_valid()),
            "another format is no record"
        );
    }

    #[test]
    fn a_record_belongs_to_the_holder_by_token_else_by_fence() {
        let mut info = LeaseInfo::free("n", "k".into());
        info.held = true;
        info.fence = Some(Fence::new(7));
        assert!(record(7, "0123456789ab").is_of(&info));
        assert!(!record(6, "0123456789ab").is_of(&info));
        info.holders
            .push(HolderInfo::new("0123456789abcdef".into(), None, None));
        assert!(record(6, "0123456789ab").is_of(&info), "the token decides");
        assert!(!record(7, "ffff456789ab").is_of(&info));
        assert!(!record(7, "").is_of(&info), "an empty tag matches nobody");
    }

    #[test]
    fn values_and_holders_are_bounded_and_printable() {
        assert!(check_text("v", &"x".repeat(MAX_VALUE_LEN), MAX_VALUE_LEN).is_ok());
        assert!(check_text("v", &"x".repeat(MAX_VALUE_LEN + 1), MAX_VALUE_LEN).is_err());
        assert!(check_text("v", "a\nb", MAX_VALUE_LEN).is_err());
        assert!(default_holder().split(':').count() >= 3);
    }
}
