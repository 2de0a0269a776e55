//! The Redis queue across clients and processes: arrival order, the hand-over, no barging, withdrawal,
//! interop with foreign locks, and — with worker processes SIGKILLed while they hold or wait — no
//! overlapping holds and no stall longer than the documented bound.
//!
//! Holds are judged at a resource, not by the workers (`lease_support::resource`). The workers are
//! this test binary run again as the ignored test `queue_worker`.

mod lease_support;

use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use lease_support::resource::*;
use lease_support::*;
use leasehold::{Error, LeaseOptions};
use leasehold_testkit::RedisServer;

/// The longest single block of a waiter (the store's refresh period).
const REFRESH: Duration = Duration::from_millis(500);

// ---------------------------------------------------------------------------------------------
// In-process clients

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_different_clients_get_the_lease_in_arrival_order() {
    let srv = server();
    let holder = client(&srv).await;
    let first = holder.try_acquire("fifo", &opts(30_000)).await.unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..5 {
        let c = client(&srv).await; // a client each: another process, as far as Redis can tell
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let l = c.acquire("fifo", &opts(30_000), ms(20_000)).await.unwrap();
            order.lock().unwrap().push((i, l.fence()));
            tokio::time::sleep(ms(20)).await;
            l.release().await.unwrap();
        }));
        wait_for_queue(&srv, &holder, "fifo", i + 1).await;
    }
    first.release().await.unwrap();
    for t in tasks {
        t.await.unwrap();
    }
    let order = order.lock().unwrap();
    let who: Vec<i64> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(who, [0, 1, 2, 3, 4], "not served in arrival order");
    assert!(order.windows(2).all(|w| w[1].1 > w[0].1), "{order:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_lease_starts_short_and_its_watchdog_extends_it_at_once() {
    let srv = server();
    let holder = client(&srv).await;
    let waiter = client(&srv).await;
    let a = holder.try_acquire("handed", &opts(30_000)).await.unwrap();
    let rt_before = waiter.round_trips();
    let w = tokio::spawn(async move {
        let l = waiter
            .acquire("handed", &opts(30_000), ms(10_000))
            .await
            .unwrap();
        (l, waiter)
    });
    wait_for_queue(&srv, &holder, "handed", 1).await;
    let fence_a = a.fence();
    a.release().await.unwrap();
    let (b, waiter) = w.await.unwrap();
    assert!(b.fence() > fence_a);
    assert!(
        b.remaining() <= ms(1_000),
        "the first TTL after a hand-over is short: {:?}",
        b.remaining()
    );
    // Connection set-up, script load, one step that blocked and was handed the lease.
    assert!(
        waiter.round_trips() - rt_before <= 4,
        "{} round trips to be handed the lease",
        waiter.round_trips() - rt_before
    );
    tokio::time::sleep(ms(700)).await;
    assert!(
        b.remaining() > ms(20_000),
        "the watchdog extended it: {:?}",
        b.remaining()
    );
    let pttl: i64 = redis::cmd("PTTL")
        .arg(lock_key(&b))
        .query(&mut srv.connection().unwrap())
        .unwrap();
    assert!(pttl > 20_000, "{pttl}");
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_jumps_the_queue_at_a_release() {
    let srv = server();
    let holder = client(&srv).await;
    let waiter = client(&srv).await;
    let barger = client(&srv).await;
    let a = holder.try_acquire("fair", &opts(30_000)).await.unwrap();
    let w = tokio::spawn(async move {
        waiter
            .acquire("fair", &opts(30_000), ms(10_000))
            .await
            .unwrap()
    });
    wait_for_queue(&srv, &holder, "fair", 1).await;
    a.release().await.unwrap();
    // Right after the release the lock is the waiter's, before it even heard of it.
    assert!(matches!(
        barger.try_acquire("fair", &opts(30_000)).await,
        Err(Error::Busy { .. })
    ));
    // A waiting newcomer joins behind.
    let b = w.await.unwrap();
    let late = tokio::spawn(async move { barger.acquire("fair", &opts(30_000), ms(10_000)).await });
    wait_for_queue(&srv, &holder, "fair", 1).await;
    b.release().await.unwrap();
    late.await.unwrap().unwrap().release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_waiter_leaves_the_queue() {
    let srv = server();
    let holder = client(&srv).await;
    let waiter = client(&srv).await;
    let a = holder.try_acquire("cancel", &opts(30_000)).await.unwrap();
    let w = tokio::spawn(async move { waiter.acquire("cancel", &opts(30_000), ms(20_000)).await });
    wait_for_queue(&srv, &holder, "cancel", 1).await;
    w.abort();
    wait_for_queue(&srv, &holder, "cancel", 0).await;
    // Its release goes to nobody: the lock is simply free.
    a.release().await.unwrap();
    assert!(!holder.inspect("cancel").await.unwrap().held);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_takes_a_lock_freed_by_a_foreign_release() {
    // Interop: another SET NX PX lock holds the key and deletes it (redis-py's release, or a bare
    // DEL); nothing hands it over, and the queued waiter takes it at its next step.
    let srv = server();
    let c = client(&srv).await;
    let key = leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "foreign")
        .unwrap()
        .lock;
    let mut con = srv.connection().unwrap();
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("foreign-token")
        .arg("PX")
        .arg(30_000)
        .query(&mut con)
        .unwrap();
    let waiter = c.clone();
    let w = tokio::spawn(async move {
        let t0 = Instant::now();
        let l = waiter.acquire("foreign", &opts(30_000), ms(10_000)).await;
        (l, t0)
    });
    wait_for_queue(&srv, &c, "foreign", 1).await;
    let freed = Instant::now();
    let _: () = redis::cmd("DEL").arg(&key).query(&mut con).unwrap();
    let (l, _) = w.await.unwrap();
    let l = l.unwrap();
    let took = freed.elapsed();
    assert!(
        took < REFRESH + ms(500),
        "took {took:?} after the foreign release"
    );
    assert_eq!(raw_get(&srv, &key).as_deref(), Some(l.token()));
    l.release().await.unwrap();
    assert_eq!(queue_len(&srv, &c, "foreign").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_lease_waits_for_replicas_too() {
    let primary = server();
    let replica = RedisServer::builder()
        .replica_of(primary.port())
        .start()
        .unwrap();
    replica.wait_until_synced().unwrap();
    let holder = client(&primary).await;
    let waiter = client(&primary).await;
    let o = LeaseOptions::builder()
        .ttl(ms(30_000))
        .wait_for_replicas(1, ms(1_000), leasehold::ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    let a = holder.try_acquire("replicated", &o).await.unwrap();
    let o2 = o.clone();
    let w = tokio::spawn(async move { waiter.acquire("replicated", &o2, ms(10_000)).await });
    wait_for_queue(&primary, &holder, "replicated", 1).await;
    a.release().await.unwrap();
    let b = w.await.unwrap().expect("handed over and acknowledged");
    let on_replica: Option<String> = redis::cmd("GET")
        .arg(lock_key(&b))
        .query(&mut replica.connection().unwrap())
        .unwrap();
    // A lock handed over is marked for the waiters that may still be queued behind it (`<token>:q`).
    let on_replica = on_replica.map(|v| v.strip_suffix(":q").map(str::to_owned).unwrap_or(v));
    assert_eq!(on_replica.as_deref(), Some(b.token()));
    b.release().await.unwrap();
}

// ---------------------------------------------------------------------------------------------
// Worker processes and the resource that judges them

/// A worker process (run by the tests above through `WorkerSpec::spawn`; does nothing otherwise).
#[test]
#[ignore = "a worker process of the queue tests, started by them"]
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
async fn thirty_two_processes_with_holders_and_waiters_sigkilled_never_overlap_nor_stall() {
    let srv = server();
    let (resource, addr) = Resource::start().await;
    let run_for = soak_seconds(9);
    let ttl = ms(1_000);
    let spec = WorkerSpec {
        url: srv.url(),
        name: "killed".into(),
        resource: addr,
        ttl_ms: ttl.as_millis() as u64,
        hold_ms: 10,
        handoff_ms: None,
        ignore_loss: false,
        permits: 1,
        until: SystemTime::now() + run_for,
    };
    let mut workers: Vec<Child> = (0..32).map(|_| spec.spawn()).collect();
    let started = Instant::now();
    let mut kills = (0, 0);
    let mut killed_procs = Vec::new();
    // A kill every 2 s, alternately the holder and a waiter, each replaced at once: further apart
    // than one stall can last, so that each gap has one cause.
    let mut round = 0;
    while started.elapsed() + ms(2_000) < run_for {
        tokio::time::sleep(ms(2_000)).await;
        round += 1;
        let holder = resource.inside();
        let victim = if round % 2 == 1 {
            holder.and_then(|pid| workers.iter().position(|c| c.id() == pid))
        } else {
            let waiting: Vec<usize> = (0..workers.len())
                .filter(|&i| Some(workers[i].id()) != holder)
                .collect();
            waiting.get(rand_index(waiting.len())).copied()
        };
        let Some(i) = victim else { continue };
        // Kill first: starting the replacement takes longer than a hold.
        workers[i].kill().unwrap();
        workers[i].wait().unwrap();
        let dead = std::mem::replace(&mut workers[i], spec.spawn());
        if round % 2 == 1 {
            kills.0 += 1;
        } else {
            kills.1 += 1;
        }
        killed_procs.push(dead);
    }
    tokio::task::block_in_place(|| reap(&mut workers, run_for + ms(30_000)));
    let end = Instant::now();
    // A killed holder keeps the lock for up to its TTL, then the next waiter's step (at most one
    // refresh period later) takes it; a lock handed to a killed waiter frees after the 1 s first TTL
    // and is taken the same way. Both: 1.5 s, plus room for a loaded machine.
    let margin = ms(1_000);
    let handoff = ms(1_000);
    let v = judge(&resource.stays(), end, |prev| {
        if prev.killed {
            ttl + REFRESH + margin
        } else {
            handoff + REFRESH + margin
        }
    });
    println!(
        "{} stays, {} holders and {} waiters killed, longest gap {:?}: {v:?}",
        v.stays, kills.0, kills.1, v.longest_gap
    );
    assert!(v.stays > 100, "too few stays to judge: {}", v.stays);
    assert!(kills.0 >= 1 && kills.1 >= 1, "{kills:?}");
    assert!(
        resource.stays().iter().any(|s| s.killed),
        "no holder was killed inside the resource"
    );
    assert_eq!(v.overlaps, 0, "overlapping holds");
    assert_eq!(v.fence_regressions, 0, "a fence did not grow");
    assert!(
        v.stalls.is_empty(),
        "stalls beyond the bound: {:?}",
        v.stalls
    );
    // Afterwards: once the dead waiters' places lapsed, the lock is free and the queue empty.
    tokio::time::sleep(ms(1_200)).await;
    let c = client(&srv).await;
    c.try_acquire("killed", &opts(1_000))
        .await
        .expect("nothing left holding the name")
        .release()
        .await
        .unwrap();
    let keys =
        leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "killed").unwrap();
    let mut con = srv.connection().unwrap();
    let n: i64 = redis::cmd("EXISTS")
        .arg(&keys.queue)
        .query(&mut con)
        .unwrap();
    assert_eq!(n, 0, "{} left behind", keys.queue);
    let alive: Vec<String> = redis::cmd("KEYS")
        .arg(format!(
            "{}*",
            keys.alive_prefix.replace('{', "\\{").replace('}', "\\}")
        ))
        .query(&mut con)
        .unwrap();
    assert!(
        alive.is_empty(),
        "waiters' liveness keys left behind: {alive:?}"
    );
}

fn rand_index(len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    (SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos() as usize)
        % len
}

/// Holds the lease in this process while two worker processes queue behind it, kills the first
/// waiter, releases, and measures how long the lock is lost to the dead waiter before the second
/// gets it.
async fn stall_after_a_dead_waiter(ttl: Duration, handoff: Option<Duration>) -> Duration {
    let srv = server();
    let (resource, addr) = Resource::start().await;
    let c = client(&srv).await;
    let holder = c
        .try_acquire("dead-waiter", &opts(ttl.as_millis() as u64))
        .await
        .unwrap();
    let spec = WorkerSpec {
        url: srv.url(),
        name: "dead-waiter".into(),
        resource: addr,
        ttl_ms: ttl.as_millis() as u64,
        hold_ms: 10,
        handoff_ms: handoff.map(|h| h.as_millis() as u64),
        ignore_loss: false,
        permits: 1,
        until: SystemTime::now() + Duration::from_secs(20),
    };
    let mut first = spec.spawn();
    wait_for_queue(&srv, &c, "dead-waiter", 1).await;
    let mut second = spec.spawn();
    wait_for_queue(&srv, &c, "dead-waiter", 2).await;
    first.kill().unwrap();
    first.wait().unwrap();
    // Its place in the queue still looks live (it refreshed within the last refresh period): the
    // release hands it the lock.
    let released = Instant::now();
    holder.release().await.unwrap();
    assert!(
        eventually(ms(30_000), async || !resource.stays().is_empty()).await,
        "the second waiter never got the lease"
    );
    let stall = resource.stays()[0].entered - released;
    let _ = second.kill();
    let _ = second.wait();
    stall
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_handed_to_a_dead_waiter_is_free_within_two_seconds_not_a_ttl() {
    // Default TTL (30 s) and the default first TTL after a hand-over (1 s): the dead waiter keeps the
    // lock 1 s, the next waiter's step takes it at most one refresh period later.
    let stall = stall_after_a_dead_waiter(ms(30_000), None).await;
    println!("lock lost to a dead waiter for {stall:?}");
    assert!(
        stall >= ms(900),
        "was the lock handed to the dead waiter? {stall:?}"
    );
    assert!(stall <= ms(2_000), "stalled {stall:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ttl_hand_over_would_lose_the_lock_to_a_dead_waiter_for_its_whole_ttl() {
    // The unsafe variant, to show the test above can see the stall: hand over with the whole TTL.
    let stall = stall_after_a_dead_waiter(ms(5_000), Some(ms(5_000))).await;
    println!("lock lost to a dead waiter for {stall:?} with a full-TTL hand-over");
    assert!(stall >= ms(4_500), "{stall:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_resource_sees_overlaps_when_holders_outlive_their_lease() {
    // The judge's own check: workers that hold past an unrenewed lease do overlap, and it says so.
    let srv = server();
    let (resource, addr) = Resource::start().await;
    let spec = WorkerSpec {
        url: srv.url(),
        name: "outlived".into(),
        resource: addr,
        ttl_ms: 150,
        hold_ms: 400,
        handoff_ms: None,
        ignore_loss: true,
        permits: 1,
        until: SystemTime::now() + Duration::from_secs(3),
    };
    let mut workers: Vec<Child> = (0..4).map(|_| spec.spawn()).collect();
    tokio::task::block_in_place(|| reap(&mut workers, ms(30_000)));
    let v = judge(&resource.stays(), Instant::now(), |_| Duration::MAX);
    println!("{v:?}");
    assert!(v.overlaps > 0, "the judge missed overlapping holds: {v:?}");
}
