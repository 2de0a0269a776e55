//! `leasehold cron`, the real binary, several daemons over one store, judged from what the
//! commands write (each run appends a line: job, slot, attempt, which daemon, the real time):
//! three daemons whose clocks are skewed up to 40 % of the period (libfaketime) run every slot once
//! and never before its instant, on Redis and on PostgreSQL, where the same daemons over a store
//! without a clock (Redlock) start runs early by the skew; a daemon SIGKILLed mid-run is followed
//! by a retry on another in the same slot; catch-up after every daemon was down, per policy;
//! overlap policies; pause and resume seen by every daemon; bad input exits 2 and starts nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold_testkit::RedisServer;

mod cli_support;

use cli_support::BIN;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn sleep_until(ms: u64) {
    let now = now_ms();
    if ms > now {
        std::thread::sleep(Duration::from_millis(ms - now));
    }
}

/// A `leasehold` command with a clean environment, against `store`, under `prefix`.
fn leasehold(store: &[String], prefix: &str) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_RETENTION")
        .env_remove("RUST_LOG")
        .env("LEASEHOLD_STORE", store.join(" "))
        .env("LEASEHOLD_KEY_PREFIX", prefix)
        .stdin(Stdio::null());
    c
}

/// A daemon, killed on drop.
struct Daemon {
    child: Child,
    log: PathBuf,
}

impl Daemon {
    fn start(store: &[String], prefix: &str, jobs: &Path, who: &str, skew_s: i64) -> Daemon {
        let log = jobs.with_file_name(format!("daemon-{who}.log"));
        let mut c = leasehold(store, prefix);
        if skew_s != 0 {
            let lib = leasehold_testkit::libfaketime_path().expect(
                "needs libfaketime (apt-get install -y faketime, or set LEASEHOLD_LIBFAKETIME)",
            );
            c.env("LD_PRELOAD", lib)
                .env("FAKETIME", format!("{skew_s:+}"))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .env("FAKETIME_DONT_RESET", "1");
        }
        c.env("WHO", who)
            .args(["cron", "--holder", who])
            .arg(jobs)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        Daemon {
            child: c.spawn().unwrap(),
            log,
        }
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// SIGTERM, and the exit code within `within`.
    fn stop(&mut self, within: Duration) -> Option<i32> {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.pid()),
            nix::sys::signal::Signal::SIGTERM,
        );
        cli_support::wait_with_timeout(&mut self.child, within).code()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One line per run: `JOB SLOT ATTEMPT WHO REAL_MS` (the real time: the command runs without
/// libfaketime).
#[derive(Debug, Clone)]
struct RunLine {
    job: String,
    slot: u64,
    attempt: u32,
    who: String,
    real_ms: u64,
}

fn record_cmd(out: &Path, tail: &str) -> String {
    format!(
        "shell = \"echo $LEASEHOLD_JOB $LEASEHOLD_SLOT $LEASEHOLD_ATTEMPT $WHO $(env -u LD_PRELOAD date +%s%3N) >> {}; {tail}\"",
        out.display()
    )
}

fn runs(out: &Path) -> Vec<RunLine> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(RunLine {
                job: f.first()?.to_string(),
                slot: f.get(1)?.parse().ok()?,
                attempt: f.get(2)?.parse().ok()?,
                who: f.get(3)?.to_string(),
                real_ms: f.get(4)?.parse().ok()?,
            })
        })
        .collect()
}

fn prefix() -> String {
    format!("cron{:08x}", rand::random::<u32>())
}

fn history(store: &[String], prefix: &str, job: &str) -> Vec<serde_json::Value> {
    let out = leasehold(store, prefix)
        .args(["history", "--json", "--limit", "100", job])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
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
    let url = leasehold_testkit::postgres_url();
    let m = leasehold(std::slice::from_ref(&url), "unused")
        .args(["migrate", "--store", &url])
        .output()
        .unwrap();
    assert_eq!(m.status.code(), Some(0), "{m:?}");
    let (got, earliest) = three_skewed(&[url]);
    assert!(
        earliest >= -100,
        "a run started {} ms before its instant: {got:?}",
        -earliest
    );
}

