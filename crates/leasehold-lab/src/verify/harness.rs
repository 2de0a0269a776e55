//! Runs the cells: starts Redis (or uses the user's) behind one proxy per worker, sets up the
//! resource, spawns the worker processes, injects the cell's fault, stops the workers and hands the
//! recorded history to the checker.

use std::io::IsTerminal as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt as _, AsyncWriteExt as _};
use tokio::process::{Child, ChildStdin, Command};

use leasehold_testkit::{Proxy, RedisServer};

use super::checker::{self, Interval};
use super::resource::{Outcome, Resource};
use super::worker::{now_ms, Event};
use super::{report, Fault, Strategy, VerifyArgs, Workload};

/// Whether a cell ran, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellStatus {
    /// The cell ran and its history was checked.
    Ran,
    /// The fault cannot apply to this strategy (e.g. a Redis fault when no Redis is used).
    NotApplicable,
    /// The fault needs a server the harness can kill, and the user's server was given.
    Skipped,
    /// The cell could not run (see `note`).
    Error,
}

/// One cell of the table: a workload under a fault with a strategy.
#[derive(Debug, Clone, serde::Serialize)]
pub struct CellResult {
    /// What the workers did.
    pub workload: Workload,
    /// What was injected.
    pub fault: Fault,
    /// How the workers coordinated.
    pub strategy: Strategy,
    /// Whether the cell ran.
    pub status: CellStatus,
    /// Operations the workers completed (writes attempted or found unnecessary).
    pub operations: u64,
    /// Faults actually injected (a worker must be inside its critical section for one to count).
    pub faults_injected: u64,
    /// Invariant violations counted from the resource's history (`null` when the cell did not run).
    pub violations: Option<u64>,
    /// What a violation is for this workload.
    pub violation_kind: &'static str,
    /// Writes the resource accepted.
    pub accepted_writes: u64,
    /// Writes the resource refused because their fence was stale.
    pub refused_stale: u64,
    /// Writes a database guard refused (duplicate key, failed condition, illegal transition, seen message).
    pub refused_by_guard: u64,
    /// Pairs of lease holding intervals that overlapped, as the workers reported them
    /// (informational; `null` without a lock).
    pub overlapping_holders: Option<u64>,
    /// Whether leasehold documents the strategy as safe (then any violation fails the run).
    pub safe_by_design: bool,
    /// Why a cell did not run, or what went wrong.
    pub note: String,
    /// Wall time of the cell in milliseconds.
    pub elapsed_ms: u64,
    /// The picture data for the HTML report.
    #[serde(skip)]
    pub(crate) timeline: Option<report::Timeline>,
}

impl CellResult {
    fn empty(
        workload: Workload,
        fault: Fault,
        strategy: Strategy,
        status: CellStatus,
        note: String,
    ) -> Self {
        Self {
            workload,
            fault,
            strategy,
            status,
            operations: 0,
            faults_injected: 0,
            violations: None,
            violation_kind: checker::violation_kind(workload),
            accepted_writes: 0,
            refused_stale: 0,
            refused_by_guard: 0,
            overlapping_holders: None,
            safe_by_design: strategy.safe_by_design(),
            note,
            elapsed_ms: 0,
            timeline: None,
        }
    }
}

/// Timings of one cell, derived from the lease TTL.
#[derive(Debug, Clone, Copy)]
struct Timing {
    ttl: Duration,
    warmup: Duration,
    gap: Duration,
    hold: Duration,
    cooldown: Duration,
    injections: u32,
}

impl Timing {
    fn new(args: &VerifyArgs) -> Self {
        let ttl = Duration::from_millis(args.ttl_ms);
        Self {
            ttl,
            warmup: Duration::from_millis(300).max(ttl),
            gap: Duration::from_millis(250).max(ttl),
            hold: ttl * 3,
            cooldown: Duration::from_millis(300).max(ttl),
            injections: args.injections.unwrap_or(if args.quick { 1 } else { 2 }),
        }
    }

    /// A generous estimate of one cell's wall time, for the announcement.
    fn estimate(&self) -> Duration {
        Duration::from_millis(900)
            + self.warmup
            + (self.gap + self.hold + Duration::from_millis(100)) * self.injections
            + self.cooldown
    }
}

