//! Prometheus metrics of `run`, `elect` and `cron`: the recorder, `/metrics`' body, and
//! `--metrics-file` (node_exporter's textfile collector).
//!
//! Promise: every family has `# HELP` and `# TYPE`; waits, holds and job durations are histograms
//! with the library's buckets (`leasehold::lease::metrics::{WAIT_BUCKETS, HOLD_BUCKETS}`, so that
//! replicas' series can be summed, which summaries cannot), any other histogram gets the hold
//! buckets; counters are there at 0 from the start. A metrics file is replaced whole (written beside
//! it, then renamed), so the collector never reads half of one: once when set, every
//! [`FILE_EVERY`] while the command runs, and as the process exits. Limit: a process killed with
//! SIGKILL leaves the file as last written.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use leasehold::lease::metrics::{ACQUIRE_WAIT_SECONDS, HOLD_BUCKETS, HOLD_SECONDS, WAIT_BUCKETS};
use leasehold::schedule::metric_names;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// The content type of Prometheus's text format.
pub(crate) const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often a metrics file is rewritten while the command runs.
pub(crate) const FILE_EVERY: Duration = Duration::from_secs(10);

/// How often the recorder's histograms are drained when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
static FILE: OnceLock<PathBuf> = OnceLock::new();

/// Installs the recorder (once per process; later calls return the same handle) and describes every
/// metric. `jobs`: the scheduled jobs whose run counters start at 0.
pub(crate) fn install(jobs: &[&str]) -> Result<&'static PrometheusHandle, String> {
    if let Some(h) = HANDLE.get() {
        return Ok(h);
    }
    let handle = PrometheusBuilder::new()
        .set_buckets(HOLD_BUCKETS)
        .and_then(|b| {
            b.set_buckets_for_metric(Matcher::Full(ACQUIRE_WAIT_SECONDS.into()), WAIT_BUCKETS)
        })
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(HOLD_SECONDS.into()), HOLD_BUCKETS))
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(metric_names::DURATION_SECONDS.into()),
                HOLD_BUCKETS,
            )
        })
        .and_then(PrometheusBuilder::install_recorder)
        .map_err(|e| format!("cannot start the metrics recorder: {e}"))?;
    leasehold::lease::metrics::describe();
    metric_names::describe(jobs);
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP_EVERY).await;
            upkeep.run_upkeep();
        }
    });
    Ok(HANDLE.get_or_init(|| handle))
}

/// `/metrics`' body, or `None` when no recorder is installed.
pub(crate) fn render() -> Option<String> {
    HANDLE.get().map(PrometheusHandle::render)
}

/// `--metrics-file PATH`: writes it now (so that a path that cannot be written is refused before the
/// lease is taken), then every [`FILE_EVERY`], and [`write_file`] writes it as the process exits.
pub(crate) fn to_file(path: &Path) -> Result<(), String> {
    install(&[])?;
    write(path).map_err(|e| format!("cannot write --metrics-file {}: {e}", path.display()))?;
    let path = FILE.get_or_init(|| path.to_owned());
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(FILE_EVERY).await;
            if let Err(e) = write(path) {
                eprintln!(
                    "leasehold: warning: cannot write --metrics-file {}: {e}",
                    path.display()
                );
            }
        }
    });
    Ok(())
}

/// Writes the metrics file, when `--metrics-file` was given; a failure is said on stderr.
pub(crate) fn write_file() {
    if let Some(path) = FILE.get() {
        if let Err(e) = write(path) {
            eprintln!(
                "leasehold: warning: cannot write --metrics-file {}: {e}",
                path.display()
            );
        }
    }
}

/// Replaces `path` whole: the text goes to a file beside it (a name the textfile collector, which
/// reads `*.prom`, skips), flushed to disk, then renamed over it.
fn write(path: &Path) -> std::io::Result<()> {
    use std::io::Write;
    let body = render().unwrap_or_default();
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = PathBuf::from(tmp);
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(body.as_bytes())?;
        f.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}
