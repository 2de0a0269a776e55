//! `leasehold._leasehold`: the native half of the Python package, a thin layer over the `leasehold`
//! crate. Promise: every call runs the library's own code (the same stores, scripts, renewal task and
//! cancel safety as a Rust program or the `leasehold` command), with the GIL released while it waits,
//! on one tokio runtime per process whose tasks renew every lease. Limit: nothing here survives the
//! process; a lease left held by a process killed with SIGKILL stays held until its TTL lapses.
//!
//! The Python-facing API (context managers, `lease.lost` as an event and an awaitable, the
//! exception classes' docs) is in `python/leasehold/__init__.py`, which wraps these classes.

use std::future::Future;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::watch;

mod scheduler;

use leasehold::election::{
    Election as CoreElection, Leadership as CoreLeadership, Observer as CoreObserver,
};
use leasehold::schedule::{self, Claim, Schedule, SlotRun as CoreSlotRun};
use leasehold::{Error, LeaseClient, LeaseOptions, LostSignal, StoreFailure};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyRuntimeError};
use pyo3::prelude::*;

create_exception!(
    _leasehold,
    LeaseholdError,
    PyException,
    "Base class of leasehold's errors."
);
create_exception!(
    _leasehold,
    Busy,
    LeaseholdError,
    "The lease is held by another and no wait is left."
);
create_exception!(
    _leasehold,
    Lost,
    LeaseholdError,
    "The lease was lost (expired, evicted or taken over)."
);
create_exception!(
    _leasehold,
    Unreachable,
    LeaseholdError,
    "The store could not be reached or did not answer in time."
);
create_exception!(
    _leasehold,
    Unauthorized,
    LeaseholdError,
    "The store refused the credentials or a permission."
);
create_exception!(
    _leasehold,
    Misconfigured,
    LeaseholdError,
    "The store is set up in a way leasehold refuses to run on."
);
create_exception!(
    _leasehold,
    BadInput,
    LeaseholdError,
    "An argument was refused before anything was sent."
);
create_exception!(
    _leasehold,
    StaleFence,
    LeaseholdError,
    "A resource refused a writer whose fence is older than one it accepted."
);

/// The runtime every call and every renewal runs on. Two worker threads: the renewals of 10,000
/// leases are one task's batches, not a thread each. (One worker was tried: on a loaded 2-core
/// machine its uncontended figures ranged from 0.7x to 4x redis-py's, two workers' from 1.75x to
/// 2.6x; a call waits for a worker to be scheduled, and two are more often at hand.)
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<&'static tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder
            .worker_threads(2)
            .enable_all()
            .thread_name("leasehold");
        pyo3_async_runtimes::tokio::init(builder);
        pyo3_async_runtimes::tokio::get_runtime()
    })
}

/// The operator's one-line reading of an error, as the `leasehold` command prints it after
/// `leasehold: ` (the command's `exit::describe`).
fn describe(e: &Error) -> String {
    let reach = "check the store URL and that the server is up";
    match e {
        Error::Store {
            phase,
            store,
            kind: StoreFailure::Unreachable,
            source,
        } => format!(
            "cannot reach {store} during {phase}: {}; {reach}",
            leasehold::Report::new(&**source)
        ),
        Error::Store {
            phase,
            store,
            kind: StoreFailure::Failing,
            source,
        } if *phase == leasehold::Phase::Connect => format!(
            "cannot reach {store} during {phase}: {}; {reach}",
            leasehold::Report::new(&**source)
        ),
        e @ Error::Timeout { .. } => format!("{e}; {reach} and not overloaded"),
        // Its causes too (Display shows only the error's own message).
        other => other.report().to_string(),
    }
}

/// The Python exception for a library error: the class follows the command's exit codes (2 bad
/// input, 69 unreachable, 75 busy, 76 lost, 77 unauthorized, 78 misconfigured).
fn to_py(e: Error) -> PyErr {
    let msg = describe(&e);
    match &e {
        Error::Invalid { .. } | Error::PermitsInUse { .. } => BadInput::new_err(msg),
        Error::Unauthorized { .. } | Error::Denied { .. } => Unauthorized::new_err(msg),
        Error::Misconfigured { .. } => Misconfigured::new_err(msg),
        Error::Busy { .. } | Error::WaitTimeout { .. } => Busy::new_err(msg),
        Error::LeaseLost { .. } => Lost::new_err(msg),
        Error::StaleFence { .. } => StaleFence::new_err(msg),
        e if e.is_unavailable() => Unreachable::new_err(msg),
        _ => LeaseholdError::new_err(msg),
    }
}

