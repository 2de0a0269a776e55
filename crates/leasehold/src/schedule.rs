//! Scheduled jobs that run **once per slot** across replicas whose clocks disagree, with a record
//! of what ran: the one job the Redis-lock articles give a lock, done so that a skewed clock, a failed
//! run or a crash does not make it run twice or never.
//!
//! A [`Schedule`] (a period and an offset) maps "now" to a [`Slot`]: the slot whose start is
//! *nearest* to now, so replicas that fire the same scheduled run with clocks apart by anything up
//! to half the period all land in the same slot, a run scheduled exactly at a period boundary
//! included (floor division would put a replica 1 ms early in the previous slot and one 1 ms late
//! in this one, and both would run). [`claim`] takes the slot's lease (`JOB@SLOT`, once, no wait)
//! and reads the slot's record beside it: done already, running elsewhere, failed too often, or
//! yours to run. [`SlotRun::finish`] records the outcome in the same lease's note before releasing
//! it; only an exit code of 0 is *done*: a failed, killed or lost run leaves the slot open, so a
//! replica firing later in the slot (or a retry) runs it again, up to `max_attempts`.
//! [`history`] reads every slot's record the store still keeps.
//!
//! Promise: within one slot, a replica that claims after a run was recorded done does not run it;
//! two replicas never run one slot at the same time while no holder pauses past its lease (the
//! lease's own promise). Records live as long as the store keeps the name (its retention: keep it
//! longer than the period; the command line sets at least two periods).
//!
//! Limit: the lease is for efficiency, as everywhere: a run that outlives its lease while paused, or
//! a store that loses the record (a Redis without persistence restarting, the retention passing)
//! can run a slot twice. When the job writes to a database, record the slot in the same transaction
//! as its writes with [`record_in`] (the inbox's unique key, feature `sql`): its effect then happens
//! once per slot even if two replicas ran it. The slot is reckoned on each replica's own clock; a
//! replica whose clock is off by more than half the period claims another slot.
//!
//! **A late firing** (a timer catching up after a reboot, a loaded machine) claims its own slot,
//! never the next one early: [`Schedule::firing`] takes the slot nearest to the replica's clock
//! unless that slot has not started yet by the replica's clock *and* by the store's (a firing more
//! than half a period late lands there); it is then a late firing of the slot before, run if within
//! its starting deadline and recorded [`Outcome::Missed`] otherwise. A firing early by a skewed
//! clock still claims the slot it was meant for: by the store's clock, which every replica reads,
//! that slot has started (or starts within [`EARLY_TOLERANCE`]).
//!
//! The scheduler that fires jobs itself is in [`scheduler`] (policies, a runner of your own), over
//! [`When`] (cron expressions in IANA zones, intervals) and [`StoreClock`] (the store's time).

use std::time::{Duration, SystemTime};

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lease::recorded::{self, release_quietly, unix_ms_at as unix_ms, Recorded};
use crate::lease::{Lease, LeaseClient, LeaseOptions};

pub mod clock;
pub mod scheduler;
pub mod when;

pub use clock::{ClockSource, StoreClock};
pub use when::When;

/// How far before a slot's start, by the store's clock, a firing still counts as that slot's (the
/// clock reading's uncertainty and a timer that rounds down): at most this, and at most a tenth of
/// the period.
pub const EARLY_TOLERANCE: Duration = Duration::from_secs(1);

/// Shortest period accepted (a schedule of a few seconds is for tests and demos).
pub const MIN_PERIOD: Duration = Duration::from_millis(100);

/// Longest period accepted: a little over a year.
pub const MAX_PERIOD: Duration = Duration::from_secs(366 * 24 * 3600);

/// Longest job name: a slot's lease name is `JOB@SLOT`, a lease name of at most 256 bytes.
pub const MAX_JOB_LEN: usize = 200;

