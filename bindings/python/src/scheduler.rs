//! The cron scheduler of `leasehold cron` (the library's `schedule::scheduler`) with Python
//! functions as its jobs. Promise: the same slots, policies, pause flags and records as `leasehold
//! cron` on the same store, so Python replicas and `leasehold cron` replicas can share jobs; each
//! slot runs on one replica while runs finish within their lease. Limit: a job function runs in a
//! thread of its own holding the GIL as any Python code does; the scheduler can ask it to stop
//! (`run.stopping`, `run.wait_stop`) but cannot interrupt it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use leasehold::schedule::scheduler::{
    self as core, CatchUp, Job as CoreJob, Overlap, Policy, Run, RunEnd, Runner,
};
use leasehold::schedule::{self, SlotRecord, When};
use leasehold::{LeaseClient, LeaseOptions, LostSignal};
use pyo3::prelude::*;
use tokio_util::sync::CancellationToken;

use crate::{block, runtime, seconds, to_json, to_py, BadInput};

/// Job(name, func, *, cron=None, zone="UTC", every=None, offset=0, ttl=30, grace=None,
/// starting_deadline=None, catch_up="skip", catch_up_limit=100, overlap="forbid", max_attempts=3,
/// backoff=1, jitter=0)
///
/// A scheduled job: its slots (`cron`, 5 or 6 fields, read in the IANA `zone`; or `every` whole
/// seconds from the Unix epoch, shifted by `offset`), its policies (as the keys of a `leasehold
/// cron` file; durations in seconds) and `func`, called with a `ScheduledRun` for each slot this
/// replica runs: it returns None or 0 (done), another int (failed, retried up to `max_attempts`),
/// or raises (failed). An `async def` function runs on an event loop of its own in the run's thread. Raises `BadInput` naming the field for a bad value; nothing runs until a
/// scheduler's `set_jobs`.
#[pyclass(frozen, name = "Job", module = "leasehold._leasehold")]
pub(crate) struct PyJob {
    job: CoreJob,
    func: Arc<Py<PyAny>>,
}

fn invalid(job: &str, field: &str, why: impl std::fmt::Display) -> PyErr {
    BadInput::new_err(format!("invalid job `{job}`: {field}: {why}"))
}

