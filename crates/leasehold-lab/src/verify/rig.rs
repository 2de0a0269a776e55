//! What a run and its cells run on: the run's context, a cell's worker processes, and the log of
//! what they said.
//!
//! Limit: the log is what the workers *said*; the resource's history (`resource/`) is the record
//! of what was written, and the lock stores are looked at from outside (`store/`).

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, Command};

use super::resource::fenced::FencedWriter;
use super::store::LeaseStores;
use super::strategy::Strategy;
use super::timing::Timing;
use super::worker::{now_ms, Event, StopRule};
use super::Workload;

/// Everything shared by the cells of one run.
#[derive(Debug)]
pub(crate) struct RunContext {
    pub(crate) exe: PathBuf,
    pub(crate) database: String,
    pub(crate) run_id: String,
    pub(crate) user_redis: Option<String>,
    pub(crate) workers: u32,
    pub(crate) timing: Timing,
    /// When a long critical section starts to stop (`--stop-rule`).
    pub(crate) stop_rule: StopRule,
    /// Who writes the fenced strategies' writes (`--fenced-writer`).
    pub(crate) fenced_writer: FencedWriter,
    /// The run-wide lease stores (`store::RUN_WIDE`), each started at its first cell.
    pub(crate) stores: LeaseStores,
    /// Keeps the default SQLite file alive for the run.
    pub(crate) _tmp: Option<tempfile::TempDir>,
}

/// One worker process and the pipe the harness commands it through.
#[derive(Debug)]
pub(crate) struct WorkerProc {
    pub(crate) child: Child,
    stdin: ChildStdin,
}

impl WorkerProc {
    pub(crate) fn pid(&self) -> Option<Pid> {
        self.child.id().map(|id| Pid::from_raw(id as i32))
    }

    pub(crate) async fn send(&mut self, line: &str) {
        // A worker that is gone cannot be commanded; the caller notices by its missing events.
        let _ = self.stdin.write_all(format!("{line}\n").as_bytes()).await;
        let _ = self.stdin.flush().await;
    }
}

/// Events from all workers of a cell, in arrival order.
#[derive(Debug, Default)]
pub(crate) struct Log {
    pub(crate) events: Mutex<Vec<(u32, i64, Event)>>,
    pub(crate) stderr: Mutex<String>,
}

impl Log {
    pub(crate) fn len(&self) -> usize {
        self.events.lock().map(|e| e.len()).unwrap_or(0)
    }

    pub(crate) fn find_since(&self, since: usize, pred: impl Fn(u32, &Event) -> bool) -> bool {
        self.events
            .lock()
            .map(|e| e.iter().skip(since).any(|(s, _, ev)| pred(*s, ev)))
            .unwrap_or(false)
    }

