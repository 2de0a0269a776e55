//! etcd on loopback: a single node or a cluster of members (3 is the usual), each of which can be
//! killed, restarted, paused and resumed, with the leader found through etcd's own status API.
//!
//! Promise: every member listens on free 127.0.0.1 client and peer ports and keeps its data and log
//! in one temporary directory per cluster; all members are killed (continued first if paused) and
//! the directory removed when the [`EtcdCluster`] is dropped, also when a test panics. Limit: a
//! test process that is itself SIGKILL-ed leaves its members running. The data directory is on
//! `/dev/shm` when there is one: etcd fsyncs every write, and a tmpfs makes that free, so tests
//! measure etcd's logic rather than the CI machine's disk; it is therefore no test of durability
//! across a machine crash (a member restart keeps its data, as on disk).
//!
//! The helpers block the calling thread (they poll every 20 ms); from an async test use
//! `tokio::task::block_in_place` on a multi-thread runtime or `spawn_blocking`.

use std::fs::OpenOptions;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::daemon::{fatal, poll_until, retry_port_clash, Daemon};
use crate::free_port;

/// Raft heartbeat interval (etcd's default). Kept at the default so that a loaded 2-core test
/// machine does not cause spurious elections.
pub const HEARTBEAT_INTERVAL: Duration = Duration::from_millis(100);

/// Raft election timeout (etcd's default): a killed leader is replaced within about one to two of
/// these; shorter values make spurious elections likely when the machine is busy.
pub const ELECTION_TIMEOUT: Duration = Duration::from_millis(1000);

/// How long start-up and the helpers' implicit waits may take before they give up.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Whether an `etcd` binary can be started (`ETCD_BIN` or `etcd` on `PATH`).
pub fn etcd_available() -> bool {
    Command::new(binary())
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn binary() -> PathBuf {
    std::env::var_os("ETCD_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("etcd"))
}

fn etcdctl_binary() -> PathBuf {
    std::env::var_os("ETCDCTL_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("etcdctl"))
}

/// One etcd member: its ports, its data directory, and its process.
#[derive(Debug)]
pub struct EtcdMember {
    /// `m0`, `m1`, …: the member name in `--initial-cluster`.
    name: String,
    /// Where clients connect (gRPC and the JSON gateway).
    client_port: u16,
    /// Where the other members connect (raft).
    peer_port: u16,
    /// Its `--data-dir`, kept across restarts.
    data_dir: PathBuf,
    /// Its log (stderr), appended to across restarts.
    log: PathBuf,
    /// The arguments it was started with, to restart it the same way.
    args: Vec<String>,
    /// The process.
    daemon: Daemon,
}

impl EtcdMember {
    /// The member name (`m0`, `m1`, …).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `127.0.0.1:<client port>`.
    pub fn client_addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.client_port))
    }

    /// `http://127.0.0.1:<client port>`.
    pub fn client_url(&self) -> String {
        format!("http://{}", self.client_addr())
    }

    /// The peer (raft) port.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }

    /// Its data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Its log file.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// Whether the process is running (possibly paused).
    pub fn is_running(&self) -> bool {
        self.daemon.is_running()
    }

    /// Whether it is stopped by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.daemon.is_paused()
    }

    /// SIGSTOP: it stops answering clients and peers (a paused leader is replaced after the
    /// election timeout; its clients' requests hang).
    ///
    /// # Errors
    /// It is not running.
    pub fn pause(&mut self) -> io::Result<()> {
        self.daemon.pause()
    }

    /// SIGCONT after [`pause`](Self::pause).
    ///
    /// # Errors
    /// It is not running.
    pub fn resume(&mut self) -> io::Result<()> {
        self.daemon.resume()
    }

    /// SIGKILL and reap.
    ///
    /// # Errors
    /// Reaping failed.
    pub fn kill(&mut self) -> io::Result<()> {
        self.daemon.kill()
    }

    /// Kills it (if running) and starts it again with its data directory, on the same ports. This
    /// does not wait: a member answers clients only once it has rejoined a quorum, which may need
    /// other members restarted too. [`EtcdCluster::restart_member`] restarts and waits.
    ///
    /// # Errors
    /// The binary cannot be started.
    pub fn restart(&mut self) -> io::Result<()> {
        self.spawn()
    }

    fn spawn(&mut self) -> io::Result<()> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)?;
        let mut cmd = Command::new(binary());
        cmd.args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(log));
        if cfg!(target_arch = "aarch64") {
            // etcd 3.4 refuses to start on arm64 unless told this is deliberate.
            cmd.env("ETCD_UNSUPPORTED_ARCH", "arm64");
        }
        self.daemon.spawn(&mut cmd).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "could not start {}: {e}; install it (apt-get install -y etcd-server) or set ETCD_BIN",
                    binary().display()
                ),
            )
        })
    }

    /// Runs `etcdctl` (API v3) against this member alone, e.g. `["get", "k",
    /// "--consistency=s"]` to see what this member has applied; returns its standard output.
    ///
    /// # Errors
    /// `etcdctl` is missing (install `etcd-client`), or it fails (the error quotes its stderr).
    pub fn etcdctl(&self, args: &[&str]) -> io::Result<String> {
        etcdctl(&[self.client_addr()], args)
    }

    /// Fails (for good) if the process has exited, quoting its log.
    fn check_alive(&mut self) -> io::Result<()> {
        if let Some(status) = self.daemon.exited()? {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            let tail: String = log
                .lines()
                .rev()
                .take(10)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect::<Vec<_>>()
                .join("\n");
            return Err(fatal(format!(
                "etcd member {} exited ({status}): {tail}",
                self.name
            )));
        }
        Ok(())
    }

    /// `/health`: whether the member has a leader and can serve a read.
    fn healthy(&self) -> io::Result<bool> {
        let body = http(self.client_addr(), "GET", "/health", "")?;
        let v: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| io::Error::other(format!("bad /health reply {body:?}: {e}")))?;
        Ok(v["health"] == "true")
    }

    /// `/v3/maintenance/status`: (this member's id, the leader it knows, raft term).
    fn status(&self) -> io::Result<(String, String, u64)> {
        let body = http(self.client_addr(), "POST", "/v3/maintenance/status", "{}")?;
        let v: serde_json::Value = serde_json::from_str(&body)
            .map_err(|e| io::Error::other(format!("bad status reply {body:?}: {e}")))?;
        let field = |v: &serde_json::Value| v.as_str().unwrap_or_default().to_owned();
        let term = field(&v["raftTerm"]).parse().unwrap_or(0);
        Ok((field(&v["header"]["member_id"]), field(&v["leader"]), term))
    }
}

