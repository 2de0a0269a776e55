//! `leasehold cron JOBS_FILE`: the scheduler every replica runs (same file, same store), each job's
//! slot run on exactly one replica, as `run` runs a command (its own lease, `LEASEHOLD_JOB`,
//! `LEASEHOLD_SLOT`, `LEASEHOLD_SLOT_START`, `LEASEHOLD_FENCE`, stopped if the lease is lost), its
//! outcome in `history`. A thin command over [`leasehold::schedule::scheduler`], which says what the
//! policies promise; [`file`] reads the jobs file.
//!
//! Promise: a jobs file that does not read starts nothing (exit 2 naming the line and the field); a
//! store that is down at start is retried with backoff (a slot is claimed by its instant, so a late
//! start never runs a slot twice); SIGHUP reads the file again and applies it without stopping
//! running jobs (a file that does not read is refused and the old jobs go on); SIGTERM or SIGINT
//! stops taking slots, lets running jobs end within their grace, stops the rest, releases, exits 0.
//! Limit: as the library's: the store is the record (a store that forgets, forgets), and an etcd or
//! Redlock store leaves each replica on its own clock.

mod file;
mod serve;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use leasehold::schedule::clock::local_ms;
use leasehold::schedule::scheduler::{self, Run, RunEnd, Runner, Scheduler};
use leasehold::schedule::{ClockSource, Outcome, SlotRecord};
use leasehold::LeaseClient;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::{CronArgs, CronCommand, OnSuspect, StoreArgs};
use crate::duration::show;
use crate::exit;
use crate::store::{connect, fail};
use crate::supervise::{run_command, until_gone, Ended, Signals, Supervised};
use file::CronJob;

/// Runs `leasehold cron …`; returns the exit code.
pub(crate) async fn main(args: CronArgs, verbose: bool) -> i32 {
    match args.command {
        Some(CronCommand::Check { file }) => check(&file),
        Some(CronCommand::Next { count, file }) => next(&file, count),
        Some(CronCommand::Trigger { store, file, job }) => trigger(&store, &file, &job).await,
        Some(CronCommand::Pause { store, job }) => pause(&store, &job, true).await,
        Some(CronCommand::Resume { store, job }) => pause(&store, &job, false).await,
        None => match &args.file {
            Some(path) => daemon(&args, path, verbose).await,
            None => {
                eprintln!("leasehold: cron needs a JOBS_FILE (or a subcommand: check, next, trigger, pause, resume); see leasehold cron --help");
                exit::USAGE
            }
        },
    }
}

fn load(path: &Path) -> Result<Vec<CronJob>, i32> {
    file::load(path).map_err(|e| {
        eprintln!("leasehold: {e}");
        exit::USAGE
    })
}

fn check(path: &Path) -> i32 {
    match load(path) {
        Ok(jobs) => {
            println!("{}: {} job(s), all valid", path.display(), jobs.len());
            0
        }
        Err(code) => code,
    }
}

fn next(path: &Path, count: usize) -> i32 {
    let jobs = match load(path) {
        Ok(j) => j,
        Err(code) => return code,
    };
    let utc = leasehold::schedule::When::every(Duration::from_secs(1), Duration::ZERO)
        .expect("one second is a valid interval");
    for j in &jobs {
        let when = j.job.when();
        println!("{} ({})", j.job.name(), when.describe());
        let mut t = local_ms();
        for _ in 0..count {
            match when.next_after(t) {
                Some(n) => {
                    println!("  {}   {}", when.local(n), utc.local(n));
                    t = n;
                }
                None => {
                    println!("  (no instant after this)");
                    break;
                }
            }
        }
    }
    0
}

async fn pause(store: &StoreArgs, job: &str, paused: bool) -> i32 {
    if let Err(e) = leasehold::lease::check_name(job) {
        return fail(&e);
    }
    let client = match connect(store).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let by = leasehold::election::default_holder();
    let done = if paused {
        scheduler::pause(&client, job, &by).await
    } else {
        scheduler::resume(&client, job, &by).await
    };
    match done {
        Ok(()) => {
            println!(
                "{job}: {} on every replica (from its next slot)",
                if paused { "paused" } else { "resumed" }
            );
            0
        }
        Err(e) => fail(&e),
    }
}