/// Everything shared by the cells of one run.
#[derive(Debug)]
struct RunContext {
    exe: PathBuf,
    database: String,
    run_id: String,
    user_redis: Option<String>,
    workers: u32,
    timing: Timing,
    /// Keeps the default SQLite file alive for the run.
    _tmp: Option<tempfile::TempDir>,
}

fn pick<T: Clone>(chosen: &[T], all: &[T]) -> Vec<T> {
    if chosen.is_empty() {
        all.to_vec()
    } else {
        chosen.to_vec()
    }
}

/// The cells a run covers, in order.
fn plan(args: &VerifyArgs) -> Vec<(Workload, Fault, Strategy)> {
    use clap::ValueEnum as _;
    let workloads: Vec<Workload> = pick(&args.workload, Workload::value_variants());
    let strategies: Vec<Strategy> = pick(&args.strategy, Strategy::value_variants());
    let faults: Vec<Fault> = pick(&args.fault, Fault::value_variants());
    let mut cells = Vec::new();
    for &w in &workloads {
        for &f in &faults {
            // The quick run: every workload under the pause fault, every fault on the counter.
            if args.quick
                && args.fault.is_empty()
                && !(f == Fault::Pause || (w == Workload::Counter && f != Fault::None))
            {
                continue;
            }
            for &s in &strategies {
                cells.push((w, f, s));
            }
        }
    }
    cells
}

fn applicability(
    fault: Fault,
    strategy: Strategy,
    user_redis: bool,
) -> Option<(CellStatus, String)> {
    let redis_fault = matches!(
        fault,
        Fault::RedisRestart | Fault::Failover | Fault::NetDelay | Fault::NetCut
    );
    if redis_fault && !strategy.uses_redis() {
        return Some((
            CellStatus::NotApplicable,
            "not applicable: this strategy uses no Redis".into(),
        ));
    }
    if user_redis && matches!(fault, Fault::RedisRestart | Fault::Failover) {
        return Some((
            CellStatus::Skipped,
            "skipped: needs a Redis the harness can kill (--redis was given)".into(),
        ));
    }
    None
}

