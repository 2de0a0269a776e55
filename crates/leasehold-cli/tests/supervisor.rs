//! `leasehold run` dies, its command stops: the real binary, real processes checked by pid, a private
//! redis-server per test, and a real terminal under tmux.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::RedisServer;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

mod cli_support;
use cli_support::tmux::Tmux;
use cli_support::wait_with_timeout as wait_exit;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

fn leasehold(redis: &RedisServer) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LEASEHOLD_KEY_PREFIX")
        .env_remove("LEASEHOLD_RUN_THREAD_CHURN")
        .env_remove("LEASEHOLD_TEST_WATCHER_PDEATHSIG")
        .env("LEASEHOLD_REDIS_URL", redis.url())
        .env("NO_COLOR", "1");
    c
}

fn status_json(redis: &RedisServer, name: &str) -> serde_json::Value {
    let o = leasehold(redis)
        .args(["status", "--json", name])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).expect("status --json prints one JSON object")
}

/// Polls until `cond` holds, for up to 15 s (the machine may be loaded).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(15);
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The process's state letter from /proc, or `None` if there is no such process.
fn state(pid: i32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 1..].trim_start().chars().next()
}

/// Running (or stopped, or sleeping): anything but gone or a zombie.
fn running(pid: i32) -> bool {
    !matches!(state(pid), None | Some('Z') | Some('X'))
}

/// Children of `parent`, from /proc.
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
        let ppid = stat[i + 1..].split_whitespace().nth(1);
        if ppid.and_then(|p| p.parse::<i32>().ok()) == Some(parent) {
            found.push(pid);
        }
    }
    found
}

