//! The scheduler every replica runs: it fires each job at its slots' instants, reckoned on the
//! store's clock, and runs each slot on one replica (a [`claim`] per slot), with the
//! policies a team moving its cron jobs onto several replicas expects. It runs on the caller's tokio
//! runtime; what a run does is the caller's [`Runner`].
//!
//! Policies, each with a default and a record of what it decided ([`super::history`]):
//! - **late start** ([`Policy::starting_deadline`], default: until the next slot's instant): no
//!   attempt starts later than that after the slot's instant; a slot nothing started in time is
//!   recorded `missed`. A replica that wakes late runs its own slot if still in time and never
//!   claims a future one (it only claims instants that have passed by the store's clock).
//! - **catch-up** after every replica was down ([`CatchUp`], default `skip`): the slots since the
//!   newest on record are recorded `missed` (`skip`), or the newest of them runs once (`latest`), or
//!   each runs, oldest first (`all`), at most [`Policy::catch_up_limit`] (default 100).
//! - **overlap** with the previous slot's run still going, on any replica ([`Overlap`], default
//!   `forbid`): recorded `skipped` (`forbid`), run anyway (`allow`), or the old run stopped first
//!   (`replace`: on this replica its run is cancelled and awaited; on another its lease is taken
//!   away, whose supervisor then stops it, and the new run waits a TTL plus the grace for that).
//! - **retries** ([`Policy::max_attempts`], default 3, [`Policy::backoff`] doubling from 1 s): a
//!   failed or lost run is tried again by whichever replica claims next, within the deadline; a
//!   replica that finds the slot running elsewhere looks again every half TTL, so a run whose
//!   replica died is retried by another once its lease lapses.
//! - **jitter** ([`Policy::jitter`], default 0): each job fires a fixed delay after its instant,
//!   from a hash of its name, below the jitter: a thousand jobs at `0 * * * *` spread over it, and
//!   every replica fires a job at the same moment (the slot is still the instant).
//! - **pause** ([`pause`], [`resume`]): kept in the store, read at each slot by every replica; a
//!   paused job's slots are recorded `skipped`, and each such slot writes the flag again, so it
//!   outlives the store's retention while any daemon runs.
//!
//! Promise: each slot of a job runs on at most one replica at a time and is recorded (`done`, `failed`,
//! `lost`, `missed`, `skipped`) beside its lease, by the rules of [`claim`]; the
//! policies above decide late, missed and overlapping slots the same way on every replica.
//! Limit: the store is the record; a store that forgets (a Redis without persistence, the retention
//! passing) forgets history and pauses, and a slot may then run again. Under `allow`, a run longer
//! than the period overlaps the next one. A store without a clock (etcd, Redlock) makes each replica
//! reckon on its own clock: replicas then agree on a slot only as well as their clocks agree.
//!
//! # Examples
//!
//! A job of a service's own, run in process once per slot by whichever replica gets there first
//! (here the only one, over a private redis-server), then the scheduler drained and the slot's
//! record read back. `leasehold cron` is this with a [`Runner`] that runs commands.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let redis = leasehold_testkit::RedisServer::start()?;
//! # let url = redis.url();
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//!
//! use leasehold::schedule::scheduler::{Job, Policy, Run, RunEnd, Runner, Scheduler};
//! use leasehold::schedule::{history, Outcome, When};
//! use leasehold::LeaseClient;
//!
//! struct Rollup {
//!     runs: AtomicU64,
//! }
//!
//! #[async_trait::async_trait]
//! impl Runner for Rollup {
//!     async fn run(&self, run: Run<'_>) -> RunEnd {
//!         // Writes carry run.lease.fence(); stop soon after run.stop is cancelled.
//!         let _fence = run.lease.fence();
//!         self.runs.fetch_add(1, Ordering::SeqCst);
//!         RunEnd { exit_code: Some(0), lost: false }
//!     }
//! }
//!
//! let client = LeaseClient::connect(&url).await?;
//! let rollup = Arc::new(Rollup { runs: AtomicU64::new(0) });
//! let sched = Scheduler::new(client.clone(), "web-2", rollup.clone()).await?;
//! let mut policy = Policy::default(); // `Policy` is non-exhaustive: change its fields
//! policy.max_attempts = 5;
//! // Every second here; a cron job is `When::cron("0 * * * *", "Europe/Berlin")?`.
//! let every_second = When::every(Duration::from_secs(1), Duration::ZERO)?;
//! sched.set_jobs(vec![Job::new("rollup", every_second)?.with_policy(policy)?])?;
//! # tokio::time::timeout(Duration::from_secs(10), async {
//! #     while rollup.runs.load(Ordering::SeqCst) == 0 {
//! #         tokio::time::sleep(Duration::from_millis(20)).await;
//! #     }
//! # })
//! # .await?;
//! // … on shutdown: no new slot is taken, the runs going on end within their grace.
//! sched.drain().await;
//! let records = history(&client, "rollup", 10).await?;
//! assert!(records.iter().any(|r| r.outcome == Outcome::Done && r.holder == "web-2"));
//! # Ok(())
//! # }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::clock::StoreClock;
use super::when::When;
use super::{claim, finish_with, mark, Claim, Outcome, Slot, SlotRecord};
use crate::error::{Error, Result};
use crate::lease::recorded;
use crate::lease::{Lease, LeaseClient, LeaseOptions};

