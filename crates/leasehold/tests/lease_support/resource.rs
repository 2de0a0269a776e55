//! Judging holds at a resource, with worker processes: a small TCP server in the test process that
//! each worker tells "enter <pid> <fence>" after acquiring and "exit" before releasing, each
//! acknowledged before the worker goes on, so the resource's timestamps follow the real order of
//! events; a worker killed while inside is seen leaving when its connection closes. The workers are
//! the test binary itself, run again as an ignored test that calls [`work`] (each test file that
//! uses them has one, named `queue_worker`).

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold::{Error, LeaseClient, LeaseOptions};
use leasehold_testkit::RedisServer;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use super::{eventually, ms};

/// Waiters in the Redis queue of `name`.
pub async fn queue_len(srv: &RedisServer, c: &LeaseClient, name: &str) -> i64 {
    let mut con = srv.connection().unwrap();
    redis::cmd("ZCARD")
        .arg(
            leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), name)
                .unwrap()
                .queue,
        )
        .query(&mut con)
        .unwrap()
}

/// Waits (up to 10 s) until `n` waiters are queued for `name`.
pub async fn wait_for_queue(srv: &RedisServer, c: &LeaseClient, name: &str, n: i64) {
    assert!(
        eventually(ms(10_000), async || queue_len(srv, c, name).await == n).await,
        "the queue of {name} never reached {n}"
    );
}

/// The most stays that were inside at once.
pub fn max_concurrency(stays: &[Stay], end: Instant) -> usize {
    let mut events: Vec<(Instant, i32)> = Vec::new();
    for s in stays {
        events.push((s.entered, 1));
        events.push((s.left.unwrap_or(end), -1));
    }
    // At equal instants, leaving comes first: the resource recorded the exit before the entry.
    events.sort_by_key(|&(t, d)| (t, d));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in events {
        now += d;
        most = most.max(now);
    }
    most as usize
}

/// One stay inside the resource, as the resource saw it.
#[derive(Debug, Clone, Copy)]
pub struct Stay {
    pub pid: u32,
    pub fence: u64,
    pub entered: Instant,
    pub left: Option<Instant>,
    /// The worker's connection closed while it was inside: it was killed holding the lease.
    pub killed: bool,
}

/// The resource: every stay, and who is inside now.
#[derive(Debug, Clone, Default)]
pub struct Resource {
    stays: Arc<Mutex<Vec<Stay>>>,
}

impl Resource {
    pub async fn start() -> (Resource, SocketAddr) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let r = Resource::default();
        let stays = r.stays.clone();
        tokio::spawn(async move {
            while let Ok((sock, _)) = listener.accept().await {
                tokio::spawn(visit(sock, stays.clone()));
            }
        });
        (r, addr)
    }

    pub fn inside(&self) -> Option<u32> {
        self.stays
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|s| s.left.is_none())
            .map(|s| s.pid)
    }

    pub fn stays(&self) -> Vec<Stay> {
        let mut v = self.stays.lock().unwrap().clone();
        v.sort_by_key(|s| s.entered);
        v
    }
}

/// One worker's connection: "enter <pid> <fence>" and "exit", each answered "ok" after it is
/// recorded.
async fn visit(sock: tokio::net::TcpStream, stays: Arc<Mutex<Vec<Stay>>>) {
    let (r, mut w) = sock.into_split();
    let mut lines = BufReader::new(r).lines();
    let mut open: Option<usize> = None;
    loop {
        let line = match lines.next_line().await {
            Ok(Some(line)) => line,
            _ => {
                if let Some(i) = open.take() {
                    let mut s = stays.lock().unwrap();
                    s[i].left = Some(Instant::now());
                    s[i].killed = true;
                }
                return;
            }
        };
        let mut words = line.split_whitespace();
        match words.next() {
            Some("enter") => {
                let pid = words.next().and_then(|p| p.parse().ok()).unwrap_or(0);
                let fence = words.next().and_then(|f| f.parse().ok()).unwrap_or(0);
                let mut s = stays.lock().unwrap();
                s.push(Stay {
                    pid,
                    fence,
                    entered: Instant::now(),
                    left: None,
                    killed: false,
                });
                open = Some(s.len() - 1);
            }
            Some("exit") => {
                if let Some(i) = open.take() {
                    stays.lock().unwrap()[i].left = Some(Instant::now());
                }
            }
            _ => {}
        }
        if w.write_all(b"ok\n").await.is_err() {
            return;
        }
    }
}

/// How a worker process behaves.
#[derive(Debug, Clone)]
pub struct WorkerSpec {
    pub url: String,
    pub name: String,
    pub resource: SocketAddr,
    pub ttl_ms: u64,
    pub hold_ms: u64,
    /// First TTL after a hand-over (default: the library's).
    pub handoff_ms: Option<u64>,
    /// The unsafe variant: go on holding after the lease is lost, without renewal.
    pub ignore_loss: bool,
    /// Permits of the name (1: a lock).
    pub permits: u32,
    /// Stop taking the lease at this time (replacements of killed workers stop with the others).
    pub until: SystemTime,
}