#[pymethods]
impl PyJob {
    #[new]
    #[pyo3(signature = (name, func, *, cron=None, zone="UTC", every=None, offset=0.0, ttl=30.0,
        grace=None, starting_deadline=None, catch_up="skip", catch_up_limit=100,
        overlap="forbid", max_attempts=3, backoff=1.0, jitter=0.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        name: String,
        func: Bound<'_, PyAny>,
        cron: Option<String>,
        zone: &str,
        every: Option<f64>,
        offset: f64,
        ttl: f64,
        grace: Option<f64>,
        starting_deadline: Option<f64>,
        catch_up: &str,
        catch_up_limit: u32,
        overlap: &str,
        max_attempts: u32,
        backoff: f64,
        jitter: f64,
    ) -> PyResult<Self> {
        if !func.is_callable() {
            return Err(invalid(
                &name,
                "func",
                "is not callable; give a function of one argument (the run)",
            ));
        }
        let when = match (cron, every) {
            (Some(_), Some(_)) => {
                return Err(invalid(&name, "every", "give `cron` or `every`, not both"))
            }
            (None, None) => {
                return Err(invalid(
                    &name,
                    "cron",
                    "missing: give cron=\"0 2 * * *\" or every=600 (seconds)",
                ))
            }
            (Some(expr), None) => {
                if offset != 0.0 {
                    return Err(invalid(
                        &name,
                        "offset",
                        "goes with `every`; a cron expression has its own minutes",
                    ));
                }
                When::cron(&expr, zone).map_err(|e| {
                    let field = if e.to_string().contains("time zone") {
                        "zone"
                    } else {
                        "cron"
                    };
                    invalid(&name, field, e)
                })?
            }
            (None, Some(period)) => {
                schedule::when::zone(zone).map_err(|e| invalid(&name, "zone", e))?;
                When::every(seconds("every", period)?, seconds("offset", offset)?).map_err(|e| {
                    let field = if e.to_string().contains("offset") {
                        "offset"
                    } else {
                        "every"
                    };
                    invalid(&name, field, e)
                })?
            }
        };
        let lease =
            LeaseOptions::with_ttl(seconds("ttl", ttl)?).map_err(|e| invalid(&name, "ttl", e))?;
        let grace = match grace {
            Some(g) => seconds("grace", g)?,
            None => lease.default_shutdown(),
        };
        lease
            .check_shutdown(grace)
            .map_err(|e| invalid(&name, "grace", e))?;
        let mut p = Policy::default();
        p.lease = lease;
        p.grace = grace;
        p.starting_deadline = starting_deadline
            .map(|d| seconds("starting_deadline", d))
            .transpose()?;
        p.catch_up = match catch_up {
            "skip" => CatchUp::Skip,
            "latest" => CatchUp::Latest,
            "all" => CatchUp::All,
            other => {
                return Err(invalid(
                    &name,
                    "catch_up",
                    format!("`{other}` is not a policy; give skip, latest or all"),
                ))
            }
        };
        p.catch_up_limit = catch_up_limit;
        p.overlap = match overlap {
            "forbid" => Overlap::Forbid,
            "allow" => Overlap::Allow,
            "replace" => Overlap::Replace,
            other => {
                return Err(invalid(
                    &name,
                    "overlap",
                    format!("`{other}` is not a policy; give forbid, allow or replace"),
                ))
            }
        };
        p.max_attempts = max_attempts;
        p.backoff = seconds("backoff", backoff)?;
        p.jitter = seconds("jitter", jitter)?;
        let job = CoreJob::new(&name, when)
            .and_then(|j| j.with_policy(p))
            .map_err(to_py)?;
        Ok(PyJob {
            job,
            func: Arc::new(func.unbind()),
        })
    }

    /// The job's name.
    #[getter]
    fn name(&self) -> &str {
        self.job.name()
    }

    /// Its slots in words (`cron "0 2 * * *" in Europe/Berlin`, `every 10m`).
    #[getter]
    fn describe(&self) -> String {
        self.job.when().describe()
    }

    /// The next instants after `after_unix_ms`, in milliseconds since the Unix epoch.
    fn next_instants(&self, after_unix_ms: i64, count: usize) -> Vec<i64> {
        let mut out = Vec::with_capacity(count);
        let mut t = after_unix_ms;
        while out.len() < count {
            match self.job.when().next_after(t) {
                Some(n) => {
                    out.push(n);
                    t = n;
                }
                None => break,
            }
        }
        out
    }
}

/// One attempt at a slot, handed to the job's function: `job`, `slot_unix_ms` (the slot's
/// instant by the store's clock), `attempt` (from 1), `triggered`, `fence` (pass it to fenced
/// writes), `stopping` (stop soon once true) and `wait_stop(timeout)`.
#[pyclass(frozen, name = "ScheduledRun", module = "leasehold._leasehold")]
pub(crate) struct ScheduledRun {
    job: String,
    slot_unix_ms: u64,
    attempt: u32,
    triggered: bool,
    fence: u64,
    stop: CancellationToken,
    lost: LostSignal,
}