/// What to do with the slots that passed while every replica was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CatchUp {
    /// Record them missed; run none.
    #[default]
    Skip,
    /// Run the newest once; record the others missed.
    Latest,
    /// Run each, oldest first, up to [`Policy::catch_up_limit`].
    All,
}

/// What to do when the previous slot's run is still going.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Record this slot skipped.
    #[default]
    Forbid,
    /// Run both.
    Allow,
    /// Stop the old run, then start this one.
    Replace,
}

/// A job's policies. Every field has a default ([`Policy::default`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Policy {
    /// Latest start after the slot's instant; `None`: until the next slot's instant.
    pub starting_deadline: Option<Duration>,
    /// Slots missed while every replica was down.
    pub catch_up: CatchUp,
    /// Most slots caught up (run under `all`, recorded missed under `skip`).
    pub catch_up_limit: u32,
    /// The previous slot's run still going.
    pub overlap: Overlap,
    /// Attempts of one slot, by any replica.
    pub max_attempts: u32,
    /// The wait before a retry, doubled after each (at most a minute).
    pub backoff: Duration,
    /// Upper bound of the job's fixed delay after each instant.
    pub jitter: Duration,
    /// The lease of each run (its TTL).
    pub lease: LeaseOptions,
    /// How long a draining scheduler lets a run go on before stopping it.
    pub grace: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            starting_deadline: None,
            catch_up: CatchUp::Skip,
            catch_up_limit: 100,
            overlap: Overlap::Forbid,
            max_attempts: 3,
            backoff: Duration::from_secs(1),
            jitter: Duration::ZERO,
            lease: LeaseOptions::default(),
            grace: Duration::from_secs(10),
        }
    }
}

/// A job: a name, its slots, its policies.
#[derive(Debug, Clone)]
pub struct Job {
    name: String,
    when: When,
    policy: Policy,
}

impl Job {
    /// A job named `name` (at most [`MAX_JOB_LEN`](super::MAX_JOB_LEN) bytes, a lease name) with the
    /// default policy.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a bad name.
    pub fn new(name: &str, when: When) -> Result<Job> {
        if name.is_empty() || name.len() > super::MAX_JOB_LEN || name.contains('@') {
            return Err(Error::invalid(
                "job name",
                format!(
                    "`{name}` must be 1 to {} bytes without `@`",
                    super::MAX_JOB_LEN
                ),
            ));
        }
        crate::lease::names::validate_name(name)?;
        Ok(Job {
            name: name.to_owned(),
            when,
            policy: Policy::default(),
        })
    }

    /// With these policies.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for `max_attempts` 0 or a zero starting deadline.
    pub fn with_policy(mut self, policy: Policy) -> Result<Job> {
        if policy.max_attempts == 0 {
            return Err(Error::invalid(
                "max-attempts",
                "0 would never run the job; give at least 1",
            ));
        }
        if policy.starting_deadline.is_some_and(|d| d.is_zero()) {
            return Err(Error::invalid(
                "starting-deadline",
                "0 would miss every slot; give e.g. 30s",
            ));
        }
        self.policy = policy;
        Ok(self)
    }

