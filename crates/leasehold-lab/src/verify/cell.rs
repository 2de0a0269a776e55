//! One cell's data: whether it ran and what it found ([`CellResult`]), the picture data of its
//! timeline, and the running [`Cell`] the fault arms (`faults/`) work on.
//!
//! Limit: a cell knows its own workers, servers and log only; which cells a run covers and how a
//! cell is driven from start to verdict is `harness/`.

use std::sync::Arc;
use std::time::Duration;

use super::checker::{self, Interval};
use super::resource::fenced::FencedWriter;
use super::resource::HistoryRow;
use super::rig::{spawn_worker, LockStory, LockUrls, Log, RunContext, WorkerProc, WorkerSpec};
use super::store::redis::Servers;
use super::strategy::Strategy;
use super::timing::Timing;
use super::worker::{lock_key, Event, StopRule};
use super::{Fault, Workload};

/// Whether a cell ran, and if not, why.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CellStatus {
    /// The cell ran and its history was checked.
    Ran,
    /// The fault cannot apply to this strategy (e.g. a Redis fault when no Redis is used).
    NotApplicable,
    /// The fault needs something this run does not have: a server the harness can kill (the user's
    /// was given), or libfaketime for a clock jump.
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
    /// Lock waits that gave up after the stall limit: nobody could take the lock for that long.
    /// A liveness failure, counted apart from the violations of the data.
    pub stalls: u64,
    /// Whether the harness saw the lock held with no expiry (the same holder, no TTL, at two looks
    /// 100 ms apart): a lock that nothing but an explicit delete will ever free.
    pub lock_without_expiry: bool,
    /// Writes the resource accepted.
    pub accepted_writes: u64,
    /// Writes the resource refused because their fence was stale.
    pub refused_stale: u64,
    /// Writes a database guard refused (duplicate key, failed condition, illegal transition, seen message).
    pub refused_by_guard: u64,
    /// Pairs of lease holding intervals that overlapped, as the workers reported them
    /// (informational; `null` without a lock).
    pub overlapping_holders: Option<u64>,
    /// Accepted writes whose fence was lower than one accepted before them (`null` for a strategy
    /// without a fence). Where the resource checks the fence, any is a broken promise.
    pub fence_regressions: Option<u64>,
    /// Whether leasehold documents the strategy as safe (then any violation or stall fails the run).
    pub safe_by_design: bool,
    /// Under `partition`, for a strategy with a leasehold lease: when the cut-off holder's long
    /// critical section started to stop (`--stop-rule`); `null` otherwise.
    pub stop_rule: Option<StopRule>,
    /// For a fenced strategy: who wrote its writes (`--fenced-writer`); `null` otherwise.
    pub fenced_writer: Option<FencedWriter>,
    /// Why a cell did not run, or what went wrong.
    pub note: String,
    /// Wall time of the cell in milliseconds.
    pub elapsed_ms: u64,
    /// The picture data for the HTML report.
    #[serde(skip)]
    pub(crate) timeline: Option<Timeline>,
    /// The writes the resource accepted, in full, for `--history-dir`.
    #[serde(skip)]
    pub(crate) accepted: Vec<HistoryRow>,
}

impl CellResult {
    pub(crate) fn empty(
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
            stalls: 0,
            lock_without_expiry: false,
            accepted_writes: 0,
            refused_stale: 0,
            refused_by_guard: 0,
            overlapping_holders: None,
            fence_regressions: None,
            safe_by_design: strategy.safe_by_design(),
            stop_rule: None,
            fenced_writer: None,
            note,
            elapsed_ms: 0,
            timeline: None,
            accepted: Vec::new(),
        }
    }

    /// Whether the lock stopped being available to anyone (a stall or a lock that never expires).
    pub fn stalled(&self) -> bool {
        self.stalls > 0 || self.lock_without_expiry
    }

    /// Whether a strategy documented as safe failed here: a violation, a stall, or (where the
    /// resource checks the fence) a fence accepted after a higher one.
    pub(crate) fn broke_a_promise(&self) -> bool {
        let fence_broken = self.strategy.fenced() && self.fence_regressions.unwrap_or(0) > 0;
        self.safe_by_design && (self.violations.unwrap_or(0) > 0 || self.stalled() || fence_broken)
    }
}

/// When a fault was applied to which worker.
#[derive(Debug, Clone)]
pub(crate) struct FaultWindow {
    pub(crate) slot: u32,
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) label: String,
}

