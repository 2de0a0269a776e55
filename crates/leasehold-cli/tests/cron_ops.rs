//! `leasehold cron`, the real binary, judged from what the commands write: the operators' side of
//! one daemon (bad input exits 2 and starts nothing; `trigger`; SIGHUP reloads, SIGTERM drains;
//! `/metrics`; a store down at start), the jitter's spread, and DST on a real store's clock: a
//! redis-server under libfaketime whose clock reads just before a Europe/Berlin fall-back and an
//! America/New_York spring-forward, three daemons over it. The multi-daemon slot rules on every
//! store are in `cron.rs`.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::{Duration, Instant};

use leasehold_testkit::RedisServer;

mod cli_support;

use cli_support::cron::{history, leasehold, prefix, record_cmd, runs, Daemon, RunLine, Store};
use cli_support::now_ms;

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
        "leasehold_job_runs_total{leasehold_job=\"m\",outcome=\"done\"}",
        "# TYPE leasehold_job_next_run_timestamp_seconds gauge",
        "leasehold_job_duration_seconds",
        "leasehold_job_last_success_timestamp_seconds{leasehold_job=\"m\"}",
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

#[test]
fn jitter_spreads_jobs_of_one_instant_over_the_window_the_same_on_every_replica() {
    // Twelve jobs with a 5 s jitter and twelve without, all every 6 s, over two daemons: each slot
    // runs once; the jitterless jobs start together at the instant, the others spread over the
    // window, each at the same delay in every slot (one delay per name, whichever replica runs it).
    let redis = RedisServer::start().unwrap();
    let store = [redis.url()];
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    let mut text = String::from("[defaults]\nttl = \"3s\"\n");
    for i in 0..12 {
        for (name, jitter) in [
            (format!("j{i}"), "\njitter = \"5s\""),
            (format!("n{i}"), ""),
        ] {
            text.push_str(&format!(
                "\n[job.{name}]\nevery = \"6s\"{jitter}\n{}\n",
                record_cmd(&out, "true")
            ));
        }
    }
    std::fs::write(&jobs, text).unwrap();
    let p = prefix();
    let mut a = Daemon::start(&store, &p, &jobs, "a", 0);
    let mut b = Daemon::start(&store, &p, &jobs, "b", 0);
    let started = now_ms();
    std::thread::sleep(Duration::from_secs(14));
    assert_eq!(a.stop(Duration::from_secs(15)), Some(0), "{}", a.log());
    assert_eq!(b.stop(Duration::from_secs(15)), Some(0), "{}", b.log());
    // Whole slots only: those whose window lay inside the run.
    let got: Vec<RunLine> = runs(&out)
        .into_iter()
        .filter(|r| r.slot * 1000 > started + 1_000 && r.slot * 1000 + 6_000 < now_ms())
        .collect();
    let mut per: BTreeMap<(String, u64), Vec<u64>> = BTreeMap::new();
    for r in &got {
        per.entry((r.job.clone(), r.slot))
            .or_default()
            .push(r.real_ms - r.slot * 1000);
    }
    assert!(per.len() >= 24, "too few job-slots: {got:?}");
    assert!(
        per.values().all(|d| d.len() == 1),
        "a slot ran twice: {per:?}"
    );
    let delays = |prefix: char| -> Vec<u64> {
        per.iter()
            .filter(|((job, _), _)| job.starts_with(prefix))
            .map(|(_, d)| d[0])
            .collect()
    };
    let (jittered, plain) = (delays('j'), delays('n'));
    assert!(
        plain.iter().all(|d| *d < 1_000),
        "without jitter every job starts at its instant: {plain:?}"
    );
    assert!(
        jittered.iter().all(|d| *d < 5_000 + 1_000),
        "a delay past the 5 s window: {jittered:?}"
    );
    let buckets: std::collections::BTreeSet<u64> = jittered.iter().map(|d| d / 1_000).collect();
    assert!(
        buckets.len() >= 4,
        "twelve jobs bunched in {} of the window's 5 seconds: {jittered:?}",
        buckets.len()
    );
    // One delay per name: the same in every slot, whichever daemon ran it.
    let mut by_job: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
    for ((job, _), d) in &per {
        by_job.entry(job).or_default().push(d[0]);
    }
    for (job, ds) in by_job.iter().filter(|(j, _)| j.starts_with('j')) {
        let (lo, hi) = (ds.iter().min().unwrap(), ds.iter().max().unwrap());
        assert!(hi - lo < 700, "{job} started at delays {ds:?}");
    }
}

/// Three daemons over `store` for `for_ms`, then stopped; their runs are appended to `out`.
fn three_daemons(store: &[String], p: &str, jobs: &std::path::Path, tag: &str, for_ms: u64) {
    let mut ds: Vec<Daemon> = ["a", "b", "c"]
        .iter()
        .map(|w| Daemon::start(store, p, jobs, &format!("{w}{tag}"), 0))
        .collect();
    std::thread::sleep(Duration::from_millis(for_ms));
    for d in &mut ds {
        assert_eq!(d.stop(Duration::from_secs(15)), Some(0), "{}", d.log());
    }
}