/// Runs `fut` on the runtime and waits for it with the GIL released, looking at Python's signals
/// every 100 ms: a Ctrl-C aborts the task (dropping the future, which the library's cancel safety
/// covers: an attempt under way is abandoned and a lease it took is released) and raises
/// `KeyboardInterrupt`.
fn block<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = leasehold::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let rt = runtime();
    let mut handle = rt.spawn(fut);
    loop {
        let joined = py.detach(|| {
            rt.block_on(async {
                tokio::time::timeout(Duration::from_millis(100), &mut handle).await
            })
        });
        match joined {
            Ok(Ok(result)) => return result.map_err(to_py),
            Ok(Err(join)) => {
                return Err(PyRuntimeError::new_err(format!(
                    "leasehold task failed: {join}"
                )))
            }
            Err(_elapsed) => {
                if let Err(interrupt) = py.check_signals() {
                    handle.abort();
                    return Err(interrupt);
                }
            }
        }
    }
}

/// An awaitable for `fut` on the running asyncio loop; cancelling the asyncio task drops `fut`.
fn awaitable<'py, F, T>(py: Python<'py>, fut: F) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = leasehold::Result<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    runtime();
    pyo3_async_runtimes::tokio::future_into_py(py, async move { fut.await.map_err(to_py) })
}

/// Seconds from Python as a duration; `what` names the argument in the error.
fn seconds(what: &'static str, s: f64) -> PyResult<Duration> {
    if !s.is_finite() || s < 0.0 {
        return Err(BadInput::new_err(format!(
            "invalid {what}: {s} s; give a number of seconds, 0 or more"
        )));
    }
    Duration::try_from_secs_f64(s)
        .map_err(|_| BadInput::new_err(format!("invalid {what}: {s} s is too large")))
}

/// The lease options from the Python keywords; the library's builder validates them (a zero TTL,
/// a renewal slower than the lease, permits out of range).
fn options(ttl: f64, max_hold: Option<f64>, permits: u32) -> PyResult<LeaseOptions> {
    let mut b = LeaseOptions::builder()
        .ttl(seconds("ttl", ttl)?)
        .permits(permits);
    if let Some(m) = max_hold {
        b = b.max_hold(seconds("max_hold", m)?);
    }
    b.build().map_err(to_py)
}

fn to_json<T: serde::Serialize>(v: &T) -> leasehold::Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Invalid {
        what: "store answer",
        why: format!("cannot be encoded: {e}"),
    })
}

/// A connected client (one per process is enough: it multiplexes every lease and renews them all in
/// one task).
#[pyclass(frozen, module = "leasehold._leasehold")]
struct Client {
    inner: LeaseClient,
}

#[pymethods]
impl Client {
    /// Connects to the store `url` names (any URL the `leasehold` command takes).
    #[staticmethod]
    #[pyo3(signature = (url, key_prefix=None, connect_timeout=None))]
    fn connect(
        py: Python<'_>,
        url: String,
        key_prefix: Option<String>,
        connect_timeout: Option<f64>,
    ) -> PyResult<Client> {
        let mut b = LeaseClient::builder(url);
        if let Some(p) = key_prefix {
            b = b.key_prefix(p);
        }
        if let Some(t) = connect_timeout {
            b = b.connect_timeout(seconds("connect_timeout", t)?);
        }
        let inner = block(py, b.connect())?;
        Ok(Client { inner })
    }

    /// The store's kind (`redis`, `postgres`, ...).
    #[getter]
    fn store_kind(&self) -> String {
        self.inner.store_kind().to_string()
    }