    /// The name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its slots.
    pub fn when(&self) -> &When {
        &self.when
    }

    /// Its policies.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The fixed delay after each instant: a hash of the name below the jitter.
    pub fn jitter_delay(&self) -> Duration {
        let j = self.policy.jitter.as_millis() as u64;
        if j == 0 {
            return Duration::ZERO;
        }
        // FNV-1a: the same on every replica and every build.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in self.name.bytes() {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
        Duration::from_millis(h % j)
    }

    /// The slot at instant `ms`.
    pub fn slot(ms: i64) -> Slot {
        let ms = u64::try_from(ms).unwrap_or(0);
        Slot {
            index: ms / 1000,
            start_unix_ms: ms,
        }
    }

    fn deadline_ms(&self, slot_ms: i64) -> i64 {
        match self.policy.starting_deadline {
            Some(d) => slot_ms + i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 2),
            None => self.when.next_after(slot_ms).unwrap_or(i64::MAX / 2),
        }
    }

    /// Whether two versions of a job are the same (a reload keeps it running untouched).
    fn same_as(&self, other: &Job) -> bool {
        format!("{:?}{:?}", self.when.describe(), self.policy)
            == format!("{:?}{:?}", other.when.describe(), other.policy)
    }
}

/// One attempt handed to a [`Runner`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Run<'a> {
    /// The job.
    pub job: &'a Job,
    /// The slot (its instant in `start_unix_ms`; `index` is the instant in seconds).
    pub slot: Slot,
    /// This attempt's number, from 1.
    pub attempt: u32,
    /// An extra run asked for by [`Scheduler::trigger`].
    pub triggered: bool,
    /// The slot's lease: its fence for fenced writes, its lost signal.
    pub lease: &'a Lease,
    /// Cancelled when the run must stop (a drain past its grace, `replace`).
    pub stop: CancellationToken,
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunEnd {
    /// The exit code: `Some(0)` is done, another code (or `None`, killed) failed.
    pub exit_code: Option<i32>,
    /// The lease was lost while it ran (it was stopped).
    pub lost: bool,
}

/// What runs a job's slot: a command (`leasehold cron`), a function of your service.
#[async_trait::async_trait]
pub trait Runner: Send + Sync + 'static {
    /// Runs one attempt; returns when it ended. Stop soon after `run.stop` fires or the lease is
    /// lost.
    async fn run(&self, run: Run<'_>) -> RunEnd;

    /// Called with every record the scheduler writes (a log line per run). Default: a `tracing`
    /// line.
    fn recorded(&self, record: &SlotRecord) {
        tracing::info!(job = %record.job, slot = record.slot.index, outcome = ?record.outcome,
            attempts = record.attempts, exit_code = ?record.exit_code, "slot recorded");
    }
}

/// A run going on in this process.
#[derive(Debug)]
struct Going {
    stop: CancellationToken,
    ended: Arc<Notify>,
}

#[derive(Debug)]
struct Inner {
    client: LeaseClient,
    clock: StoreClock,
    holder: String,
    runner: Arc<dyn Runner>,
    /// Runs going on here, by job and slot instant.
    going: Mutex<HashMap<(String, i64), Going>>,
    /// Signalled whenever a run here ends.
    run_ended: Notify,
    /// Set when draining: no new slot is taken.
    draining: CancellationToken,
}

impl std::fmt::Debug for dyn Runner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Runner")
    }
}

/// The scheduler: one task per job, on the caller's runtime.
#[derive(Debug)]
pub struct Scheduler {
    inner: Arc<Inner>,
    loops: Mutex<HashMap<String, (Job, CancellationToken)>>,
}

/// The name of a job's pause flag.
fn pause_name(job: &str) -> String {
    format!("{job}@paused")
}

#[derive(serde::Serialize, serde::Deserialize)]
struct PauseNote {
    paused: bool,
    by: String,
    at_unix_ms: i64,
}

async fn write_pause(client: &LeaseClient, job: &str, paused: bool, by: &str) -> Result<()> {
    let opts = LeaseOptions::default();
    let lease = client
        .acquire(&pause_name(job), &opts, Duration::from_secs(10))
        .await?;
    let note = PauseNote {
        paused,
        by: by.to_owned(),
        at_unix_ms: super::clock::local_ms(),
    };
    let written = recorded::write(&lease, &note).await;
    let released = lease.release().await;
    written?;
    released
}

