//! `leasehold cron`, the real binary, several daemons over one store, judged from what the
//! commands write (each run appends a line: job, slot, attempt, which daemon, the real time):
//! three daemons whose clocks are skewed up to 40 % of the period (libfaketime) run every slot once
//! and never before its instant, on Redis, PostgreSQL and MariaDB, where the same daemons over a
//! store without a clock (Redlock) start runs early by the skew; on every store (`on_every_store!`:
//! Redis, PostgreSQL, MariaDB, etcd) a daemon SIGKILLed mid-run is followed by a retry on another
//! in the same slot, catch-up after every daemon was down follows each policy, overlap `forbid` and
//! `allow` do what they say, pause and resume are seen by every daemon; `replace` stops the previous
//! run first, on this replica and on another. The one-daemon and operator tests, the jitter and DST
//! are in `cron_ops.rs`; the scaffolding is `cli_support/cron.rs`.
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leasehold_testkit::RedisServer;

mod cli_support;

use cli_support::cron::{
    history, leasehold, outcomes, prefix, record_cmd, runs, Daemon, RunLine, Store,
};
use cli_support::{now_ms, sleep_until};

/// The scenario `$name(store: Store)` as one test per store: `$name::redis`, `::postgres`,
/// `::mariadb`, `::etcd` (the same daemons, the same assertions).
macro_rules! on_every_store {
    ($name:ident) => {
        mod $name {
            #[test]
            fn redis() {
                super::$name(super::Store::redis());
            }
            #[test]
            fn postgres() {
                super::$name(super::Store::postgres());
            }
            #[test]
            fn mariadb() {
                super::$name(super::Store::mariadb());
            }
            #[test]
            fn etcd() {
                super::$name(super::Store::etcd());
            }
        }
    };
}

const PERIOD_S: u64 = 5;

/// Three daemons, clocks -2 s, 0, +2 s (40 % of the 5 s period), for about six slots; each slot
/// run once. Returns the runs and how early the earliest run started against its instant (ms,
/// negative: before it).
fn three_skewed(store: &[String]) -> (Vec<RunLine>, i64) {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[defaults]\nttl = \"3s\"\n\n[job.tick]\nevery = \"{PERIOD_S}s\"\n{}\n",
            record_cmd(&out, "sleep 0.2")
        ),
    )
    .unwrap();
    let p = prefix();
    let mut daemons: Vec<Daemon> = [(-2, "behind"), (0, "right"), (2, "ahead")]
        .iter()
        .map(|(skew, who)| Daemon::start(store, &p, &jobs, who, *skew))
        .collect();
    let started = now_ms();
    // Six slots after the daemons are up (and a little to let the last one finish).
    sleep_until(started + 6 * PERIOD_S * 1000 + 3_000);
    for d in &mut daemons {
        assert_eq!(d.stop(Duration::from_secs(20)), Some(0), "{}", d.log());
    }
    let got: Vec<RunLine> = runs(&out)
        .into_iter()
        .filter(|r| r.slot * 1000 > started + 2_500)
        .collect();
    let mut per_slot: BTreeMap<u64, Vec<&RunLine>> = BTreeMap::new();
    for r in &got {
        per_slot.entry(r.slot).or_default().push(r);
    }
    let slots: Vec<u64> = per_slot.keys().copied().collect();
    assert!(slots.len() >= 5, "too few slots ran: {got:?}");
    for w in slots.windows(2) {
        assert_eq!(w[1] - w[0], PERIOD_S, "a slot did not run: {slots:?}");
    }
    for (slot, rs) in &per_slot {
        assert_eq!(rs.len(), 1, "slot {slot} ran {} times: {rs:?}", rs.len());
    }
    let earliest = got
        .iter()
        .map(|r| r.real_ms as i64 - (r.slot * 1000) as i64)
        .min()
        .unwrap();
    (got, earliest)
}

#[test]
fn three_skewed_daemons_run_each_slot_once_and_never_early_on_redis() {
    let redis = RedisServer::start().unwrap();
    let (got, earliest) = three_skewed(&[redis.url()]);
    assert!(
        earliest >= -100,
        "a run started {} ms before its instant (reckoned on a skewed clock?): {got:?}",
        -earliest
    );
    // The daemon ahead by 2 s would win most slots if it fired by its own clock.
    let whos: std::collections::BTreeSet<&str> = got.iter().map(|r| r.who.as_str()).collect();
    assert!(!whos.is_empty());
}