/// Moves `redis`'s wall clock forward so that it reads `unix_s` less `before_ms` now.
fn set_store_clock(redis: &mut RedisServer, unix_s: u64, before_ms: u64) {
    let reads = now_ms() + redis.clock_offset().as_millis() as u64;
    let target = unix_s * 1000 - before_ms;
    assert!(target > reads, "the store's clock only moves forward");
    redis
        .jump_clock(Duration::from_millis(target - reads))
        .unwrap();
}

/// The slots (seconds since the epoch) each job ran, in order; panics on a slot run twice.
fn slots_per_job(out: &std::path::Path) -> BTreeMap<String, Vec<u64>> {
    let mut per: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for r in runs(out) {
        let slots = per.entry(r.job.clone()).or_default();
        assert!(
            !slots.contains(&r.slot),
            "{} ran slot {} twice: {:?}",
            r.job,
            r.slot,
            runs(out)
        );
        slots.push(r.slot);
    }
    per
}

#[test]
fn on_a_store_clock_passing_a_berlin_fall_back_a_repeated_local_time_runs_once() {
    // Europe/Berlin leaves summer time on 2027-10-31 at 01:00 UTC: 02:30 local happens at 00:30
    // UTC (CEST) and again at 01:30 UTC (CET). The store's clock is set to just before each; the
    // daemons' own clocks stay right, so they go by the store's alone.
    const FIRST_0230: u64 = 1_824_942_600; // 2027-10-31T00:30:00Z, 02:30 CEST
    const SECOND_0230: u64 = 1_824_946_200; // 2027-10-31T01:30:00Z, 02:30 CET
    let (store, mut redis) = Store::redis_with_fake_clock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[defaults]\nttl = \"3s\"\nzone = \"Europe/Berlin\"\n\n[job.fixed]\nschedule = \"30 2 * * *\"\n{r}\n\n[job.hourly]\nschedule = \"30 * * * *\"\n{r}\n",
            r = record_cmd(&out, "true")
        ),
    )
    .unwrap();
    let p = prefix();
    set_store_clock(&mut redis, FIRST_0230, 7_000);
    three_daemons(&store.urls, &p, &jobs, "1", 12_000);
    // The daemons were down for the hour between (nothing to catch up: no slot in it).
    set_store_clock(&mut redis, SECOND_0230, 7_000);
    three_daemons(&store.urls, &p, &jobs, "2", 12_000);
    let per = slots_per_job(&out);
    assert_eq!(
        per.get("fixed"),
        Some(&vec![FIRST_0230]),
        "`30 2 * * *` runs once, at the earlier 02:30: {per:?}"
    );
    assert_eq!(
        per.get("hourly"),
        Some(&vec![FIRST_0230, SECOND_0230]),
        "`30 * * * *` runs at both real instants: {per:?}"
    );
    let h = history(&store.urls, &p, "fixed");
    assert_eq!(h.len(), 1, "{h:?}");
    assert_eq!(h[0]["outcome"], "done", "{h:?}");
}

#[test]
fn on_a_store_clock_passing_a_new_york_spring_forward_a_skipped_time_runs_once_after_the_gap() {
    // America/New_York enters summer time on 2027-03-14 at 07:00 UTC: 02:00 EST becomes 03:00
    // EDT, so 02:30 and 02:59 do not exist that day; each runs once, at 03:00 EDT.
    const AFTER_GAP: u64 = 1_805_007_600; // 2027-03-14T07:00:00Z, 03:00 EDT
    let (store, mut redis) = Store::redis_with_fake_clock();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("runs");
    let jobs = dir.path().join("jobs.toml");
    std::fs::write(
        &jobs,
        format!(
            "[defaults]\nttl = \"3s\"\nzone = \"America/New_York\"\n\n[job.half]\nschedule = \"30 2 * * *\"\n{r}\n\n[job.late]\nschedule = \"59 2 * * *\"\n{r}\n\n[job.minutely]\nschedule = \"* * * * *\"\n{r}\n",
            r = record_cmd(&out, "true")
        ),
    )
    .unwrap();
    let p = prefix();
    set_store_clock(&mut redis, AFTER_GAP, 7_000);
    three_daemons(&store.urls, &p, &jobs, "", 12_000);
    let per = slots_per_job(&out);
    assert_eq!(per.get("half"), Some(&vec![AFTER_GAP]), "{per:?}");
    assert_eq!(per.get("late"), Some(&vec![AFTER_GAP]), "{per:?}");
    // The daemons ran through the gap: a job every minute ran at 01:59 EST's next minute, 03:00.
    assert_eq!(per.get("minutely"), Some(&vec![AFTER_GAP]), "{per:?}");
}