/// Writes the pause flag again if it still says paused (under its lease, so a `resume` in between
/// wins): the store keeps a name its retention after its last use, and a job stays paused however
/// long while a daemon runs.
async fn refresh_pause(client: &LeaseClient, job: &str) -> Result<()> {
    let opts = LeaseOptions::default();
    let lease = client
        .acquire(&pause_name(job), &opts, Duration::from_secs(10))
        .await?;
    let written = match recorded::read(client, &pause_name(job), |n: &PauseNote| n.paused).await {
        Ok(Some(note)) => recorded::write(&lease, &note).await,
        Ok(None) => Ok(()),
        Err(e) => Err(e),
    };
    let released = lease.release().await;
    written?;
    released
}

/// Pauses `job` on every replica (kept in the store, read at each slot): its slots are recorded
/// skipped until [`resume`]. `by` says who paused it.
///
/// # Errors
///
/// Store errors; [`Error::Invalid`] for a bad job name.
///
/// # Cancel safety
///
/// Cancel safe: the flag's lease is released in the background.
pub async fn pause(client: &LeaseClient, job: &str, by: &str) -> Result<()> {
    write_pause(client, job, true, by).await
}

/// Resumes a paused `job` on every replica.
///
/// # Errors
///
/// As [`pause`].
///
/// # Cancel safety
///
/// As [`pause`].
pub async fn resume(client: &LeaseClient, job: &str, by: &str) -> Result<()> {
    write_pause(client, job, false, by).await
}

/// Whether `job` is paused, and by whom.
///
/// # Errors
///
/// Store errors.
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub async fn paused(client: &LeaseClient, job: &str) -> Result<Option<String>> {
    let note = recorded::read(client, &pause_name(job), |n: &PauseNote| n.paused).await?;
    Ok(note.map(|n| n.by))
}

impl Scheduler {
    /// A scheduler over `client`'s store (its clock read now), running slots with `runner`, its
    /// records naming `holder`. It runs no job until [`set_jobs`](Self::set_jobs).
    ///
    /// # Errors
    ///
    /// Store errors of the first clock reading.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn new(client: LeaseClient, holder: &str, runner: Arc<dyn Runner>) -> Result<Self> {
        let clock = StoreClock::new(client.clone()).await?;
        Ok(Scheduler {
            inner: Arc::new(Inner {
                client,
                clock,
                holder: holder.to_owned(),
                runner,
                going: Mutex::new(HashMap::new()),
                run_ended: Notify::new(),
                draining: CancellationToken::new(),
            }),
            loops: Mutex::new(HashMap::new()),
        })
    }

    /// The store's clock as this scheduler reckons by it.
    pub fn clock(&self) -> &StoreClock {
        &self.inner.clock
    }

    /// Runs exactly `jobs` from now: a job that is new or changed starts (a changed one's old loop
    /// stops taking slots; its run going on is left to end), one that is gone stops taking slots,
    /// one unchanged goes on untouched. Returns the names started and stopped.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for two jobs of one name (nothing is changed then).
    pub fn set_jobs(&self, jobs: Vec<Job>) -> Result<(Vec<String>, Vec<String>)> {
        let mut seen = std::collections::HashSet::new();
        for j in &jobs {
            if !seen.insert(j.name.clone()) {
                return Err(Error::invalid(
                    "job name",
                    format!("`{}` is given twice; job names must be unique", j.name),
                ));
            }
        }
        let mut loops = self.loops.lock().unwrap_or_else(|p| p.into_inner());
        let (mut started, mut stopped) = (Vec::new(), Vec::new());
        loops.retain(|name, (old, token)| {
            let keep = jobs.iter().any(|j| &j.name == name && j.same_as(old));
            if !keep {
                token.cancel();
                stopped.push(name.clone());
            }
            keep
        });
        for job in jobs {
            if loops.contains_key(&job.name) {
                continue;
            }
            let token = self.inner.draining.child_token();
            started.push(job.name.clone());
            tokio::spawn(job_loop(self.inner.clone(), job.clone(), token.clone()));
            loops.insert(job.name.clone(), (job, token));
        }
        Ok((started, stopped))
    }

    /// Runs `job` once now, outside its schedule, recorded with reason `trigger` (its slot is the
    /// current second, or the next one when that is a slot instant of the job). Returns its
    /// record.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a job this scheduler does not run; store errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: a run cancelled midway is stopped and its record says running (read as
    /// lost).
    pub async fn trigger(&self, job: &Job) -> Result<Option<SlotRecord>> {
        let now = self.inner.clock.now_ms().await;
        let mut at = now - now.rem_euclid(1000);
        if job.when.latest_at_or_before(at) == Some(at) {
            at += 1000;
        }
        Ok(handle_slot(self.inner.clone(), job.clone(), at, Mode::Trigger).await)
    }

    /// Stops taking slots, lets the runs going on here end within their job's grace, then stops
    /// the rest (each run's `stop` token) and waits for them.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the loops are stopped by the first poll; the runs go on.
    pub async fn drain(&self) {
        self.inner.draining.cancel();
        let grace = self
            .loops
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|(j, _)| j.policy.grace)
            .max()
            .unwrap_or_default();
        let inner = &self.inner;
        if tokio::time::timeout(grace, no_run_going(inner))
            .await
            .is_err()
        {
            for g in inner
                .going
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .values()
            {
                g.stop.cancel();
            }
            let _ = tokio::time::timeout(grace + Duration::from_secs(5), no_run_going(inner)).await;
        }
    }

    /// Runs going on in this process now.
    pub fn running(&self) -> usize {
        self.inner
            .going
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .len()
    }
}

