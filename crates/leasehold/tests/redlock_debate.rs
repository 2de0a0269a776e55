//! The Redlock debate, measured with real servers: Redlock keeps exclusion when a master crashes or
//! restarts empty (what it is for; the single-server store on that master does not), loses it when
//! the holder pauses past its validity and when a master's wall clock jumps forward, and in every
//! case the fence, checked by a fenced SQLite resource, refuses the stale writer while the same write
//! without the fence goes through.
#![cfg(all(feature = "redis", feature = "sqlite"))]

mod lease_support;

use std::time::Duration;

use lease_support::{eventually, ms, server};
use leasehold::db::Database;
use leasehold::{Error, Fence, LeaseClient, LeaseOptions, LostReason};
use leasehold_testkit::{Proxy, RedisServer};

fn masters() -> Vec<RedisServer> {
    (0..3).map(|_| server()).collect()
}

fn urls(servers: &[RedisServer]) -> Vec<String> {
    servers.iter().map(|s| s.url()).collect()
}

async fn redlock(urls: &[String]) -> LeaseClient {
    LeaseClient::redlock(urls)
        .response_timeout(ms(300))
        .connect_timeout(ms(300))
        .connect()
        .await
        .expect("connect the redlock")
}

fn opts(ttl_ms: u64) -> LeaseOptions {
    LeaseOptions::with_ttl(ms(ttl_ms)).unwrap()
}

/// A counter behind a fenced write, in an SQLite file: the resource of the debate.
struct Ledger {
    db: Database,
    _dir: tempfile::TempDir,
}

impl Ledger {
    async fn new() -> Ledger {
        let dir = tempfile::tempdir().unwrap();
        let db = Database::connect(&format!("sqlite:{}", dir.path().join("r.db").display()))
            .await
            .unwrap();
        db.migrate().await.unwrap();
        let mut tx = db.begin().await.unwrap();
        tx.execute(
            "CREATE TABLE counter (id BIGINT PRIMARY KEY, value BIGINT NOT NULL)",
            &[],
        )
        .await
        .unwrap();
        tx.execute("INSERT INTO counter VALUES (1, 0), (2, 0)", &[])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        Ledger { db, _dir: dir }
    }

    async fn read(&self, id: i64) -> i64 {
        let mut tx = self.db.begin().await.unwrap();
        let v = tx
            .fetch_i64("SELECT value FROM counter WHERE id = $1", &[id.into()])
            .await
            .unwrap()
            .unwrap();
        tx.commit().await.unwrap();
        v
    }