#[test]
fn three_skewed_daemons_run_each_slot_once_and_never_early_on_mariadb() {
    let url = std::env::var("LEASEHOLD_TEST_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://leasehold:leasehold@127.0.0.1:3306/test".into());
    let m = leasehold(std::slice::from_ref(&url), "unused")
        .args(["migrate", "--store", &url])
        .output()
        .unwrap();
    assert_eq!(m.status.code(), Some(0), "{m:?}");
    let (got, earliest) = three_skewed(&[url]);
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

#[test]
fn a_daemon_killed_mid_run_is_followed_by_a_retry_on_another_in_the_same_slot() {
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let marker = dir.path().join("first");
    let jobs = dir.path().join("jobs.toml");
    // The first attempt hangs (until its daemon dies); later attempts end at once.
    std::fs::write(
        &jobs,
        format!(
            "[job.report]\nschedule = \"*/20 * * * * *\"\nttl = \"2s\"\ngrace = \"1s\"\n{}\n",
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
    let mut a = Daemon::start(&store, &p, &jobs, "a", 0);
    let mut b = Daemon::start(&store, &p, &jobs, "b", 0);
    // Until the first attempt started (at most one 20 s slot away).
    assert!(
        cli_support::eventually(Duration::from_secs(30), || !runs(&out).is_empty()),
        "no run: {} {}",
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
        second.real_ms < first.slot * 1000 + 20_000,
        "within the slot"
    );
    // The record follows the run's end (a loaded machine may take a while).
    assert!(cli_support::eventually(Duration::from_secs(15), || {
        history(&store, &p, "report")
            .first()
            .is_some_and(|r| r["outcome"] == "done" && r["attempts"] == 2)
    }));
    assert_eq!(other.stop(Duration::from_secs(10)), Some(0));
}

#[test]
fn after_every_daemon_was_down_catch_up_follows_each_policy() {
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
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
    let mut d = Daemon::start(&store, &p, &jobs, "d", 0);
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
    let mut d = Daemon::start(&store, &p, &jobs, "d2", 0);
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
    let missed = |j: &str| {
        history(&store, &p, j)
            .iter()
            .filter(|r| r["outcome"] == "missed")
            .count()
    };
    assert!(missed("skip") >= 3, "{:?}", history(&store, &p, "skip"));
    assert!(missed("latest") >= 2, "{:?}", history(&store, &p, "latest"));
    assert_eq!(missed("all"), 0, "{:?}", history(&store, &p, "all"));
}

#[test]
fn overlap_forbid_skips_and_allow_runs_both() {
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
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
    let mut a = Daemon::start(&store, &p, &jobs, "a", 0);
    let mut b = Daemon::start(&store, &p, &jobs, "b", 0);
    std::thread::sleep(Duration::from_secs(11));
    assert_eq!(a.stop(Duration::from_secs(20)), Some(0), "{}", a.log());
    assert_eq!(b.stop(Duration::from_secs(20)), Some(0), "{}", b.log());
    let count = |j: &str, o: &str| {
        history(&store, &p, j)
            .iter()
            .filter(|r| r["outcome"] == o)
            .count()
    };
    assert!(
        count("forbid", "skipped") >= 2,
        "{:?}",
        history(&store, &p, "forbid")
    );
    assert_eq!(count("allow", "skipped"), 0);
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

#[test]
fn pause_and_resume_are_seen_by_every_daemon() {
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
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
    let st = leasehold(&store, &p)
        .args(["cron", "pause", "j"])
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(0), "{st:?}");
    let mut a = Daemon::start(&store, &p, &jobs, "a", 0);
    let mut b = Daemon::start(&store, &p, &jobs, "b", 0);
    std::thread::sleep(Duration::from_secs(4));
    assert!(runs(&out).is_empty(), "ran while paused: {:?}", runs(&out));
    let skipped = history(&store, &p, "j")
        .iter()
        .filter(|r| r["outcome"] == "skipped" && r["reason"] == "paused")
        .count();
    assert!(skipped >= 2, "{:?}", history(&store, &p, "j"));
    let st = leasehold(&store, &p)
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
fn bad_input_exits_2_naming_the_line_and_field_and_starts_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[job.a]\nschedule = \"61 * * * *\"\ncommand = [\"true\"]\n",
            ":2: job `a`, field `schedule`",
        ),
        (
            "[job.a]\nschedule = \"0 * * * *\"\nzone = \"Nowhere/City\"\ncommand = [\"true\"]\n",
            ":3: job `a`, field `zone`",
        ),
        (
            "[job.a]\nevery = \"1m\"\ncommand = [\"true\"]\n\n[job.a]\nevery = \"2m\"\n",
            ":5: not a jobs file",
        ),
        (
            "[job.a]\nevery = \"1m\"\ncommand = []\n",
            ":3: job `a`, field `command`",
        ),
        (
            "[job.a]\nevery = \"0\"\ncommand = [\"true\"]\n",
            ":2: job `a`, field `every`",
        ),
        (
            "[job.a]\nevery = \"-1m\"\ncommand = [\"true\"]\n",
            ":2: job `a`, field `every`",
        ),
        ("\u{0}\u{1}garbage = = =\n", ":1: not a jobs file"),
    ];
    let marker = dir.path().join("ran");
    for (i, (text, want)) in cases.iter().enumerate() {
        let jobs = dir.path().join(format!("jobs{i}.toml"));
        std::fs::write(&jobs, text).unwrap();
        for sub in [&["cron", "check"][..], &["cron"][..]] {
            // A store that is not there: bad input is refused before any connection.
            let o = leasehold(&["redis://127.0.0.1:1".into()], "x")
                .args(sub)
                .arg(&jobs)
                .env("MARK", &marker)
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{sub:?} {text:?}: {err}");
            assert!(
                err.contains(want),
                "{sub:?} {text:?}: want {want:?} in {err}"
            );
        }
    }
    assert!(!marker.exists());
    let o = leasehold(&["redis://127.0.0.1:1".into()], "x")
        .arg("cron")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
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

#[test]
fn trigger_runs_once_now_and_is_recorded_as_such() {
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[job.yearly]\nschedule = \"@yearly\"\n{}\n",
            record_cmd(&out, "true")
        ),
    )
    .unwrap();
    let p = prefix();
    let o = leasehold(&store, &p)
        .env("WHO", "operator")
        .args(["cron", "trigger"])
        .arg(&jobs)
        .arg("yearly")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{o:?}");
    assert_eq!(runs(&out).len(), 1);
    let h = history(&store, &p, "yearly");
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0]["outcome"], "done");
    assert_eq!(h[0]["reason"], "trigger");
    let o = leasehold(&store, &p)
        .args(["cron", "trigger"])
        .arg(&jobs)
        .arg("nope")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn sighup_reloads_without_stopping_a_running_job() {
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let ended = dir.path().join("ended");
    let jobs = dir.path().join("jobs.toml");
    let slow = format!(
        "[job.slow]\nevery = \"2s\"\n{}\n",
        record_cmd(
            &out,
            &format!("sleep 3; echo $LEASEHOLD_SLOT >> {}", ended.display())
        )
    );
    std::fs::write(&jobs, &slow).unwrap();
    let p = prefix();
    let mut d = Daemon::start(&store, &p, &jobs, "a", 0);
    assert!(
        cli_support::eventually(Duration::from_secs(6), || !runs(&out).is_empty()),
        "{}",
        d.log()
    );
    let going = runs(&out)[0].slot;
    let hup = |d: &Daemon| {
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(d.pid()),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap()
    };
    // A second job, and SIGHUP while `slow` runs.
    let fast = format!(
        "\n[job.fast]\nevery = \"1s\"\n{}\n",
        record_cmd(&out, "true")
    );
    std::fs::write(&jobs, format!("{slow}{fast}")).unwrap();
    hup(&d);
    assert!(
        cli_support::eventually(Duration::from_secs(5), || runs(&out)
            .iter()
            .any(|r| r.job == "fast")),
        "{}",
        d.log()
    );
    assert!(
        cli_support::eventually(Duration::from_secs(5), || std::fs::read_to_string(&ended)
            .unwrap_or_default()
            .lines()
            .any(|l| l == going.to_string())),
        "the run going on at the reload was stopped: {}",
        d.log()
    );
    // A file that does not read is refused on SIGHUP; the jobs go on.
    std::fs::write(&jobs, "[job.fast]\nevery = \"0\"\n").unwrap();
    hup(&d);
    std::thread::sleep(Duration::from_millis(500));
    let n = runs(&out).iter().filter(|r| r.job == "fast").count();
    std::thread::sleep(Duration::from_millis(2_200));
    assert!(
        runs(&out).iter().filter(|r| r.job == "fast").count() > n,
        "the old jobs stopped: {}",
        d.log()
    );
    assert!(
        d.log().contains("keeping the jobs running now"),
        "{}",
        d.log()
    );
    assert_eq!(d.stop(Duration::from_secs(15)), Some(0), "{}", d.log());
}