#[test]
fn three_skewed_daemons_run_each_slot_once_and_never_early_on_postgres() {
    let (got, earliest) = three_skewed(&Store::postgres().urls);
    assert!(
        earliest >= -100,
        "a run started {} ms before its instant: {got:?}",
        -earliest
    );
}

#[test]
fn three_skewed_daemons_run_each_slot_once_and_never_early_on_mariadb() {
    let (got, earliest) = three_skewed(&Store::mariadb().urls);
    assert!(
        earliest >= -100,
        "a run started {} ms before its instant: {got:?}",
        -earliest
    );
}

#[test]
fn over_a_store_without_a_clock_the_skewed_daemon_fires_early() {
    // Redlock over three servers: no one clock to read, each daemon reckons on its own. Still one
    // run per slot (the record), but the daemon 2 s ahead starts runs 2 s before the instant: what
    // the store's clock prevents above.
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start().unwrap()).collect();
    let urls: Vec<String> = servers.iter().map(|s| s.url()).collect();
    let (got, earliest) = three_skewed(&urls);
    assert!(
        earliest < -1_000,
        "expected runs 2 s early on the daemon's own clock; earliest {earliest} ms: {got:?}"
    );
}

on_every_store!(a_daemon_killed_mid_run_is_followed_by_a_retry_on_another_in_the_same_slot);