/// Sleeps until the store's clock reads `at_ms`; `false` when `stop` fired first.
async fn sleep_until(clock: &StoreClock, at_ms: i64, stop: &CancellationToken) -> bool {
    loop {
        let now = clock.now_ms().await;
        if now >= at_ms {
            return true;
        }
        // Wake a little early on long waits to read the clock again (it may have been refreshed).
        let wait = Duration::from_millis(u64::try_from(at_ms - now).unwrap_or(0));
        let step = if wait > Duration::from_secs(60) {
            wait - Duration::from_secs(30)
        } else {
            wait
        };
        tokio::select! {
            _ = tokio::time::sleep(step) => {}
            _ = stop.cancelled() => return false,
        }
    }
}

/// The slots that passed with no record since the newest on record, oldest first (a job with none
/// on record has nothing to catch up).
async fn missed_since_record(inner: &Inner, job: &Job, now: i64) -> Result<Vec<i64>> {
    let newest = super::history(&inner.client, &job.name, 1).await?;
    let Some(newest) = newest.first() else {
        return Ok(Vec::new());
    };
    let mut out = std::collections::VecDeque::new();
    let mut t = i64::try_from(newest.slot.start_unix_ms).unwrap_or(0);
    // Bounded: a job with a record a year old and a per-second schedule stops after this many.
    for _ in 0..100_000 {
        match job.when.next_after(t) {
            Some(next) if next <= now => {
                out.push_back(next);
                t = next;
            }
            _ => break,
        }
    }
    Ok(out.into())
}

async fn catch_up(inner: &Arc<Inner>, job: &Job, now: i64) {
    let missed = match missed_since_record(inner, job, now).await {
        Ok(m) => m,
        Err(e) => {
            tracing::warn!(job = %job.name, error = %e, "reading the history for catch-up failed; nothing caught up");
            return;
        }
    };
    let limit = job.policy.catch_up_limit as usize;
    // Slots still within their starting deadline are not missed: they run as any late slot does.
    let (late, in_time): (Vec<i64>, Vec<i64>) =
        missed.into_iter().partition(|s| now > job.deadline_ms(*s));
    let runs: Vec<i64> = match job.policy.catch_up {
        CatchUp::Skip => Vec::new(),
        CatchUp::Latest => late.last().copied().into_iter().collect(),
        CatchUp::All => late.iter().rev().take(limit).rev().copied().collect(),
    };
    for s in late.iter().rev().take(limit).rev() {
        if !runs.contains(s) {
            record_mark(inner, job, *s, Outcome::Missed, "catch-up").await;
        }
    }
    for s in runs {
        handle_slot(inner.clone(), job.clone(), s, Mode::CatchUp).await;
    }
    for s in in_time {
        spawn_slot(inner, job, s);
    }
}