#[test]
fn sigterm_lets_a_running_job_end_within_its_grace() {
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let ended = dir.path().join("ended");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[job.slow]\nevery = \"2s\"\ngrace = \"8s\"\n{}\n",
            record_cmd(
                &out,
                &format!("sleep 3; echo $LEASEHOLD_SLOT >> {}", ended.display())
            )
        ),
    )
    .unwrap();
    let p = prefix();
    let port = leasehold_testkit::free_port();
    let mut c = leasehold(&store, &p);
    c.env("WHO", "a")
        .args(["cron", "--health", &format!("127.0.0.1:{port}")])
        .arg(&jobs)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut d = Daemon {
        child: c.spawn().unwrap(),
        log: dir.path().join("none"),
    };
    assert!(
        cli_support::eventually(Duration::from_secs(6), || !runs(&out).is_empty()),
        "no run"
    );
    let get = |path: &str| -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
        write!(
            s,
            "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body
    };
    assert!(
        get("/healthz").starts_with("HTTP/1.1 200"),
        "{}",
        get("/healthz")
    );
    let running_slot = runs(&out)[0].slot;
    let t0 = Instant::now();
    assert_eq!(d.stop(Duration::from_secs(20)), Some(0));
    assert!(
        t0.elapsed() < Duration::from_secs(8),
        "drained in {:?}",
        t0.elapsed()
    );
    let done: Vec<u64> = std::fs::read_to_string(&ended)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.parse().ok())
        .collect();
    assert!(
        done.contains(&running_slot),
        "the running job finished: {done:?}"
    );
    let h = history(&store, &p, "slow");
    assert!(
        h.iter()
            .any(|r| r["slot"]["index"] == running_slot && r["outcome"] == "done"),
        "{h:?}"
    );
}