/// An etcd cluster of one or more members on loopback, torn down on drop.
///
/// Timings: [`HEARTBEAT_INTERVAL`] and [`ELECTION_TIMEOUT`] are etcd's defaults (100 ms, 1 s).
/// Measured on a 2-core machine: a single node is healthy 0.15 to 0.3 s after start, three members
/// 0.5 to 2.3 s after; a killed leader is replaced in 0.9 to 1.5 s, and a restarted member is
/// healthy again in about 0.1 s.
#[derive(Debug)]
pub struct EtcdCluster {
    /// The members, in `--initial-cluster` order.
    members: Vec<EtcdMember>,
    /// Holds every member's data directory and log; removed on drop, after the members are killed
    /// (field order: members drop first).
    dir: tempfile::TempDir,
}

impl EtcdCluster {
    /// Starts one member and waits until it is healthy.
    ///
    /// # Errors
    /// As [`start`](Self::start).
    pub fn start_single() -> io::Result<Self> {
        Self::start(1)
    }

    /// Starts `members` members (1, or an odd number such as 3) as a new cluster and waits until
    /// every one is healthy (has a leader and serves reads).
    ///
    /// # Errors
    /// `members` is 0, etcd is missing, a member exits at start, or the cluster is not healthy
    /// within 30 s.
    pub fn start(members: usize) -> io::Result<Self> {
        if members == 0 {
            return Err(io::Error::other(
                "an etcd cluster needs at least one member",
            ));
        }
        retry_port_clash(|| Self::start_once(members))
    }