fn pids_in(path: &Path) -> Vec<i32> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// For each pid, how long after `since` it was first seen not running (polling every 5 ms, up to
/// `limit` after `since`); `None` for a pid still running then.
fn stop_times(pids: &[i32], since: Instant, limit: Duration) -> Vec<Option<Duration>> {
    let mut times = vec![None; pids.len()];
    while since.elapsed() < limit && times.iter().any(Option::is_none) {
        for (t, &p) in times.iter_mut().zip(pids) {
            if t.is_none() && !running(p) {
                *t = Some(since.elapsed());
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    times
}

/// How long until every pid in `pids` stops running, up to `limit`.
fn time_until_gone(pids: &[i32], limit: Duration) -> Option<Duration> {
    let times = stop_times(pids, Instant::now(), limit);
    times
        .iter()
        .copied()
        .collect::<Option<Vec<_>>>()?
        .into_iter()
        .max()
}

fn sigkill(pid: i32) {
    let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
}

/// A command whose processes cover what a stop must reach: the command itself (a shell), a child in
/// its group, a child that left the group and the session (setsid), and one that ignores SIGTERM.
/// Each writes its pid to `dir/pids` once it runs.
fn family_script(dir: &Path) -> String {
    let pids = dir.join("pids");
    let p = pids.display();
    format!(
        "echo $$ >> {p}; \
         sleep 60 & echo $! >> {p}; \
         setsid sleep 60 & echo $! >> {p}; \
         sh -c 'trap \"\" TERM; echo $$ >> {p}; while :; do sleep 1; done' & \
         wait"
    )
}

struct Running {
    run: Child,
    watcher: i32,
    family: Vec<i32>,
    dir: tempfile::TempDir,
}

/// Starts `leasehold run` with the family script and waits until all four processes run.
fn start_family(redis: &RedisServer, name: &str, extra: &[&str]) -> Running {
    let dir = tempfile::tempdir().unwrap();
    let script = family_script(dir.path());
    let mut run = leasehold(redis)
        .arg("run")
        .args(extra)
        .args([name, "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pids_file = dir.path().join("pids");
    eventually("the command and its three children run", || {
        pids_in(&pids_file).len() == 4 || run.try_wait().unwrap().is_some()
    });
    assert!(run.try_wait().unwrap().is_none(), "run exited early");
    let family = pids_in(&pids_file);
    let watchers = children(run.id() as i32);
    assert_eq!(
        watchers.len(),
        1,
        "run has one child, the watcher: {watchers:?}"
    );
    Running {
        watcher: watchers[0],
        run,
        family,
        dir,
    }
}

#[test]
fn sigkill_of_run_stops_the_command_and_all_it_started_within_a_second() {
    let redis = RedisServer::start().unwrap();
    let grace = Duration::from_millis(400);
    let mut r = start_family(&redis, "killed", &["--ttl", "2s", "--grace", "400ms"]);
    let before = status_json(&redis, "killed");
    assert_eq!(before["held"], true, "{before}");
    let killed = Instant::now();
    sigkill(r.run.id() as i32);
    let times = stop_times(&r.family, killed, Duration::from_secs(5));
    let _ = r.run.wait();
    for &p in &r.family {
        sigkill(p); // only matters if the assertions below fail
    }
    let names = [
        "the command",
        "its child",
        "its child in a session of its own",
        "its child that ignores SIGTERM",
    ];
    for ((name, pid), time) in names.iter().zip(&r.family).zip(&times) {
        let time = time.unwrap_or_else(|| {
            panic!("{name} (pid {pid}) still ran 5 s after run died: {times:?}")
        });
        if name.contains("ignores") {
            assert!(
                time >= grace && time < grace + Duration::from_secs(1),
                "{name} (pid {pid}) stopped after {time:?}; it should get SIGKILL after --grace {grace:?}"
            );
        } else {
            assert!(
                time < Duration::from_secs(1),
                "{name} (pid {pid}) took {time:?} to stop"
            );
        }
    }
    // Nothing left as a zombie either: the watcher reaped them all, and then exited.
    eventually("the watcher has exited", || state(r.watcher).is_none());
    for &p in &r.family {
        assert_eq!(state(p), None, "pid {p} left behind");
    }
    // Nothing renews the lease: it lapses by its TTL.
    eventually("the lease has lapsed", || {
        status_json(&redis, "killed")["held"] == false
    });
    assert_eq!(
        status_json(&redis, "killed")["fence"],
        before["fence"],
        "nobody took it since"
    );
    drop(r.dir);
}

#[test]
fn sigkill_of_run_and_its_watcher_together_leaves_the_command_running() {
    // The limit the watcher documents, and the proof that the pid checks above can see a survivor:
    // with no process left to notice, the command runs on unsupervised (the old behaviour of `run`).
    let redis = RedisServer::start().unwrap();
    let mut r = start_family(&redis, "both", &["--ttl", "2s", "--grace", "400ms"]);
    // Frozen first, so that neither sees the other die: "at once".
    for pid in [r.watcher, r.run.id() as i32] {
        let _ = kill(Pid::from_raw(pid), Signal::SIGSTOP);
    }
    sigkill(r.watcher);
    sigkill(r.run.id() as i32);
    let _ = r.run.wait();
    let gone = time_until_gone(&r.family[..1], Duration::from_millis(1500));
    let survivors: Vec<i32> = r.family.iter().copied().filter(|&p| running(p)).collect();
    let _ = killpg(Pid::from_raw(r.family[0]), Signal::SIGKILL);
    for &p in &r.family {
        sigkill(p);
    }
    assert_eq!(gone, None, "the command stopped without a supervisor?");
    assert_eq!(survivors.len(), 4, "all four ran on: {survivors:?}");
}

#[test]
fn sigkill_of_the_watcher_alone_makes_run_stop_the_command_and_exit_70() {
    let redis = RedisServer::start().unwrap();
    let mut r = start_family(&redis, "orphaned", &["--ttl", "5s", "--grace", "400ms"]);
    sigkill(r.watcher);
    let status = wait_exit(&mut r.run, Duration::from_secs(10));
    // run finds them by their process group and by the LEASEHOLD_NAME and LEASEHOLD_FENCE they
    // inherited: the child in a session of its own too.
    let gone = time_until_gone(&r.family, Duration::from_secs(3));
    for &p in &r.family {
        sigkill(p); // before reading stderr: they hold it open
    }
    let mut err = String::new();
    std::io::Read::read_to_string(r.run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(70), "{err}");
    assert!(err.contains("watcher process"), "{err}");
    assert!(gone.is_some(), "the command's group outlived run: {err}");
    assert_eq!(status_json(&redis, "orphaned")["held"], false, "released");
}

/// Threads of process `pid` right now.
fn threads(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default()
}

/// Runs a 3 s command under `run` with its runtime threads churning (a blocking thread started and
/// retired every 100 ms); returns run's exit code, whether the command finished, how many of run's
/// threads exited meanwhile, and run's stderr.
fn run_through_thread_churn(extra_env: &[(&str, &str)]) -> (Option<i32>, bool, usize, String) {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let done = dir.path().join("done");
    let script = format!("sleep 3; touch {}", done.display());
    let mut run = leasehold(&redis)
        .args(["run", "--ttl", "2s", "churn", "--", "sh", "-c", &script])
        .env("LEASEHOLD_RUN_THREAD_CHURN", "100ms")
        .envs(extra_env.iter().copied())
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = std::collections::BTreeSet::new();
    let status = loop {
        seen.extend(threads(run.id()));
        if let Some(st) = run.try_wait().unwrap() {
            break st;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let exited_threads = seen.len().saturating_sub(threads(run.id()).len());
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    (status.code(), done.exists(), exited_threads, err)
}

#[test]
fn a_command_outlives_runtime_thread_churn_without_a_spurious_stop() {
    let (code, finished, exited_threads, err) = run_through_thread_churn(&[]);
    assert!(
        exited_threads >= 8,
        "the churn knob should retire run's threads all the time; saw {exited_threads} exit"
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        finished,
        "the command was stopped before it finished: {err}"
    );
}

#[test]
fn the_churn_stops_a_command_supervised_by_a_thread_bound_parent_death_signal() {
    // The design the watcher rejects: a parent-death signal fires when the *thread* that forked the
    // process exits. Under the same churn it kills the watcher while run is alive and well, and run
    // has to stop the healthy command: the test above would see it.
    let (code, finished, _, err) =
        run_through_thread_churn(&[("LEASEHOLD_TEST_WATCHER_PDEATHSIG", "1")]);
    assert_eq!(code, Some(70), "{err}");
    assert!(!finished, "{err}");
    assert!(err.contains("watcher process"), "{err}");
}

// ---------------------------------------------------------------------------------------------------
// On a real terminal.

#[test]
fn on_a_terminal_the_command_reads_it_and_one_ctrl_c_stops_it_and_releases() {
    let redis = RedisServer::start().unwrap();
    let tmux = Tmux::start(&[("LEASEHOLD_REDIS_URL", redis.url())]);
    // Quotes split each marker so that the typed line itself never shows it.
    tmux.type_line(&format!(
        "{BIN} run --ttl 10s term -- sh -c 'echo fen\"\"ce=$LEASEHOLD_FENCE; read line; echo got:$line; sleep 60'; echo r\"\"c=$?"
    ));
    tmux.wait_for("fence=1");
    assert_eq!(status_json(&redis, "term")["held"], true);
    // The command reads the terminal: it is in the foreground group, not frozen by SIGTTIN.
    tmux.type_line("hello");
    tmux.wait_for("got:hello");
    tmux.send(&["C-c"]);
    let screen = tmux.wait_for("rc=1");
    assert!(screen.contains("rc=130"), "run exits 128+SIGINT:\n{screen}");
    assert!(!screen.contains("lost lease"), "{screen}");
    assert_eq!(
        status_json(&redis, "term")["held"],
        false,
        "released at once, not left to expire:\n{screen}"
    );
    // Nothing left below the shell: not the command, not the watcher.
    eventually("the shell has no children left", || {
        children(tmux.shell_pid()).is_empty()
    });
    tmux.type_line("echo still\"\"-alive");
    tmux.wait_for("still-alive");
}

#[test]
fn on_a_terminal_sigkill_of_run_stops_the_command_in_its_foreground_group() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let pids = dir.path().join("pids");
    let tmux = Tmux::start(&[("LEASEHOLD_REDIS_URL", redis.url())]);
    tmux.type_line(&format!(
        "{BIN} run --ttl 10s --grace 300ms termkill -- sh -c 'echo $$ >> {p}; sleep 60 & echo $! >> {p}; echo rea\"\"dy; wait'; echo r\"\"c=$?",
        p = pids.display()
    ));
    tmux.wait_for("ready");
    let family = pids_in(&pids);
    assert_eq!(family.len(), 2, "{family:?}");
    let run = children(tmux.shell_pid());
    assert_eq!(run.len(), 1, "the shell runs `leasehold run`: {run:?}");
    sigkill(run[0]);
    let gone = time_until_gone(&family, Duration::from_secs(5));
    for &p in &family {
        sigkill(p);
    }
    let gone = gone.expect("the command outlived run on a terminal");
    assert!(gone < Duration::from_secs(1), "took {gone:?}");
    let screen = tmux.wait_for("rc=1");
    assert!(screen.contains("rc=137"), "{screen}");
}