#[test]
fn metrics_carry_help_and_type_and_count_runs() {
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!("[job.m]\nevery = \"1s\"\n{}\n", record_cmd(&out, "true")),
    )
    .unwrap();
    let p = prefix();
    let port = leasehold_testkit::free_port();
    let mut c = leasehold(&store, &p);
    c.env("WHO", "a")
        .args(["cron", "--health", &format!("127.0.0.1:{port}")])
        .arg(&jobs)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut d = Daemon {
        child: c.spawn().unwrap(),
        log: dir.path().join("none"),
    };
    assert!(cli_support::eventually(Duration::from_secs(6), || runs(
        &out
    )
    .len()
        >= 2));
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    write!(
        s,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut body = String::new();
    let _ = s.read_to_string(&mut body);
    for want in [
        "# TYPE leasehold_job_runs_total counter",
        "# HELP leasehold_job_runs_total",
        "leasehold_job_runs_total{job=\"m\",outcome=\"done\"}",
        "# TYPE leasehold_job_next_run_timestamp_seconds gauge",
        "leasehold_job_duration_seconds",
        "leasehold_job_last_success_timestamp_seconds{job=\"m\"}",
    ] {
        assert!(body.contains(want), "no {want:?} in {body}");
    }
    assert_eq!(d.stop(Duration::from_secs(10)), Some(0));
}

#[test]
fn a_store_down_at_start_is_retried_and_the_slot_runs_once_it_is_up() {
    let port = leasehold_testkit::free_port();
    let url = format!("redis://127.0.0.1:{port}");
    let store = [url];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!("[job.j]\nevery = \"1s\"\n{}\n", record_cmd(&out, "true")),
    )
    .unwrap();
    let p = prefix();
    let mut d = Daemon::start(&store, &p, &jobs, "a", 0);
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        d.child.try_wait().unwrap().is_none(),
        "gave up: {}",
        d.log()
    );
    assert!(d.log().contains("retrying in"), "{}", d.log());
    let _redis = RedisServer::builder().port(port).start().unwrap();
    assert!(
        cli_support::eventually(Duration::from_secs(15), || runs(&out).len() >= 2),
        "{}",
        d.log()
    );
    let mut per: BTreeMap<u64, usize> = BTreeMap::new();
    for r in runs(&out) {
        *per.entry(r.slot).or_default() += 1;
    }
    assert!(per.values().all(|n| *n == 1), "{per:?}");
    assert_eq!(d.stop(Duration::from_secs(10)), Some(0));
}