fn spawn_slot(inner: &Arc<Inner>, job: &Job, slot_ms: i64) {
    tokio::spawn(handle_slot(
        inner.clone(),
        job.clone(),
        slot_ms,
        Mode::Scheduled,
    ));
}

async fn job_loop(inner: Arc<Inner>, job: Job, stop: CancellationToken) {
    let now = inner.clock.now_ms().await;
    catch_up(&inner, &job, now).await;
    let mut after = now;
    loop {
        let Some(slot_ms) = job.when.next_after(after) else {
            tracing::warn!(job = %job.name, "the schedule has no instant after now; the job stops");
            return;
        };
        metrics::gauge!(super::metric_names::NEXT_RUN, super::metric_names::JOB => job.name.clone())
            .set(slot_ms as f64 / 1000.0);
        let fire = slot_ms + i64::try_from(job.jitter_delay().as_millis()).unwrap_or(0);
        if !sleep_until(&inner.clock, fire, &stop).await {
            return;
        }
        spawn_slot(&inner, &job, slot_ms);
        after = slot_ms;
        // Woken late past further instants (a suspended machine): the next is the newest passed,
        // the ones in between are left to the other replicas (or recorded by the next catch-up).
        let now = inner.clock.estimate_ms();
        if let Some(newest) = job.when.latest_at_or_before(now) {
            if newest > slot_ms {
                after = newest - 1;
            }
        }
    }
}

/// Why a slot is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// At its instant (or a late wake within its deadline).
    Scheduled,
    /// Caught up after every replica was down: the deadline does not apply.
    CatchUp,
    /// An operator's extra run.
    Trigger,
}

async fn record_mark(
    inner: &Inner,
    job: &Job,
    slot_ms: i64,
    outcome: Outcome,
    reason: &str,
) -> Option<SlotRecord> {
    match mark(
        &inner.client,
        &job.name,
        Job::slot(slot_ms),
        outcome,
        reason,
        &job.policy.lease,
        &inner.holder,
    )
    .await
    {
        Ok(Some(r)) => {
            inner.runner.recorded(&r);
            Some(r)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(job = %job.name, slot = slot_ms / 1000, error = %e, "recording the slot {reason} failed");
            None
        }
    }
}

/// Whether the previous slot's run is still going (here or elsewhere), and its instant.
async fn previous_going(inner: &Inner, job: &Job, slot_ms: i64) -> Option<i64> {
    let prev = job.when.latest_at_or_before(slot_ms - 1)?;
    if inner
        .going
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains_key(&(job.name.clone(), prev))
    {
        return Some(prev);
    }
    let name = super::slot_name(&job.name, Job::slot(prev));
    match inner.client.inspect(&name).await {
        Ok(info) if info.held => Some(prev),
        _ => None,
    }
}

async fn replace(inner: &Inner, job: &Job, prev: i64) {
    let here = inner
        .going
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&(job.name.clone(), prev))
        .map(|g| (g.stop.clone(), g.ended.clone()));
    if let Some((stop, ended)) = here {
        let wait = ended.notified();
        stop.cancel();
        let _ = tokio::time::timeout(job.policy.grace + Duration::from_secs(5), wait).await;
        return;
    }
    // On another replica: take its lease away; its supervisor stops it within a renewal interval
    // and the grace. Wait that long before starting (stop before hand-over).
    let name = super::slot_name(&job.name, Job::slot(prev));
    if let Err(e) = inner.client.force_release(&name).await {
        tracing::warn!(job = %job.name, error = %e, "taking the previous run's lease away failed");
    }
    tokio::time::sleep(job.policy.lease.ttl() + job.policy.grace).await;
}

