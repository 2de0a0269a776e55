//! S6, observers: 100 observers of one election and a leader that changes its advertised value
//! (`proclaim`) a number of times, a pause apart; how long after each change each observer reports
//! it, and what the observers cost the store per change and observer. Run twice in the same run on
//! the same store: with the store's pushed notices (the default of `Election::observe`) and, as the
//! baseline, polled (`Observer::polled`, reading every `DEFAULT_OBSERVE_EVERY`: how observers worked
//! before stores pushed). On a store that cannot push both rows poll.
//!
//! The observers sit on [`CLIENTS`] clients, [`OBSERVERS`] / [`CLIENTS`] on each, as that many
//! processes would (a client shares one subscription between its observers of a name). A delay is
//! counted from the moment the leader sent the change, so it includes the change's own round trip,
//! the notice and the observer's read (two requests). Requests are what the observers' clients
//! sent (a pipeline or a script is one), over the whole measured span, safety reads and
//! subscriptions included; Redis commands are `INFO commandstats` deltas of the benchmark's private
//! server, every command it ran in that span (the leader's few per change included, the commands
//! scripts call counted under their own names too).
//!
//! Limit: one process hosts every observer, on this machine's cores: with 100 observers woken at
//! once, the tail includes waiting for a core. The leader's changes come a pause apart, so each is
//! seen alone; changes closer than a read are merged (an observer reports the last).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use leasehold::election::{Election, DEFAULT_OBSERVE_EVERY};
use leasehold::{LeaseClient, LeaseOptions};

use super::measure::{round3, CommandStats, Latencies};
use super::stores::{connect_any, Target};

/// Observers of the one election.
pub(crate) const OBSERVERS: usize = 100;

/// Clients the observers sit on.
pub(crate) const CLIENTS: usize = 10;

/// The pause between two changes: longer than the baseline's poll interval, so that the baseline
/// sees each change alone too.
const GAP: Duration = Duration::from_millis(400);

/// The election's name.
const NAME: &str = "s6-observed";

/// One store's figures in one mode.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct ObserveRow {
    /// The target's label.
    pub(crate) store: &'static str,
    /// `pushed` (the default observer) or `polled` (the baseline).
    pub(crate) mode: &'static str,
    pub(crate) observers: usize,
    /// Changes measured.
    pub(crate) changes: usize,
    /// Observers that had the store's notices at the end (0 where the store cannot push).
    pub(crate) subscribed: usize,
    /// Delay from a change to an observer's report: p50, p99 and max over every (change, observer),
    /// milliseconds.
    pub(crate) delay_p50_ms: f64,
    pub(crate) delay_p99_ms: f64,
    pub(crate) delay_max_ms: f64,
    /// (change, observer) pairs never reported (merged with the next change): should be 0.
    pub(crate) missed: usize,
    /// Requests the observers' clients sent, per change per observer.
    pub(crate) requests_per_change_per_observer: f64,
    /// Redis only: commands the server ran, per change per observer.
    pub(crate) commands_per_change_per_observer: Option<f64>,
}