    /// Acquires `name`, waiting up to `wait` seconds (0: try once).
    #[pyo3(signature = (name, ttl, wait, max_hold=None, permits=1))]
    fn acquire(
        &self,
        py: Python<'_>,
        name: String,
        ttl: f64,
        wait: f64,
        max_hold: Option<f64>,
        permits: u32,
    ) -> PyResult<Lease> {
        let opts = options(ttl, max_hold, permits)?;
        let wait = seconds("wait", wait)?;
        let client = self.inner.clone();
        let lease = block(py, async move { client.acquire(&name, &opts, wait).await })?;
        Ok(Lease::new(lease))
    }

    /// As `acquire`, awaitable.
    #[pyo3(signature = (name, ttl, wait, max_hold=None, permits=1))]
    fn acquire_async<'py>(
        &self,
        py: Python<'py>,
        name: String,
        ttl: f64,
        wait: f64,
        max_hold: Option<f64>,
        permits: u32,
    ) -> PyResult<Bound<'py, PyAny>> {
        let opts = options(ttl, max_hold, permits)?;
        let wait = seconds("wait", wait)?;
        let client = self.inner.clone();
        awaitable(py, async move {
            let lease = client.acquire(&name, &opts, wait).await?;
            Ok(Lease::new(lease))
        })
    }

    /// The state of `name` as JSON (the `leasehold status --json` fields).
    fn status_json(&self, py: Python<'_>, name: String) -> PyResult<String> {
        let client = self.inner.clone();
        block(py, async move { to_json(&client.inspect(&name).await?) })
    }

    /// The names matching the glob `pattern`, as a JSON list.
    fn list_json(&self, py: Python<'_>, pattern: String) -> PyResult<String> {
        let client = self.inner.clone();
        block(py, async move { to_json(&client.list(&pattern).await?) })
    }

    /// Frees `name` whoever holds it and advances the fence; `(evicted, fence)`.
    fn force_release(&self, py: Python<'_>, name: String) -> PyResult<(bool, u64)> {
        let client = self.inner.clone();
        let r = block(py, async move { client.force_release(&name).await })?;
        Ok((r.evicted, r.fence.get()))
    }

    /// Campaigns in election `name` with `value`, waiting up to `wait` seconds.
    #[pyo3(signature = (name, value, ttl, wait, holder=None))]
    fn campaign(
        &self,
        py: Python<'_>,
        name: String,
        value: String,
        ttl: f64,
        wait: f64,
        holder: Option<String>,
    ) -> PyResult<Leadership> {
        let opts = options(ttl, None, 1)?;
        let wait = seconds("wait", wait)?;
        let mut election = CoreElection::new(&self.inner, &name, &opts).map_err(to_py)?;
        if let Some(h) = holder {
            election = election.with_holder(&h).map_err(to_py)?;
        }
        let leadership = block(py, async move { election.campaign(&value, wait).await })?;
        Ok(Leadership::new(leadership))
    }

    /// The leader of election `name` as JSON (`null`: nobody leads).
    fn leader_json(&self, py: Python<'_>, name: String) -> PyResult<String> {
        let client = self.inner.clone();
        block(py, async move {
            to_json(&leasehold::election::leader_of(&client, &name).await?)
        })
    }

    /// Follows the leader of election `name` with the core's observer, asking the store every
    /// `every` seconds.
    fn observe(&self, name: String, every: f64) -> PyResult<Observer> {
        let every = seconds("every", every)?;
        let opts = LeaseOptions::default();
        let election = CoreElection::new(&self.inner, &name, &opts).map_err(to_py)?;
        Ok(Observer {
            inner: std::sync::Arc::new(tokio::sync::Mutex::new(election.observe().every(every))),
        })
    }

    /// A scheduler of Python jobs on this client's store, its records naming `holder` (default
    /// host:pid:random); it runs nothing until `set_jobs`.
    #[pyo3(signature = (holder=None))]
    fn scheduler(&self, py: Python<'_>, holder: Option<String>) -> PyResult<scheduler::Scheduler> {
        let holder = holder.unwrap_or_else(leasehold::election::default_holder);
        scheduler::Scheduler::start(py, self.inner.clone(), holder)
    }

    /// The slot records of `job` the store keeps, newest first, at most `limit`, as JSON.
    fn history_json(&self, py: Python<'_>, job: String, limit: usize) -> PyResult<String> {
        scheduler::history_json(py, self.inner.clone(), job, limit)
    }

    /// Pauses (`paused=True`) or resumes `job` on every replica; `by` says who.
    fn set_paused(&self, py: Python<'_>, job: String, paused: bool, by: String) -> PyResult<()> {
        scheduler::set_paused(py, self.inner.clone(), job, paused, by)
    }

    /// Who paused `job`, or `None` when it is not paused.
    fn paused_by(&self, py: Python<'_>, job: String) -> PyResult<Option<String>> {
        scheduler::paused_by(py, self.inner.clone(), job)
    }

    /// Claims the current slot of `job` run every `every` seconds: `("run", SlotRun)`, or
    /// `("busy" | "done" | "exhausted", record JSON or None)`.
    #[pyo3(signature = (job, every, ttl, max_attempts=3, holder=None, offset=0.0))]
    #[allow(clippy::too_many_arguments)]
    fn claim_slot(
        &self,
        py: Python<'_>,
        job: String,
        every: f64,
        ttl: f64,
        max_attempts: u32,
        holder: Option<String>,
        offset: f64,
    ) -> PyResult<(String, Option<Py<PyAny>>)> {
        let sched = Schedule::every(seconds("every", every)?)
            .and_then(|s| s.offset(Duration::from_secs_f64(offset.max(0.0))))
            .map_err(to_py)?;
        let opts = options(ttl, None, 1)?;
        let holder = holder.unwrap_or_else(leasehold::election::default_holder);
        let client = self.inner.clone();
        let claim = block(py, async move {
            schedule::claim(&client, &job, sched.now(), &opts, max_attempts, &holder).await
        })?;
        let record = |r: &schedule::SlotRecord| -> PyResult<Option<Py<PyAny>>> {
            let text = to_json(r).map_err(to_py)?;
            Ok(Some(text.into_pyobject(py)?.into_any().unbind()))
        };
        Ok(match claim {
            Claim::Run(run) => {
                let obj = Py::new(py, SlotRun::new(run))?.into_any();
                ("run".to_owned(), Some(obj))
            }
            Claim::Busy => ("busy".to_owned(), None),
            Claim::Done(r) => ("done".to_owned(), record(&r)?),
            Claim::Exhausted(r) => ("exhausted".to_owned(), record(&r)?),
        })
    }
}