/// Claims and runs one slot until it is done, exhausted, taken elsewhere and done, or past its
/// deadline. Returns the last record this replica wrote.
async fn handle_slot(inner: Arc<Inner>, job: Job, slot_ms: i64, mode: Mode) -> Option<SlotRecord> {
    let slot = Job::slot(slot_ms);
    let deadline = match mode {
        Mode::Scheduled => job.deadline_ms(slot_ms),
        // A catch-up or trigger run starts now; its deadline is counted from now.
        Mode::CatchUp | Mode::Trigger => {
            inner.clock.estimate_ms() + (job.deadline_ms(slot_ms) - slot_ms)
        }
    };
    if mode != Mode::Trigger {
        match paused(&inner.client, &job.name).await {
            Ok(Some(_)) => {
                if let Err(e) = refresh_pause(&inner.client, &job.name).await {
                    tracing::debug!(job = %job.name, error = %e, "refreshing the pause flag failed");
                }
                return record_mark(&inner, &job, slot_ms, Outcome::Skipped, "paused").await;
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(job = %job.name, error = %e, "reading the pause flag failed; running")
            }
        }
        if job.policy.overlap != Overlap::Allow {
            if let Some(prev) = previous_going(&inner, &job, slot_ms).await {
                if job.policy.overlap == Overlap::Forbid {
                    return record_mark(&inner, &job, slot_ms, Outcome::Skipped, "overlap").await;
                }
                replace(&inner, &job, prev).await;
            }
        }
    }
    let poll =
        (job.policy.lease.ttl() / 2).clamp(Duration::from_millis(250), Duration::from_secs(5));
    let mut backoff = job.policy.backoff;
    let mut last = None;
    loop {
        if inner.draining.is_cancelled() {
            return last;
        }
        let now = inner.clock.now_ms().await;
        if now > deadline {
            if last.is_none() {
                return record_mark(&inner, &job, slot_ms, Outcome::Missed, "deadline").await;
            }
            return last;
        }
        let claimed = claim(
            &inner.client,
            &job.name,
            slot,
            &job.policy.lease,
            job.policy.max_attempts,
            &inner.holder,
        )
        .await;
        let wait = match claimed {
            Ok(Claim::Run(run)) => {
                let record = run_one(&inner, &job, run, mode).await;
                let ok = record.as_ref().is_some_and(|r| r.outcome == Outcome::Done);
                last = record;
                if ok {
                    return last;
                }
                let w = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(60));
                w
            }
            Ok(Claim::Busy) => poll,
            Ok(Claim::Done(_) | Claim::Exhausted(_)) => return last,
            Err(e) => {
                tracing::warn!(job = %job.name, slot = slot.index, error = %e, "claiming the slot failed; retrying");
                let w = backoff;
                backoff = (backoff * 2).min(Duration::from_secs(60));
                w
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = inner.draining.cancelled() => return last,
        }
    }
}

async fn run_one(
    inner: &Arc<Inner>,
    job: &Job,
    run: super::SlotRun,
    mode: Mode,
) -> Option<SlotRecord> {
    let (lease, mut record) = run.into_parts();
    if mode == Mode::Trigger {
        record.reason = Some("trigger".into());
    } else if mode == Mode::CatchUp {
        record.reason = Some("catch-up".into());
    }
    let key = (
        job.name.clone(),
        i64::try_from(record.slot.start_unix_ms).unwrap_or(0),
    );
    let stop = CancellationToken::new();
    let ended = Arc::new(Notify::new());
    inner
        .going
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(
            key.clone(),
            Going {
                stop: stop.clone(),
                ended: ended.clone(),
            },
        );
    let end = inner
        .runner
        .run(Run {
            job,
            slot: record.slot,
            attempt: record.attempts,
            triggered: mode == Mode::Trigger,
            lease: &lease,
            stop,
        })
        .await;
    let written = finish_with(&lease, record, end.exit_code, end.lost).await;
    if let Err(e) = lease.release().await {
        if !end.lost {
            tracing::warn!(job = %job.name, error = %e, "releasing the slot's lease failed; it lapses by itself");
        }
    }
    inner
        .going
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&key);
    ended.notify_waiters();
    inner.run_ended.notify_waiters();
    match written {
        Ok(r) => {
            inner.runner.recorded(&r);
            Some(r)
        }
        Err(e) => {
            tracing::warn!(job = %job.name, error = %e, "the outcome could not be recorded; a later claim reads it as lost");
            None
        }
    }
}

/// Completes once no run is going (each run's end notifies `run_ended`).
async fn no_run_going(inner: &Inner) {
    loop {
        let ended = inner.run_ended.notified();
        if inner
            .going
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
        {
            return;
        }
        ended.await;
    }
}