/// Runs the observers on `target`, `changes` changes, pushed or polled.
pub(crate) async fn run(
    target: &Target,
    changes: usize,
    pushed: bool,
) -> anyhow::Result<ObserveRow> {
    let prefix = format!("s6o-{}-{:08x}", std::process::id(), rand::random::<u32>());
    let opts = LeaseOptions::with_ttl(Duration::from_secs(10))?;
    let leader_client = connect_any(&target.urls, &prefix).await?;
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(connect_any(&target.urls, &prefix).await?);
    }
    let mut leading = Election::new(&leader_client, NAME, &opts)?
        .campaign("start", Duration::ZERO)
        .await
        .context("S6 observers: the leader's campaign")?;
    let ready = Arc::new(tokio::sync::Barrier::new(OBSERVERS + 1));
    let mut tasks = Vec::new();
    for i in 0..OBSERVERS {
        let client = clients[i % CLIENTS].clone();
        let (ready, opts) = (ready.clone(), opts.clone());
        tasks.push(tokio::spawn(observe(client, opts, ready, changes, pushed)));
    }
    ready.wait().await;
    let requests = |cs: &[LeaseClient]| cs.iter().map(LeaseClient::round_trips).sum::<u64>();
    let mut info_con = match target.label {
        "redis" => Some(
            redis::Client::open(target.urls[0].as_str())?
                .get_multiplexed_async_connection()
                .await?,
        ),
        _ => None,
    };
    let stats_before = match info_con.as_mut() {
        Some(con) => Some(CommandStats::read(con).await?),
        None => None,
    };
    let requests_before = requests(&clients);
    let mut sent = Vec::with_capacity(changes);
    for k in 0..changes {
        tokio::time::sleep(GAP).await;
        sent.push(Instant::now());
        leading
            .proclaim(&format!("v{k}"))
            .await
            .context("S6 observers: a change")?;
    }
    tokio::time::sleep(GAP).await;
    leading
        .proclaim("done")
        .await
        .context("S6 observers: the end")?;
    let mut seen = Vec::new();
    let mut subscribed = 0;
    for t in tasks {
        let (times, was_pushed) = t.await??;
        subscribed += usize::from(was_pushed);
        seen.push(times);
    }
    let spent = requests(&clients) - requests_before;
    let commands = match (info_con.as_mut(), stats_before) {
        (Some(con), Some(before)) => {
            let after = CommandStats::read(con).await?;
            Some(after.since(&before).values().sum::<u64>())
        }
        _ => None,
    };
    leading.resign().await.context("S6 observers: resigning")?;
    let mut delays = Latencies::default();
    let mut missed = 0;
    let mut max = Duration::ZERO;
    for times in &seen {
        for (k, at) in times.iter().enumerate() {
            match at {
                Some(at) => {
                    let d = at.saturating_duration_since(sent[k]);
                    max = max.max(d);
                    delays.record(d);
                }
                None => missed += 1,
            }
        }
    }
    // The end marker is a change too: the span's cost is shared by `changes + 1`.
    let per = (changes + 1) as f64 * OBSERVERS as f64;
    let ms = |q: f64| round3(delays.quantile_us(q) / 1000.0);
    Ok(ObserveRow {
        store: target.label,
        mode: if pushed { "pushed" } else { "polled" },
        observers: OBSERVERS,
        changes,
        subscribed,
        delay_p50_ms: ms(0.5),
        delay_p99_ms: ms(0.99),
        delay_max_ms: round3(max.as_secs_f64() * 1000.0),
        missed,
        requests_per_change_per_observer: round3(spent as f64 / per),
        commands_per_change_per_observer: commands.map(|c| round3(c as f64 / per)),
    })
}

/// One observer: reports once ready, then records when it first saw each change `v<k>`, until
/// `done`. The times, and whether it had the store's notices.
async fn observe(
    client: LeaseClient,
    opts: LeaseOptions,
    ready: Arc<tokio::sync::Barrier>,
    changes: usize,
    pushed: bool,
) -> anyhow::Result<(Vec<Option<Instant>>, bool)> {
    let observer = Election::new(&client, NAME, &opts)?
        .observe()
        .every(DEFAULT_OBSERVE_EVERY);
    let mut observer = if pushed { observer } else { observer.polled() };
    observer
        .changed()
        .await
        .context("S6 observers: the first read")?;
    ready.wait().await;
    let mut times = vec![None; changes];
    let deadline = Instant::now() + GAP * (changes as u32 + 2) + Duration::from_secs(30);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let leader = match tokio::time::timeout(left, observer.changed())
            .await
            .context("S6 observers: the end was never seen")?
        {
            Ok(leader) => leader,
            // A read that failed (a timeout on a loaded machine): the observer reads again, as
            // `leader --watch` does; the change is then reported late, which the figures show.
            Err(e) => {
                eprintln!("bench: S6 observers: a read failed, reading again: {e}");
                continue;
            }
        };
        let at = Instant::now();
        match leader.and_then(|l| l.value).as_deref() {
            Some("done") => return Ok((times, observer.is_pushed())),
            Some(v) => {
                if let Some(k) = v.strip_prefix('v').and_then(|k| k.parse::<usize>().ok()) {
                    if let Some(slot) = times.get_mut(k) {
                        slot.get_or_insert(at);
                    }
                }
            }
            None => {}
        }
    }
}