#[pymethods]
impl ScheduledRun {
    #[getter]
    fn job(&self) -> &str {
        &self.job
    }
    /// The slot's instant, in milliseconds since the Unix epoch (by the store's clock).
    #[getter]
    fn slot_unix_ms(&self) -> u64 {
        self.slot_unix_ms
    }
    #[getter]
    fn attempt(&self) -> u32 {
        self.attempt
    }
    #[getter]
    fn triggered(&self) -> bool {
        self.triggered
    }
    /// The slot's lease fence: present it to fenced writes.
    #[getter]
    fn fence(&self) -> u64 {
        self.fence
    }
    /// Whether the run must stop now: the scheduler is draining past its grace, a `replace`
    /// overlap took over, or the slot's lease was lost.
    #[getter]
    fn stopping(&self) -> bool {
        self.stop.is_cancelled() || self.lost.is_fired()
    }
    /// Why the lease was lost, or `None`.
    #[getter]
    fn lost_reason(&self) -> Option<String> {
        self.lost.reason().map(|r| r.to_string())
    }
    /// Waits up to `timeout` seconds (GIL released) for the run to be told to stop; whether it was.
    fn wait_stop(&self, py: Python<'_>, timeout: f64) -> PyResult<bool> {
        let timeout = seconds("timeout", timeout)?;
        let (stop, lost) = (self.stop.clone(), self.lost.clone());
        block(py, async move {
            let told = async {
                tokio::select! {
                    _ = stop.cancelled() => {}
                    _ = lost.fired() => {}
                }
            };
            Ok(tokio::time::timeout(timeout, told).await.is_ok())
        })
    }
}

/// Runs each slot with the job's Python function, in a thread of its own (not one of the
/// runtime's: the function may call leasehold itself, which waits on the runtime).
#[derive(Default)]
struct PyRunner {
    funcs: Mutex<HashMap<String, Arc<Py<PyAny>>>>,
}

/// The exit code of a job function's result: `None` or an int (0 is done); an exception or another
/// value is a failure (1), its traceback printed to stderr. An `async def` function's coroutine is
/// run to its end on an event loop of its own in the job's thread (`asyncio.run`), and its result
/// read the same way.
fn call_job(func: &Py<PyAny>, run: ScheduledRun) -> Option<i32> {
    Python::attach(|py| {
        let outcome = Py::new(py, run)
            .and_then(|r| func.call1(py, (r,)))
            .and_then(|v| run_if_coroutine(py, v));
        match outcome {
            Ok(v) if v.is_none(py) => Some(0),
            Ok(v) => match v.extract::<i32>(py) {
                Ok(code) => Some(code),
                Err(e) => {
                    e.print(py);
                    Some(1)
                }
            },
            Err(e) => {
                e.print(py);
                Some(1)
            }
        }
    })
}

/// `v` itself, or, when it is a coroutine (the function was `async def`), what it returns once run
/// on a new event loop in this thread (the job's own: no loop runs here).
fn run_if_coroutine(py: Python<'_>, v: Py<PyAny>) -> PyResult<Py<PyAny>> {
    let is_coroutine = py
        .import("inspect")?
        .call_method1("iscoroutine", (v.bind(py),))?
        .is_truthy()?;
    if !is_coroutine {
        return Ok(v);
    }
    Ok(py
        .import("asyncio")?
        .call_method1("run", (v.bind(py),))?
        .unbind())
}