/// A period and an offset: slots start at `offset + k × period` after the Unix epoch (UTC).
///
/// # Examples
///
/// Run this hour's slot of a job on one replica, and record it done:
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> leasehold::Result<()> {
/// use std::time::Duration;
/// use leasehold::schedule::{claim, Claim, Outcome, Schedule};
/// use leasehold::{LeaseClient, LeaseOptions};
///
/// let client = LeaseClient::connect("redis://127.0.0.1:6379/").await?;
/// let hourly = Schedule::every(Duration::from_secs(3600))?;
/// let slot = hourly.now();
/// let opts = LeaseOptions::default();
/// # let job = format!("doc-hourly-{:08x}", rand::random::<u32>());
/// match claim(&client, &job, slot, &opts, 3, "replica-1").await? {
///     Claim::Run(run) => {
///         // ... run the job, presenting run.fence() to what it writes ...
///         let record = run.finish(Some(0), false).await?;
///         assert_eq!(record.outcome, Outcome::Done);
///     }
///     Claim::Busy | Claim::Done(_) | Claim::Exhausted(_) => {} // another replica has it
/// }
/// // Any later claim of this slot finds it done.
/// assert!(matches!(claim(&client, &job, slot, &opts, 3, "replica-2").await?, Claim::Done(_)));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    period: Duration,
    offset: Duration,
}

/// One slot of a schedule.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[non_exhaustive]
pub struct Slot {
    /// Its number: slots since the epoch (plus offset), in periods.
    pub index: u64,
    /// When it starts, in milliseconds since the Unix epoch.
    pub start_unix_ms: u64,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Schedule {
    /// Slots of `period` (between [`MIN_PERIOD`] and [`MAX_PERIOD`]), starting at the epoch.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a period out of range.
    pub fn every(period: Duration) -> Result<Self> {
        if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
            return Err(Error::invalid(
                "schedule period",
                format!(
                    "{} is out of range; give between {} and {} (e.g. 1h, 1d)",
                    crate::lease::options::show(period),
                    crate::lease::options::show(MIN_PERIOD),
                    crate::lease::options::show(MAX_PERIOD)
                ),
            ));
        }
        Ok(Schedule {
            period,
            offset: Duration::ZERO,
        })
    }

    /// Shifts every slot start by `offset` (less than the period): `every(1d).offset(2h)` is daily
    /// at 02:00 UTC.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for an offset not below the period.
    pub fn offset(mut self, offset: Duration) -> Result<Self> {
        if offset >= self.period {
            return Err(Error::invalid(
                "schedule offset",
                format!(
                    "{offset:?} is not below the period {:?}; give an offset within one period",
                    self.period
                ),
            ));
        }
        self.offset = offset;
        Ok(self)
    }

    /// The period.
    pub fn period(&self) -> Duration {
        self.period
    }

    /// Slot number `index` of this schedule (the one that starts `index` periods after the epoch,
    /// plus the offset).
    pub fn slot(&self, index: u64) -> Slot {
        let (p, off) = (millis(self.period).max(1), millis(self.offset));
        Slot {
            index,
            start_unix_ms: index.saturating_mul(p).saturating_add(off),
        }
    }

    /// The slot whose start is nearest to `t`: every time within half a period of a slot's start
    /// maps to that slot (the half-way point to the next).
    pub fn slot_at(&self, t: SystemTime) -> Slot {
        let (p, off) = (millis(self.period).max(1), millis(self.offset));
        let since = unix_ms(t).saturating_sub(off);
        // Nearest, not floor: `since + p/2` divided down.
        self.slot(since.saturating_add(p / 2) / p)
    }

    /// The first slot that starts after `t`, and how long until it does: what an in-process
    /// scheduler sleeps before it claims (claiming at the start, not anywhere in the period).
    pub fn next_after(&self, t: SystemTime) -> (Slot, Duration) {
        let (p, off) = (millis(self.period).max(1), millis(self.offset));
        let now = unix_ms(t);
        let index = now.saturating_sub(off) / p + 1;
        let start = index.saturating_mul(p).saturating_add(off);
        (
            Slot {
                index,
                start_unix_ms: start,
            },
            Duration::from_millis(start.saturating_sub(now)),
        )
    }

    /// The slot of now, by this machine's clock.
    pub fn now(&self) -> Slot {
        self.slot_at(SystemTime::now())
    }