/// The longest time between two instants of any job (over its next few), for the retention.
fn longest_gap(jobs: &[CronJob]) -> Duration {
    let now = local_ms();
    let mut gap = 0;
    for j in jobs {
        let w = j.job.when();
        let mut t = now;
        for _ in 0..4 {
            let Some(n) = w.next_after(t) else { break };
            if t != now {
                gap = gap.max(n - t);
            }
            t = n;
        }
    }
    Duration::from_millis(u64::try_from(gap).unwrap_or(0))
}

/// The store settings for these jobs: records kept at least two of the longest gaps.
fn store_for(store: &StoreArgs, jobs: &[CronJob]) -> StoreArgs {
    let mut s = store.clone();
    let max = Duration::from_secs(366 * 24 * 3600);
    s.retention = s
        .retention
        .max(longest_gap(jobs).saturating_mul(2))
        .min(max);
    s
}

/// Runs each slot's command as `run` does.
struct CommandRunner {
    jobs: RwLock<HashMap<String, CronJob>>,
    verbose: bool,
}

impl CommandRunner {
    fn set(&self, jobs: &[CronJob]) {
        let map = jobs
            .iter()
            .map(|j| (j.job.name().to_owned(), j.clone()))
            .collect();
        *self.jobs.write().unwrap_or_else(|p| p.into_inner()) = map;
    }

    /// How a job's run is supervised: as `run` with the job's TTL and grace, a suspect lease said.
    fn supervised<'a>(&self, job: &'a CronJob) -> Supervised<'a> {
        Supervised {
            name: job.job.name(),
            command: &job.command,
            ttl: job.ttl,
            grace: job.grace,
            stop_at_deadline: false,
            on_suspect: OnSuspect::Warn,
            min_hold: None,
            verbose: self.verbose,
        }
    }
}

/// A run's end as the scheduler records it.
fn run_end(ended: Ended) -> RunEnd {
    match ended {
        Ended::Exited(code) => RunEnd {
            exit_code: code,
            lost: false,
        },
        Ended::Lost => RunEnd {
            exit_code: None,
            lost: true,
        },
        Ended::Failed(code) => RunEnd {
            exit_code: Some(code),
            lost: false,
        },
    }
}

fn outcome_word(o: Outcome) -> String {
    format!("{o:?}").to_lowercase()
}

#[async_trait::async_trait]
impl Runner for CommandRunner {
    async fn run(&self, run: Run<'_>) -> RunEnd {
        let job = self
            .jobs
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(run.job.name())
            .cloned();
        let Some(job) = job else {
            return RunEnd {
                exit_code: Some(exit::SOFTWARE),
                lost: false,
            };
        };
        let args = self.supervised(&job);
        let mut signals = match Signals::silent() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("leasehold: cron: cannot install signal handlers for a run: {e}");
                return RunEnd {
                    exit_code: Some(exit::SOFTWARE),
                    lost: false,
                };
            }
        };
        eprintln!(
            "leasehold: cron: `{}` slot {} ({}): attempt {}{}, fence {}",
            job.job.name(),
            run.slot.index,
            job.job
                .when()
                .local(i64::try_from(run.slot.start_unix_ms).unwrap_or(0)),
            run.attempt,
            if run.triggered { " (trigger)" } else { "" },
            run.lease.fence()
        );
        let env = vec![
            ("LEASEHOLD_JOB", job.job.name().to_owned()),
            ("LEASEHOLD_SLOT", run.slot.index.to_string()),
            ("LEASEHOLD_SLOT_START", run.slot.start_unix_ms.to_string()),
            ("LEASEHOLD_ATTEMPT", run.attempt.to_string()),
        ];
        // Dropping the run (a drain past its grace, `replace`) closes the watcher's socket: the
        // watcher stops the command (SIGTERM, SIGKILL after the grace).
        let ended = tokio::select! {
            e = run_command(&args, run.lease, &mut signals, env) => e,
            _ = run.stop.cancelled() => {
                // Stop before hand-over: the run counts as ended only once nothing it started is
                // left (the processes that carry its name and fence), within the grace and 5 s.
                until_gone(job.job.name(), run.lease.fence(), job.grace + Duration::from_secs(5))
                    .await;
                Ended::Exited(None)
            }
        };
        run_end(ended)
    }

    fn recorded(&self, r: &SlotRecord) {
        eprintln!(
            "leasehold: cron: `{}` slot {}: {}{} (attempts {}, exit {}, took {}, by {})",
            r.job,
            r.slot.index,
            outcome_word(r.outcome),
            r.reason
                .as_ref()
                .map(|w| format!(" ({w})"))
                .unwrap_or_default(),
            r.attempts,
            r.exit_code.map_or("-".into(), |c| c.to_string()),
            r.duration_ms
                .map_or("-".into(), |ms| show(Duration::from_millis(ms))),
            r.holder
        );
    }
}