/// A held lease. Dropping it without `release` releases it in the background (the renewal task
/// does that, without blocking).
#[pyclass(frozen, module = "leasehold._leasehold")]
struct Lease {
    inner: Mutex<Option<leasehold::Lease>>,
    name: String,
    token: String,
    fence: u64,
    lost: LostSignal,
    done: Done,
}

impl Lease {
    fn new(lease: leasehold::Lease) -> Self {
        Lease {
            name: lease.name().to_owned(),
            token: lease.token().to_owned(),
            fence: lease.fence().get(),
            lost: lease.lost(),
            done: done(),
            inner: Mutex::new(Some(lease)),
        }
    }

    fn take(&self) -> Option<leasehold::Lease> {
        finish(&self.done);
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
}

/// What a lost signal says, as text (`None` while not lost).
fn lost_reason(lost: &LostSignal) -> Option<String> {
    lost.reason().map(|r| r.to_string())
}

/// Ends the watchers of [`notify_on_lost`] when the lease is released or its object dropped
/// (dropping the sender is the signal), so that they do not outlive it.
type Done = Mutex<Option<watch::Sender<()>>>;

fn done() -> Done {
    Mutex::new(Some(watch::channel(()).0))
}

/// Calls `callback(reason)` with the GIL once `lost` fires (a task on the runtime, not a thread);
/// if the lease is released first, the task ends without calling it.
fn notify_on_lost(lost: LostSignal, done: &Done, callback: Py<PyAny>) {
    let Some(mut released) = done
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|tx| tx.subscribe())
    else {
        return;
    };
    runtime().spawn(async move {
        let reason = tokio::select! {
            reason = lost.fired() => reason.to_string(),
            _ = released.changed() => return,
        };
        Python::attach(|py| {
            if let Err(e) = callback.call1(py, (reason,)) {
                e.print(py);
            }
        });
    });
}

fn finish(done: &Done) {
    done.lock().unwrap_or_else(|p| p.into_inner()).take();
}

