//! One cell from start to its recorded history: the resource's tables, the cell's Redis and lease
//! store, the worker processes, the injections, and the stop.
//!
//! Limit: a cell that cannot start its workers is an error, not a result; whatever went wrong
//! after that is in the cell's notes, and its history is checked all the same.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::super::cell::{Cell, CellResult, FaultWindow, StoreLink};
use super::super::resource::fenced::Fenced;
use super::super::resource::guards::Guards;
use super::super::resource::{Dialect, Resource};
use super::super::rig::{Log, RunContext, WorkerSpec};
use super::super::store::redis::Servers;
use super::super::worker::now_ms;
use super::super::{Fault, Strategy, Workload};
use super::tally;

/// Runs cell `index` (its tables and keys named after it) and drops its tables afterwards.
pub(super) async fn run_cell(
    ctx: &RunContext,
    index: usize,
    workload: Workload,
    fault: Fault,
    strategy: Strategy,
) -> anyhow::Result<CellResult> {
    let prefix = match Dialect::of(&ctx.database)? {
        Dialect::Postgres => format!("lhv_{}_c{index}.", ctx.run_id),
        Dialect::Sqlite => format!("r{}_c{index}_", ctx.run_id),
    };
    // The lease strategies' key prefix: no `:` in it (it separates prefix and name in every key).
    let key = format!("lhv-{}-c{index}", ctx.run_id);
    let resource = Resource::connect(&ctx.database, &prefix, 2).await?;
    let spec = WorkerSpec {
        workload,
        strategy,
        prefix: &prefix,
        key: &key,
    };
    let outcome = drive(ctx, &resource, spec, fault).await;
    let _ = resource.teardown().await;
    outcome
}

/// The cell's timeline: start, warm up, inject, cool down, stop, then the verdict.
async fn drive(
    ctx: &RunContext,
    resource: &Resource,
    spec: WorkerSpec<'_>,
    fault: Fault,
) -> anyhow::Result<CellResult> {
    prepare_resource(ctx, resource, spec).await?;
    let mut cell = open_cell(ctx, spec, fault).await?;
    let cell_start = now_ms();
    start_workers(&mut cell).await?;
    tokio::time::sleep(cell.timing.warmup).await;
    let windows = inject_rounds(&mut cell, fault).await?;
    tokio::time::sleep(cell.timing.cooldown).await;
    cell.check_lock("at the end of the cell").await;
    stop_workers(&mut cell).await;
    let cell_end = now_ms();
    drop(cell.redis.take());
    let history = resource.history().await?;
    Ok(tally::result(
        &mut cell,
        fault,
        &history,
        windows,
        (cell_start, cell_end),
    ))
}

/// Creates the cell's tables, and leasehold's own when the strategy writes through them.
async fn prepare_resource(
    ctx: &RunContext,
    resource: &Resource,
    spec: WorkerSpec<'_>,
) -> anyhow::Result<()> {
    resource.setup(spec.workload, spec.strategy).await?;
    if spec.strategy.fenced() {
        let fenced =
            Fenced::connect(&ctx.database, spec.prefix, spec.key, ctx.fenced_writer).await?;
        fenced.migrate().await?;
        fenced.close().await;
    }
    if spec.strategy.guarded() {
        let guards = Guards::connect(&ctx.database, spec.prefix, spec.key).await?;
        guards.migrate().await?;
        guards.close().await;
    }
    Ok(())
}

