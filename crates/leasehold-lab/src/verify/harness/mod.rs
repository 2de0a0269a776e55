//! Runs the cells: checks the input, makes the run's context, announces the plan, drives each cell
//! (`drive.rs`) under a progress bar, and writes the table, the JSON and the HTML report.
//!
//! Layout: `plan.rs` which cells, `drive.rs` one cell from start to its recorded history,
//! `tally.rs` from that history and the workers' events to the cell's result. Limit: cells run one
//! at a time (they share two cores and the run-wide stores); an interrupted run reports nothing.

mod drive;
mod plan;
mod tally;

use std::io::IsTerminal as _;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use super::cell::{CellResult, CellStatus};
use super::faults::applicability;
use super::report;
use super::rig::RunContext;
use super::store::redis::split_redis_url;
use super::store::{run_wide_names, LeaseStores};
use super::timing::Timing;
use super::{Fault, Strategy, VerifyArgs, Workload};

/// Runs `leasehold verify`.
pub(crate) async fn run(args: VerifyArgs) -> anyhow::Result<i32> {
    let ctx = context(&args)?;
    let cells = plan::plan(&args);
    if cells.is_empty() {
        anyhow::bail!(
            "no cells to run: the --workload/--fault/--strategy filters exclude everything"
        );
    }
    if let Some(dir) = &args.history_dir {
        report::history::prepare(dir)?;
    }
    announce(&ctx, &args, &cells);
    let started = Instant::now();
    let Some(results) = run_cells(&ctx, &cells, args.history_dir.as_deref()).await else {
        return Ok(130);
    };
    let wall = started.elapsed();
    write_outputs(&args, &results, wall)?;
    Ok(exit_code(&results))
}

/// Checks `--redis` and `--database` and makes the run's context (a temporary SQLite file when no
/// database is given).
fn context(args: &VerifyArgs) -> anyhow::Result<RunContext> {
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
    args.fenced_writer.check(&database)?;
    Ok(RunContext {
        exe,
        database,
        run_id: format!("{:06x}", rand::random::<u32>() & 0xff_ffff),
        user_redis: args.redis.clone(),
        workers: args.workers,
        timing: Timing::new(args),
        stop_rule: args.stop_rule,
        fenced_writer: args.fenced_writer,
        stores: LeaseStores::default(),
        _tmp: tmp,
    })
}

/// Says up front how many cells will run and about how long that takes.
fn announce(ctx: &RunContext, args: &VerifyArgs, cells: &[(Workload, Fault, Strategy)]) {
    let runnable: Vec<&(Workload, Fault, Strategy)> = cells
        .iter()
        .filter(|(_, f, s)| applicability(*f, *s, ctx.user_redis.is_some()).is_none())
        .collect();
    let estimate: Duration = runnable
        .iter()
        .map(|(_, f, s)| f.estimate(&ctx.timing, *s))
        .sum();
    eprintln!(
        "leasehold verify: {} cells ({} to run, {} not applicable or skipped), {} workers each, lease TTL {} ms, {} injection(s) per cell ({} per Sentinel or Cluster failover and per cell on {}); {}.",
        cells.len(),
        runnable.len(),
        cells.len() - runnable.len(),
        ctx.workers,
        args.ttl_ms,
        ctx.timing.injections,
        ctx.timing.slow_injections,
        run_wide_names("or"),
        human(estimate)
    );
}

/// A progress bar on a terminal; `None` otherwise (then one line per cell).
fn progress_bar(len: usize) -> Option<indicatif::ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    let bar = indicatif::ProgressBar::new(len as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    Some(bar)
}

