//! The etcd store against real etcd on loopback, one private cluster per test (a single member, or
//! three): what the contract suite (`mod contract` below) cannot show.
//! Waiters across clients are served in FIFO order; a busy try leaves no key and a waiter that gives
//! up leaves the queue; a member, the leader included, is killed under a held lease and the lease
//! lives on while a lone member's death loses it; a holder process paused past its TTL loses the
//! lease to the next holder and its late fenced write is refused where an unfenced one lands;
//! wrong endpoints, TLS and credentials give clear errors.

mod lease_support;

use std::io::{BufRead, BufReader, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lease_support::{eventually, ms};
use leasehold::db::Database;
use leasehold::{Error, Fence, LeaseClient, LeaseOptions, LostReason, Phase};
use leasehold_testkit::etcd::EtcdCluster;
use tokio::time::Instant;

async fn start(members: usize) -> EtcdCluster {
    tokio::task::spawn_blocking(move || EtcdCluster::start(members))
        .await
        .unwrap()
        .expect("start etcd (is etcd-server installed?)")
}

async fn client(url: &str) -> LeaseClient {
    lease_support::client_at(url, ms(1_000)).await
}

fn opts(ttl_ms: u64) -> LeaseOptions {
    LeaseOptions::with_ttl(ms(ttl_ms)).unwrap()
}

/// How many contenders (holder and waiters) have a key in `name`'s queue, as etcd itself says.
fn queue_len(etcd: &EtcdCluster, name: &str) -> usize {
    let out = tokio::task::block_in_place(|| {
        etcd.etcdctl(&[
            "get",
            "--prefix",
            "--keys-only",
            &format!("leasehold/{{{name}}}/"),
        ])
    })
    .expect("etcdctl get");
    out.lines().filter(|l| !l.trim().is_empty()).count()
}

async fn queue_reaches(etcd: &EtcdCluster, name: &str, n: usize) -> bool {
    eventually(ms(5_000), async || queue_len(etcd, name) == n).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_different_clients_are_served_first_come_first_served() {
    let etcd = start(1).await;
    let url = etcd.url();
    let holder = client(&url).await;
    let a = holder.try_acquire("fifo", &opts(10_000)).await.unwrap();
    let served = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for (i, who) in ["b", "c", "d", "e"].into_iter().enumerate() {
        let (c, served) = (client(&url).await, served.clone());
        tasks.push(tokio::spawn(async move {
            let l = c.acquire("fifo", &opts(10_000), ms(30_000)).await.unwrap();
            served.lock().unwrap().push((who, l.fence()));
            tokio::time::sleep(ms(30)).await;
            l.release().await.unwrap();
        }));
        // Each waiter queues before the next one starts.
        assert!(queue_reaches(&etcd, "fifo", i + 2).await, "{who} queued");
    }
    let mut last = a.fence();
    a.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let served = served.lock().unwrap();
    let order: Vec<&str> = served.iter().map(|(w, _)| *w).collect();
    assert_eq!(
        order,
        ["b", "c", "d", "e"],
        "served in the order they queued"
    );
    for (_, f) in served.iter() {
        assert!(*f > last, "fences grow along the queue: {served:?}");
        last = *f;
    }
    assert_eq!(queue_len(&etcd, "fifo"), 0, "the queue is empty at the end");
}

/// Every key of `name` (its fence record and its queue), as etcd itself says.
fn keys_of(etcd: &EtcdCluster, name: &str) -> Vec<String> {
    let out = tokio::task::block_in_place(|| {
        etcd.etcdctl(&[
            "get",
            "--prefix",
            "--keys-only",
            &format!("leasehold/{{{name}}}"),
        ])
    })
    .expect("etcdctl get");
    out.lines()
        .filter(|l| !l.trim().is_empty())
        .map(str::to_owned)
        .collect()
}

/// A name no longer used leaves nothing behind: its fence record rides on a lease of the writing
/// client that lapses the retention after the last write (here 1 s, the lease 2 s). The fence, the
/// cluster's revision, keeps growing when the name is used again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_name_leaves_nothing_after_the_retention_and_its_fences_still_grow() {
    let etcd = start(1).await;
    let c = LeaseClient::builder(etcd.url())
        .response_timeout(ms(1_000))
        .connect_timeout(ms(1_000))
        .retention(ms(1_000))
        .connect()
        .await
        .unwrap();
    let mut last = None;
    for name in ["idle-a", "idle-b"] {
        let lease = c.try_acquire(name, &opts(5_000)).await.unwrap();
        assert!(last.is_none_or(|f| lease.fence() > f));
        last = Some(lease.fence());
        lease.release().await.unwrap();
        assert_eq!(keys_of(&etcd, name), vec![format!("leasehold/{{{name}}}")]);
    }
    assert!(
        eventually(ms(6_000), async || keys_of(&etcd, "idle-a").is_empty()
            && keys_of(&etcd, "idle-b").is_empty())
        .await,
        "the records are still there: {:?}",
        keys_of(&etcd, "idle-a")
    );
    let again = c.try_acquire("idle-a", &opts(5_000)).await.unwrap();
    assert!(
        again.fence() > last.unwrap(),
        "fences grow after the record went"
    );
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_try_leaves_no_key_and_waiters_that_give_up_leave_the_queue() {
    let etcd = start(1).await;
    let url = etcd.url();
    let c = client(&url).await;
    let a = c.try_acquire("q", &opts(10_000)).await.unwrap();
    let other = client(&url).await;
    for _ in 0..3 {
        assert!(matches!(
            other.try_acquire("q", &opts(10_000)).await,
            Err(Error::Busy { .. })
        ));
    }
    assert_eq!(queue_len(&etcd, "q"), 1, "a busy try put nothing");
    // A wait that times out withdraws from the queue.
    assert!(matches!(
        other.acquire("q", &opts(10_000), ms(400)).await,
        Err(Error::WaitTimeout { .. })
    ));
    assert_eq!(queue_len(&etcd, "q"), 1, "the timed-out waiter left");
    // A waiter whose task is dropped withdraws in the background; its 30 s etcd lease would
    // otherwise hold up everyone behind it for 30 s after the holder leaves.
    let quitter = client(&url).await;
    let dropped = tokio::spawn(async move {
        let _ = quitter.acquire("q", &opts(30_000), ms(60_000)).await;
    });
    assert!(queue_reaches(&etcd, "q", 2).await);
    let patient = client(&url).await;
    let behind = tokio::spawn(async move {
        let l = patient
            .acquire("q", &opts(30_000), ms(60_000))
            .await
            .unwrap();
        let f = l.fence();
        l.release().await.unwrap();
        f
    });
    assert!(queue_reaches(&etcd, "q", 3).await);
    dropped.abort();
    assert!(
        queue_reaches(&etcd, "q", 2).await,
        "the dropped waiter's key went"
    );
    let released_at = Instant::now();
    let fence_a = a.fence();
    a.release().await.unwrap();
    let fence_b = behind.await.unwrap();
    assert!(fence_b > fence_a);
    assert!(
        released_at.elapsed() < ms(10_000),
        "the waiter behind the dropped one was served at the release, not after 30 s: {:?}",
        released_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_keeps_whole_seconds_and_the_holder_stops_first() {
    let etcd = start(1).await;
    let c = client(&etcd.url()).await;
    // 2.1 s asked: etcd keeps it 3 s; the holder's deadline is 2.1 s minus drift.
    let o = LeaseOptions::builder()
        .ttl(ms(2_100))
        .no_renewal()
        .build()
        .unwrap();
    let before = Instant::now();
    let a = c.try_acquire("seconds", &o).await.unwrap();
    let info = c.inspect("seconds").await.unwrap();
    assert!(info.held);
    let ttl = info.ttl_ms.expect("a held lease has a TTL in etcd");
    assert!((2_000..=3_000).contains(&ttl), "{ttl}");
    let reason = tokio::time::timeout(ms(5_000), a.lost().fired())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::DeadlinePassed);
    let held = c.inspect("seconds").await.unwrap().held;
    // etcd expires it 3 s after the grant at the earliest; a machine too loaded to look before
    // then cannot tell.
    if before.elapsed() < ms(2_900) {
        assert!(
            held,
            "etcd still has it when the holder's own deadline passes"
        );
    }
    assert!(
        eventually(ms(5_000), async || !c
            .inspect("seconds")
            .await
            .unwrap()
            .held)
        .await
    );
    assert!(matches!(a.release().await, Err(Error::LeaseLost { .. })));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_acquirers_on_three_members_never_overlap_and_fences_grow() {
    let etcd = start(3).await;
    let url = etcd.url();
    let mut clients = Vec::new();
    for _ in 0..6 {
        clients.push(client(&url).await);
    }
    // Tries at the same instant: one wins each round.
    let mut last = Fence::new(0);
    for _ in 0..8 {
        let go = Arc::new(tokio::sync::Barrier::new(clients.len()));
        let tries = clients.iter().cloned().map(|c| {
            let go = go.clone();
            tokio::spawn(async move {
                go.wait().await;
                c.try_acquire("race", &opts(5_000)).await
            })
        });
        let results = futures::future::join_all(tries).await;
        let mut won = Vec::new();
        for r in results {
            match r.unwrap() {
                Ok(l) => won.push(l),
                Err(Error::Busy { .. }) => {}
                Err(e) => panic!("unexpected {e}"),
            }
        }
        assert_eq!(won.len(), 1, "exactly one winner");
        let l = won.pop().unwrap();
        assert!(l.fence() > last);
        last = l.fence();
        l.release().await.unwrap();
    }
    // Waiters of six clients (two tasks each) take turns; never two inside.
    let inside = Arc::new(AtomicU64::new(0));
    let fences = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for c in &clients {
        for _ in 0..2 {
            let (c, inside, fences) = (c.clone(), inside.clone(), fences.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..3 {
                    let l = c.acquire("race", &opts(5_000), ms(60_000)).await.unwrap();
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two holders");
                    fences.lock().unwrap().push(l.fence());
                    tokio::time::sleep(ms(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    l.release().await.unwrap();
                }
            }));
        }
    }
    for t in tasks {
        t.await.unwrap();
    }
    let fences = fences.lock().unwrap();
    assert_eq!(fences.len(), 36);
    assert!(fences[0] > last);
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
}

/// Takes and releases `name` over and over until told to stop, recording every fence it got.
fn churn(
    c: LeaseClient,
    name: &'static str,
    stop: Arc<AtomicU64>,
) -> tokio::task::JoinHandle<Vec<Fence>> {
    tokio::spawn(async move {
        let mut got = Vec::new();
        while stop.load(Ordering::SeqCst) == 0 {
            match c.acquire(name, &opts(4_000), ms(5_000)).await {
                Ok(l) => {
                    got.push(l.fence());
                    tokio::time::sleep(ms(20)).await;
                    let _ = l.release().await;
                }
                // An election or a dead member: try again.
                Err(_) => tokio::time::sleep(ms(50)).await,
            }
        }
        got
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_a_member_or_the_leader_keeps_a_held_lease_alive() {
    let mut etcd = start(3).await;
    let url = etcd.url();
    let c = client(&url).await;
    let observer = client(&url).await;
    let ttl = 5_000;
    let l = c.try_acquire("kept", &opts(ttl)).await.unwrap();
    let fence = l.fence();
    let stop = Arc::new(AtomicU64::new(0));
    let churner = churn(client(&url).await, "churn", stop.clone());

    for kill_leader in [false, true] {
        let leader = tokio::task::block_in_place(|| etcd.leader()).unwrap();
        let victim = if kill_leader {
            leader
        } else {
            (leader + 1) % 3
        };
        tokio::task::block_in_place(|| etcd.kill_member(victim)).unwrap();
        let killed_at = Instant::now();
        if kill_leader {
            tokio::task::block_in_place(|| etcd.wait_for_leader(Duration::from_secs(20))).unwrap();
        }
        // Past a whole TTL after the kill, the lease is still ours: renewals went through the
        // members left (the deadline only moves on a renewal etcd accepted).
        tokio::time::sleep_until(killed_at + ms(ttl + 1_000)).await;
        assert!(
            !l.is_lost(),
            "lost after killing member {victim} (leader: {kill_leader})"
        );
        assert!(l.remaining() > ms(1_000), "{:?}", l.remaining());
        let info = observer.inspect("kept").await.unwrap();
        assert!(info.held);
        assert_eq!(info.fence, Some(fence));
        assert!(matches!(
            observer.try_acquire("kept", &opts(ttl)).await,
            Err(Error::Busy { .. })
        ));
        tokio::task::block_in_place(|| etcd.restart_member(victim)).unwrap();
    }
    l.release().await.unwrap();
    let next = observer.try_acquire("kept", &opts(ttl)).await.unwrap();
    assert!(next.fence() > fence);
    next.release().await.unwrap();
    stop.store(1, Ordering::SeqCst);
    let churned = churner.await.unwrap();
    assert!(churned.len() >= 5, "{churned:?}");
    assert!(
        churned.windows(2).all(|w| w[1] > w[0]),
        "fences strictly increase across the kills: {churned:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_only_member_loses_the_lease_at_its_deadline() {
    // What the test above would see if the lease did not survive: one member, killed.
    let mut etcd = start(1).await;
    let c = client(&etcd.url()).await;
    let l = c.try_acquire("gone", &opts(2_000)).await.unwrap();
    tokio::task::block_in_place(|| etcd.kill_member(0)).unwrap();
    let reason = tokio::time::timeout(ms(5_000), l.lost().fired())
        .await
        .expect("the holder is told within its deadline");
    assert_eq!(reason, LostReason::DeadlinePassed);
}

/// The holder process of the paused-holder test, started by it as a child (the test binary run
/// again on this test alone). Protocol on stdout: `CHILD fence N`, then after `write` on stdin,
/// `CHILD lost true|false`, `CHILD fenced ok|refused`, `CHILD unfenced ok`.
#[tokio::test]
#[ignore = "the child process of a_paused_holder_loses_its_lease_and_its_fenced_write_is_refused"]
async fn paused_holder_child() {
    let (Ok(url), Ok(db_url)) = (
        std::env::var("LEASEHOLD_TEST_CHILD_ETCD"),
        std::env::var("LEASEHOLD_TEST_CHILD_DB"),
    ) else {
        return;
    };
    let db = Database::connect(&db_url).await.unwrap();
    let c = client(&url).await;
    let l = c.try_acquire("nightly", &opts(1_000)).await.unwrap();
    println!("CHILD fence {}", l.fence());
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    // Give the runtime a moment to notice the deadline that passed while the process was stopped.
    tokio::time::sleep(ms(50)).await;
    println!("CHILD lost {}", l.is_lost());
    // The write was already under way when the process stopped: it goes ahead whatever the
    // signal says, as a write in flight does.
    let fenced = match db.begin_fenced("report", l.fence()).await {
        Ok(mut tx) => {
            tx.execute("UPDATE report SET writer = 'paused holder'", &[])
                .await
                .unwrap();
            tx.commit().await.unwrap();
            "ok"
        }
        Err(Error::StaleFence { .. }) => "refused",
        Err(e) => panic!("{e}"),
    };
    println!("CHILD fenced {fenced}");
    let mut tx = db.begin().await.unwrap();
    tx.execute("UPDATE report SET unfenced_writer = 'paused holder'", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    println!("CHILD unfenced ok");
    let _ = l.release().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_loses_its_lease_and_its_fenced_write_is_refused() {
    let etcd = start(1).await;
    let dir = tempfile::tempdir().unwrap();
    let db_url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("report.db").display()
    );
    let db = Database::connect(&db_url).await.unwrap();
    db.migrate().await.unwrap();
    let mut tx = db.begin().await.unwrap();
    tx.execute(
        "CREATE TABLE report (writer TEXT NOT NULL, unfenced_writer TEXT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    tx.execute("INSERT INTO report VALUES ('nobody', 'nobody')", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "paused_holder_child",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LEASEHOLD_TEST_CHILD_ETCD", etcd.url())
        .env("LEASEHOLD_TEST_CHILD_DB", &db_url)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let mut stdin = child.stdin.take().unwrap();
    let (tx_lines, mut lines) = tokio::sync::mpsc::unbounded_channel();
    let stdout = child.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // The test harness prints its own words on the same line before the child's.
            if let Some(at) = line.find("CHILD ") {
                let _ = tx_lines.send(line[at + "CHILD ".len()..].to_owned());
            }
        }
    });
    let mut next = async || {
        tokio::time::timeout(ms(20_000), lines.recv())
            .await
            .expect("the child answers")
            .expect("the child is alive")
    };
    let first = next().await;
    let paused_fence: u64 = first
        .strip_prefix("fence ")
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("{first}"));
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();

    // etcd expires the stopped holder's lease on its own (1 s asked, etcd's minimum of 2 s kept),
    // and the next holder gets a larger fence and writes with it.
    let c = client(&etcd.url()).await;
    let next_holder = c
        .acquire("nightly", &opts(10_000), ms(10_000))
        .await
        .expect("the stopped holder's lease expires in etcd");
    assert!(next_holder.fence() > Fence::new(paused_fence));
    let mut tx = db
        .begin_fenced("report", next_holder.fence())
        .await
        .unwrap();
    tx.execute(
        "UPDATE report SET writer = 'next holder', unfenced_writer = 'next holder'",
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();

    // The stopped holder resumes and finishes its write.
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT).unwrap();
    stdin.write_all(b"write\n").unwrap();
    stdin.flush().unwrap();
    assert_eq!(
        next().await,
        "lost true",
        "it learns of the loss when it runs again"
    );
    assert_eq!(
        next().await,
        "fenced refused",
        "its fenced write is refused"
    );
    assert_eq!(next().await, "unfenced ok");
    assert!(child.wait().unwrap().success());

    let mut tx = db.begin().await.unwrap();
    let fenced_rows = tx
        .fetch_i64(
            "SELECT COUNT(*) FROM report WHERE writer = 'next holder'",
            &[],
        )
        .await
        .unwrap();
    let clobbered = tx
        .fetch_i64(
            "SELECT COUNT(*) FROM report WHERE unfenced_writer = 'paused holder'",
            &[],
        )
        .await
        .unwrap();
    drop(tx);
    assert_eq!(
        fenced_rows,
        Some(1),
        "the fenced column keeps the next holder's write"
    );
    assert_eq!(
        clobbered,
        Some(1),
        "without the fence the paused holder's late write overwrote the next holder's"
    );
    assert!(next_holder.fence() > Fence::new(paused_fence));
    next_holder.release().await.unwrap();
}

/// A TCP port that answers every connection with a plain HTTP/1.1 reply.
fn http_server() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = [0u8; 1024];
            let _ = std::io::Read::read(&mut s, &mut buf);
            let _ = s.write_all(
                b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_endpoints_are_clear_errors_without_the_password() {
    let quick = |url: String| async move {
        LeaseClient::builder(url)
            .connect_timeout(ms(1_000))
            .response_timeout(ms(1_000))
            .connect()
            .await
    };
    // Nothing listens: unreachable, exit 69 in the CLI.
    let down = leasehold_testkit::free_port();
    let err = quick(format!("etcd://u:secret@127.0.0.1:{down}"))
        .await
        .unwrap_err();
    let msg = err.to_string();
    println!("down: {msg}");
    assert!(err.is_unavailable(), "{msg}");
    assert!(!msg.contains("secret"), "{msg}");

    // A Redis server, and a plain HTTP server: they answer, but not as etcd.
    let redis = lease_support::server();
    let http = http_server();
    for (what, port) in [("redis", redis.port()), ("http", http)] {
        let err = quick(format!("etcd://u:secret@127.0.0.1:{port}"))
            .await
            .unwrap_err();
        let msg = err.to_string();
        println!("{what}: {msg}");
        assert!(
            matches!(
                err,
                Error::Invalid {
                    what: "etcd url",
                    ..
                }
            ),
            "{what}: {msg}"
        );
        assert!(msg.contains("not as etcd"), "{what}: {msg}");
        assert!(
            msg.contains("2379"),
            "the fix names etcd's client port: {msg}"
        );
        assert!(!msg.contains("secret"), "{msg}");
    }

    // An etcd member spoken to in TLS when it serves plain text.
    let etcd = start(1).await;
    let tls_url = etcd.url().replacen("etcd://", "etcds://", 1);
    let err = quick(tls_url).await.unwrap_err();
    println!("tls to plain: {err}");
    assert!(
        matches!(
            err,
            Error::Invalid {
                what: "etcd url",
                ..
            }
        ) || err.is_unavailable(),
        "{err}"
    );

    // The replica wait is Redis's; etcd refuses it by name.
    let c = client(&etcd.url()).await;
    let o = LeaseOptions::builder()
        .wait_for_replicas(1, ms(100), leasehold::ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    let err = c.try_acquire("r", &o).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                what: "replica wait",
                ..
            }
        ),
        "{err}"
    );
    assert_eq!(queue_len(&etcd, "r"), 0, "nothing held");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_come_from_the_url_and_a_wrong_password_is_refused() {
    let etcd = start(1).await;
    tokio::task::block_in_place(|| {
        etcd.etcdctl(&["user", "add", "root:r00t-pw"])?;
        etcd.etcdctl(&["auth", "enable"])
    })
    .unwrap();
    let endpoints = etcd.endpoints();
    let c = client(&format!("etcd://root:r00t-pw@{endpoints}")).await;
    let l = c.try_acquire("authed", &opts(2_000)).await.unwrap();
    l.release().await.unwrap();
    let err = LeaseClient::connect(&format!("etcd://root:wrong-pw@{endpoints}"))
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        matches!(
            err,
            Error::Unauthorized {
                phase: Phase::Connect,
                ..
            }
        ),
        "{msg}"
    );
    assert!(msg.contains("authentication failed"), "{msg}");
    assert!(!msg.contains("wrong-pw"), "{msg}");
    let err = LeaseClient::connect(&format!("etcd://{endpoints}"))
        .await
        .map(drop)
        .unwrap_err();
    assert!(
        matches!(err, Error::Unauthorized { .. }) && err.to_string().contains("user name is empty"),
        "{err}"
    );
}

/// A single etcd member serving TLS on its client port with a certificate from a private CA.
struct TlsEtcd {
    child: std::process::Child,
    port: u16,
    /// The CA's certificate, PEM.
    ca: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl Drop for TlsEtcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_etcd() -> Option<TlsEtcd> {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let openssl = |args: &[&str]| {
        std::process::Command::new("openssl")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    std::fs::write(
        p("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let made = openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.pem"),
        "-subj",
        "/CN=leasehold test CA",
    ]) && openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &p("key.pem"),
        "-out",
        &p("server.csr"),
        "-subj",
        "/CN=127.0.0.1",
    ]) && openssl(&[
        "x509",
        "-req",
        "-in",
        &p("server.csr"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        &p("cert.pem"),
        "-extfile",
        &p("ext.cnf"),
    ]);
    if !made {
        return None;
    }
    let (port, peer) = (
        leasehold_testkit::free_port(),
        leasehold_testkit::free_port(),
    );
    let client_url = format!("https://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let child = std::process::Command::new("etcd")
        .args(["--name", "tls", "--data-dir", &p("data")])
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .args(["--initial-cluster", &format!("tls={peer_url}")])
        .args(["--cert-file", &p("cert.pem"), "--key-file", &p("key.pem")])
        .args(["--log-level", "error", "--logger", "zap"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let ca = std::fs::read(p("ca.pem")).unwrap();
    Some(TlsEtcd {
        child,
        port,
        ca,
        _dir: dir,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_through_an_etcds_url_with_a_private_root_certificate() {
    let Some(srv) = tls_etcd() else {
        println!("note: openssl or etcd is missing; skipping the TLS test");
        return;
    };
    let url = format!("etcds://127.0.0.1:{}", srv.port);
    let trusted = || {
        LeaseClient::builder(&url)
            .tls_root_ca_pem(srv.ca.clone())
            .connect_timeout(ms(1_000))
            .response_timeout(ms(1_000))
            .connect()
    };
    // The member needs a moment to elect itself.
    let started = Instant::now();
    let c = loop {
        match trusted().await {
            Ok(c) => break c,
            Err(e) if started.elapsed() < ms(15_000) => {
                let _ = e;
                tokio::time::sleep(ms(100)).await;
            }
            Err(e) => panic!("TLS connect with the private CA as root: {e}"),
        }
    };
    let l = c.try_acquire("tls", &opts(2_000)).await.unwrap();
    assert!(matches!(
        c.try_acquire("tls", &opts(2_000)).await,
        Err(Error::Busy { .. })
    ));
    l.release().await.unwrap();

    // Without trusting the CA, the handshake is refused: a connect error naming the certificate.
    let untrusted = LeaseClient::builder(&url)
        .connect_timeout(ms(1_000))
        .connect()
        .await
        .unwrap_err();
    println!("untrusted: {}", untrusted.report());
    assert!(
        matches!(
            untrusted,
            Error::Store {
                phase: Phase::Connect,
                ..
            }
        ),
        "{untrusted}"
    );
    assert!(
        untrusted.report().to_string().contains("certificate"),
        "{untrusted}"
    );
    // Plain text to the TLS port: it does not answer as etcd, and the fix says etcds://.
    let plain = LeaseClient::builder(format!("etcd://127.0.0.1:{}", srv.port))
        .connect_timeout(ms(1_000))
        .response_timeout(ms(1_000))
        .connect()
        .await
        .unwrap_err();
    println!("plain: {plain}");
    assert!(
        matches!(
            plain,
            Error::Invalid {
                what: "etcd url",
                ..
            }
        ),
        "{plain}"
    );
    assert!(plain.to_string().contains("etcds://"), "{plain}");
    // A root certificate for a non-TLS URL, or one that is not PEM, is a configuration error.
    let misuse = LeaseClient::builder(format!("etcd://127.0.0.1:{}", srv.port))
        .tls_root_ca_pem(srv.ca.clone())
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            misuse,
            Error::Invalid {
                what: "tls root certificate",
                ..
            }
        ),
        "{misuse}"
    );
    let garbage = LeaseClient::builder(&url)
        .tls_root_ca_pem(b"not a certificate".to_vec())
        .connect_timeout(ms(1_000))
        .connect()
        .await
        .unwrap_err();
    println!("garbage: {garbage}");
    assert!(
        matches!(
            garbage,
            Error::Invalid { .. }
                | Error::Store {
                    phase: Phase::Connect,
                    ..
                }
        ),
        "{garbage}"
    );
}

/// Percentile `p` (0..=100) of `v` (sorted in place).
fn percentile(v: &mut [Duration], p: usize) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    v[(v.len() - 1) * p / 100]
}

/// S1: one client takes and releases one free name for `run`; cycles/s, p50 and p99 of a cycle, and
/// round trips per cycle.
async fn s1(url: &str, run: Duration) -> (f64, Duration, Duration, f64) {
    let c = client(url).await;
    let o = opts(30_000);
    for _ in 0..50 {
        c.try_acquire("s1", &o)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let trips = c.round_trips();
    let mut cycles = Vec::new();
    let started = Instant::now();
    while started.elapsed() < run {
        let t = Instant::now();
        c.try_acquire("s1", &o)
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
        cycles.push(t.elapsed());
    }
    let n = cycles.len();
    let per_s = n as f64 / started.elapsed().as_secs_f64();
    let rt = (c.round_trips() - trips) as f64 / n as f64;
    (
        per_s,
        percentile(&mut cycles, 50),
        percentile(&mut cycles, 99),
        rt,
    )
}

/// S2: 16 contenders on one name, each holding 1 ms, for `run`; as tasks of one client
/// (`separate == false`) or with a client each. Acquisitions/s, p50 and p99 of the hand-off gap
/// (one release to the next acquire's return), round trips per acquisition.
async fn s2(url: &str, separate: bool, run: Duration) -> (f64, Duration, Duration, f64) {
    let shared = client(url).await;
    let mut clients = Vec::new();
    for _ in 0..16 {
        clients.push(if separate {
            client(url).await
        } else {
            shared.clone()
        });
    }
    let trips: u64 = if separate {
        clients.iter().map(LeaseClient::round_trips).sum()
    } else {
        shared.round_trips()
    };
    let holds = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let tasks: Vec<_> = clients
        .iter()
        .cloned()
        .map(|c| {
            let holds = holds.clone();
            tokio::spawn(async move {
                while started.elapsed() < run {
                    let l = c.acquire("s2", &opts(5_000), ms(30_000)).await.unwrap();
                    let got = Instant::now();
                    tokio::time::sleep(ms(1)).await;
                    let left = Instant::now();
                    l.release().await.unwrap();
                    holds.lock().unwrap().push((got, left));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let mut holds = std::mem::take(&mut *holds.lock().unwrap());
    holds.sort();
    assert!(
        holds.windows(2).all(|w| w[1].0 >= w[0].1),
        "two holders at once"
    );
    let mut gaps: Vec<Duration> = holds.windows(2).map(|w| w[1].0 - w[0].1).collect();
    let n = holds.len();
    let now: u64 = if separate {
        clients.iter().map(LeaseClient::round_trips).sum()
    } else {
        shared.round_trips()
    };
    (
        n as f64 / elapsed.as_secs_f64(),
        percentile(&mut gaps, 50),
        percentile(&mut gaps, 99),
        (now - trips) as f64 / n as f64,
    )
}

/// Not a test: S1 and S2 on Redis, a single etcd member and three etcd members, printed as a table.
/// `cargo test -p leasehold --features etcd --release --test lease_etcd bench -- --ignored --nocapture`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: run it on purpose"]
async fn bench_s1_s2_against_redis() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let run = ms(std::env::var("LEASEHOLD_BENCH_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3_000));
    let redis = lease_support::server();
    let one = start(1).await;
    let three = start(3).await;
    let stores = [
        ("redis", redis.url()),
        ("etcd x1", one.url()),
        ("etcd x3", three.url()),
    ];
    println!("S1 uncontended acquire+release, one client, {run:?} each");
    println!("store    | cycles/s | p50      | p99      | round trips/cycle");
    let mut base = None;
    for (name, url) in &stores {
        let (per_s, p50, p99, rt) = s1(url, run).await;
        let ratio = per_s / *base.get_or_insert(per_s);
        println!(
            "{name:8} | {per_s:8.0} | {p50:8.2?} | {p99:8.2?} | {rt:.2}   ({ratio:.2} x redis)"
        );
    }
    for separate in [false, true] {
        println!(
            "\nS2 16 contenders, 1 ms holds, {}",
            if separate {
                "16 clients"
            } else {
                "tasks of one client"
            }
        );
        println!("store    | acq/s    | gap p50  | gap p99  | round trips/acq");
        let mut base = None;
        for (name, url) in &stores {
            let (per_s, p50, p99, rt) = s2(url, separate, run).await;
            let ratio = per_s / *base.get_or_insert(per_s);
            println!(
                "{name:8} | {per_s:8.0} | {p50:8.2?} | {p99:8.2?} | {rt:.2}   ({ratio:.2} x redis)"
            );
        }
    }
}

/// The lease contract suite (`leasehold::contract_suite!`: the tests every store runs, a store written
/// outside the crate too) on this store.
mod contract {
    #[allow(unused_imports)]
    use super::lease_support;
    #[allow(unused_imports)]
    use super::lease_support::contract::*;

    leasehold::contract_suite!(Env::open("etcd", async {
        // A private single-node etcd.
        tokio::task::spawn_blocking(leasehold_testkit::etcd::EtcdCluster::start_single)
            .await
            .unwrap()
            .expect("start a private etcd (is etcd-server installed?)")
    }));
}