/// Starts what the cell's lock lives on (its Redis, or the run-wide store's URL) and makes the
/// running cell, with no workers yet.
async fn open_cell<'a>(
    ctx: &'a RunContext,
    spec: WorkerSpec<'a>,
    fault: Fault,
) -> anyhow::Result<Cell<'a>> {
    let strategy = spec.strategy;
    let redis = if strategy.uses_redis() {
        let want = fault.needs().want(strategy, ctx.workers);
        Some(Servers::start(want, ctx.user_redis.as_deref()).await?)
    } else {
        None
    };
    let lease_store = ctx.stores.url_for(strategy.store()).await?;
    // The partition cuts one holder off from a store the others still reach: each worker goes
    // through proxies of its own.
    let mut store_links = Vec::new();
    if let (Fault::Partition, Some(url)) = (fault, lease_store.as_deref()) {
        for _ in 0..ctx.workers {
            store_links.push(StoreLink::open(url).await?);
        }
    }
    Ok(Cell {
        ctx,
        spec,
        log: Arc::new(Log::default()),
        workers: Vec::new(),
        redis,
        lease_store,
        store_links,
        timing: ctx.timing.for_fault(fault, strategy),
        notes: Vec::new(),
        replication_cut_ms: None,
        failover_ms: None,
        stuck_lock: None,
        injected: 0,
        bare_majorities: 0,
        passed_over: 0,
        leaders_killed: 0,
        evicted_locks: 0,
        fillers: 0,
    })
}

/// Spawns one worker per slot and waits (up to 20 s) until every one says it is ready; a worker
/// that exits first fails the cell with what the workers wrote on stderr.
async fn start_workers(cell: &mut Cell<'_>) -> anyhow::Result<()> {
    let workers = cell.ctx.workers;
    for slot in 0..workers {
        let w = cell.spawn(slot, 0).await?;
        cell.workers.push(w);
    }
    let ready_deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < ready_deadline {
        if cell.log.ready_count() >= workers as usize {
            return Ok(());
        }
        if cell
            .workers
            .iter_mut()
            .any(|w| matches!(w.child.try_wait(), Ok(Some(_))))
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let err = cell
        .log
        .stderr
        .lock()
        .map(|s| s.clone())
        .unwrap_or_default();
    anyhow::bail!("workers did not start: {}", err.trim());
}

/// The cell's injections, a gap apart; returns when and to whom each was done.
async fn inject_rounds(cell: &mut Cell<'_>, fault: Fault) -> anyhow::Result<Vec<FaultWindow>> {
    let t = cell.timing;
    let mut windows = Vec::new();
    let injections = fault.injections(&t);
    for round in 1..=injections {
        if round > 1 {
            tokio::time::sleep(t.gap).await;
        }
        if fault == Fault::None {
            tokio::time::sleep(t.hold).await;
            continue;
        }
        cell.arm(fault).await?;
        let Some(slot) = choose_suited_target(cell, fault).await else {
            cell.disarm(fault);
            cell.notes.push(format!(
                "injection {round} not done: no worker reached a write in its critical section"
            ));
            if cell.check_lock(&format!("before injection {round}")).await {
                cell.notes.push(format!(
                    "injections {round}-{injections} not done: nobody can take the lock"
                ));
                break;
            }
            continue;
        };
        let start = now_ms();
        if cell.inject(fault, slot).await? {
            cell.workers[slot as usize].send("go").await;
        }
        cell.injected += 1;
        windows.push(FaultWindow {
            slot,
            start_ms: start,
            end_ms: now_ms(),
            label: fault.to_string(),
        });
    }
    Ok(windows)
}

/// A target stopped at its hold point that `fault` is meant for (`Cell::suits`), trying up to ten
/// others after the first; `None` when no worker got there.
async fn choose_suited_target(cell: &mut Cell<'_>, fault: Fault) -> Option<u32> {
    let mut target = cell.choose_target().await;
    for _ in 0..10 {
        match target {
            Some(slot) if !cell.suits(fault, slot).await => {
                cell.workers[slot as usize].send("go").await;
                cell.passed_over += 1;
                target = cell.choose_target().await;
            }
            _ => break,
        }
    }
    target
}

/// Tells every worker to stop and waits for it (up to 15 s each, then it is killed).
async fn stop_workers(cell: &mut Cell<'_>) {
    for w in &mut cell.workers {
        w.send("stop").await;
    }
    for w in &mut cell.workers {
        if tokio::time::timeout(Duration::from_secs(15), w.child.wait())
            .await
            .is_err()
        {
            let _ = w.child.start_kill();
            let _ = w.child.wait().await;
            cell.notes
                .push("a worker did not stop within 15 s and was killed".into());
        }
    }
}