fn a_daemon_killed_mid_run_is_followed_by_a_retry_on_another_in_the_same_slot(store: Store) {
    let store = &store.urls;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let marker = dir.path().join("first");
    let jobs = dir.path().join("jobs.toml");
    // The first attempt hangs (until its daemon dies); later attempts end at once.
    std::fs::write(
        &jobs,
        format!(
            "[job.report]\nschedule = \"*/15 * * * * *\"\nttl = \"2s\"\ngrace = \"1s\"\n{}\n",
            record_cmd(
                &out,
                &format!(
                    "if [ ! -e {m} ]; then touch {m}; sleep 60; fi",
                    m = marker.display()
                )
            )
        ),
    )
    .unwrap();
    let p = prefix();
    let mut a = Daemon::start(store, &p, &jobs, "a", 0);
    let mut b = Daemon::start(store, &p, &jobs, "b", 0);
    // Until the first attempt started (at most one 15 s slot away).
    assert!(
        cli_support::eventually(Duration::from_secs(25), || !runs(&out).is_empty()),
        "no run: {} {}",
        a.log(),
        b.log()
    );
    // And until it is in its sleep (the marker made): killed between its line and the marker, the
    // first attempt dies with its daemon before making it, and the retry would then sleep in its
    // place (seen in CI: the retry's record stayed `running`).
    assert!(
        cli_support::eventually(Duration::from_secs(10), || marker.exists()),
        "the first attempt never made its marker: {} {}",
        a.log(),
        b.log()
    );
    let first = runs(&out)[0].clone();
    assert_eq!(first.attempt, 1);
    let (victim, other) = if first.who == "a" {
        (&mut a, &mut b)
    } else {
        (&mut b, &mut a)
    };
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(victim.pid()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let _ = victim.child.wait();
    // The lease lapses within its 2 s TTL; the other daemon looks every second.
    assert!(
        cli_support::eventually(Duration::from_secs(10), || runs(&out).len() >= 2),
        "no retry: {}",
        other.log()
    );
    let second = runs(&out)[1].clone();
    assert_eq!(second.slot, first.slot, "the retry is in the same slot");
    assert_eq!(second.attempt, 2);
    assert_ne!(second.who, first.who, "another daemon retried it");
    assert!(
        second.real_ms < first.slot * 1000 + 15_000,
        "within the slot"
    );
    // The record follows the run's end (a loaded machine may take a while). The slot's own record:
    // the next slot may start meanwhile and be the newest.
    assert!(
        cli_support::eventually(Duration::from_secs(15), || {
            history(store, &p, "report").iter().any(|r| {
                r["slot"]["index"] == first.slot && r["outcome"] == "done" && r["attempts"] == 2
            })
        }),
        "no done record of two attempts within 15 s; history: {:?}\nthe retrying daemon's log:\n{}",
        history(store, &p, "report"),
        other.log()
    );
    assert_eq!(other.stop(Duration::from_secs(10)), Some(0));
}

on_every_store!(after_every_daemon_was_down_catch_up_follows_each_policy);

fn after_every_daemon_was_down_catch_up_follows_each_policy(store: Store) {
    let store = &store.urls;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    let mut text = String::from("[defaults]\nttl = \"2s\"\nstarting-deadline = \"1s\"\n");
    for policy in ["skip", "latest", "all"] {
        text.push_str(&format!(
            "\n[job.{policy}]\nevery = \"2s\"\ncatch-up = \"{policy}\"\n{}\n",
            record_cmd(&out, "true")
        ));
    }
    std::fs::write(&jobs, text).unwrap();
    let p = prefix();
    let mut d = Daemon::start(store, &p, &jobs, "d", 0);
    // Each job on record at least once.
    assert!(
        cli_support::eventually(Duration::from_secs(10), || {
            let r = runs(&out);
            ["skip", "latest", "all"]
                .iter()
                .all(|j| r.iter().any(|l| l.job == *j))
        }),
        "{}",
        d.log()
    );
    assert_eq!(d.stop(Duration::from_secs(10)), Some(0));
    let stopped = now_ms();
    let before = runs(&out).len();
    // Down for four slots (8 s), then up again.
    std::thread::sleep(Duration::from_secs(8));
    let restarted = now_ms();
    let mut d = Daemon::start(store, &p, &jobs, "d2", 0);
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(d.stop(Duration::from_secs(10)), Some(0), "{}", d.log());
    let caught: Vec<RunLine> = runs(&out)[before..]
        .iter()
        // Slots past their 1 s deadline when the daemon came back; later ones run as usual.
        .filter(|r| r.who == "d2" && r.slot * 1000 + 1_000 < restarted && r.slot * 1000 > stopped)
        .cloned()
        .collect();
    let count = |j: &str| caught.iter().filter(|r| r.job == j).count();
    assert_eq!(count("skip"), 0, "skip runs none: {caught:?}");
    assert_eq!(
        count("latest"),
        1,
        "latest runs the newest once: {caught:?}"
    );
    assert!(count("all") >= 3, "all runs each missed slot: {caught:?}");
    let missed = |j: &str| outcomes(store, &p, j, "missed");
    assert!(missed("skip") >= 3, "{:?}", history(store, &p, "skip"));
    assert!(missed("latest") >= 2, "{:?}", history(store, &p, "latest"));
    assert_eq!(missed("all"), 0, "{:?}", history(store, &p, "all"));
}

on_every_store!(overlap_forbid_skips_and_allow_runs_both);

fn overlap_forbid_skips_and_allow_runs_both(store: Store) {
    let store = &store.urls;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    let mut text = String::from("[defaults]\nttl = \"2s\"\n");
    for policy in ["forbid", "allow"] {
        text.push_str(&format!(
            "\n[job.{policy}]\nevery = \"2s\"\noverlap = \"{policy}\"\n{}\n",
            record_cmd(&out, "sleep 3")
        ));
    }
    std::fs::write(&jobs, text).unwrap();
    let p = prefix();
    let mut a = Daemon::start(store, &p, &jobs, "a", 0);
    let mut b = Daemon::start(store, &p, &jobs, "b", 0);
    std::thread::sleep(Duration::from_secs(11));
    assert_eq!(a.stop(Duration::from_secs(20)), Some(0), "{}", a.log());
    assert_eq!(b.stop(Duration::from_secs(20)), Some(0), "{}", b.log());
    assert!(
        outcomes(store, &p, "forbid", "skipped") >= 2,
        "{:?}",
        history(store, &p, "forbid")
    );
    assert_eq!(outcomes(store, &p, "allow", "skipped"), 0);
    // Allow: runs overlap in time (a 3 s run every 2 s).
    let allow: Vec<RunLine> = runs(&out)
        .into_iter()
        .filter(|r| r.job == "allow")
        .collect();
    assert!(allow.len() >= 4, "{allow:?}");
    let forbid = runs(&out).into_iter().filter(|r| r.job == "forbid").count();
    assert!(
        forbid < allow.len(),
        "forbid ran {forbid}, allow {}",
        allow.len()
    );
}

on_every_store!(pause_and_resume_are_seen_by_every_daemon);

fn pause_and_resume_are_seen_by_every_daemon(store: Store) {
    let store = &store.urls;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[job.j]\nevery = \"1s\"\nttl = \"2s\"\n{}\n",
            record_cmd(&out, "true")
        ),
    )
    .unwrap();
    let p = prefix();
    let st = leasehold(store, &p)
        .args(["cron", "pause", "j"])
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(0), "{st:?}");
    let mut a = Daemon::start(store, &p, &jobs, "a", 0);
    let mut b = Daemon::start(store, &p, &jobs, "b", 0);
    std::thread::sleep(Duration::from_secs(4));
    assert!(runs(&out).is_empty(), "ran while paused: {:?}", runs(&out));
    let skipped = history(store, &p, "j")
        .iter()
        .filter(|r| r["outcome"] == "skipped" && r["reason"] == "paused")
        .count();
    assert!(skipped >= 2, "{:?}", history(store, &p, "j"));
    let st = leasehold(store, &p)
        .args(["cron", "resume", "j"])
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(0));
    let resumed = Instant::now();
    assert!(
        cli_support::eventually(Duration::from_secs(5), || runs(&out).len() >= 2),
        "{} {}",
        a.log(),
        b.log()
    );
    assert!(resumed.elapsed() < Duration::from_secs(5));
    assert_eq!(a.stop(Duration::from_secs(10)), Some(0));
    assert_eq!(b.stop(Duration::from_secs(10)), Some(0));
}