    pub(crate) async fn wait_for(
        &self,
        since: usize,
        timeout: Duration,
        pred: impl Fn(u32, &Event) -> bool,
    ) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.find_since(since, &pred) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(3)).await;
        }
        false
    }

    pub(crate) fn first_held_since(&self, since: usize) -> Option<u32> {
        self.events.lock().ok().and_then(|e| {
            e.iter()
                .skip(since)
                .find(|(_, _, ev)| matches!(ev, Event::Held { .. }))
                .map(|(s, _, _)| *s)
        })
    }

    pub(crate) fn last_op(&self, slot: u32) -> u64 {
        let events = self.events.lock().map(|e| e.clone()).unwrap_or_default();
        events
            .iter()
            .filter(|(s, _, _)| *s == slot)
            .filter_map(|(_, _, ev)| match ev {
                Event::Acquired { op, .. }
                | Event::Held { op }
                | Event::Wrote { op, .. }
                | Event::Failed { op, .. }
                | Event::Stalled { op, .. } => Some(*op),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Who took the lock with `token`, and what became of its release.
    pub(crate) fn lock_taken_with(&self, token: &str) -> Option<LockStory> {
        let events = self.events.lock().ok()?;
        let (i, slot, op, at) = events
            .iter()
            .enumerate()
            .find_map(|(i, (s, _, ev))| match ev {
                Event::Acquired {
                    op,
                    at_ms,
                    token: Some(t),
                    ..
                } if t == token => Some((i, *s, *op, *at_ms)),
                _ => None,
            })?;
        let released = events[i..].iter().find_map(|(s, _, ev)| match ev {
            Event::Released {
                op: o,
                at_ms,
                ok,
                error,
            } if *s == slot && *o == op => Some((*at_ms, error.clone().map_or(Ok(*ok), Err))),
            _ => None,
        });
        Some(LockStory {
            slot,
            op,
            taken_ms: at,
            released,
        })
    }

    pub(crate) fn ready_count(&self) -> usize {
        self.events
            .lock()
            .map(|e| {
                e.iter()
                    .filter(|(_, _, ev)| matches!(ev, Event::Ready))
                    .count()
            })
            .unwrap_or(0)
    }
}

/// One holder's lock, as its worker told it.
#[derive(Debug)]
pub(crate) struct LockStory {
    pub(crate) slot: u32,
    pub(crate) op: u64,
    /// When the lock was taken (after the whole acquire, e.g. `SETNX` then `PEXPIRE`).
    pub(crate) taken_ms: i64,
    /// When the holder released it, and how that went: a lock deleted or not, or the error.
    pub(crate) released: Option<(i64, Result<bool, String>)>,
}

/// What a worker process is started with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WorkerSpec<'a> {
    pub(crate) workload: Workload,
    pub(crate) strategy: Strategy,
    pub(crate) prefix: &'a str,
    pub(crate) key: &'a str,
}

/// Where a worker takes its lock.
#[derive(Debug, Default)]
pub(crate) struct LockUrls<'a> {
    /// Its Redis URLs: one (through its proxy, or a Sentinel or Cluster URL), or one per Redlock
    /// master.
    pub(crate) redis: Vec<String>,
    /// The lease store's URL when it is not Redis (a run-wide store's).
    pub(crate) lease_store: Option<&'a str>,
}

/// Starts the worker for `slot`, its events going to `log`.
pub(crate) async fn spawn_worker(
    ctx: &RunContext,
    log: &Arc<Log>,
    spec: WorkerSpec<'_>,
    slot: u32,
    lock: LockUrls<'_>,
    timing: Timing,
    start_op: u64,
) -> anyhow::Result<WorkerProc> {
    let mut cmd = Command::new(&ctx.exe);
    cmd.arg("__verify-worker")
        .args(["--strategy", &spec.strategy.to_string()])
        .args(["--workload", &spec.workload.to_string()])
        .args(["--database", &ctx.database])
        .args(["--prefix", spec.prefix])
        .args(["--key", spec.key])
        .args(["--slot", &slot.to_string()])
        .args(["--ttl-ms", &timing.ttl.as_millis().to_string()])
        .args(["--stall-ms", &timing.stall_after.as_millis().to_string()])
        .args(["--start-op", &start_op.to_string()])
        .args(["--stop-rule", &ctx.stop_rule.to_string()])
        .args(["--fenced-writer", &ctx.fenced_writer.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    for url in lock.redis {
        cmd.args(["--redis", &url]);
    }
    if let Some(url) = lock.lease_store {
        cmd.args(["--lease-store", url]);
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("cannot spawn the worker {}", ctx.exe.display()))?;
    let stdin = child.stdin.take().context("worker stdin")?;
    let stdout = child.stdout.take().context("worker stdout")?;
    let stderr = child.stderr.take().context("worker stderr")?;
    let events = log.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(ev) = serde_json::from_str::<Event>(&line) {
                if let Ok(mut e) = events.events.lock() {
                    e.push((slot, now_ms(), ev));
                }
            }
        }
    });
    let errors = log.clone();
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(mut s) = errors.stderr.lock() {
                if s.len() < 4000 {
                    s.push_str(&format!("worker {slot}: {line}\n"));
                }
            }
        }
    });
    Ok(WorkerProc { child, stdin })
}