/// What one cell's timeline shows.
#[derive(Debug, Clone)]
pub(crate) struct Timeline {
    pub(crate) start_ms: i64,
    pub(crate) end_ms: i64,
    pub(crate) slots: u32,
    pub(crate) intervals: Vec<Interval>,
    pub(crate) overlaps: Vec<(i64, i64)>,
    pub(crate) faults: Vec<FaultWindow>,
    /// Accepted writes: (database time, writer slot, whether it violated the invariant).
    pub(crate) writes: Vec<(i64, i64, bool)>,
    /// Stale writes the resource refused: (time, slot, fence).
    pub(crate) refusals: Vec<(i64, u32, i64)>,
    /// Lock waits that gave up: (start, end, slot).
    pub(crate) stalls: Vec<(i64, i64, u32)>,
    pub(crate) uses_lock: bool,
}

/// One running cell: its workers, its Redis and what happened so far. The fault arms
/// (`faults/`) work on it.
#[derive(Debug)]
pub(crate) struct Cell<'a> {
    pub(crate) ctx: &'a RunContext,
    pub(crate) spec: WorkerSpec<'a>,
    pub(crate) log: Arc<Log>,
    pub(crate) workers: Vec<WorkerProc>,
    pub(crate) redis: Option<Servers>,
    /// The URL of the lease store when it is not Redis (a run-wide store's).
    pub(crate) lease_store: Option<String>,
    /// Per worker slot, its own proxies to that store and the URL through them (a `partition`
    /// cell's; empty otherwise, the workers then reach the store directly).
    pub(crate) store_links: Vec<StoreLink>,
    /// The run's timings as they apply to this cell's strategy ([`Timing::for_strategy`]).
    pub(crate) timing: Timing,
    pub(crate) notes: Vec<String>,
    /// When the replication link was last cut and the last failover began (ms, this machine's
    /// clock), for the stall evidence.
    pub(crate) replication_cut_ms: Option<i64>,
    pub(crate) failover_ms: Option<i64>,
    /// The first lock seen held with no expiry.
    pub(crate) stuck_lock: Option<StuckLock>,
    /// Faults injected so far in this cell (the Redlock faults take turns among the masters).
    pub(crate) injected: u32,
    /// Redlock master faults that found the target's lease on fewer than all three masters.
    pub(crate) bare_majorities: u32,
    /// Targets let go because their lease stood on a bare majority (see `Cell::suits`).
    pub(crate) passed_over: u32,
    /// `member-kill` injections whose member was the etcd leader.
    pub(crate) leaders_killed: u32,
    /// `eviction` injections in which the server evicted the holder's lock key.
    pub(crate) evicted_locks: u32,
    /// Filler keys the `eviction` injections wrote.
    pub(crate) fillers: u64,
}

/// One worker's way to a run-wide store: a proxy per address in the store's URL, and the URL with
/// those addresses replaced by the proxies'.
#[derive(Debug)]
pub(crate) struct StoreLink {
    pub(crate) url: String,
    pub(crate) proxies: Vec<leasehold_testkit::Proxy>,
}

impl StoreLink {
    /// Puts a proxy in front of every `127.0.0.1:PORT` in `url` (a PostgreSQL or MariaDB server's
    /// one, each member of an etcd cluster).
    pub(crate) async fn open(url: &str) -> anyhow::Result<Self> {
        const HOST: &str = "127.0.0.1:";
        let mut out = String::new();
        let mut proxies = Vec::new();
        let mut rest = url;
        while let Some(at) = rest.find(HOST) {
            out.push_str(&rest[..at]);
            let after = &rest[at + HOST.len()..];
            let digits = after.bytes().take_while(u8::is_ascii_digit).count();
            let port: u16 = after[..digits]
                .parse()
                .map_err(|_| anyhow::anyhow!("no port after {HOST} in the lease store's URL"))?;
            let proxy = leasehold_testkit::Proxy::start(([127, 0, 0, 1], port).into()).await?;
            out.push_str(&format!("{HOST}{}", proxy.port()));
            proxies.push(proxy);
            rest = &after[digits..];
        }
        out.push_str(rest);
        anyhow::ensure!(
            !proxies.is_empty(),
            "the lease store's URL names no 127.0.0.1 address to put a proxy in front of"
        );
        Ok(Self { url: out, proxies })
    }
}

/// A lock the harness saw held with no expiry.
#[derive(Debug)]
pub(crate) struct StuckLock {
    /// Where it was seen ("on the promoted replica", "at the end of the cell").
    seen: String,
    /// Its token, to find its holder in the log.
    token: String,
    cut_ms: Option<i64>,
    failover_ms: Option<i64>,
}