/// Runs `leasehold verify`.
pub(crate) async fn run(args: VerifyArgs) -> anyhow::Result<i32> {
    let exe = match &args.worker_exe {
        Some(p) => p.clone(),
        None => {
            std::env::current_exe().context("cannot find this program to spawn workers from")?
        }
    };
    if let Some(url) = &args.redis {
        redis::Client::open(url.as_str()).with_context(|| {
            format!("--redis {url:?} is not a valid Redis URL (redis://[user:pass@]host:port[/db])")
        })?;
        split_redis_url(url)?;
    } else if !leasehold_testkit::redis_server_available() {
        anyhow::bail!("redis-server is not installed: install it (apt-get install -y redis-server), set REDIS_SERVER_BIN, or pass --redis URL");
    }
    let (database, tmp) = match &args.database {
        Some(url) => {
            super::resource::Dialect::of(url)?;
            (url.clone(), None)
        }
        None => {
            let dir = tempfile::Builder::new()
                .prefix("leasehold-verify-")
                .tempdir()?;
            let url = format!("sqlite://{}", dir.path().join("resource.sqlite").display());
            (url, Some(dir))
        }
    };
    let ctx = RunContext {
        exe,
        database,
        run_id: format!("{:06x}", rand::random::<u32>() & 0xff_ffff),
        user_redis: args.redis.clone(),
        workers: args.workers,
        timing: Timing::new(&args),
        _tmp: tmp,
    };
    let cells = plan(&args);
    if cells.is_empty() {
        anyhow::bail!(
            "no cells to run: the --workload/--fault/--strategy filters exclude everything"
        );
    }
    let runnable = cells
        .iter()
        .filter(|(_, f, s)| applicability(*f, *s, ctx.user_redis.is_some()).is_none())
        .count();
    let estimate = ctx.timing.estimate() * runnable as u32;
    eprintln!(
        "leasehold verify: {} cells ({} to run, {} not applicable or skipped), {} workers each, lease TTL {} ms, {} injection(s) per cell; about {} s.",
        cells.len(),
        runnable,
        cells.len() - runnable,
        ctx.workers,
        args.ttl_ms,
        ctx.timing.injections,
        estimate.as_secs().max(1)
    );
    let bar = if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(cells.len() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} {msg}",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(bar)
    } else {
        None
    };
    let started = Instant::now();
    let mut results = Vec::with_capacity(cells.len());
    for (i, &(w, f, s)) in cells.iter().enumerate() {
        let label = format!("{w} × {f} × {s}");
        if let Some(bar) = &bar {
            bar.set_message(label.clone());
        }
        let result = match applicability(f, s, ctx.user_redis.is_some()) {
            Some((status, note)) => CellResult::empty(w, f, s, status, note),
            None => {
                let t0 = Instant::now();
                // On Ctrl-C or SIGTERM the cell's future is dropped: its workers are killed
                // (kill_on_drop) and its redis-servers stopped (their Drop), so nothing is left behind.
                let outcome = tokio::select! {
                    r = run_cell(&ctx, i, w, f, s) => r,
                    _ = interrupted() => {
                        if let Some(bar) = &bar {
                            bar.abandon();
                        }
                        eprintln!("leasehold verify: interrupted; {} of {} cells done", i, cells.len());
                        // A redis-server being started on a blocking thread is stopped when that
                        // start returns; give it the moment it needs before the process exits.
                        tokio::time::sleep(Duration::from_millis(700)).await;
                        return Ok(130);
                    }
                };
                let mut r = match outcome {
                    Ok(r) => r,
                    Err(e) => CellResult::empty(w, f, s, CellStatus::Error, format!("{e:#}")),
                };
                r.elapsed_ms = t0.elapsed().as_millis() as u64;
                r
            }
        };
        let line = format!(
            "[{}/{}] {label}: {}",
            i + 1,
            cells.len(),
            match (result.status, result.violations) {
                (CellStatus::Ran, Some(v)) => format!(
                    "{} ops, {} faults, {v} {}",
                    result.operations, result.faults_injected, result.violation_kind
                ),
                _ => result.note.clone(),
            }
        );
        match &bar {
            Some(bar) => {
                bar.inc(1);
                if result.status == CellStatus::Error {
                    bar.println(line);
                }
            }
            None => eprintln!("{line}"),
        }
        results.push(result);
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    let wall = started.elapsed();
    println!("{}", report::table(&results));
    println!("wall time: {:.1} s", wall.as_secs_f64());
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&results)?;
        std::fs::write(path, json)
            .with_context(|| format!("cannot write --json {}", path.display()))?;
    }
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create --report {}", dir.display()))?;
        let page = report::html(&results, &command_line(&args), wall);
        let path = dir.join("index.html");
        std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("report: {}", path.display());
    }
    let unsafe_safe: Vec<&CellResult> = results
        .iter()
        .filter(|r| r.safe_by_design && r.violations.unwrap_or(0) > 0)
        .collect();
    if !unsafe_safe.is_empty() {
        for r in &unsafe_safe {
            eprintln!(
                "FAILED: {} × {} × {} is documented as safe but showed {} {}",
                r.workload,
                r.fault,
                r.strategy,
                r.violations.unwrap_or(0),
                r.violation_kind
            );
        }
        return Ok(1);
    }
    let errors = results
        .iter()
        .filter(|r| r.status == CellStatus::Error)
        .count();
    if errors > 0 {
        eprintln!("{errors} cell(s) could not run; see the note column");
        return Ok(2);
    }
    Ok(0)
}

/// Completes on Ctrl-C or SIGTERM.
async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

fn command_line(args: &VerifyArgs) -> String {
    let mut s = String::from("leasehold verify");
    if args.quick {
        s.push_str(" --quick");
    }
    if args.redis.is_some() {
        s.push_str(" --redis URL");
    }
    if args.database.is_some() {
        s.push_str(" --database URL");
    }
    s
}

/// Splits a Redis URL into (before host, host:port, after) so the host can be swapped for a proxy.
fn split_redis_url(url: &str) -> anyhow::Result<(String, String, String)> {
    let (scheme, rest) = url
        .split_once("://")
        .with_context(|| format!("--redis {url:?}: expected redis://[user:pass@]host:port[/db]"))?;
    let (auth, hostpart) = match rest.rsplit_once('@') {
        Some((a, h)) => (format!("{a}@"), h),
        None => (String::new(), rest),
    };
    let (hostport, tail) = match hostpart.find('/') {
        Some(i) => (&hostpart[..i], &hostpart[i..]),
        None => (hostpart, ""),
    };
    let hostport = if hostport.contains(':') {
        hostport.to_owned()
    } else {
        format!("{hostport}:6379")
    };
    Ok((format!("{scheme}://{auth}"), hostport, tail.to_owned()))
}