impl WorkerSpec {
    pub fn spawn(&self) -> Child {
        let until_ms = self.until.duration_since(UNIX_EPOCH).unwrap().as_millis() as u64;
        Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "queue_worker", "--ignored", "--nocapture"])
            .env("LEASEHOLD_QUEUE_WORKER", "1")
            .env("LHQ_URL", &self.url)
            .env("LHQ_NAME", &self.name)
            .env("LHQ_RESOURCE", self.resource.to_string())
            .env("LHQ_TTL_MS", self.ttl_ms.to_string())
            .env("LHQ_HOLD_MS", self.hold_ms.to_string())
            .env(
                "LHQ_HANDOFF_MS",
                self.handoff_ms.map(|m| m.to_string()).unwrap_or_default(),
            )
            .env("LHQ_IGNORE_LOSS", if self.ignore_loss { "1" } else { "" })
            .env("LHQ_PERMITS", self.permits.to_string())
            .env("LHQ_UNTIL_MS", until_ms.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a worker process")
    }
}

pub fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_default()
}

/// The worker's loop (see [`WorkerSpec`]): acquire, enter, hold, exit, release, until its time is up.
pub async fn work() {
    let num = |n: &str| env(n).parse::<u64>().ok();
    let until = UNIX_EPOCH + Duration::from_millis(num("LHQ_UNTIL_MS").unwrap());
    let ignore_loss = env("LHQ_IGNORE_LOSS") == "1";
    let mut b = LeaseOptions::builder()
        .ttl(ms(num("LHQ_TTL_MS").unwrap()))
        .permits(num("LHQ_PERMITS").unwrap_or(1) as u32);
    if let Some(first) = num("LHQ_HANDOFF_MS") {
        b = b.handoff_ttl(ms(first));
    }
    if ignore_loss {
        b = b.no_renewal();
    }
    let opts = b.build().unwrap();
    let hold = ms(num("LHQ_HOLD_MS").unwrap());
    let name = env("LHQ_NAME");
    let client = LeaseClient::builder(env("LHQ_URL"))
        .response_timeout(ms(2_000))
        .connect()
        .await
        .unwrap();
    let sock = tokio::net::TcpStream::connect(env("LHQ_RESOURCE"))
        .await
        .unwrap();
    let (r, mut w) = sock.into_split();
    let mut acks = BufReader::new(r).lines();
    let pid = std::process::id();
    loop {
        let Ok(left) = until.duration_since(SystemTime::now()) else {
            return;
        };
        let lease = match client.acquire(&name, &opts, left).await {
            Ok(l) => l,
            Err(Error::WaitTimeout { .. }) => return,
            Err(e) => {
                eprintln!("worker {pid}: {e}");
                tokio::time::sleep(ms(50)).await;
                continue;
            }
        };
        w.write_all(format!("enter {pid} {}\n", lease.fence()).as_bytes())
            .await
            .unwrap();
        acks.next_line().await.unwrap();
        if ignore_loss {
            tokio::time::sleep(hold).await;
        } else {
            let lost = lease.lost();
            tokio::select! {
                _ = tokio::time::sleep(hold) => {}
                _ = lost.fired() => {}
            }
        }
        w.write_all(b"exit\n").await.unwrap();
        acks.next_line().await.unwrap();
        let _ = lease.release().await;
    }
}

/// What the resource's record says.
#[derive(Debug)]
pub struct Verdict {
    pub stays: usize,
    pub overlaps: usize,
    pub fence_regressions: usize,
    /// Gaps between one stay's end and the next one's start that exceeded their bound.
    pub stalls: Vec<(Duration, Duration)>,
    pub longest_gap: Duration,
}

/// Judges the stays: overlaps, fences in order, and each gap against `bound(previous stay)`.
pub fn judge(stays: &[Stay], end: Instant, bound: impl Fn(&Stay) -> Duration) -> Verdict {
    let mut v = Verdict {
        stays: stays.len(),
        overlaps: 0,
        fence_regressions: 0,
        stalls: Vec::new(),
        longest_gap: Duration::ZERO,
    };
    let mut latest_left: Option<Instant> = None;
    for (i, s) in stays.iter().enumerate() {
        if latest_left.is_some_and(|l| s.entered < l) {
            v.overlaps += 1;
        }
        let left = s.left.unwrap_or(end);
        latest_left = Some(latest_left.map_or(left, |l| l.max(left)));
        if i > 0 {
            let prev = &stays[i - 1];
            if s.fence <= prev.fence {
                v.fence_regressions += 1;
            }
            let gap = s
                .entered
                .saturating_duration_since(prev.left.unwrap_or(end));
            v.longest_gap = v.longest_gap.max(gap);
            if gap > bound(prev) {
                v.stalls.push((gap, bound(prev)));
            }
        }
    }
    v
}

pub fn soak_seconds(default: u64) -> Duration {
    Duration::from_secs(
        std::env::var("LEASEHOLD_QUEUE_SOAK_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(default),
    )
}

pub fn reap(children: &mut [Child], within: Duration) {
    let end = Instant::now() + within;
    for c in children.iter_mut() {
        loop {
            if c.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > end {
                let _ = c.kill();
                let _ = c.wait();
                panic!("a worker did not stop by itself");
            }
            std::thread::sleep(ms(20));
        }
    }
}
