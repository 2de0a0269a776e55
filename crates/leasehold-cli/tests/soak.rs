//! Soak: many `leasehold run` invocations in parallel lanes on one lease name, with the commands and
//! `run` itself SIGKILLed at random and a private redis-server paused (SIGSTOP/SIGCONT) at random;
//! judged from the history written at the resource.
//!
//! Each command is this test binary again (`__soak-worker`): it records `start`, a few `work` steps
//! and `end`, each in its own transaction fenced with its `LEASEHOLD_FENCE` in a SQLite table, and
//! appends each attempt, before trying it, to a plain O_APPEND log. The fenced table is what the
//! resource accepted; the log is what an unfenced resource would have accepted.
//!
//! Verdicts, all from real processes and the files they wrote:
//! * the fenced history has 0 overlapping holders: in commit order each holder's rows are contiguous
//!   and fences strictly increase from one holder to the next, and no fence belongs to two holders;
//! * after a SIGKILL of `run`, every process it started is gone within `--grace` + 1 s, and the command
//!   wrote nothing later (judged from the log, by wall clock);
//! * afterwards no lease key is left without a TTL, and no process of the soak is left, zombie or not.
//!
//! A Redis pause can make a lease lapse while its holder still runs (up to the drift allowance), so
//! the unfenced log may show overlaps in a healthy run: that count is reported, not asserted; the fence
//! is what keeps them out of the data.
//!
//! A second, small run is the control: it kills `run` *and* its watcher at once (what killing `run`
//! did before the watcher existed), and must see commands outlive them and write after they died.
//!
//! Size: `LEASEHOLD_SOAK_RUNS` invocations (default 96, about half a minute on 2 cores) across
//! `LEASEHOLD_SOAK_LANES` lanes (default 8); `LEASEHOLD_SOAK_SEED` replays a run. The full soak:
//! `LEASEHOLD_SOAK_RUNS=2000 cargo test -p leasehold-cli --test soak`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::db::{Database, Param};
use leasehold::{Error, Fence};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");
const NAME: &str = "soak";
const TTL: &str = "1s";
const GRACE: Duration = Duration::from_millis(300);
/// How long after `run` dies its command may still be seen: the grace, plus a second of slack for a
/// loaded machine (the watcher itself reacts within milliseconds).
const STOP_WITHIN: Duration = Duration::from_millis(1300);

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("__soak-worker") {
        std::process::exit(worker(&args[2..]));
    }
    // Enough of the test harness's command line to live among other test binaries.
    if args.iter().any(|a| a == "--list") {
        println!("soak: test");
        return;
    }
    let filters: Vec<&String> = args[1..]
        .iter()
        .filter(|a| !a.starts_with('-') && a.parse::<u32>().is_err())
        .collect();
    if !filters.is_empty() && !filters.iter().any(|f| "soak".contains(f.as_str())) {
        println!("running 0 tests (filtered out: soak)");
        return;
    }

    let runs = env_usize("LEASEHOLD_SOAK_RUNS", 96);
    let lanes = env_usize("LEASEHOLD_SOAK_LANES", 8).max(1);
    let seed = std::env::var("LEASEHOLD_SOAK_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    println!("soak: {runs} invocations of `leasehold run` across {lanes} lanes, seed {seed} (LEASEHOLD_SOAK_SEED to replay)");

    let mut failures = Vec::new();
    let started = Instant::now();
    let safe = soak(&Plan {
        runs,
        lanes,
        seed,
        control: false,
    });
    println!("{}", safe.summary(started.elapsed()));
    failures.extend(safe.violations());

    let started = Instant::now();
    let control = soak(&Plan {
        runs: 4,
        lanes: 2,
        seed,
        control: true,
    });
    println!("control: {}", control.summary(started.elapsed()));
    if control.late.is_empty()
        || control.late_writes == 0
        || control.refused_writes == 0
        || control.unfenced_overlaps == 0
    {
        failures.push(format!(
            "control: killing run and its watcher together should leave commands running and writing \
             after the kill, overlapping the next holder (the bug this soak must be able to see); saw \
             {} late processes, {} late writes, {} refused, {} unfenced overlaps",
            control.late.len(),
            control.late_writes,
            control.refused_writes,
            control.unfenced_overlaps
        ));
    }
    failures.extend(
        control
            .violations()
            .into_iter()
            .filter(|v| !v.starts_with("supervisor:"))
            .map(|v| format!("control: {v}")),
    );
    if !failures.is_empty() {
        for f in &failures {
            eprintln!("soak FAILED: {f}");
        }
        std::process::exit(1);
    }
    println!("test soak ... ok");
}