    fn start_once(count: usize) -> io::Result<Self> {
        let shm = Path::new("/dev/shm");
        let builder = {
            let mut b = tempfile::Builder::new();
            b.prefix("leasehold-etcd-");
            b
        };
        let dir = if shm.is_dir() {
            builder.tempdir_in(shm).or_else(|_| builder.tempdir())?
        } else {
            builder.tempdir()?
        };
        crate::reaper::remove_at_exit(dir.path());
        let ports: Vec<(u16, u16)> = (0..count).map(|_| (free_port(), free_port())).collect();
        let initial_cluster = ports
            .iter()
            .enumerate()
            .map(|(i, (_, peer))| format!("m{i}=http://127.0.0.1:{peer}"))
            .collect::<Vec<_>>()
            .join(",");
        // A token unique to this cluster keeps members of two clusters started side by side from
        // ever mistaking each other's peers for their own.
        let token = format!("leasehold-{}-{}", std::process::id(), rand::random::<u64>());
        let mut members = Vec::with_capacity(count);
        for (i, &(client_port, peer_port)) in ports.iter().enumerate() {
            let name = format!("m{i}");
            let data_dir = dir.path().join(format!("{name}.etcd"));
            let client = format!("http://127.0.0.1:{client_port}");
            let peer = format!("http://127.0.0.1:{peer_port}");
            let args = vec![
                "--name".into(),
                name.clone(),
                "--data-dir".into(),
                data_dir.to_string_lossy().into_owned(),
                "--listen-client-urls".into(),
                client.clone(),
                "--advertise-client-urls".into(),
                client,
                "--listen-peer-urls".into(),
                peer.clone(),
                "--initial-advertise-peer-urls".into(),
                peer,
                "--initial-cluster".into(),
                initial_cluster.clone(),
                "--initial-cluster-state".into(),
                "new".into(),
                "--initial-cluster-token".into(),
                token.clone(),
                "--heartbeat-interval".into(),
                HEARTBEAT_INTERVAL.as_millis().to_string(),
                "--election-timeout".into(),
                ELECTION_TIMEOUT.as_millis().to_string(),
                "--logger".into(),
                "zap".into(),
                "--log-outputs".into(),
                "stderr".into(),
                "--log-level".into(),
                "warn".into(),
            ];
            let mut member = EtcdMember {
                log: dir.path().join(format!("{name}.log")),
                name,
                client_port,
                peer_port,
                data_dir,
                args,
                daemon: Daemon::default(),
            };
            member.spawn()?;
            members.push(member);
        }
        let mut cluster = Self { members, dir };
        cluster.wait_until_healthy(SETTLE_TIMEOUT)?;
        Ok(cluster)
    }

    /// The members.
    pub fn members(&self) -> &[EtcdMember] {
        &self.members
    }