/// Redis for one cell: the server(s) and one proxy per worker slot.
#[derive(Debug)]
struct RedisSetup {
    primary: Option<RedisServer>,
    replica: Option<RedisServer>,
    replication: Option<Proxy>,
    proxies: Vec<Proxy>,
    url_head: String,
    url_tail: String,
}

impl RedisSetup {
    async fn start(ctx: &RunContext, fault: Fault) -> anyhow::Result<Self> {
        let (primary, replica, replication, upstream, head, tail) = match &ctx.user_redis {
            Some(url) => {
                let (head, hostport, tail) = split_redis_url(url)?;
                let addr = tokio::net::lookup_host(hostport.as_str())
                    .await
                    .with_context(|| format!("cannot resolve the Redis host {hostport}"))?
                    .next()
                    .with_context(|| format!("no address for the Redis host {hostport}"))?;
                (None, None, None, addr, head, tail)
            }
            None => {
                let primary = tokio::task::spawn_blocking(RedisServer::start).await??;
                let upstream: SocketAddr = ([127, 0, 0, 1], primary.port()).into();
                let (replica, replication) = if fault == Fault::Failover {
                    let replication = Proxy::start(upstream).await?;
                    let port = replication.port();
                    let replica = tokio::task::spawn_blocking(move || {
                        RedisServer::builder().replica_of(port).start()
                    })
                    .await??;
                    // Waited for here, not on the blocking thread, so an interrupted run drops
                    // (and stops) the replica at once.
                    wait_until_synced(&replica.url()).await?;
                    (Some(replica), Some(replication))
                } else {
                    (None, None)
                };
                (
                    Some(primary),
                    replica,
                    replication,
                    upstream,
                    "redis://".to_owned(),
                    "/".to_owned(),
                )
            }
        };
        let mut proxies = Vec::new();
        for _ in 0..ctx.workers {
            proxies.push(Proxy::start(upstream).await?);
        }
        Ok(Self {
            primary,
            replica,
            replication,
            proxies,
            url_head: head,
            url_tail: tail,
        })
    }

    fn url(&self, slot: u32) -> String {
        format!(
            "{}{}{}",
            self.url_head,
            self.proxies[slot as usize].addr(),
            self.url_tail
        )
    }
}

