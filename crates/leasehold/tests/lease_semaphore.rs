//! Semaphores on Redis: up to N holders of one name, each permit a lease of its own (token, TTL,
//! renewal, lost signal, fence), on the same queue and hand-over as a lock. Concurrency is judged at
//! a resource from what worker processes tell it (`lease_support::resource`), not from their say-so.

mod lease_support;

use std::process::Child;
use std::time::{Duration, Instant, SystemTime};

use lease_support::resource::*;
use lease_support::*;
use leasehold::{Error, LeaseOptions, LostReason};

fn sem(permits: u32, ttl_ms: u64) -> LeaseOptions {
    LeaseOptions::builder()
        .ttl(ms(ttl_ms))
        .permits(permits)
        .build()
        .unwrap()
}

/// A worker process (started by the tests below; does nothing otherwise).
#[test]
#[ignore = "a worker process of the semaphore tests, started by them"]
fn queue_worker() {
    if env("LEASEHOLD_QUEUE_WORKER") != "1" {
        return;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(work());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_are_leases_of_their_own_and_inspect_shows_the_holders() {
    let srv = server();
    let c = client(&srv).await;
    let o = sem(3, 600);
    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(c.try_acquire("pool", &o).await.unwrap());
    }
    assert!(held.windows(2).all(|w| w[1].fence() > w[0].fence()));
    assert!(matches!(
        c.try_acquire("pool", &o).await,
        Err(Error::Busy {
            remaining: Some(_),
            ..
        })
    ));
    let info = c.inspect("pool").await.unwrap();
    assert_eq!((info.permits, info.free_permits()), (3, 0));
    assert!(info.held);
    let mut tokens: Vec<&str> = info.holders.iter().map(|h| h.token.as_str()).collect();
    tokens.sort();
    let mut ours: Vec<&str> = held.iter().map(|l| l.token()).collect();
    ours.sort();
    assert_eq!(tokens, ours);
    assert!(info.holders.iter().all(|h| h.fence.is_some()));
    // Renewed in the background like any lease: still held after several TTLs.
    tokio::time::sleep(ms(1_500)).await;
    assert!(held.iter().all(|l| !l.is_lost()));
    // A waiter queues; a release hands it the permit.
    let waiter = client(&srv).await;
    let o2 = o.clone();
    let w = tokio::spawn(async move { waiter.acquire("pool", &o2, ms(10_000)).await });
    wait_for_queue(&srv, &c, "pool", 1).await;
    assert_eq!(c.inspect("pool").await.unwrap().waiting, 1);
    let first = held.remove(0);
    first.release().await.unwrap();
    let handed = w.await.unwrap().expect("handed the freed permit");
    held.push(handed);
    // An operator evicts one holder by token: only that one loses its lease.
    let victim = held[0].token().to_owned();
    let forced = c.force_release_holder("pool", &victim).await.unwrap();
    assert!(forced.evicted);
    let reason = tokio::time::timeout(ms(3_000), held[0].lost().fired())
        .await
        .expect("the evicted holder is told");
    assert_eq!(reason, LostReason::NotOurs);
    assert!(held[1..].iter().all(|l| !l.is_lost()));
    assert!(
        !c.force_release_holder("pool", &victim)
            .await
            .unwrap()
            .evicted
    );
    // Everyone.
    assert!(c.force_release("pool").await.unwrap().evicted);
    for l in &held[1..] {
        let reason = tokio::time::timeout(ms(3_000), l.lost().fired())
            .await
            .unwrap();
        assert_eq!(reason, LostReason::NotOurs);
    }
    let info = c.inspect("pool").await.unwrap();
    assert!(!info.held && info.holders.is_empty(), "{info:?}");
    assert!(c
        .list("po*")
        .await
        .unwrap()
        .iter()
        .any(|i| i.name == "pool"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_in_use_refuses_another_number_of_permits() {
    let srv = server();
    let c = client(&srv).await;
    let lock = c.try_acquire("shared", &opts(5_000)).await.unwrap();
    match c.try_acquire("shared", &sem(3, 5_000)).await {
        Err(e @ Error::PermitsInUse { .. }) => {
            assert!(matches!(
                e,
                Error::PermitsInUse {
                    asked: 3,
                    in_use: 1,
                    ..
                }
            ));
            assert!(!e.is_retryable());
        }
        other => panic!("expected PermitsInUse, got {other:?}"),
    }
    lock.release().await.unwrap();
    let s = c.try_acquire("shared", &sem(3, 5_000)).await.unwrap();
    for o in [sem(2, 5_000), opts(5_000)] {
        match c.acquire("shared", &o, ms(2_000)).await {
            Err(Error::PermitsInUse { in_use: 3, .. }) => {}
            other => panic!("expected PermitsInUse 3, got {other:?}"),
        }
    }
    s.release().await.unwrap();
    // Free again: another count may be used.
    c.try_acquire("shared", &sem(2, 5_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_processes_on_three_permits_never_exceed_three_and_reach_three() {
    let srv = server();
    let (resource, addr) = Resource::start().await;
    let spec = WorkerSpec {
        url: srv.url(),
        name: "three".into(),
        resource: addr,
        ttl_ms: 2_000,
        hold_ms: 20,
        handoff_ms: None,
        ignore_loss: false,
        permits: 3,
        until: SystemTime::now() + soak_seconds(6),
    };
    let mut workers: Vec<Child> = (0..64).map(|_| spec.spawn()).collect();
    tokio::task::block_in_place(|| reap(&mut workers, ms(60_000)));
    let stays = resource.stays();
    let most = max_concurrency(&stays, Instant::now());
    let mut fences: Vec<u64> = stays.iter().map(|s| s.fence).collect();
    fences.sort();
    fences.dedup();
    println!("{} stays, at most {most} inside at once", stays.len());
    assert!(stays.len() > 100, "too few stays: {}", stays.len());
    assert_eq!(fences.len(), stays.len(), "two permits had the same fence");
    assert!(most <= 3, "{most} holders of 3 permits at once");
    assert_eq!(most, 3, "the three permits were never all in use");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resource_sees_more_holders_than_permits_when_holders_outlive_their_lease() {
    // The judge's own check: holders that go on past an unrenewed permit exceed the permits.
    let srv = server();
    let (resource, addr) = Resource::start().await;
    let spec = WorkerSpec {
        url: srv.url(),
        name: "outlived".into(),
        resource: addr,
        ttl_ms: 150,
        hold_ms: 500,
        handoff_ms: None,
        ignore_loss: true,
        permits: 3,
        until: SystemTime::now() + Duration::from_secs(3),
    };
    let mut workers: Vec<Child> = (0..8).map(|_| spec.spawn()).collect();
    tokio::task::block_in_place(|| reap(&mut workers, ms(30_000)));
    let most = max_concurrency(&resource.stays(), Instant::now());
    assert!(most > 3, "the judge missed {most} > 3 holders");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permits_of_sigkilled_holders_come_back_after_their_ttl() {
    let srv = server();
    let (resource, addr) = Resource::start().await;
    let ttl = ms(1_000);
    let spec = WorkerSpec {
        url: srv.url(),
        name: "crashy".into(),
        resource: addr,
        ttl_ms: ttl.as_millis() as u64,
        hold_ms: 60_000,
        handoff_ms: None,
        ignore_loss: false,
        permits: 2,
        until: SystemTime::now() + Duration::from_secs(60),
    };
    let mut holders: Vec<Child> = (0..2).map(|_| spec.spawn()).collect();
    assert!(
        eventually(ms(20_000), async || resource.stays().len() == 2).await,
        "both permits were never taken"
    );
    let c = client(&srv).await;
    assert_eq!(c.inspect("crashy").await.unwrap().free_permits(), 0);
    for h in &mut holders {
        h.kill().unwrap();
        h.wait().unwrap();
    }
    let killed = Instant::now();
    let o = sem(2, 1_000);
    let a = c.acquire("crashy", &o, ms(10_000)).await.unwrap();
    let b = c.acquire("crashy", &o, ms(10_000)).await.unwrap();
    let took = killed.elapsed();
    println!("both permits back {took:?} after their holders were killed");
    // Not before the holders' renewed TTL ran out, and soon after it did.
    assert!(took >= ms(300), "{took:?}");
    assert!(took <= ttl + ms(500) + ms(1_000), "{took:?}");
    a.release().await.unwrap();
    b.release().await.unwrap();
}