fn env_usize(key: &str, default: usize) -> usize {
    std::env::var(key)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn unix_micros(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH).unwrap().as_micros() as i64
}

// ---------------------------------------------------------------------------------------------------
// The command.

/// `__soak-worker DIR WORK_MS STEPS IGNORE_TERM PERSIST`: records its run at the resource; exit 3
/// once the resource refused its fence (it knows it was superseded), unless PERSIST: then it goes on
/// like a job that does not look at the answer (the control's orphans).
fn worker(args: &[String]) -> i32 {
    let dir = PathBuf::from(&args[0]);
    let work = Duration::from_millis(args[1].parse().unwrap());
    let steps: usize = args[2].parse().unwrap();
    let persist = args[4] == "1";
    if args[3] == "1" {
        // Only SIGKILL after the grace stops this one. Blocked before any thread exists, so all share it.
        let mut term = nix::sys::signal::SigSet::empty();
        term.add(Signal::SIGTERM);
        term.thread_block().unwrap();
    }
    let fence: u64 = std::env::var("LEASEHOLD_FENCE").unwrap().parse().unwrap();
    let inv: i64 = std::env::var("SOAK_INVOCATION").unwrap().parse().unwrap();
    // A crash must leave its reason where the harness finds it, whatever became of stderr.
    let panic_file = dir.join("stderr").join(format!("{inv}.panic"));
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let _ = std::fs::write(&panic_file, info.to_string());
        default_hook(info);
    }));
    let pid = std::process::id() as i64;
    std::fs::write(
        dir.join("inv").join(inv.to_string()),
        format!("{pid} {fence}"),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let db = Database::builder(format!("sqlite://{}", dir.join("history.db").display()))
            .max_connections(1)
            .busy_timeout(Duration::from_secs(30))
            .connect()
            .await
            .unwrap();
        let mut log = std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("attempts.log"))
            .unwrap();
        let events = std::iter::once("start")
            .chain(std::iter::repeat_n("work", steps))
            .chain(std::iter::once("end"));
        for (i, event) in events.enumerate() {
            if i > 0 {
                tokio::time::sleep(work / (steps as u32 + 1)).await;
            }
            // One write(2) per line, O_APPEND: lines never interleave.
            let line = format!(
                "{fence} {pid} {inv} {event} {}\n",
                unix_micros(SystemTime::now())
            );
            log.write_all(line.as_bytes()).unwrap();
            match db.begin_fenced(NAME, Fence::new(fence)).await {
                Ok(mut tx) => {
                    tx.execute(
                        "INSERT INTO soak_history (fence, pid, inv, event) VALUES ($1, $2, $3, $4)",
                        &[
                            Param::I64(fence as i64),
                            Param::I64(pid),
                            Param::I64(inv),
                            Param::Text(event),
                        ],
                    )
                    .await
                    .unwrap();
                    tx.commit().await.unwrap();
                }
                Err(Error::StaleFence { .. }) => {
                    let line = format!(
                        "{fence} {pid} {inv} refused {}\n",
                        unix_micros(SystemTime::now())
                    );
                    log.write_all(line.as_bytes()).unwrap();
                    if !persist {
                        return 3;
                    }
                }
                Err(e) => panic!("fenced transaction failed: {e}"),
            }
        }
        0
    })
}

// ---------------------------------------------------------------------------------------------------
// The harness.

