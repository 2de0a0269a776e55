//! `leasehold cron --health ADDR`: `/healthz` and `/metrics` over HTTP. Promise: both answer from
//! what the process already holds in memory, never by asking the store, so they answer at once
//! whether or not the store does. `/healthz` is 200 while the daemon takes slots, 503 before its
//! jobs are loaded and once it drains; `/metrics` is Prometheus text with HELP and TYPE. Limit: a
//! 200 says the daemon runs, not that the store answers (a run's failures show in the metrics).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use leasehold::schedule::metric_names;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

const STARTING: u8 = 0;
const READY: u8 = 1;
const DRAINING: u8 = 2;

/// The endpoints' state.
pub(crate) struct Served {
    state: Arc<AtomicU8>,
    jobs: Arc<AtomicUsize>,
}

impl Served {
    /// Installs the metrics recorder and serves on `addr` in the background.
    pub(crate) async fn start(addr: SocketAddr) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let handle = PrometheusBuilder::new()
            .install_recorder()
            .map_err(std::io::Error::other)?;
        describe();
        let state = Arc::new(AtomicU8::new(STARTING));
        let jobs = Arc::new(AtomicUsize::new(0));
        let (s, j) = (state.clone(), jobs.clone());
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let (s, j, h) = (s.clone(), j.clone(), handle.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let r = answer(&req, &s, &j, &h);
                        async move { Ok::<_, std::convert::Infallible>(r) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(Served { state, jobs })
    }

    pub(crate) fn ready(&self, jobs: usize) {
        self.jobs.store(jobs, Ordering::Relaxed);
        self.state.store(READY, Ordering::Relaxed);
    }

    pub(crate) fn draining(&self) {
        self.state.store(DRAINING, Ordering::Relaxed);
    }
}

fn describe() {
    metrics::describe_counter!(
        metric_names::RUNS_TOTAL,
        "Slots finished, by outcome (done, failed, lost, missed, skipped)."
    );
    metrics::describe_histogram!(
        metric_names::DURATION_SECONDS,
        metrics::Unit::Seconds,
        "How long runs took."
    );
    metrics::describe_gauge!(
        metric_names::LAST_SUCCESS,
        "When the job last succeeded, seconds since the epoch."
    );
    metrics::describe_gauge!(
        metric_names::NEXT_RUN,
        "The job's next slot instant, seconds since the epoch."
    );
}

fn answer<B>(
    req: &Request<B>,
    state: &AtomicU8,
    jobs: &AtomicUsize,
    handle: &PrometheusHandle,
) -> Response<Full<Bytes>> {
    match req.uri().path() {
        "/healthz" => match state.load(Ordering::Relaxed) {
            READY => reply(
                StatusCode::OK,
                format!("ok: {} job(s) scheduled\n", jobs.load(Ordering::Relaxed)),
            ),
            DRAINING => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "draining: no new slots\n".into(),
            ),
            _ => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                "starting: waiting for the store\n".into(),
            ),
        },
        "/metrics" => reply(StatusCode::OK, handle.render()),
        _ => reply(StatusCode::NOT_FOUND, "try /healthz or /metrics\n".into()),
    }
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}