#[pymethods]
impl Lease {
    #[getter]
    fn name(&self) -> &str {
        &self.name
    }
    #[getter]
    fn token(&self) -> &str {
        &self.token
    }
    #[getter]
    fn fence(&self) -> u64 {
        self.fence
    }
    /// Whether the lease was lost (or released).
    #[getter]
    fn is_lost(&self) -> bool {
        self.lost.is_fired()
    }
    /// Why it was lost, or `None`.
    #[getter]
    fn lost_reason(&self) -> Option<String> {
        lost_reason(&self.lost)
    }
    /// Seconds left before the holder must assume the lease is gone (0 once released or lost).
    #[getter]
    fn remaining(&self) -> f64 {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().map_or(0.0, |l| l.remaining().as_secs_f64())
    }
    /// Seconds left before the instant the holder's work must be gone (`Lease::stop_by`: the
    /// store's earliest hand-over by the holder's estimate, less the drift allowance and 100 ms); 0
    /// once released or lost.
    #[getter]
    fn stop_in(&self) -> f64 {
        let guard = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        guard.as_ref().filter(|l| !l.is_lost()).map_or(0.0, |l| {
            l.stop_by()
                .saturating_duration_since(tokio::time::Instant::now())
                .as_secs_f64()
        })
    }
    /// Whether `release` has been called.
    #[getter]
    fn released(&self) -> bool {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_none()
    }
    /// Calls `callback(reason)` once the lease is lost (from the runtime's thread, with the GIL);
    /// never after `release`.
    fn on_lost(&self, callback: Py<PyAny>) {
        notify_on_lost(self.lost.clone(), &self.done, callback);
    }
    /// Releases the lease (once; later calls do nothing).
    fn release(&self, py: Python<'_>) -> PyResult<()> {
        match self.take() {
            Some(lease) => block(py, lease.release()),
            None => Ok(()),
        }
    }
    /// As `release`, awaitable.
    fn release_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lease = self.take();
        awaitable(py, async move {
            match lease {
                Some(lease) => lease.release().await,
                None => Ok(()),
            }
        })
    }
}

/// A won election: the leadership's lease, its term (a fence) and its value.
#[pyclass(frozen, module = "leasehold._leasehold")]
struct Leadership {
    inner: Mutex<Option<CoreLeadership>>,
    term: u64,
    holder: String,
    lost: LostSignal,
    done: Done,
}

impl Leadership {
    fn new(l: CoreLeadership) -> Self {
        Leadership {
            term: l.term().get(),
            holder: l.holder().to_owned(),
            lost: l.lost(),
            done: done(),
            inner: Mutex::new(Some(l)),
        }
    }
    fn take(&self) -> Option<CoreLeadership> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner()).take()
    }
    fn end(&self) -> Option<CoreLeadership> {
        finish(&self.done);
        self.take()
    }
}

#[pymethods]
impl Leadership {
    #[getter]
    fn term(&self) -> u64 {
        self.term
    }
    #[getter]
    fn holder(&self) -> &str {
        &self.holder
    }
    #[getter]
    fn is_lost(&self) -> bool {
        self.lost.is_fired()
    }
    #[getter]
    fn lost_reason(&self) -> Option<String> {
        lost_reason(&self.lost)
    }
    fn on_lost(&self, callback: Py<PyAny>) {
        notify_on_lost(self.lost.clone(), &self.done, callback);
    }
    /// Publishes a new value under the same term.
    fn proclaim(&self, py: Python<'_>, value: String) -> PyResult<()> {
        let Some(mut l) = self.take() else {
            return Err(Lost::new_err(
                "this leadership was resigned; campaign again",
            ));
        };
        let (l, r) = py.detach(|| {
            runtime().block_on(async move {
                let r = l.proclaim(&value).await;
                (l, r)
            })
        });
        *self.inner.lock().unwrap_or_else(|p| p.into_inner()) = Some(l);
        r.map_err(to_py)
    }
    /// Steps down: releases the leadership's lease (once).
    fn resign(&self, py: Python<'_>) -> PyResult<()> {
        match self.end() {
            Some(l) => block(py, l.resign()),
            None => Ok(()),
        }
    }
}