struct Plan {
    runs: usize,
    lanes: usize,
    seed: u64,
    /// Kill `run` and its watcher together, every time, after the command started; the commands
    /// go on after the fence refused them.
    control: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Fate {
    Normal,
    KillCommand,
    KillRun,
}

#[derive(Debug)]
struct Invocation {
    fate: Fate,
    exit: Option<i32>,
    /// When `run` got its SIGKILL.
    killed_at: Option<SystemTime>,
    /// After a SIGKILL of `run`: how long until nothing of it was left (None: something outlived the check).
    stopped_after: Option<Duration>,
}

#[derive(Debug, Default)]
struct Outcome {
    runs: usize,
    fates: BTreeMap<String, usize>,
    exits: BTreeMap<String, usize>,
    pauses: usize,
    holders: usize,
    accepted_rows: usize,
    refused_writes: usize,
    unfenced_overlaps: usize,
    max_stop: Duration,
    /// Invocations whose processes outlived `STOP_WITHIN` after `run` was SIGKILLed.
    late: Vec<usize>,
    /// Log lines written by a command more than `STOP_WITHIN` after its `run` was SIGKILLed.
    late_writes: usize,
    fenced_violations: Vec<String>,
    keys_without_ttl: Vec<String>,
    fence_key_ttl: i64,
    leftovers: Vec<String>,
}

impl Outcome {
    fn summary(&self, took: Duration) -> String {
        format!(
            "{} invocations in {:.1} s; fates {:?}; exit codes {:?}; {} Redis pauses; {} holders \
             accepted ({} rows); {} writes refused by the fence; {} overlaps an unfenced resource \
             would have accepted; slowest stop after a SIGKILL of run: {} ms; {} processes late, {} \
             writes late; fence key TTL {}",
            self.runs,
            took.as_secs_f64(),
            self.fates,
            self.exits,
            self.pauses,
            self.holders,
            self.accepted_rows,
            self.refused_writes,
            self.unfenced_overlaps,
            self.max_stop.as_millis(),
            self.late.len(),
            self.late_writes,
            self.fence_key_ttl,
        )
    }

    fn violations(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .fenced_violations
            .iter()
            .map(|s| format!("fenced history: {s}"))
            .collect();
        if !self.late.is_empty() || self.late_writes > 0 {
            v.push(format!(
                "supervisor: after a SIGKILL of run, invocations {:?} still had processes after {STOP_WITHIN:?}, and {} writes were attempted after that",
                self.late, self.late_writes
            ));
        }
        if !self.keys_without_ttl.is_empty() {
            v.push(format!("keys without a TTL: {:?}", self.keys_without_ttl));
        }
        if !self.leftovers.is_empty() {
            v.push(format!("processes left behind: {:?}", self.leftovers));
        }
        if let Some(n) = self.exits.get("101") {
            v.push(format!(
                "{n} commands panicked (exit 101); their stderr is in the kept directory"
            ));
        }
        if self.holders == 0 {
            v.push("no holder ever wrote: the soak tested nothing".into());
        }
        v
    }
}

/// Processes (not zombies) whose environment carries `SOAK_ID=id` (and `SOAK_INVOCATION=inv`).
fn marked(id: &str, inv: Option<usize>) -> Vec<i32> {
    let want_id = format!("SOAK_ID={id}");
    let want_inv = inv.map(|i| format!("SOAK_INVOCATION={i}"));
    let mut found = Vec::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return found;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        let vars: Vec<&[u8]> = env.split(|&b| b == 0).collect();
        let has = |want: &str| vars.contains(&want.as_bytes());
        if has(&want_id) && want_inv.as_deref().is_none_or(has) {
            found.push(pid);
        }
    }
    found
}

/// Zombies whose name is one of ours.
fn zombies(names: &[String]) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = &stat[open + 1..close];
        let state = stat[close + 1..].trim_start().chars().next();
        if state == Some('Z') && names.iter().any(|n| n == comm) {
            found.push(format!("zombie {}", stat[..close + 1].trim()));
        }
    }
    found
}

fn children(parent: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let Some(i) = stat.rfind(')') else { continue };
        if stat[i + 1..].split_whitespace().nth(1) == Some(&parent.to_string()) {
            found.push(pid);
        }
    }
    found
}