    /// Which slot a firing at `local` (this replica's clock) is for, given the store's time `store`
    /// (`None`: a store without a clock; the replica's own clock judges alone) and the late-start
    /// `deadline`: the slot nearest to `local`, unless that slot has not started by either clock
    /// (beyond [`EARLY_TOLERANCE`] by the store's): the firing is then more than half a period late
    /// for the slot before, which it runs if `local` is within `deadline` of that slot's start and
    /// records missed otherwise. It never claims a slot that has not started yet.
    pub fn firing(
        &self,
        local: SystemTime,
        store: Option<SystemTime>,
        deadline: Duration,
    ) -> Firing {
        let nearest = self.slot_at(local);
        let local_ms = unix_ms(local);
        let tolerance = millis(EARLY_TOLERANCE.min(self.period / 10));
        let early_by_store = match store {
            Some(t) => unix_ms(t).saturating_add(tolerance) < nearest.start_unix_ms,
            None => true,
        };
        if local_ms >= nearest.start_unix_ms || !early_by_store || nearest.index == 0 {
            return Firing::Run(nearest);
        }
        let own = self.slot(nearest.index - 1);
        if local_ms.saturating_sub(own.start_unix_ms) <= millis(deadline) {
            Firing::Run(own)
        } else {
            Firing::Missed(own)
        }
    }
}

/// What [`Schedule::firing`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Firing {
    /// Claim this slot.
    Run(Slot),
    /// The firing is this slot's, past its late-start deadline: record it missed, run nothing.
    Missed(Slot),
}

/// What became of a slot's run, as its record says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Outcome {
    /// A run is going on (or its runner died and its lease has not lapsed yet).
    Running,
    /// It ran and exited 0: the slot is done.
    Done,
    /// It ran and failed (a non-zero exit, killed by a signal): a later claim runs it again.
    Failed,
    /// Its lease was lost while it ran (stopped by the supervisor), or its runner died: a later
    /// claim runs it again.
    Lost,
    /// Not started within its late-start deadline (every replica down, or fired too late): nothing
    /// ran.
    Missed,
    /// Not run on purpose: the job was paused, or its previous run was still going under the
    /// `forbid` overlap policy.
    Skipped,
}

/// A slot's record, kept in the note of the slot's lease.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct SlotRecord {
    /// The job.
    pub job: String,
    /// The slot.
    pub slot: Slot,
    /// What became of the last attempt.
    pub outcome: Outcome,
    /// Attempts so far, this one included.
    pub attempts: u32,
    /// Who ran the last attempt (host, process id, random id unless given).
    pub holder: String,
    /// The last attempt's lease fence: present it to fenced writes.
    pub fence: Fence,
    /// When the last attempt started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// How long it ran (`None` while running).
    pub duration_ms: Option<u64>,
    /// Its exit code (`None` while running, or killed by a signal).
    pub exit_code: Option<i32>,
    /// Why nothing ran, for a missed or skipped slot (`paused`, `overlap`, `deadline`, `catch-up`),
    /// or `trigger` for an extra run asked for by an operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The lease name of a job's slot.
pub fn slot_name(job: &str, slot: Slot) -> String {
    format!("{job}@{}", slot.index)
}

/// Refuses a job name that would not make a lease name with its slot.
fn check_job(client: &LeaseClient, job: &str) -> Result<()> {
    if job.len() > MAX_JOB_LEN {
        return Err(Error::invalid(
            "job name",
            format!(
                "{} bytes is over the {MAX_JOB_LEN}-byte limit (a slot's lease is `JOB@SLOT`)",
                job.len()
            ),
        ));
    }
    client.check_name(job)
}