/// Follows who leads an election: the core's `Observer` (it asks the store every `every`; a
/// change shorter than that can be missed).
#[pyclass(frozen, module = "leasehold._leasehold")]
struct Observer {
    inner: std::sync::Arc<tokio::sync::Mutex<CoreObserver>>,
}

/// The next change within `timeout` (`None`: wait as long as it takes): `Some(json)` of the leader
/// (`"null"`: nobody leads), `None` when the timeout passed first.
async fn next_change(
    observer: std::sync::Arc<tokio::sync::Mutex<CoreObserver>>,
    timeout: Option<Duration>,
) -> leasehold::Result<Option<String>> {
    let mut observer = observer.lock().await;
    let changed = observer.changed();
    let leader = match timeout {
        None => changed.await?,
        Some(t) => match tokio::time::timeout(t, changed).await {
            Ok(leader) => leader?,
            Err(_elapsed) => return Ok(None),
        },
    };
    to_json(&leader).map(Some)
}

#[pymethods]
impl Observer {
    /// Waits (GIL released) for the next change: the leader as JSON, or `None` when `timeout`
    /// seconds passed first. The first call reports the current leader at once.
    #[pyo3(signature = (timeout=None))]
    fn changed_json(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<String>> {
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        block(py, next_change(self.inner.clone(), timeout))
    }

    /// As `changed_json`, awaitable.
    #[pyo3(signature = (timeout=None))]
    fn changed_json_async<'py>(
        &self,
        py: Python<'py>,
        timeout: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        awaitable(py, next_change(self.inner.clone(), timeout))
    }
}

/// A claimed slot of a scheduled job: run the job, then `finish`.
#[pyclass(frozen, module = "leasehold._leasehold")]
struct SlotRun {
    inner: Mutex<Option<CoreSlotRun>>,
    fence: u64,
    slot: u64,
    record: String,
    lost: LostSignal,
}

impl SlotRun {
    fn new(run: CoreSlotRun) -> Self {
        SlotRun {
            fence: run.fence().get(),
            slot: run.slot().index,
            record: to_json(run.record()).unwrap_or_default(),
            lost: run.lease().lost(),
            inner: Mutex::new(Some(run)),
        }
    }
}

#[pymethods]
impl SlotRun {
    #[getter]
    fn fence(&self) -> u64 {
        self.fence
    }
    #[getter]
    fn slot(&self) -> u64 {
        self.slot
    }
    /// The slot's record as it was claimed ("running"), JSON.
    #[getter]
    fn record_json(&self) -> &str {
        &self.record
    }
    #[getter]
    fn is_lost(&self) -> bool {
        self.lost.is_fired()
    }
    /// Records the run's outcome (done when `exit_code` is 0, failed otherwise; lost when `lost`)
    /// and releases the slot's lease; the final record as JSON. Later calls fail with `BadInput`.
    #[pyo3(signature = (exit_code, lost=false))]
    fn finish_json(&self, py: Python<'_>, exit_code: Option<i32>, lost: bool) -> PyResult<String> {
        let Some(run) = self.inner.lock().unwrap_or_else(|p| p.into_inner()).take() else {
            return Err(BadInput::new_err(
                "invalid slot run: it was finished already",
            ));
        };
        block(
            py,
            async move { to_json(&run.finish(exit_code, lost).await?) },
        )
    }
}

#[pymodule]
fn _leasehold(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<Client>()?;
    m.add_class::<Lease>()?;
    m.add_class::<Leadership>()?;
    m.add_class::<SlotRun>()?;
    m.add_class::<Observer>()?;
    m.add_class::<scheduler::PyJob>()?;
    m.add_class::<scheduler::ScheduledRun>()?;
    m.add_class::<scheduler::Scheduler>()?;
    m.add("LeaseholdError", py.get_type::<LeaseholdError>())?;
    m.add("Busy", py.get_type::<Busy>())?;
    m.add("Lost", py.get_type::<Lost>())?;
    m.add("Unreachable", py.get_type::<Unreachable>())?;
    m.add("Unauthorized", py.get_type::<Unauthorized>())?;
    m.add("Misconfigured", py.get_type::<Misconfigured>())?;
    m.add("BadInput", py.get_type::<BadInput>())?;
    m.add("StaleFence", py.get_type::<StaleFence>())?;
    Ok(())
}