async fn wait_until_synced(url: &str) -> anyhow::Result<()> {
    let client = redis::Client::open(url)?;
    let mut con = client.get_multiplexed_async_connection().await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let info: String = redis::cmd("INFO")
            .arg("replication")
            .query_async(&mut con)
            .await?;
        if info.contains("master_link_status:up") {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("the replica did not sync with its primary within 10 s: {info}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One worker process and the pipe the harness commands it through.
#[derive(Debug)]
struct WorkerProc {
    child: Child,
    stdin: ChildStdin,
}

impl WorkerProc {
    fn pid(&self) -> Option<Pid> {
        self.child.id().map(|id| Pid::from_raw(id as i32))
    }

    async fn send(&mut self, line: &str) {
        // A worker that is gone cannot be commanded; the caller notices by its missing events.
        let _ = self.stdin.write_all(format!("{line}\n").as_bytes()).await;
        let _ = self.stdin.flush().await;
    }
}

/// Events from all workers of a cell, in arrival order.
#[derive(Debug, Default)]
struct Log {
    events: Mutex<Vec<(u32, i64, Event)>>,
    stderr: Mutex<String>,
}

impl Log {
    fn len(&self) -> usize {
        self.events.lock().map(|e| e.len()).unwrap_or(0)
    }

    fn find_since(&self, since: usize, pred: impl Fn(u32, &Event) -> bool) -> bool {
        self.events
            .lock()
            .map(|e| e.iter().skip(since).any(|(s, _, ev)| pred(*s, ev)))
            .unwrap_or(false)
    }

    async fn wait_for(
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

    fn first_held_since(&self, since: usize) -> Option<u32> {
        self.events.lock().ok().and_then(|e| {
            e.iter()
                .skip(since)
                .find(|(_, _, ev)| matches!(ev, Event::Held { .. }))
                .map(|(s, _, _)| *s)
        })
    }

    fn last_op(&self, slot: u32) -> u64 {
        let events = self.events.lock().map(|e| e.clone()).unwrap_or_default();
        events
            .iter()
            .filter(|(s, _, _)| *s == slot)
            .filter_map(|(_, _, ev)| match ev {
                Event::Acquired { op, .. }
                | Event::Held { op }
                | Event::Wrote { op, .. }
                | Event::Failed { op, .. } => Some(*op),
                _ => None,
            })
            .max()
            .unwrap_or(0)
    }
}

#[allow(clippy::too_many_arguments)]
async fn spawn_worker(
    ctx: &RunContext,
    log: &Arc<Log>,
    slot: u32,
    workload: Workload,
    strategy: Strategy,
    redis_url: Option<String>,
    prefix: &str,
    key: &str,
    start_op: u64,
) -> anyhow::Result<WorkerProc> {
    let mut cmd = Command::new(&ctx.exe);
    cmd.arg("__verify-worker")
        .args(["--strategy", &strategy.to_string()])
        .args(["--workload", &workload.to_string()])
        .args(["--database", &ctx.database])
        .args(["--prefix", prefix])
        .args(["--key", key])
        .args(["--slot", &slot.to_string()])
        .args(["--ttl-ms", &ctx.timing.ttl.as_millis().to_string()])
        .args(["--start-op", &start_op.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(url) = redis_url {
        cmd.args(["--redis", &url]);
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

async fn run_cell(
    ctx: &RunContext,
    index: usize,
    workload: Workload,
    fault: Fault,
    strategy: Strategy,
) -> anyhow::Result<CellResult> {
    let dialect = super::resource::Dialect::of(&ctx.database)?;
    let prefix = match dialect {
        super::resource::Dialect::Postgres => format!("lhv_{}_c{index}.", ctx.run_id),
        super::resource::Dialect::Sqlite => format!("r{}_c{index}_", ctx.run_id),
    };
    let key = format!("lhv:{}:c{index}", ctx.run_id);
    let resource = Resource::connect(&ctx.database, &prefix, 2).await?;
    let outcome = run_cell_inner(ctx, &resource, &prefix, &key, workload, fault, strategy).await;
    let _ = resource.teardown().await;
    outcome
}

async fn run_cell_inner(
    ctx: &RunContext,
    resource: &Resource,
    prefix: &str,
    key: &str,
    workload: Workload,
    fault: Fault,
    strategy: Strategy,
) -> anyhow::Result<CellResult> {
    resource.setup(workload, strategy).await?;
    if strategy == Strategy::LeaseFence {
        let fenced = super::resource::Fenced::connect(&ctx.database, prefix, key).await?;
        fenced.migrate().await?;
        fenced.close().await;
    }
    if strategy == Strategy::DbGuards {
        let guards = super::resource::Guards::connect(&ctx.database, prefix, key).await?;
        guards.migrate().await?;
        guards.close().await;
    }
    let mut redis = if strategy.uses_redis() {
        Some(RedisSetup::start(ctx, fault).await?)
    } else {
        None
    };
    let log = Arc::new(Log::default());
    let t = ctx.timing;
    let cell_start = now_ms();
    let mut workers = Vec::new();
    for slot in 0..ctx.workers {
        let url = redis.as_ref().map(|r| r.url(slot));
        workers.push(spawn_worker(ctx, &log, slot, workload, strategy, url, prefix, key, 0).await?);
    }
    let ready_deadline = Instant::now() + Duration::from_secs(20);
    let mut all_ready = false;
    while Instant::now() < ready_deadline {
        if log_ready_count(&log) >= ctx.workers as usize {
            all_ready = true;
            break;
        }
        if workers
            .iter_mut()
            .any(|w| matches!(w.child.try_wait(), Ok(Some(_))))
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    if !all_ready {
        let err = log.stderr.lock().map(|s| s.clone()).unwrap_or_default();
        anyhow::bail!("workers did not start: {}", err.trim());
    }
    tokio::time::sleep(t.warmup).await;

    let mut windows = Vec::new();
    let mut injected = 0u64;
    let mut notes = Vec::new();
    for i in 0..t.injections {
        if i > 0 {
            tokio::time::sleep(t.gap).await;
        }
        if fault == Fault::None {
            tokio::time::sleep(t.hold).await;
            continue;
        }
        if fault == Fault::Failover && i > 0 {
            break; // the replica has been promoted; there is nothing left to fail over to
        }
        if fault == Fault::Failover {
            if let Some(p) = redis.as_ref().and_then(|r| r.replication.as_ref()) {
                p.cut(); // from now on the primary's writes do not reach the replica
            }
        }
        // The fault goes to whichever worker first reaches a write inside its critical section.
        let since = log.len();
        for w in &mut workers {
            w.send("hold").await;
        }
        let held = log
            .wait_for(since, Duration::from_secs(10), |_, ev| {
                matches!(ev, Event::Held { .. })
            })
            .await;
        for w in &mut workers {
            w.send("unhold").await;
        }
        let Some(slot) = (if held {
            log.first_held_since(since)
        } else {
            None
        }) else {
            notes.push(format!(
                "injection {} not done: no worker reached a write in its critical section",
                i + 1
            ));
            continue;
        };
        // Let go of any other worker that stopped at the same moment: it was not the target.
        tokio::time::sleep(Duration::from_millis(5)).await;
        for (other, w) in workers.iter_mut().enumerate() {
            if other as u32 != slot
                && log.find_since(since, |s, ev| {
                    s == other as u32 && matches!(ev, Event::Held { .. })
                })
            {
                w.send("go").await;
            }
        }
        let start = now_ms();
        let mut resume = true;
        match fault {
            Fault::None => {}
            Fault::Pause => {
                if let Some(pid) = workers[slot as usize].pid() {
                    kill(pid, Signal::SIGSTOP)?;
                    tokio::time::sleep(t.hold).await;
                    kill(pid, Signal::SIGCONT)?;
                }
            }
            Fault::Kill => {
                let w = &mut workers[slot as usize];
                w.child.start_kill()?;
                let _ = w.child.wait().await;
                resume = false;
                let next = log.last_op(slot) + 1;
                let url = redis.as_ref().map(|r| r.url(slot));
                let since = log.len();
                workers[slot as usize] =
                    spawn_worker(ctx, &log, slot, workload, strategy, url, prefix, key, next)
                        .await?;
                log.wait_for(since, Duration::from_secs(20), |s, ev| {
                    s == slot && matches!(ev, Event::Ready)
                })
                .await;
            }
            Fault::RedisRestart => {
                if let Some(mut server) = redis.as_mut().and_then(|r| r.primary.take()) {
                    let server =
                        tokio::task::spawn_blocking(move || server.restart().map(|_| server))
                            .await??;
                    if let Some(r) = redis.as_mut() {
                        r.primary = Some(server);
                    }
                }
                tokio::time::sleep(t.hold).await;
            }
            Fault::Failover => {
                if let Some(r) = redis.as_mut() {
                    if let Some(mut primary) = r.primary.take() {
                        tokio::task::spawn_blocking(move || primary.kill()).await??;
                    }
                    if let Some(mut replica) = r.replica.take() {
                        let port = replica.port();
                        let replica =
                            tokio::task::spawn_blocking(move || replica.promote().map(|_| replica))
                                .await??;
                        r.replica = Some(replica);
                        for p in &r.proxies {
                            p.set_upstream(([127, 0, 0, 1], port).into());
                            p.reset_connections();
                        }
                    }
                }
                tokio::time::sleep(t.hold).await;
            }
            Fault::NetDelay => {
                if let Some(r) = redis.as_ref() {
                    r.proxies[slot as usize].set_delay(t.ttl * 2);
                    tokio::time::sleep(t.hold).await;
                    r.proxies[slot as usize].set_delay(Duration::ZERO);
                }
            }
            Fault::NetCut => {
                if let Some(r) = redis.as_ref() {
                    r.proxies[slot as usize].cut();
                    tokio::time::sleep(t.hold).await;
                    r.proxies[slot as usize].restore();
                }
            }
        }
        if resume {
            workers[slot as usize].send("go").await;
        }
        injected += 1;
        windows.push(report::FaultWindow {
            slot,
            start_ms: start,
            end_ms: now_ms(),
            label: fault.to_string(),
        });
    }
    tokio::time::sleep(t.cooldown).await;

    for w in &mut workers {
        w.send("stop").await;
    }
    for w in &mut workers {
        if tokio::time::timeout(Duration::from_secs(15), w.child.wait())
            .await
            .is_err()
        {
            let _ = w.child.start_kill();
            let _ = w.child.wait().await;
            notes.push("a worker did not stop within 15 s and was killed".into());
        }
    }
    let cell_end = now_ms();
    drop(redis);

    let history = resource.history().await?;
    let verdict = checker::check(workload, &history);
    let events = log.events.lock().map(|e| e.clone()).unwrap_or_default();
    let mut intervals = Vec::new();
    let mut open: std::collections::HashMap<u32, (i64, i64)> = Default::default();
    let (mut ops, mut stale, mut guarded) = (0u64, 0u64, 0u64);
    let mut refusals = Vec::new();
    let mut failures = 0u64;
    for (slot, recv_ms, ev) in &events {
        match ev {
            Event::Ready => {
                // A (re)started worker: whatever its predecessor held ended when it was killed.
                if let Some((s, f)) = open.remove(slot) {
                    intervals.push(Interval {
                        slot: *slot,
                        start_ms: s,
                        end_ms: *recv_ms,
                        fence: f,
                    });
                }
            }
            Event::Acquired { at_ms, fence, .. } => {
                open.insert(*slot, (*at_ms, *fence));
            }
            Event::Released { at_ms, .. } => {
                if let Some((s, f)) = open.remove(slot) {
                    intervals.push(Interval {
                        slot: *slot,
                        start_ms: s,
                        end_ms: *at_ms,
                        fence: f,
                    });
                }
            }
            Event::Wrote {
                outcome,
                at_ms,
                fence,
                ..
            } => {
                ops += 1;
                match outcome {
                    Outcome::Stale => {
                        stale += 1;
                        refusals.push((*at_ms, *slot, *fence));
                    }
                    Outcome::Guarded => guarded += 1,
                    Outcome::Accepted | Outcome::Skipped => {}
                }
            }
            Event::Failed { .. } => failures += 1,
            Event::Held { .. } | Event::Exit { .. } => {}
        }
    }
    for (slot, (s, f)) in open {
        intervals.push(Interval {
            slot,
            start_ms: s,
            end_ms: cell_end,
            fence: f,
        });
    }
    let (overlap_pairs, overlap_spans) = checker::overlaps(&intervals);
    if failures > 0 {
        notes.push(format!("{failures} failed attempts retried"));
    }
    let timeline = report::Timeline {
        start_ms: cell_start,
        end_ms: cell_end,
        slots: ctx.workers,
        intervals,
        overlaps: overlap_spans,
        faults: windows,
        writes: history
            .iter()
            .map(|r| (r.at_ms, r.writer, verdict.violating.contains(&r.seq)))
            .collect(),
        refusals,
        uses_lock: strategy.uses_redis(),
    };
    Ok(CellResult {
        workload,
        fault,
        strategy,
        status: CellStatus::Ran,
        operations: ops,
        faults_injected: injected,
        violations: Some(verdict.count()),
        violation_kind: checker::violation_kind(workload),
        accepted_writes: history.len() as u64,
        refused_stale: stale,
        refused_by_guard: guarded,
        overlapping_holders: strategy.uses_redis().then_some(overlap_pairs),
        safe_by_design: strategy.safe_by_design(),
        note: notes.join("; "),
        elapsed_ms: 0,
        timeline: Some(timeline),
    })
}

fn log_ready_count(log: &Log) -> usize {
    log.events
        .lock()
        .map(|e| {
            e.iter()
                .filter(|(_, _, ev)| matches!(ev, Event::Ready))
                .count()
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_urls_split_around_the_host() {
        let (h, hp, t) = split_redis_url("redis://u:p@example.org:6380/2").unwrap();
        assert_eq!(
            (h.as_str(), hp.as_str(), t.as_str()),
            ("redis://u:p@", "example.org:6380", "/2")
        );
        let (_, hp, t) = split_redis_url("redis://localhost").unwrap();
        assert_eq!((hp.as_str(), t.as_str()), ("localhost:6379", ""));
        assert!(split_redis_url("localhost:6379").is_err());
    }

    #[test]
    fn quick_plan_covers_pause_everywhere_and_every_fault_on_the_counter() {
        let args = VerifyArgs {
            quick: true,
            ..VerifyArgs::default()
        };
        let cells = plan(&args);
        assert_eq!(cells.iter().filter(|c| c.1 == Fault::Pause).count(), 25);
        assert!(cells
            .iter()
            .all(|c| c.1 == Fault::Pause || c.0 == Workload::Counter));
        assert!(!cells.iter().any(|c| c.1 == Fault::None));
    }
}