#[test]
fn on_etcd_each_daemon_reckons_on_its_own_clock_and_each_slot_runs_once() {
    let etcd = leasehold_testkit::EtcdCluster::start_single().expect("etcd (etcd-server)");
    let store = [etcd.url()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[job.tick]\nevery = \"2s\"\nttl = \"3s\"\n{}\n",
            record_cmd(&out, "true")
        ),
    )
    .unwrap();
    let p = prefix();
    let mut ds: Vec<Daemon> = ["a", "b", "c"]
        .iter()
        .map(|w| Daemon::start(&store, &p, &jobs, w, 0))
        .collect();
    let started = now_ms();
    std::thread::sleep(Duration::from_secs(9));
    for d in &mut ds {
        assert_eq!(d.stop(Duration::from_secs(10)), Some(0), "{}", d.log());
    }
    assert!(
        ds[0].log().contains("this replica's own"),
        "{}",
        ds[0].log()
    );
    let got: Vec<RunLine> = runs(&out)
        .into_iter()
        .filter(|r| r.slot * 1000 > started + 1_500)
        .collect();
    let mut per: BTreeMap<u64, usize> = BTreeMap::new();
    for r in &got {
        *per.entry(r.slot).or_default() += 1;
    }
    assert!(per.len() >= 3, "{got:?}");
    assert!(per.values().all(|n| *n == 1), "{per:?}");
}

#[test]
fn replace_stops_the_previous_run_before_the_next_starts() {
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let stopped = dir.path().join("stopped");
    let jobs = dir.path().join("jobs.toml");
    // Each run would take 10 s; the next slot (3 s later) replaces it.
    std::fs::write(
        &jobs,
        format!(
            "[job.long]\nevery = \"3s\"\noverlap = \"replace\"\nttl = \"2s\"\ngrace = \"1s\"\n{}\n",
            record_cmd(
                &out,
                &format!(
                    "trap 'echo $LEASEHOLD_SLOT $(env -u LD_PRELOAD date +%s%3N) >> {}; exit 143' TERM; sleep 10 & wait",
                    stopped.display()
                )
            )
        ),
    )
    .unwrap();
    let p = prefix();
    let mut d = Daemon::start(&store, &p, &jobs, "a", 0);
    std::thread::sleep(Duration::from_secs(11));
    assert_eq!(d.stop(Duration::from_secs(20)), Some(0), "{}", d.log());
    let started = runs(&out);
    let stops: Vec<(u64, u64)> = std::fs::read_to_string(&stopped)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect();
    assert!(started.len() >= 3, "{started:?}");
    // Every run but the last was stopped, and before the next slot's run started.
    for w in started.windows(2) {
        let (old, new) = (&w[0], &w[1]);
        let stop = stops
            .iter()
            .find(|(s, _)| *s == old.slot)
            .unwrap_or_else(|| panic!("slot {} not stopped: {stops:?}", old.slot));
        assert!(
            stop.1 <= new.real_ms,
            "slot {} stopped at {} after the next started at {}",
            old.slot,
            stop.1,
            new.real_ms
        );
    }
}