#[async_trait::async_trait]
impl Runner for PyRunner {
    async fn run(&self, run: Run<'_>) -> RunEnd {
        let func = self
            .funcs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(run.job.name())
            .cloned();
        let Some(func) = func else {
            return RunEnd {
                exit_code: None,
                lost: false,
            };
        };
        let ctx = ScheduledRun {
            job: run.job.name().to_owned(),
            slot_unix_ms: run.slot.start_unix_ms,
            attempt: run.attempt,
            triggered: run.triggered,
            fence: run.lease.fence().get(),
            stop: run.stop.clone(),
            lost: run.lease.lost(),
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name(format!("leasehold-job-{}", run.job.name()))
            .spawn(move || {
                let _ = tx.send(call_job(&func, ctx));
            });
        let exit_code = match spawned {
            Ok(_) => rx.await.unwrap_or(None),
            Err(_) => None,
        };
        RunEnd {
            exit_code,
            lost: run.lease.is_lost(),
        }
    }
}

/// The scheduler (`LeaseClient.scheduler()`): one per process is enough; every replica runs one
/// with the same jobs. Dropped without `drain`, it stops taking slots in the background.
#[pyclass(frozen, name = "Scheduler", module = "leasehold._leasehold")]
pub(crate) struct Scheduler {
    inner: Arc<core::Scheduler>,
    runner: Arc<PyRunner>,
    jobs: Mutex<HashMap<String, CoreJob>>,
}

impl Scheduler {
    pub(crate) fn start(py: Python<'_>, client: LeaseClient, holder: String) -> PyResult<Self> {
        let runner = Arc::new(PyRunner::default());
        let r: Arc<dyn Runner> = runner.clone();
        let inner = block(
            py,
            async move { core::Scheduler::new(client, &holder, r).await },
        )?;
        Ok(Scheduler {
            inner: Arc::new(inner),
            runner,
            jobs: Mutex::new(HashMap::new()),
        })
    }
}

#[pymethods]
impl Scheduler {
    /// Runs exactly `jobs` from now (new or changed ones start, missing ones stop taking slots);
    /// the names started and stopped.
    fn set_jobs(&self, jobs: Vec<Bound<'_, PyJob>>) -> PyResult<(Vec<String>, Vec<String>)> {
        let list: Vec<CoreJob> = jobs.iter().map(|j| j.get().job.clone()).collect();
        // Functions first: a slot of a new job may fire as soon as its loop starts.
        {
            let mut funcs = self.runner.funcs.lock().unwrap_or_else(|p| p.into_inner());
            for j in &jobs {
                let j = j.get();
                funcs.insert(j.job.name().to_owned(), j.func.clone());
            }
        }
        let _entered = runtime().enter();
        let changed = self.inner.set_jobs(list.clone()).map_err(to_py)?;
        let mut funcs = self.runner.funcs.lock().unwrap_or_else(|p| p.into_inner());
        funcs.retain(|name, _| list.iter().any(|j| j.name() == name));
        *self.jobs.lock().unwrap_or_else(|p| p.into_inner()) =
            list.into_iter().map(|j| (j.name().to_owned(), j)).collect();
        Ok(changed)
    }

    /// Runs job `name` once now, outside its schedule; its record as JSON.
    fn trigger_json(&self, py: Python<'_>, name: String) -> PyResult<String> {
        let job = self
            .jobs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&name)
            .cloned()
            .ok_or_else(|| {
                BadInput::new_err(format!(
                    "invalid job `{name}`: this scheduler does not run it"
                ))
            })?;
        let inner = self.inner.clone();
        block(py, async move { to_json(&inner.trigger(&job).await?) })
    }

    /// Stops taking slots and waits for the runs going on (each job's grace, then told to stop).
    fn drain(&self, py: Python<'_>) -> PyResult<()> {
        let inner = self.inner.clone();
        block(py, async move {
            inner.drain().await;
            Ok(())
        })
    }

    /// Runs going on in this process now.
    #[getter]
    fn running(&self) -> usize {
        self.inner.running()
    }

    /// The store's clock now, in milliseconds since the Unix epoch, as the scheduler reckons.
    #[getter]
    fn clock_ms(&self) -> i64 {
        self.inner.clock().estimate_ms()
    }
}

impl Drop for Scheduler {
    /// A scheduler dropped without `drain` stops taking slots (its loops would otherwise run on).
    fn drop(&mut self) {
        let inner = self.inner.clone();
        runtime().spawn(async move { inner.drain().await });
    }
}

/// Records of `job`, newest first, as JSON.
pub(crate) fn history_json(
    py: Python<'_>,
    client: LeaseClient,
    job: String,
    limit: usize,
) -> PyResult<String> {
    block(py, async move {
        to_json::<Vec<SlotRecord>>(&schedule::history(&client, &job, limit).await?)
    })
}

/// Pauses (`true`) or resumes `job` on every replica.
pub(crate) fn set_paused(
    py: Python<'_>,
    client: LeaseClient,
    job: String,
    paused: bool,
    by: String,
) -> PyResult<()> {
    block(py, async move {
        if paused {
            core::pause(&client, &job, &by).await
        } else {
            core::resume(&client, &job, &by).await
        }
    })
}

/// Who paused `job`, or `None`.
pub(crate) fn paused_by(
    py: Python<'_>,
    client: LeaseClient,
    job: String,
) -> PyResult<Option<String>> {
    block(py, async move { core::paused(&client, &job).await })
}