/// Takes a slot's lease once, without waiting (`None`: another replica holds it).
async fn try_take(client: &LeaseClient, name: &str, opts: &LeaseOptions) -> Result<Option<Lease>> {
    match client.try_acquire(name, opts).await {
        Ok(lease) => Ok(Some(lease)),
        Err(Error::Busy { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What [`claim`] found.
#[derive(Debug)]
#[must_use = "a claimed slot is run and finished, or its lease is released when dropped"]
pub enum Claim {
    /// The slot is yours: run the job, then [`SlotRun::finish`].
    Run(SlotRun),
    /// Another replica is running it now.
    Busy,
    /// It was done: the record of the run that did it.
    Done(SlotRecord),
    /// Its attempts reached the bound, all failed or lost: the last one's record.
    Exhausted(SlotRecord),
}

/// A claimed slot: the slot's lease, and its record as "running".
#[derive(Debug)]
pub struct SlotRun {
    /// The slot's lease and its record as last written.
    held: Recorded<SlotRecord>,
}

/// Claims `job`'s `slot`: takes the slot's lease with `opts` (once, without waiting), reads its
/// record and, unless it is done or out of attempts, records a new attempt as running and hands the
/// slot to the caller. `max_attempts` (at least 1) bounds the attempts of one slot; `holder` is who
/// the record says ran it.
///
/// # Errors
///
/// [`Error::Invalid`] for a bad job name or holder, `max_attempts` 0, or a store that keeps no
/// notes; store errors. Whatever fails after the lease was taken releases it.
///
/// # Cancel safety
///
/// Cancel safe: a lease taken before the cancellation is released in the background (its record,
/// if written, says running, which the next claim reads as lost).
pub async fn claim(
    client: &LeaseClient,
    job: &str,
    slot: Slot,
    opts: &LeaseOptions,
    max_attempts: u32,
    holder: &str,
) -> Result<Claim> {
    check_job(client, job)?;
    if max_attempts == 0 {
        return Err(Error::invalid(
            "max attempts",
            "0 would never run the job; give at least 1",
        ));
    }
    if holder.len() > 128 || holder.chars().any(char::is_control) {
        return Err(Error::invalid(
            "holder",
            "at most 128 bytes, no control characters",
        ));
    }
    let name = slot_name(job, slot);
    let Some(lease) = try_take(client, &name, opts).await? else {
        return Ok(Claim::Busy);
    };
    let previous = recorded::read::<SlotRecord>(client, &name, |_| true).await?;
    let attempts = match &previous {
        Some(r)
            if matches!(
                r.outcome,
                Outcome::Done | Outcome::Missed | Outcome::Skipped
            ) =>
        {
            release_quietly(lease).await;
            return Ok(Claim::Done(r.clone()));
        }
        Some(r) if r.attempts >= max_attempts => {
            release_quietly(lease).await;
            let mut last = r.clone();
            // A record left "running" by a runner that died: it was lost.
            if last.outcome == Outcome::Running {
                last.outcome = Outcome::Lost;
            }
            return Ok(Claim::Exhausted(last));
        }
        Some(r) => r.attempts + 1,
        None => 1,
    };
    let record = SlotRecord {
        job: job.to_owned(),
        slot,
        outcome: Outcome::Running,
        attempts,
        holder: holder.to_owned(),
        fence: lease.fence(),
        started_unix_ms: recorded::unix_ms(),
        duration_ms: None,
        exit_code: None,
        reason: None,
    };
    let held = Recorded::new(lease, record);
    // On failure the lease is dropped, which releases it in the background.
    held.write().await?;
    Ok(Claim::Run(SlotRun { held }))
}

/// Records `job`'s `slot` as [`Outcome::Missed`] or [`Outcome::Skipped`] (with `reason`) unless
/// the slot has a record already (done, failed, running: those stand) or is held: takes the slot's
/// lease once, writes, releases. Returns the record written (`None`: left as it was). Running it
/// twice writes once.
///
/// # Errors
///
/// [`Error::Invalid`] for an outcome other than missed or skipped, a bad job name or holder; store
/// errors.
///
/// # Cancel safety
///
/// Cancel safe: a lease taken before the cancellation is released in the background.
pub async fn mark(
    client: &LeaseClient,
    job: &str,
    slot: Slot,
    outcome: Outcome,
    reason: &str,
    opts: &LeaseOptions,
    holder: &str,
) -> Result<Option<SlotRecord>> {
    check_job(client, job)?;
    if !matches!(outcome, Outcome::Missed | Outcome::Skipped) {
        return Err(Error::invalid(
            "outcome",
            "only missed or skipped is marked",
        ));
    }
    let name = slot_name(job, slot);
    let Some(lease) = try_take(client, &name, opts).await? else {
        return Ok(None);
    };
    if client.read_note(&name).await?.is_some() {
        release_quietly(lease).await;
        return Ok(None);
    }
    let record = SlotRecord {
        job: job.to_owned(),
        slot,
        outcome,
        attempts: 0,
        holder: holder.to_owned(),
        fence: lease.fence(),
        started_unix_ms: recorded::unix_ms(),
        duration_ms: None,
        exit_code: None,
        reason: Some(reason.to_owned()),
    };
    let written = recorded::write(&lease, &record).await;
    release_quietly(lease).await;
    written?;
    metrics(&record);
    Ok(Some(record))
}

impl SlotRun {
    /// The slot.
    pub fn slot(&self) -> Slot {
        self.held.record().slot
    }

    /// The attempt's fence: present it to fenced writes.
    pub fn fence(&self) -> Fence {
        self.held.lease().fence()
    }

    /// The record as written when the attempt started.
    pub fn record(&self) -> &SlotRecord {
        self.held.record()
    }

    /// The slot's lease (its lost signal, its health).
    pub fn lease(&self) -> &Lease {
        self.held.lease()
    }

    /// Records the attempt's end and releases the slot's lease: `exit_code` `Some(0)` is done,
    /// another code or `None` (killed by a signal) failed; `lost` (the lease was lost while it ran)
    /// is lost whatever the code. Returns the record written.
    ///
    /// # Errors
    ///
    /// [`Error::LeaseLost`] when the lease was gone before the record could be written (the slot
    /// stays open: a later claim runs it again); store errors.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the lease is released in the background; the record says what the last write
    /// that landed said (running: a later claim counts it as lost).
    pub async fn finish(self, exit_code: Option<i32>, lost: bool) -> Result<SlotRecord> {
        let (lease, record) = self.held.into_parts();
        let written = finish_with(&lease, record, exit_code, lost).await;
        let released = lease.release().await;
        let record = written?;
        match released {
            Err(Error::LeaseLost { .. }) if lost => Ok(record),
            Err(e) => Err(e),
            Ok(()) => Ok(record),
        }
    }

    /// The lease and the record, for a caller that supervises the lease itself and writes the
    /// outcome later with [`finish_with`].
    pub fn into_parts(self) -> (Lease, SlotRecord) {
        self.held.into_parts()
    }
}

/// [`SlotRun::finish`] for a run taken apart with [`SlotRun::into_parts`]: writes the outcome with
/// `lease` (still held) and returns the record; the caller releases the lease.
///
/// # Errors
///
/// As [`SlotRun::finish`], without the release.
///
/// # Cancel safety
///
/// As [`Lease::write_note`]: the record may or may not be written; the lease stays the caller's.
pub async fn finish_with(
    lease: &Lease,
    mut record: SlotRecord,
    exit_code: Option<i32>,
    lost: bool,
) -> Result<SlotRecord> {
    record.outcome = match (lost, exit_code) {
        (true, _) => Outcome::Lost,
        (false, Some(0)) => Outcome::Done,
        (false, _) => Outcome::Failed,
    };
    record.exit_code = exit_code;
    record.duration_ms = Some(recorded::unix_ms().saturating_sub(record.started_unix_ms));
    metrics(&record);
    recorded::write(lease, &record).await?;
    Ok(record)
}

/// Metric names of scheduled runs. Each carries the job's name in the label [`JOB`](metric_names::JOB)
/// (`leasehold_job`), not `job`, which Prometheus gives every series of a scrape target.
pub mod metric_names {
    /// The label that names the job on each of these metrics.
    pub const JOB: &str = "leasehold_job";
    /// Gauge: when the job last succeeded, in seconds since the Unix epoch (label `leasehold_job`): the
    /// metric to alert on when it falls behind.
    pub const LAST_SUCCESS: &str = "leasehold_job_last_success_timestamp_seconds";
    /// Counter: finished attempts and slots that did not run (labels `leasehold_job`, `outcome`: `done`,
    /// `failed`, `lost`, `missed`, `skipped`).
    pub const RUNS_TOTAL: &str = "leasehold_job_runs_total";
    /// Histogram: how long attempts ran, in seconds (label `leasehold_job`).
    pub const DURATION_SECONDS: &str = "leasehold_job_duration_seconds";
    /// Describes these metrics to the installed recorder (a Prometheus exporter's `# HELP` lines),
    /// and, for each of `jobs`, registers [`RUNS_TOTAL`] at 0 for every outcome, so that a scrape
    /// shows the series before the first run (histograms take
    /// [`HOLD_BUCKETS`](crate::lease::metrics::HOLD_BUCKETS)).
    pub fn describe(jobs: &[&str]) {
        use metrics::{describe_counter, describe_gauge, describe_histogram, Unit};
        describe_counter!(
            RUNS_TOTAL,
            "Slots finished, by outcome (done, failed, lost, missed, skipped)."
        );
        describe_histogram!(DURATION_SECONDS, Unit::Seconds, "How long runs took.");
        describe_gauge!(
            LAST_SUCCESS,
            "When the job last succeeded, seconds since the epoch."
        );
        describe_gauge!(
            NEXT_RUN,
            "The job's next slot instant, seconds since the epoch."
        );
        for job in jobs {
            for outcome in ["done", "failed", "lost", "missed", "skipped"] {
                let job = (*job).to_owned();
                metrics::counter!(RUNS_TOTAL, JOB => job, "outcome" => outcome).increment(0);
            }
        }
    }
    /// Gauge: the job's next slot instant, in seconds since the Unix epoch (label `leasehold_job`), set by
    /// the [`scheduler`](super::scheduler) as it waits for it.
    pub const NEXT_RUN: &str = "leasehold_job_next_run_timestamp_seconds";
}

fn metrics(r: &SlotRecord) {
    let outcome = match r.outcome {
        Outcome::Done => "done",
        Outcome::Failed => "failed",
        Outcome::Lost | Outcome::Running => "lost",
        Outcome::Missed => "missed",
        Outcome::Skipped => "skipped",
    };
    metrics::counter!(metric_names::RUNS_TOTAL, metric_names::JOB => r.job.clone(), "outcome" => outcome)
        .increment(1);
    if let Some(ms) = r.duration_ms {
        metrics::histogram!(metric_names::DURATION_SECONDS, metric_names::JOB => r.job.clone())
            .record(ms as f64 / 1000.0);
    }
    if r.outcome == Outcome::Done {
        metrics::gauge!(metric_names::LAST_SUCCESS, metric_names::JOB => r.job.clone())
            .set(recorded::unix_ms() as f64 / 1000.0);
    }
}

/// Every slot record of `job` the store still keeps, newest slot first, at most `limit`. A record
/// left "running" whose lease is no longer held is reported lost (its runner died).
///
/// # Errors
///
/// [`Error::Invalid`] for a bad job name or a store that keeps no notes; store errors.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub async fn history(client: &LeaseClient, job: &str, limit: usize) -> Result<Vec<SlotRecord>> {
    check_job(client, job)?;
    let prefix = format!("{job}@");
    let mut slots: Vec<(u64, bool, String)> = client
        .list(&format!("{}*", crate::lease::names::glob_escape(&prefix)))
        .await?
        .into_iter()
        .filter_map(|info| {
            let index = info.name.strip_prefix(&prefix)?.parse::<u64>().ok()?;
            Some((index, info.held, info.name))
        })
        .collect();
    slots.sort_unstable_by_key(|s| std::cmp::Reverse(s.0));
    let mut out = Vec::new();
    for (_, held, name) in slots.into_iter().take(limit) {
        if let Some(mut r) = recorded::read::<SlotRecord>(client, &name, |_| true).await? {
            if r.outcome == Outcome::Running && !held {
                r.outcome = Outcome::Lost;
            }
            out.push(r);
        }
    }
    Ok(out)
}

/// Records `job`'s `slot` as applied in `tx`, the transaction of the job's own writes (the inbox's
/// unique key, consumer `leasehold-slot:JOB`): [`Delivery::First`](crate::inbox::Delivery::First)
/// the first time, so commit the writes; [`Delivery::Duplicate`](crate::inbox::Delivery::Duplicate)
/// when a run of this slot already committed, so roll back. The job's effect then happens once per
/// slot even if two replicas ran it.
///
/// # Errors
///
/// [`Error::Invalid`] for a job name over 240 bytes; database errors.
///
/// # Cancel safety
///
/// As [`Inbox::record`](crate::inbox::Inbox::record): the transaction rolls back.
#[cfg(feature = "sql")]
pub async fn record_in(
    tx: &mut crate::db::Tx,
    job: &str,
    slot: Slot,
) -> Result<crate::inbox::Delivery> {
    crate::inbox::Inbox::new(&format!("leasehold-slot:{job}"))?
        .record(tx, &slot.index.to_string())
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::UNIX_EPOCH;

    fn at(ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(ms)
    }

    #[test]
    fn replicas_within_half_a_period_map_to_one_slot_a_boundary_included() {
        let s = Schedule::every(Duration::from_secs(60)).unwrap();
        // A run scheduled at exactly 10 periods, fired by clocks 29.9 s early to 29.9 s late.
        let boundary = 600_000;
        let slot = s.slot_at(at(boundary));
        assert_eq!(slot.index, 10);
        assert_eq!(slot.start_unix_ms, boundary);
        for skew in [-29_900_i64, -2_000, -1, 0, 1, 2_000, 29_900] {
            let t = (boundary as i64 + skew) as u64;
            assert_eq!(s.slot_at(at(t)), slot, "skew {skew} ms");
        }
        // Floor division, the trap: 1 ms early lands in the previous slot.
        assert_eq!((boundary - 1) / 60_000, 9);
        // Beyond half a period it is the neighbour's.
        assert_eq!(s.slot_at(at(boundary + 30_000)).index, 11);
        assert_eq!(s.slot_at(at(boundary - 30_001)).index, 9);
    }

    #[test]
    fn an_offset_moves_the_slots_and_bad_schedules_are_refused() {
        let day = Duration::from_secs(86_400);
        let s = Schedule::every(day)
            .unwrap()
            .offset(Duration::from_secs(2 * 3600))
            .unwrap();
        let two_am = 20_000 * 86_400_000 + 2 * 3_600_000;
        let slot = s.slot_at(at(two_am + 1_000));
        assert_eq!(slot.start_unix_ms, two_am);
        assert_eq!(s.slot_at(at(two_am - 1_000)), slot);
        assert!(Schedule::every(Duration::ZERO).is_err());
        assert!(Schedule::every(Duration::from_millis(99)).is_err());
        assert!(Schedule::every(MAX_PERIOD + Duration::from_secs(1)).is_err());
        assert!(Schedule::every(day).unwrap().offset(day).is_err());
        // The next start after a time, and the wait for it.
        let (next, wait) = s.next_after(at(two_am + 1_000));
        assert_eq!(next.start_unix_ms, two_am + 86_400_000);
        assert_eq!(wait, day - Duration::from_secs(1));
        assert_eq!(s.slot_at(at(next.start_unix_ms)), next);
        // Before the epoch (a clock gone mad): slot 0, no panic.
        assert_eq!(s.slot_at(UNIX_EPOCH - Duration::from_secs(5)).index, 0);
    }

    #[test]
    fn a_late_firing_runs_its_own_slot_never_the_next_one_early() {
        let s = Schedule::every(Duration::from_secs(4)).unwrap();
        let k = 1_000_u64;
        let start = k * 4_000;
        let deadline = Duration::from_secs(4);
        // Fired 2.5 s late on a right clock: the nearest slot is k+1, not started by either clock.
        let late = at(start + 2_500);
        assert_eq!(s.slot_at(late).index, k + 1, "the nearest-slot rule alone");
        assert_eq!(s.firing(late, Some(late), deadline), Firing::Run(s.slot(k)));
        // Past a deadline of 2 s: recorded missed.
        assert_eq!(
            s.firing(late, Some(late), Duration::from_secs(2)),
            Firing::Missed(s.slot(k))
        );
        // Fired on time at k+1 by a clock 1.5 s behind (same instant as the store's k+1): k+1.
        let behind = at(start + 4_000 - 1_500);
        assert_eq!(
            s.firing(behind, Some(at(start + 4_000)), deadline),
            Firing::Run(s.slot(k + 1))
        );
        // Fired by its own timer at k+1 on a clock 1.5 s ahead: k+1 (its clock says started).
        assert_eq!(
            s.firing(at(start + 4_000), Some(behind), deadline),
            Firing::Run(s.slot(k + 1))
        );
        // Without a store clock the replica's own clock judges: late, so slot k.
        assert_eq!(s.firing(late, None, deadline), Firing::Run(s.slot(k)));
    }

    #[test]
    fn a_record_reads_back_and_garbage_is_no_record() {
        let r = SlotRecord {
            job: "nightly".into(),
            slot: Slot {
                index: 7,
                start_unix_ms: 7,
            },
            outcome: Outcome::Failed,
            attempts: 2,
            holder: "h:1:0".into(),
            fence: Fence::new(9),
            started_unix_ms: 1,
            duration_ms: Some(5),
            exit_code: Some(3),
            reason: None,
        };
        assert_eq!(recorded::decode(&recorded::encode(&r)), Some(r));
        assert_eq!(recorded::decode::<SlotRecord>(b"{}"), None);
        assert_eq!(
            slot_name(
                "nightly",
                Slot {
                    index: 42,
                    start_unix_ms: 0
                }
            ),
            "nightly@42"
        );
    }
}