fn soak(plan: &Plan) -> Outcome {
    let mut redis = leasehold_testkit::RedisServer::start().expect("redis-server starts");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("inv")).unwrap();
    std::fs::create_dir(dir.path().join("stderr")).unwrap();
    std::fs::write(dir.path().join("attempts.log"), "").unwrap();
    let db_url = format!("sqlite://{}", dir.path().join("history.db").display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let db = Database::connect(&db_url).await.unwrap();
        db.migrate().await.unwrap();
        let mut tx = db.begin().await.unwrap();
        tx.execute(
            "CREATE TABLE soak_history (seq INTEGER PRIMARY KEY AUTOINCREMENT, fence INTEGER NOT NULL, \
             pid INTEGER NOT NULL, inv INTEGER NOT NULL, event TEXT NOT NULL)",
            &[],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        db.close().await;
    });

    let soak_id = format!("{}-{}", std::process::id(), unix_micros(SystemTime::now()));
    let worker_exe = std::env::current_exe().unwrap();
    let next = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let invocations: Arc<Mutex<BTreeMap<usize, Invocation>>> = Arc::default();
    let progress_at = Arc::new(Mutex::new(Instant::now()));

    // Redis pauses, until the lanes are done.
    let redis_pid = Pid::from_raw(redis.pid().expect("a running redis-server has a pid") as i32);
    let pauser = {
        let done = Arc::clone(&done);
        let mut rng = StdRng::seed_from_u64(plan.seed ^ 0x5eed);
        let control = plan.control;
        std::thread::spawn(move || {
            let mut pauses = 0;
            while !done.load(Ordering::Relaxed) && !control {
                std::thread::sleep(Duration::from_millis(rng.random_range(500..2500)));
                if done.load(Ordering::Relaxed) {
                    break;
                }
                kill(redis_pid, Signal::SIGSTOP).unwrap();
                // Up to longer than the TTL: the lease lapses under a holder that is still running.
                std::thread::sleep(Duration::from_millis(rng.random_range(50..1500)));
                kill(redis_pid, Signal::SIGCONT).unwrap();
                pauses += 1;
            }
            pauses
        })
    };

    let lanes: Vec<_> = (0..plan.lanes)
        .map(|lane| {
            let next = Arc::clone(&next);
            let invocations = Arc::clone(&invocations);
            let progress_at = Arc::clone(&progress_at);
            let url = redis.url();
            let dir = dir.path().to_owned();
            let worker_exe = worker_exe.clone();
            let soak_id = soak_id.clone();
            let mut rng = StdRng::seed_from_u64(plan.seed.wrapping_add(lane as u64 + 1));
            let (runs, control) = (plan.runs, plan.control);
            std::thread::spawn(move || loop {
                let inv = next.fetch_add(1, Ordering::Relaxed);
                if inv >= runs {
                    return;
                }
                let record =
                    one_invocation(inv, &mut rng, control, &url, &dir, &worker_exe, &soak_id);
                invocations.lock().unwrap().insert(inv, record);
                let mut at = progress_at.lock().unwrap();
                if at.elapsed() > Duration::from_secs(5) {
                    *at = Instant::now();
                    eprintln!(
                        "soak: {}/{runs} invocations done",
                        invocations.lock().unwrap().len()
                    );
                }
            })
        })
        .collect();
    for lane in lanes {
        lane.join().expect("a lane panicked");
    }
    done.store(true, Ordering::Relaxed);
    let pauses = pauser.join().unwrap();
    let _ = redis.resume();

    let mut out = Outcome {
        runs: plan.runs,
        pauses,
        ..Outcome::default()
    };
    let invocations = std::mem::take(&mut *invocations.lock().unwrap());
    for i in invocations.values() {
        *out.fates.entry(format!("{:?}", i.fate)).or_default() += 1;
        let exit = i.exit.map_or("signal".to_owned(), |c| c.to_string());
        *out.exits.entry(exit).or_default() += 1;
    }

    judge_fenced_history(&db_url, &mut out);
    judge_attempts(dir.path(), &invocations, &mut out);

    // Keys: every key of the lease must expire by itself. The fence key is the exception for now:
    // its retention is another part of this work; its TTL is reported.
    let mut con = redis.connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    for key in keys {
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut con).unwrap();
        if key.ends_with(":fence") {
            out.fence_key_ttl = ttl;
        } else if ttl < 0 {
            out.keys_without_ttl.push(format!("{key} (PTTL {ttl})"));
        }
    }

    // Processes: nothing of the soak left, and no zombie of ours.
    let mut names = vec!["leasehold".to_owned(), "leasehold-watch".to_owned()];
    if let Some(exe) = worker_exe.file_name().and_then(|n| n.to_str()) {
        names.push(exe.chars().take(15).collect());
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let left = marked(&soak_id, None);
        let z = zombies(&names);
        if (left.is_empty() && z.is_empty()) || Instant::now() > deadline {
            out.leftovers
                .extend(left.iter().map(|p| format!("pid {p} still running")));
            out.leftovers.extend(z);
            for p in left {
                let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if std::env::var_os("LEASEHOLD_SOAK_KEEP").is_some()
        || (!plan.control && !out.violations().is_empty())
    {
        // Keep the evidence.
        let kept = dir.keep();
        eprintln!("soak: files kept in {}", kept.display());
    }
    out
}

fn one_invocation(
    inv: usize,
    rng: &mut StdRng,
    control: bool,
    url: &str,
    dir: &Path,
    worker_exe: &Path,
    soak_id: &str,
) -> Invocation {
    let fate = if control {
        Fate::KillRun
    } else {
        match rng.random_range(0..100) {
            0..70 => Fate::Normal,
            70..85 => Fate::KillCommand,
            _ => Fate::KillRun,
        }
    };
    let (work_ms, steps) = if control {
        (3000, 30)
    } else if rng.random_bool(0.05) {
        // Long enough to span a Redis pause: the lease is lost under it and it is stopped mid-work.
        (rng.random_range(500..2000), rng.random_range(5..20))
    } else {
        (rng.random_range(20..300), rng.random_range(1..4))
    };
    let ignore_term = !control && rng.random_bool(0.2);
    let stderr = std::fs::File::create(dir.join("stderr").join(inv.to_string())).unwrap();
    let mut run = Command::new(BIN)
        .args(["run", "--redis", url, "--ttl", TTL, "--wait", "60s"])
        .arg("--grace")
        .arg(format!("{}ms", GRACE.as_millis()))
        .args([NAME, "--"])
        .arg(worker_exe)
        .arg("__soak-worker")
        .arg(dir)
        .args([
            work_ms.to_string(),
            steps.to_string(),
            if ignore_term { "1" } else { "0" }.to_owned(),
            if control { "1" } else { "0" }.to_owned(),
        ])
        .env("SOAK_ID", soak_id)
        .env("SOAK_INVOCATION", inv.to_string())
        .env_remove("LEASEHOLD_KEY_PREFIX")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .unwrap();
    let inv_file = dir.join("inv").join(inv.to_string());
    let command_started = |run: &mut std::process::Child| -> bool {
        let until = Instant::now() + Duration::from_secs(120);
        while Instant::now() < until {
            if inv_file.exists() {
                return true;
            }
            if run.try_wait().unwrap().is_some() {
                return false;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        false
    };
    let mut killed_at = None;
    let mut stopped_after = None;
    match fate {
        Fate::Normal => {}
        Fate::KillCommand => {
            if command_started(&mut run) {
                std::thread::sleep(Duration::from_millis(rng.random_range(0..work_ms)));
                if let Some(pid) = std::fs::read_to_string(&inv_file)
                    .ok()
                    .and_then(|s| s.split(' ').next().and_then(|p| p.parse::<i32>().ok()))
                {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
                }
            }
        }
        Fate::KillRun => {
            if control {
                // After the command started, so that there is something left to stop.
                command_started(&mut run);
                std::thread::sleep(Duration::from_millis(200));
                let run_pid = run.id() as i32;
                let victims: Vec<i32> = std::iter::once(run_pid).chain(children(run_pid)).collect();
                for &p in &victims {
                    let _ = kill(Pid::from_raw(p), Signal::SIGSTOP);
                }
                killed_at = Some(SystemTime::now());
                // The watcher first: were run to die first, the kernel would resume the stopped
                // watcher (its process group just became orphaned) and it would do its job.
                for &p in victims.iter().rev() {
                    let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                }
            } else {
                // Anywhere in run's life: while it waits, while it starts the command, while it runs.
                std::thread::sleep(Duration::from_millis(rng.random_range(0..600)));
                killed_at = Some(SystemTime::now());
                let _ = kill(Pid::from_raw(run.id() as i32), Signal::SIGKILL);
            }
            let since = Instant::now();
            let _ = run.wait();
            while since.elapsed() < STOP_WITHIN {
                if marked(soak_id, Some(inv)).is_empty() {
                    stopped_after = Some(since.elapsed());
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            if stopped_after.is_none() {
                // Leave the survivors for the late-write count, then clean up.
                std::thread::sleep(Duration::from_millis(500));
                for p in marked(soak_id, Some(inv)) {
                    let _ = kill(Pid::from_raw(p), Signal::SIGKILL);
                }
            }
        }
    }
    let status = run.wait().unwrap();
    let _ = std::fs::write(
        dir.join("stderr").join(format!("{inv}.exit")),
        format!("{status:?} {fate:?}"),
    );
    Invocation {
        fate,
        exit: status.code(),
        killed_at,
        stopped_after,
    }
}

/// Overlapping holders in a history (fence and invocation of each write, in the order the resource
/// took them): a fence lower than one already seen means its holder wrote after a newer holder began;
/// a fence written by two invocations means two holders at once.
fn overlaps(history: impl IntoIterator<Item = (u64, usize)>) -> Vec<String> {
    let mut found = Vec::new();
    let mut owner: BTreeMap<u64, BTreeSet<usize>> = BTreeMap::new();
    let mut newest: Option<u64> = None;
    for (i, (fence, inv)) in history.into_iter().enumerate() {
        owner.entry(fence).or_default().insert(inv);
        match newest {
            Some(n) if fence < n => found.push(format!(
                "write {i}: fence {fence} (invocation {inv}) after fence {n} had begun"
            )),
            Some(n) if fence == n => {}
            _ => newest = Some(fence),
        }
    }
    for (fence, invs) in owner.iter().filter(|(_, i)| i.len() > 1) {
        found.push(format!(
            "fence {fence} held by invocations {invs:?} at once"
        ));
    }
    found
}

/// The fenced table, in commit order.
fn judge_fenced_history(db_url: &str, out: &mut Outcome) {
    let rows: Vec<(i64, i64)> = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let db = Database::connect(db_url).await.unwrap();
            let pool = db.sqlite().expect("a SQLite database").clone();
            let rows = sqlx::query_as("SELECT fence, inv FROM soak_history ORDER BY seq")
                .fetch_all(&pool)
                .await
                .unwrap();
            db.close().await;
            rows
        });
    out.accepted_rows = rows.len();
    out.holders = rows.iter().map(|r| r.0).collect::<BTreeSet<_>>().len();
    out.fenced_violations = overlaps(rows.iter().map(|&(f, i)| (f as u64, i as usize)));
}

/// The unfenced view (every attempt, in the order written) and the writes after `run` died.
fn judge_attempts(dir: &Path, invocations: &BTreeMap<usize, Invocation>, out: &mut Outcome) {
    let log = std::fs::read_to_string(dir.join("attempts.log")).unwrap();
    let mut attempts = Vec::new();
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let (fence, inv, event, at): (u64, usize, &str, i64) = (
            f[0].parse().unwrap(),
            f[2].parse().unwrap(),
            f[3],
            f[4].parse().unwrap(),
        );
        if event == "refused" {
            out.refused_writes += 1;
            continue;
        }
        attempts.push((fence, inv));
        if let Some(killed) = invocations.get(&inv).and_then(|i| i.killed_at) {
            if at > unix_micros(killed + STOP_WITHIN) {
                out.late_writes += 1;
            }
        }
    }
    out.unfenced_overlaps = overlaps(attempts).len();
    for (&inv, i) in invocations {
        if i.fate == Fate::KillRun {
            match i.stopped_after {
                Some(d) => out.max_stop = out.max_stop.max(d),
                None => out.late.push(inv),
            }
        }
    }
}