/// The stopped runs in `stopped`: `SLOT REAL_MS` lines.
fn stops(stopped: &std::path::Path) -> Vec<(u64, u64)> {
    std::fs::read_to_string(stopped)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            Some((f.next()?.parse().ok()?, f.next()?.parse().ok()?))
        })
        .collect()
}

#[test]
fn replace_stops_a_run_on_another_replica_before_the_next_starts() {
    // Replica `old` runs slot N, then is told to shut down just before slot N+1 (SIGTERM: it takes
    // no new slot and lets its run go on for the 3.5 s grace). Replica `new` fires slot N+1, finds
    // N running elsewhere, takes its lease away (the stop-before-hand-over rule), and starts N+1
    // only after its TTL and grace. The old run must be stopped by that (its holder learns of the
    // loss at its next renewal, within a third of the 6 s TTL), before `old`'s own grace would have
    // ended it, and before N+1 starts.
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let stopped = dir.path().join("stopped");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[job.long]\nevery = \"12s\"\noverlap = \"replace\"\nttl = \"6s\"\ngrace = \"3500ms\"\n{}\n",
            record_cmd(
                &out,
                &format!(
                    "trap 'echo $LEASEHOLD_SLOT $(env -u LD_PRELOAD date +%s%3N) >> {}; exit 143' TERM; sleep 30 & wait",
                    stopped.display()
                )
            )
        ),
    )
    .unwrap();
    let p = prefix();
    let mut old = Daemon::start(&store, &p, &jobs, "old", 0);
    assert!(
        cli_support::eventually(Duration::from_secs(15), || !runs(&out).is_empty()),
        "{}",
        old.log()
    );
    let first = runs(&out)[0].clone();
    assert_eq!(first.who, "old");
    let mut new = Daemon::start(&store, &p, &jobs, "new", 0);
    let next_ms = (first.slot + 12) * 1000;
    // Just before the next slot: `old` shuts down; its run would go on until `sigterm + 3.5 s`.
    sleep_until(next_ms - 300);
    old.signal(nix::sys::signal::Signal::SIGTERM);
    let sigterm = now_ms();
    assert!(
        cli_support::eventually(Duration::from_secs(15), || runs(&out).len() >= 2),
        "no run of the next slot: {}\n{}",
        new.log(),
        old.log()
    );
    let second = runs(&out)[1].clone();
    assert_eq!(second.slot, first.slot + 12, "{:?}", runs(&out));
    assert_eq!(second.who, "new");
    let (_, stop_ms) = *stops(&stopped)
        .iter()
        .find(|(s, _)| *s == first.slot)
        .unwrap_or_else(|| panic!("slot {} not stopped: {}", first.slot, old.log()));
    assert!(
        stop_ms >= next_ms,
        "stopped at {stop_ms}, before the next slot's instant {next_ms}"
    );
    assert!(
        stop_ms + 300 < sigterm + 3_500,
        "stopped at {stop_ms}: by the old replica's own grace (SIGTERM at {sigterm}), not by the new one"
    );
    assert!(
        stop_ms <= second.real_ms,
        "the next slot's run started at {} before the old one stopped at {stop_ms}",
        second.real_ms
    );
    let exited = cli_support::wait_with_timeout(&mut old.child, Duration::from_secs(15));
    assert_eq!(exited.code(), Some(0), "{}", old.log());
    assert_eq!(new.stop(Duration::from_secs(15)), Some(0), "{}", new.log());
}