impl Cell<'_> {
    /// Starts a worker process for `slot`, continuing at operation `start_op`.
    pub(crate) async fn spawn(&self, slot: u32, start_op: u64) -> anyhow::Result<WorkerProc> {
        let urls = self
            .redis
            .as_ref()
            .map(|r| r.urls(slot))
            .unwrap_or_default();
        spawn_worker(
            self.ctx,
            &self.log,
            self.spec,
            slot,
            LockUrls {
                redis: urls,
                lease_store: match self.store_links.get(slot as usize) {
                    Some(link) => Some(link.url.as_str()),
                    None => self.lease_store.as_deref(),
                },
            },
            self.timing,
            start_op,
        )
        .await
    }

    /// Looks for a lock that will never expire and remembers the first sighting (`where_`, the
    /// token) for the cell's note.
    pub(crate) async fn check_lock(&mut self, where_: &str) -> bool {
        let (Some(redis), Some(key)) = (
            self.redis.as_ref(),
            lock_key(self.spec.strategy, self.spec.key),
        ) else {
            return false;
        };
        let Some(token) = redis.lock_without_expiry(&key).await else {
            return false;
        };
        if self.stuck_lock.is_none() {
            self.stuck_lock = Some(StuckLock {
                seen: where_.to_owned(),
                token,
                cut_ms: self.replication_cut_ms,
                failover_ms: self.failover_ms,
            });
        }
        true
    }

    /// What the log says of the stuck lock, once the cell is over: whose it was, when it was taken
    /// and released, against the replication cut and the failover.
    pub(crate) fn stuck_lock_note(&self) -> Option<String> {
        let stuck = self.stuck_lock.as_ref()?;
        let mut note = format!(
            "lock held with no expiry {} (same token, PTTL -1, at two looks 100 ms apart)",
            stuck.seen
        );
        if let Some(LockStory {
            slot,
            op,
            taken_ms: at,
            released,
        }) = self.log.lock_taken_with(&stuck.token)
        {
            let rel = |t: i64| match stuck.cut_ms {
                Some(cut) => format!("{:+} ms from the replication cut", t - cut),
                None => format!("at {t} ms"),
            };
            let side = |t: i64| match stuck.failover_ms {
                Some(f) if t < f => " (before the failover, on the old primary)",
                Some(_) => " (after the failover)",
                None => "",
            };
            note.push_str(&format!(
                ": worker {slot}'s lock of op {op}, taken (SETNX, then PEXPIRE) {}; {}",
                rel(at),
                match released {
                    Some((r, outcome)) => format!(
                        "its release {}{} {}",
                        rel(r),
                        side(r),
                        match outcome {
                            Ok(true) => "deleted a lock".to_owned(),
                            Ok(false) => "found no lock".to_owned(),
                            Err(e) => format!("failed: {e}"),
                        }
                    ),
                    None => "never released".into(),
                }
            ));
        }
        Some(note)
    }

    /// Asks every worker to stop at its next hold point and returns the first to get there (the
    /// others are let go), or `None` if none does within the target wait.
    pub(crate) async fn choose_target(&mut self) -> Option<u32> {
        let since = self.log.len();
        for w in &mut self.workers {
            w.send("hold").await;
        }
        let held = self
            .log
            .wait_for(since, self.timing.target_wait, |_, ev| {
                matches!(ev, Event::Held { .. })
            })
            .await;
        for w in &mut self.workers {
            w.send("unhold").await;
        }
        let slot = if held {
            self.log.first_held_since(since)?
        } else {
            return None;
        };
        // Let go of any other worker that stopped at the same moment: it was not the target.
        tokio::time::sleep(Duration::from_millis(5)).await;
        for (other, w) in self.workers.iter_mut().enumerate() {
            if other as u32 != slot
                && self.log.find_since(since, |s, ev| {
                    s == other as u32 && matches!(ev, Event::Held { .. })
                })
            {
                w.send("go").await;
            }
        }
        Some(slot)
    }
}

#[cfg(test)]
mod tests {
    use super::StoreLink;

    #[tokio::test]
    async fn a_store_link_puts_a_proxy_in_front_of_every_address_of_the_url() {
        let link = StoreLink::open("etcd://127.0.0.1:2379,127.0.0.1:22379,127.0.0.1:32379")
            .await
            .unwrap();
        assert_eq!(link.proxies.len(), 3);
        let ports: Vec<String> = link
            .proxies
            .iter()
            .map(|p| format!("127.0.0.1:{}", p.port()))
            .collect();
        assert_eq!(link.url, format!("etcd://{}", ports.join(",")));
        let pg = StoreLink::open("postgres://postgres@127.0.0.1:5432/postgres")
            .await
            .unwrap();
        assert_eq!(
            pg.url,
            format!(
                "postgres://postgres@127.0.0.1:{}/postgres",
                pg.proxies[0].port()
            )
        );
        let err = StoreLink::open("postgres://db.example/x")
            .await
            .unwrap_err();
        assert!(err.to_string().contains("127.0.0.1"), "{err}");
    }
}