/// Connects and reads the store's clock, retrying with backoff while the store is unreachable;
/// `Err(code)` for a setting that is wrong, or a signal.
async fn start(
    store: &StoreArgs,
    holder: &str,
    runner: Arc<CommandRunner>,
    term: &mut tokio::signal::unix::Signal,
) -> Result<(LeaseClient, Scheduler), i32> {
    let mut backoff = Duration::from_millis(500);
    loop {
        let attempt = async {
            let client = connect(store).await?;
            match Scheduler::new(client.clone(), holder, runner.clone()).await {
                Ok(s) => Ok((client, s)),
                Err(e) if e.is_unavailable() || e.is_retryable() => {
                    eprintln!(
                        "leasehold: cron: reading the store's clock failed: {}",
                        exit::describe(&e)
                    );
                    Err(exit::UNAVAILABLE)
                }
                Err(e) => Err(fail(&e)),
            }
        };
        match attempt.await {
            Ok(ready) => return Ok(ready),
            Err(exit::UNAVAILABLE) => {
                eprintln!("leasehold: cron: retrying in {}", show(backoff));
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = term.recv() => return Err(128 + 15),
                }
                backoff = (backoff * 2).min(Duration::from_secs(30));
            }
            Err(code) => return Err(code),
        }
    }
}

