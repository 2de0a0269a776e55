//! The servers `verify` and `bench` start for themselves die with them: killed mid-run by SIGTERM
//! (as `timeout` sends it), SIGINT (a Ctrl-C) or SIGKILL, `leasehold` leaves no redis-server,
//! mariadbd, postgres or etcd behind, and no scratch directory of theirs.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

mod cli_support;
use cli_support::BIN;

/// The servers the lab starts, by the name the kernel gives them.
const SERVERS: [&str; 4] = ["redis-server", "mariadbd", "postgres", "etcd"];

#[derive(Debug, Clone)]
struct Proc {
    pid: i32,
    ppid: i32,
    comm: String,
    start: String,
    zombie: bool,
}

fn procs() -> Vec<Proc> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let comm = stat[open + 1..close].to_owned();
        let f: Vec<&str> = stat[close + 2..].split(' ').collect();
        out.push(Proc {
            pid,
            ppid: f[1].parse().unwrap_or(0),
            comm,
            start: f[19].to_owned(),
            zombie: f[0] == "Z" || f[0] == "X",
        });
    }
    out
}

/// The servers below `root`, with their start times (to tell them from a pid reused later) and
/// the scratch directories their command lines name.
fn servers_below(root: i32) -> (Vec<Proc>, Vec<PathBuf>) {
    let all = procs();
    let mut children: HashMap<i32, Vec<&Proc>> = HashMap::new();
    for p in &all {
        children.entry(p.ppid).or_default().push(p);
    }
    let (mut found, mut queue) = (Vec::new(), vec![root]);
    while let Some(parent) = queue.pop() {
        for p in children.remove(&parent).unwrap_or_default() {
            queue.push(p.pid);
            if SERVERS.contains(&p.comm.as_str()) && !p.zombie {
                found.push(p.clone());
            }
        }
    }
    let mut dirs = Vec::new();
    for p in &found {
        let cmdline = std::fs::read(format!("/proc/{}/cmdline", p.pid)).unwrap_or_default();
        for arg in cmdline.split(|&b| b == 0) {
            let arg = String::from_utf8_lossy(arg);
            if let Some(i) = arg.find("/leasehold-") {
                let start = arg[..i].rfind(['=', ' ']).map_or(0, |j| j + 1);
                let rest = &arg[start..];
                // The scratch directory: up to the component after `leasehold-…`.
                let path = PathBuf::from(rest);
                if let Some(dir) = path.ancestors().find(|a| {
                    a.file_name()
                        .is_some_and(|n| n.to_string_lossy().starts_with("leasehold-"))
                }) {
                    dirs.push(dir.to_path_buf());
                }
            }
        }
    }
    dirs.sort();
    dirs.dedup();
    (found, dirs)
}

fn still_running(p: &Proc) -> bool {
    procs()
        .iter()
        .any(|q| q.pid == p.pid && q.start == p.start && !q.zombie)
}

fn lab(args: &[&str]) -> Child {
    Command::new(BIN)
        .args(args)
        .env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_STORE")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Starts `args`, waits until a server named `wanted` runs below it, sends `sig`, and checks that
/// every server it had started and every scratch directory they used are gone soon after.
fn killed_mid_run_leaves_nothing(args: &[&str], wanted: &str, sig: Signal) {
    let mut child = lab(args);
    let root = child.id() as i32;
    let until = Instant::now() + Duration::from_secs(180);
    let (servers, dirs) = loop {
        let (s, d) = servers_below(root);
        if s.iter().any(|p| p.comm == wanted) {
            break (s, d);
        }
        if let Some(st) = child.try_wait().unwrap() {
            panic!("{args:?} ended ({st}) before starting {wanted}");
        }
        assert!(Instant::now() < until, "{args:?} never started {wanted}");
        std::thread::sleep(Duration::from_millis(100));
    };
    kill(Pid::from_raw(root), sig).unwrap();
    let _ = child.wait();
    let gone_by = Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<&Proc> = servers.iter().filter(|p| still_running(p)).collect();
        let dirs_left: Vec<&PathBuf> = dirs.iter().filter(|d| d.exists()).collect();
        if left.is_empty() && dirs_left.is_empty() {
            break;
        }
        if Instant::now() > gone_by {
            for p in &left {
                let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
            }
            panic!("{args:?} killed by {sig}: left running {left:?}, left on disk {dirs_left:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "{args:?} by {sig}: {} servers and {} directories gone",
        servers.len(),
        dirs.len()
    );
}

#[test]
fn bench_killed_by_sigterm_or_sigkill_leaves_no_server_running() {
    let bench = ["bench", "--quick", "--only", "s5"];
    killed_mid_run_leaves_nothing(&bench, "mariadbd", Signal::SIGTERM);
    killed_mid_run_leaves_nothing(&bench, "mariadbd", Signal::SIGKILL);
}

#[test]
fn verify_interrupted_leaves_no_server_running() {
    killed_mid_run_leaves_nothing(&["verify", "--quick"], "redis-server", Signal::SIGINT);
}