/// Runs every cell in order, writing each one's record into `history` when given; `None` when the
/// run was interrupted.
async fn run_cells(
    ctx: &RunContext,
    cells: &[(Workload, Fault, Strategy)],
    history: Option<&Path>,
) -> Option<Vec<CellResult>> {
    let bar = progress_bar(cells.len());
    let mut results = Vec::with_capacity(cells.len());
    for (i, &(w, f, s)) in cells.iter().enumerate() {
        let label = format!("{w} × {f} × {s}");
        if let Some(bar) = &bar {
            bar.set_message(label.clone());
        }
        let result = match applicability(f, s, ctx.user_redis.is_some()) {
            Some((status, note)) => CellResult::empty(w, f, s, status, note),
            None => {
                // On Ctrl-C or SIGTERM the cell's future is dropped: its workers are killed
                // (kill_on_drop) and its redis-servers stopped (their Drop), so nothing is left behind.
                tokio::select! {
                    r = timed_cell(ctx, i, w, f, s) => r,
                    _ = interrupted() => {
                        if let Some(bar) = &bar {
                            bar.abandon();
                        }
                        eprintln!("leasehold verify: interrupted; {} of {} cells done", i, cells.len());
                        // A redis-server being started on a blocking thread is stopped when that
                        // start returns; give it the moment it needs before the process exits.
                        tokio::time::sleep(Duration::from_millis(700)).await;
                        return None;
                    }
                }
            }
        };
        let mut line = format!("[{}/{}] {label}: {}", i + 1, cells.len(), summary(&result));
        let mut unwritten = false;
        if let Some(dir) = history {
            // A record that cannot be written is said, and the run goes on: the verdict stands.
            if let Err(e) = report::history::write_cell(dir, i, &result) {
                line.push_str(&format!(" (its record not written: {e:#})"));
                unwritten = true;
            }
        }
        match &bar {
            Some(bar) => {
                bar.inc(1);
                if result.status == CellStatus::Error || unwritten {
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
    Some(results)
}

/// Runs one applicable cell and times it; a cell that could not run is an error cell.
async fn timed_cell(
    ctx: &RunContext,
    index: usize,
    w: Workload,
    f: Fault,
    s: Strategy,
) -> CellResult {
    let t0 = Instant::now();
    let mut r = match drive::run_cell(ctx, index, w, f, s).await {
        Ok(r) => r,
        Err(e) => CellResult::empty(w, f, s, CellStatus::Error, format!("{e:#}")),
    };
    r.elapsed_ms = t0.elapsed().as_millis() as u64;
    r
}

/// A cell's progress line after its label.
fn summary(result: &CellResult) -> String {
    match (result.status, result.violations) {
        (CellStatus::Ran, Some(v)) => format!(
            "{} ops, {} faults, {v} {}{}",
            result.operations,
            result.faults_injected,
            result.violation_kind,
            if result.stalled() {
                ", STALLED (lock never freed)"
            } else {
                ""
            }
        ),
        _ => result.note.clone(),
    }
}

/// Prints the table and the totals, and writes `--json` and `--report` when asked.
fn write_outputs(args: &VerifyArgs, results: &[CellResult], wall: Duration) -> anyhow::Result<()> {
    println!("{}", report::table(results));
    println!("{}", report::totals(results, wall));
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(results)?;
        std::fs::write(path, json)
            .with_context(|| format!("cannot write --json {}", path.display()))?;
    }
    if let Some(dir) = &args.report {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot create --report {}", dir.display()))?;
        let page = report::html(results, &command_line(args), wall);
        let path = dir.join("index.html");
        std::fs::write(&path, page).with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("report: {}", path.display());
    }
    Ok(())
}

/// 1 when a strategy documented as safe broke its promise, 2 when cells could not run, else 0.
fn exit_code(results: &[CellResult]) -> i32 {
    let broken: Vec<&CellResult> = results.iter().filter(|r| r.broke_a_promise()).collect();
    if !broken.is_empty() {
        for r in &broken {
            eprintln!(
                "FAILED: {} × {} × {} is documented as safe but showed {} {}{}{}",
                r.workload,
                r.fault,
                r.strategy,
                r.violations.unwrap_or(0),
                r.violation_kind,
                match r.fence_regressions {
                    Some(n) if n > 0 => format!(", {n} fences accepted after a higher one"),
                    _ => String::new(),
                },
                if r.stalled() {
                    " and a lock nobody could take"
                } else {
                    ""
                }
            );
        }
        return 1;
    }
    let errors = results
        .iter()
        .filter(|r| r.status == CellStatus::Error)
        .count();
    if errors > 0 {
        eprintln!("{errors} cell(s) could not run; see the note column");
        return 2;
    }
    0
}

/// "about 95 s" or "about 17 minutes".
fn human(d: Duration) -> String {
    let s = d.as_secs().max(1);
    if s < 120 {
        format!("about {s} s")
    } else {
        format!("about {} minutes", s.div_ceil(60))
    }
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
    if let Some(n) = args.injections {
        s.push_str(&format!(" --injections {n}"));
    }
    s
}
