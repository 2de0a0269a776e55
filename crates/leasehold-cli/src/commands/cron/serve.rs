//! `leasehold cron --health ADDR`: `/healthz` and `/metrics` over HTTP ([`crate::http`]). Promise:
//! both answer from what the process already holds in memory, never by asking the store, so they
//! answer at once whether or not the store does. `/healthz` is 200 while the daemon takes slots, 503
//! before its jobs are loaded and once it drains; `/metrics` is Prometheus text ([`crate::prom`]);
//! any other path is 404. Limit: a 200 says the daemon runs, not that the store answers (a run's
//! failures show in the metrics).

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use hyper::StatusCode;

use crate::http::TEXT;
use crate::listen::ListenAddr;

const STARTING: u8 = 0;
const READY: u8 = 1;
const DRAINING: u8 = 2;

/// The endpoints' state.
pub(crate) struct Served {
    state: Arc<AtomicU8>,
    jobs: Arc<AtomicUsize>,
}

impl Served {
    /// Installs the metrics recorder (the run counters of `jobs` at 0) and serves on `addr` in the
    /// background.
    pub(crate) fn start(addr: &ListenAddr, jobs: &[&str]) -> std::io::Result<Self> {
        let listener = addr.bind()?;
        crate::prom::install(jobs).map_err(std::io::Error::other)?;
        let state = Arc::new(AtomicU8::new(STARTING));
        let count = Arc::new(AtomicUsize::new(0));
        let (s, j) = (state.clone(), count.clone());
        crate::http::serve(listener, "/healthz or /metrics", move |path| {
            (path == "/healthz").then(|| match s.load(Ordering::Relaxed) {
                READY => (
                    StatusCode::OK,
                    TEXT,
                    format!("ok: {} job(s) scheduled\n", j.load(Ordering::Relaxed)),
                ),
                DRAINING => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    "draining: no new slots\n".into(),
                ),
                _ => (
                    StatusCode::SERVICE_UNAVAILABLE,
                    TEXT,
                    "starting: waiting for the store\n".into(),
                ),
            })
        })?;
        Ok(Served { state, jobs: count })
    }

    pub(crate) fn ready(&self, jobs: usize) {
        self.jobs.store(jobs, Ordering::Relaxed);
        self.state.store(READY, Ordering::Relaxed);
    }

    pub(crate) fn draining(&self) {
        self.state.store(DRAINING, Ordering::Relaxed);
    }
}