    /// Writes `read + 1` to counter `id`, presenting `fence` when given (`None`: the unsafe write
    /// that trusts the lease alone). `Err(StaleFence)` when refused.
    async fn write(&self, id: i64, read: i64, fence: Option<Fence>) -> leasehold::Result<()> {
        let mut tx = match fence {
            Some(f) => self.db.begin_fenced(&format!("counter:{id}"), f).await?,
            None => self.db.begin().await?,
        };
        tx.execute(
            "UPDATE counter SET value = $1 WHERE id = $2",
            &[(read + 1).into(), id.into()],
        )
        .await?;
        tx.commit().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_crash_keeps_exclusion_and_the_lease_lives_on() {
    let mut servers = masters();
    let urls = urls(&servers);
    let a = redlock(&urls).await;
    let b = redlock(&urls).await;
    let lease = a.try_acquire("job", &opts(900)).await.unwrap();
    tokio::task::block_in_place(|| servers[2].kill()).unwrap();
    // Several TTLs later the holder still has it: two of three masters renew it.
    tokio::time::sleep(ms(3_000)).await;
    assert!(!lease.is_lost(), "renewed on the two masters left");
    match b.try_acquire("job", &opts(900)).await {
        Err(Error::Busy { .. }) => {}
        r => panic!("a second client must not get a majority: {r:?}"),
    }
    let ledger = Ledger::new().await;
    ledger.write(1, 0, Some(lease.fence())).await.unwrap();
    lease.release().await.unwrap();
    // With the holder gone, the second client gets it on the two masters left, with a larger fence.
    let next = b.try_acquire("job", &opts(900)).await.unwrap();
    ledger.write(1, 1, Some(next.fence())).await.unwrap();
    assert_eq!(ledger.read(1).await, 2);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_keeps_exclusion_where_one_server_loses_it() {
    let mut servers = masters();
    let urls = urls(&servers);
    let a = redlock(&urls).await;
    let b = redlock(&urls).await;
    let lease = a.try_acquire("job", &opts(5_000)).await.unwrap();
    tokio::task::block_in_place(|| servers[2].restart()).unwrap();
    // The restarted master forgot the lock; the second client takes it there, finds the other two
    // busy, gives it back.
    let r = b.try_acquire("job", &opts(5_000)).await;
    assert!(matches!(r, Err(Error::Busy { .. })), "{r:?}");
    lease.release().await.unwrap();

    // The unsafe twin: the single-server store on the master that restarts.
    let single_a = lease_support::client(&servers[2]).await;
    let single_b = lease_support::client(&servers[2]).await;
    let held = single_a.try_acquire("job", &opts(5_000)).await.unwrap();
    tokio::task::block_in_place(|| servers[2].restart()).unwrap();
    let twin = eventually(ms(3_000), async || {
        match single_b.try_acquire("job", &opts(5_000)).await {
            Ok(second) => {
                drop(second);
                true
            }
            Err(_) => false,
        }
    })
    .await;
    assert!(
        twin,
        "one server restarted empty hands the lease to a second holder"
    );
    drop(held);
}

/// Client A runs on a runtime of its own, on a thread of its own, so that the test can stall it for
/// real (its watchdog included), as a GC pause or a stopped VM does.
fn paused_holder(
    urls: Vec<String>,
    ttl: Duration,
    pause: Duration,
    took: std::sync::mpsc::Sender<Fence>,
    resumed: tokio::sync::oneshot::Receiver<()>,
) -> std::thread::JoinHandle<(Fence, bool)> {
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let client = redlock(&urls).await;
            let lease = client
                .try_acquire("job", &opts(ttl.as_millis() as u64))
                .await
                .unwrap();
            let fence = lease.fence();
            took.send(fence).unwrap();
            // The pause: the whole runtime stops, renewals included.
            std::thread::sleep(pause);
            let _ = resumed.await;
            let lost = lease.lost();
            let lost_now = tokio::time::timeout(ms(1_000), lost.fired()).await.ok()
                == Some(LostReason::DeadlinePassed);
            drop(lease);
            (fence, lost_now)
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_paused_past_its_validity_makes_two_holders_and_the_fence_refuses_it() {
    let servers = masters();
    let urls = urls(&servers);
    let ledger = Ledger::new().await;
    let (took_tx, took) = std::sync::mpsc::channel();
    let (resume_tx, resume) = tokio::sync::oneshot::channel();
    let a = paused_holder(urls.clone(), ms(600), ms(1_500), took_tx, resume);
    let fence_a = tokio::task::block_in_place(|| took.recv_timeout(Duration::from_secs(10)))
        .expect("A acquired");
    // A read the counters before its pause.
    let (read1, read2) = (ledger.read(1).await, ledger.read(2).await);
    // While A is stalled its locks expire on every master; B gets the lease: two holders.
    let b = redlock(&urls).await;
    let lease_b = b.acquire("job", &opts(5_000), ms(5_000)).await.unwrap();
    assert!(lease_b.fence() > fence_a);
    ledger.write(1, read1, Some(lease_b.fence())).await.unwrap();
    ledger.write(2, read2, None).await.unwrap();
    resume_tx.send(()).unwrap();
    let (fence, lost) = tokio::task::block_in_place(|| a.join()).unwrap();
    assert_eq!(fence, fence_a);
    assert!(lost, "A is told, but only once it runs again");
    // A, awake, writes what it computed before the pause. Fenced: refused, nothing lost.
    match ledger.write(1, read1, Some(fence_a)).await {
        Err(Error::StaleFence {
            presented, current, ..
        }) => {
            assert_eq!(presented, fence_a);
            assert_eq!(current, lease_b.fence());
        }
        r => panic!("the fenced resource must refuse A: {r:?}"),
    }
    assert_eq!(ledger.read(1).await, read1 + 1, "B's write stands");
    // Unfenced (the `redlock` strategy without a fence): A's stale write goes through and B's
    // increment is lost.
    ledger.write(2, read2, None).await.unwrap();
    assert_eq!(
        ledger.read(2).await,
        read2 + 1,
        "two increments, one left: the lost update Redlock alone cannot prevent"
    );
    lease_b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_clock_jump_makes_two_holders_and_the_fence_refuses_the_first() {
    // The clock-jump example of the Redlock debate: the lease is held on a bare majority {m0, m1}
    // (the holder's way to m2 cut during its acquire), m1's wall clock jumps forward past the TTL,
    // m1 expires the lock early, and a second client reaches a majority {m1, m2} while the first
    // still holds the lease by its own clock.
    let m0 = server();
    let mut m1 = RedisServer::builder()
        .fake_clock()
        .start()
        .expect("a redis-server under libfaketime (apt-get install faketime)");
    let m2 = server();
    let mut proxies = Vec::new();
    for s in [&m0, &m1, &m2] {
        let addr = format!("127.0.0.1:{}", s.port()).parse().unwrap();
        proxies.push(Proxy::start(addr).await.unwrap());
    }
    let via: Vec<String> = proxies
        .iter()
        .map(|p| format!("redis://127.0.0.1:{}/", p.port()))
        .collect();
    let a = redlock(&via).await;
    proxies[2].cut();
    let lease_a = a.try_acquire("job", &opts(10_000)).await.unwrap();
    let ledger = Ledger::new().await;
    let (read1, read2) = (ledger.read(1).await, ledger.read(2).await);

    tokio::task::block_in_place(|| m1.jump_clock(Duration::from_secs(15))).unwrap();
    let b = redlock(&[m0.url(), m1.url(), m2.url()]).await;
    let lease_b = b
        .try_acquire("job", &opts(10_000))
        .await
        .expect("the jumped master forgot A's lock: B reaches a majority");
    assert!(
        !lease_a.is_lost() && lease_a.remaining() > ms(5_000),
        "A still holds it by its own clock: two holders at once"
    );
    // The jumped clock only raises fences.
    assert!(lease_b.fence() > lease_a.fence());
    ledger.write(1, read1, Some(lease_b.fence())).await.unwrap();
    ledger.write(2, read2, None).await.unwrap();
    match ledger.write(1, read1, Some(lease_a.fence())).await {
        Err(Error::StaleFence { .. }) => {}
        r => panic!("the fenced resource must refuse A: {r:?}"),
    }
    assert_eq!(ledger.read(1).await, read1 + 1);
    // Unfenced, A's write goes through: one of the two increments is lost.
    ledger.write(2, read2, None).await.unwrap();
    assert_eq!(ledger.read(2).await, read2 + 1);
    lease_b.release().await.unwrap();
    drop(lease_a);
}