async fn daemon(args: &CronArgs, path: &Path, verbose: bool) -> i32 {
    let jobs = match load(path) {
        Ok(j) => j,
        Err(code) => return code,
    };
    if let Err(e) = leasehold::lease::check_prefix(&args.store.key_prefix) {
        return fail(&e);
    }
    let (mut hup, mut term, mut int) = match (
        signal(SignalKind::hangup()),
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(h), Ok(t), Ok(i)) => (h, t, i),
        _ => {
            eprintln!("leasehold: cannot install signal handlers");
            return exit::SOFTWARE;
        }
    };
    let served = match serve_health(args, &jobs) {
        Ok(s) => s,
        Err(code) => return code,
    };
    let store = store_for(&args.store, &jobs);
    let holder = args
        .holder
        .clone()
        .unwrap_or_else(leasehold::election::default_holder);
    let runner = Arc::new(CommandRunner {
        jobs: RwLock::new(HashMap::new()),
        verbose,
    });
    runner.set(&jobs);
    let (_client, sched) = match start(&store, &holder, runner.clone(), &mut term).await {
        Ok(ready) => ready,
        Err(code) => return code,
    };
    if let Err(e) = sched.set_jobs(jobs.iter().map(|j| j.job.clone()).collect()) {
        return fail(&e);
    }
    say_started(jobs.len(), path, &holder, &sched);
    if let Some(s) = &served {
        s.ready(jobs.len());
    }
    loop {
        tokio::select! {
            _ = hup.recv() => reload(path, &runner, &sched),
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    if let Some(s) = &served {
        s.draining();
    }
    eprintln!(
        "leasehold: cron: stopping: no new slots; {} run(s) going on get their grace",
        sched.running()
    );
    sched.drain().await;
    eprintln!("leasehold: cron: stopped");
    0
}

/// `--health`: the endpoints served from now on, or exit 2 for an address that cannot be bound.
fn serve_health(args: &CronArgs, jobs: &[CronJob]) -> Result<Option<serve::Served>, i32> {
    let Some(addr) = &args.health else {
        return Ok(None);
    };
    let names: Vec<&str> = jobs.iter().map(|j| j.job.name()).collect();
    serve::Served::start(addr, &names).map(Some).map_err(|e| {
        eprintln!("leasehold: cannot serve --health on {addr}: {e}; pick a free address");
        exit::USAGE
    })
}

/// The daemon's first line: its jobs, who it is, whose clock it reckons slots on.
fn say_started(jobs: usize, path: &Path, holder: &str, sched: &Scheduler) {
    let (offset, error) = sched.clock().offset_ms();
    eprintln!(
        "leasehold: cron: {jobs} job(s) from {}, as {holder}; clock: {}",
        path.display(),
        match sched.clock().source() {
            ClockSource::Store => format!("the store's ({offset:+} ms from ours, ±{error} ms)"),
            ClockSource::Local => "this replica's own (the store has none)".into(),
        }
    );
}

fn reload(path: &Path, runner: &CommandRunner, sched: &Scheduler) {
    let jobs = match file::load(path) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("leasehold: cron: SIGHUP: {e}; keeping the jobs running now");
            return;
        }
    };
    // Runs going on keep the command they started with; new runs take the new one.
    let old = runner
        .jobs
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .clone();
    runner.set(&jobs);
    match sched.set_jobs(jobs.iter().map(|j| j.job.clone()).collect()) {
        Ok((started, stopped)) => eprintln!(
            "leasehold: cron: SIGHUP: {} job(s); started or changed: {}; stopped: {}",
            jobs.len(),
            list(&started),
            list(&stopped)
        ),
        Err(e) => {
            *runner.jobs.write().unwrap_or_else(|p| p.into_inner()) = old;
            eprintln!(
                "leasehold: cron: SIGHUP: {}; keeping the jobs running now",
                exit::describe(&e)
            );
        }
    }
}

fn list(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

async fn trigger(store: &StoreArgs, path: &Path, name: &str) -> i32 {
    let jobs = match load(path) {
        Ok(j) => j,
        Err(code) => return code,
    };
    let Some(job) = jobs.iter().find(|j| j.job.name() == name) else {
        eprintln!(
            "leasehold: no job `{name}` in {}; its jobs: {}",
            path.display(),
            jobs.iter()
                .map(|j| j.job.name())
                .collect::<Vec<_>>()
                .join(", ")
        );
        return exit::USAGE;
    };
    let store = store_for(store, &jobs);
    let runner = Arc::new(CommandRunner {
        jobs: RwLock::new(HashMap::new()),
        verbose: false,
    });
    runner.set(&jobs);
    let client = match connect(&store).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let holder = leasehold::election::default_holder();
    let sched = match Scheduler::new(client, &holder, runner).await {
        Ok(s) => s,
        Err(e) => return fail(&e),
    };
    match sched.trigger(&job.job).await {
        Ok(Some(r)) if r.outcome == Outcome::Done => 0,
        Ok(Some(r)) => match (r.outcome, r.exit_code) {
            (Outcome::Lost, _) => exit::LOST,
            (_, Some(code)) if code != 0 => code,
            _ => exit::SOFTWARE,
        },
        Ok(None) => {
            eprintln!("leasehold: the triggered run did not start (its slot was taken); see leasehold history {name}");
            exit::BUSY
        }
        Err(e) => fail(&e),
    }
}