    /// Member `i`.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn member(&self, i: usize) -> &EtcdMember {
        &self.members[i]
    }

    /// Member `i`, to pause, resume, kill or restart by hand.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn member_mut(&mut self, i: usize) -> &mut EtcdMember {
        &mut self.members[i]
    }

    /// The directory holding every member's data directory and log.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Every member's client address.
    pub fn client_addrs(&self) -> Vec<SocketAddr> {
        self.members.iter().map(EtcdMember::client_addr).collect()
    }

    /// `127.0.0.1:a,127.0.0.1:b,…`: every member's client address.
    pub fn endpoints(&self) -> String {
        self.client_addrs()
            .iter()
            .map(SocketAddr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `etcd://127.0.0.1:a,127.0.0.1:b,…`.
    pub fn url(&self) -> String {
        format!("etcd://{}", self.endpoints())
    }

    /// The index of the leader: a running, unpaused member that reports itself as leader (the one
    /// with the highest raft term, should an old leader not know it was replaced).
    ///
    /// # Errors
    /// No live member knows of a leader among them.
    pub fn leader(&self) -> io::Result<usize> {
        let mut best: Option<(u64, usize)> = None;
        let mut last = io::Error::other("no member is running and unpaused");
        for (i, m) in self.live() {
            match m.status() {
                Ok((id, leader, term)) if !id.is_empty() && id == leader => {
                    if best.is_none_or(|(t, _)| term > t) {
                        best = Some((term, i));
                    }
                }
                Ok(_) => last = io::Error::other(format!("member {i} is not the leader")),
                Err(e) => last = e,
            }
        }
        best.map(|(_, i)| i).ok_or(last)
    }

    /// Waits until every live member reports the same leader and that leader is live; returns it.
    ///
    /// # Errors
    /// Not so within `timeout`.
    pub fn wait_for_leader(&self, timeout: Duration) -> io::Result<usize> {
        poll_until(timeout, "etcd leader election", || {
            let leader = self.leader()?;
            let (leader_id, _, _) = self.members[leader].status()?;
            for (i, m) in self.live() {
                let (_, knows, _) = m.status()?;
                if knows != leader_id {
                    return Err(io::Error::other(format!(
                        "member {i} does not follow member {leader} yet"
                    )));
                }
            }
            Ok(Some(leader))
        })
    }

    /// Waits until every running, unpaused member answers `/health` with `true` (it has a leader
    /// and can serve a read).
    ///
    /// # Errors
    /// A member has exited, or not all are healthy within `timeout`.
    pub fn wait_until_healthy(&mut self, timeout: Duration) -> io::Result<()> {
        poll_until(timeout, "etcd members to be healthy", || {
            for m in self.members.iter_mut() {
                if m.is_running() {
                    m.check_alive()?;
                }
            }
            for (i, m) in self.live() {
                if !m.healthy()? {
                    return Err(io::Error::other(format!("member {i} is not healthy yet")));
                }
            }
            if self.live().next().is_none() {
                return Err(fatal("no etcd member is running and unpaused".into()));
            }
            Ok(Some(()))
        })
    }

    /// SIGKILLs member `i`.
    ///
    /// # Errors
    /// Reaping failed.
    pub fn kill_member(&mut self, i: usize) -> io::Result<()> {
        self.members[i].kill()
    }

    /// Restarts member `i` with its data and waits until every live member is healthy.
    ///
    /// # Errors
    /// It does not start, or the cluster is not healthy within 30 s.
    pub fn restart_member(&mut self, i: usize) -> io::Result<()> {
        self.members[i].restart()?;
        self.wait_until_healthy(SETTLE_TIMEOUT)
    }

    /// SIGSTOPs member `i`.
    ///
    /// # Errors
    /// It is not running.
    pub fn pause_member(&mut self, i: usize) -> io::Result<()> {
        self.members[i].pause()
    }

    /// SIGCONTs member `i`.
    ///
    /// # Errors
    /// It is not running.
    pub fn resume_member(&mut self, i: usize) -> io::Result<()> {
        self.members[i].resume()
    }

    /// Runs `etcdctl` (API v3) against the running, unpaused members with `args`, e.g.
    /// `["put", "k", "v"]`; returns its standard output.
    ///
    /// # Errors
    /// `etcdctl` is missing (install `etcd-client`), or it fails (the error quotes its stderr).
    pub fn etcdctl(&self, args: &[&str]) -> io::Result<String> {
        let endpoints: Vec<SocketAddr> = self.live().map(|(_, m)| m.client_addr()).collect();
        etcdctl(&endpoints, args)
    }

    fn live(&self) -> impl Iterator<Item = (usize, &EtcdMember)> {
        self.members
            .iter()
            .enumerate()
            .filter(|(_, m)| m.is_running() && !m.is_paused())
    }
}

fn etcdctl(endpoints: &[SocketAddr], args: &[&str]) -> io::Result<String> {
    let endpoints = endpoints
        .iter()
        .map(SocketAddr::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let out = Command::new(etcdctl_binary())
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoints}"))
        .arg("--dial-timeout=2s")
        .arg("--command-timeout=5s")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("could not run etcdctl: {e}; install it (apt-get install -y etcd-client) or set ETCDCTL_BIN"),
            )
        })?;
    if !out.status.success() {
        return Err(io::Error::other(format!(
            "etcdctl {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// One HTTP/1.0 request (so the reply is never chunked) over plain TCP, with short timeouts;
/// returns the body of a 200 reply.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> io::Result<String> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )?;
    let mut reply = String::new();
    stream.read_to_string(&mut reply)?;
    let (head, body) = reply
        .split_once("\r\n\r\n")
        .ok_or_else(|| io::Error::other(format!("incomplete HTTP reply from {addr}{path}")))?;
    let status = head.lines().next().unwrap_or_default();
    if !status.contains(" 200 ") {
        return Err(io::Error::other(format!(
            "{addr}{path} answered {status}: {body}"
        )));
    }
    Ok(body.to_owned())
}
