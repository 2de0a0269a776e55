//! Waiting for a busy lease against a real redis-server: mutual exclusion under contention, wake-ups
//! by release, the expiry fallback, the wait bound, no polling, and round trips per acquisition that
//! stay flat as waiters grow.

mod lease_support;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use lease_support::*;
use leasehold::{Error, LeaseClient, LeaseOptions};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_contenders_never_overlap_and_fences_only_grow() {
    let srv = server();
    let mut clients = Vec::new();
    for _ in 0..4 {
        clients.push(client(&srv).await); // 4 "processes" × 8 tasks
    }
    let holding = Arc::new(AtomicUsize::new(0));
    let overlaps = Arc::new(AtomicUsize::new(0));
    let acquisitions = Arc::new(AtomicUsize::new(0));
    let last_fence = Arc::new(AtomicU64::new(0));
    let fence_regressions = Arc::new(AtomicUsize::new(0));
    let o = opts(5_000);
    let mut tasks = Vec::new();
    for i in 0..32 {
        let c = clients[i % 4].clone();
        let (holding, overlaps, acquisitions, last_fence, fence_regressions, o) = (
            holding.clone(),
            overlaps.clone(),
            acquisitions.clone(),
            last_fence.clone(),
            fence_regressions.clone(),
            o.clone(),
        );
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let lease = c
                    .acquire("hot", &o, ms(60_000))
                    .await
                    .expect("acquire within 60 s");
                if holding.fetch_add(1, Ordering::SeqCst) != 0 {
                    overlaps.fetch_add(1, Ordering::SeqCst);
                }
                let f = lease.fence().get();
                if last_fence.swap(f, Ordering::SeqCst) >= f {
                    fence_regressions.fetch_add(1, Ordering::SeqCst);
                }
                tokio::time::sleep(ms(2)).await;
                holding.fetch_sub(1, Ordering::SeqCst);
                acquisitions.fetch_add(1, Ordering::SeqCst);
                lease.release().await.expect("release while held");
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(acquisitions.load(Ordering::SeqCst), 128);
    assert_eq!(overlaps.load(Ordering::SeqCst), 0, "overlapping holds");
    assert_eq!(
        fence_regressions.load(Ordering::SeqCst),
        0,
        "a fence did not grow"
    );
}

/// Round trips per successful acquisition with `waiters` tasks of one client contending for one name.
async fn round_trips_per_acquisition(
    c: &LeaseClient,
    name: &str,
    waiters: usize,
    rounds: usize,
) -> f64 {
    let o = LeaseOptions::builder().ttl(ms(10_000)).build().unwrap();
    // Warm: scripts loaded, one dedicated connection per concurrently blocked contender exists.
    c.try_acquire(name, &o)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = c.round_trips();
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let (c, o, name) = (c.clone(), o.clone(), name.to_owned());
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let lease = c.acquire(&name, &o, ms(60_000)).await.unwrap();
                tokio::task::yield_now().await;
                lease.release().await.unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (c.round_trips() - before) as f64 / (waiters * rounds) as f64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trips_per_acquisition_stay_flat_as_waiters_grow() {
    let srv = server();
    let c = client(&srv).await;
    let mut figures = Vec::new();
    for (waiters, rounds) in [(1, 200), (16, 12), (128, 2)] {
        let per =
            round_trips_per_acquisition(&c, &format!("flat-{waiters}"), waiters, rounds).await;
        println!("round trips per acquisition with {waiters:>3} waiting tasks: {per:.2} ({} acquisitions)", waiters * rounds);
        figures.push(per);
    }
    for per in &figures {
        assert!(*per <= 4.0, "round trips per acquisition grew: {figures:?}");
    }
}

#[tokio::test]
async fn a_release_wakes_a_waiter_long_before_the_ttl() {
    let srv = server();
    let holder = client(&srv).await;
    let waiter = client(&srv).await; // another "process"
    let a = holder.try_acquire("handover", &opts(10_000)).await.unwrap();
    let w = tokio::spawn(async move {
        let t0 = Instant::now();
        let l = waiter.acquire("handover", &opts(10_000), ms(8_000)).await;
        (l, t0.elapsed())
    });
    tokio::time::sleep(ms(300)).await;
    a.release().await.unwrap();
    let (l, waited) = w.await.unwrap();
    let l = l.expect("woken by the release");
    assert!(waited >= ms(250), "{waited:?}");
    assert!(
        waited < ms(3_000),
        "took {waited:?}: not woken by the release"
    );
    l.release().await.unwrap();
}

#[tokio::test]
async fn a_crashed_holders_expiry_is_noticed_without_a_release() {
    let srv = server();
    let c = client(&srv).await;
    // A holder that crashed: the key was set and nobody will release it or push a wake-up.
    let mut con = srv.connection().unwrap();
    let key = leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "orphan")
        .unwrap()
        .lock;
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("crashed")
        .arg("PX")
        .arg(500)
        .query(&mut con)
        .unwrap();
    let t0 = Instant::now();
    let before = c.round_trips();
    let l = c
        .acquire("orphan", &opts(5_000), ms(5_000))
        .await
        .expect("taken after the expiry");
    let waited = t0.elapsed();
    assert!(waited >= ms(400) && waited < ms(2_500), "{waited:?}");
    // A new dedicated connection and its script load count one each; the waiter blocks until about
    // the holder's expiry, then takes it. A polling loop would send dozens.
    assert!(
        c.round_trips() - before <= 7,
        "polled: {} round trips",
        c.round_trips() - before
    );
    l.release().await.unwrap();
}

#[tokio::test]
async fn the_wait_bound_is_kept_and_waiting_does_not_poll() {
    let srv = server();
    let holder = client(&srv).await;
    let c = client(&srv).await;
    let _a = holder.try_acquire("busy", &opts(20_000)).await.unwrap();
    let before = c.round_trips();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let c = c.clone();
        tasks.push(tokio::spawn(async move {
            c.acquire("busy", &opts(20_000), ms(1_000)).await
        }));
    }
    for t in tasks {
        match t.await.unwrap() {
            Err(Error::WaitTimeout { name, waited }) => {
                assert_eq!(name, "busy");
                assert!(waited >= ms(950), "{waited:?}");
            }
            other => panic!("expected WaitTimeout, got {other:?}"),
        }
    }
    let elapsed = t0.elapsed();
    assert!(elapsed < ms(3_500), "the bound was overrun: {elapsed:?}");
    let sent = c.round_trips() - before;
    // One contender asks once, blocks once, asks once more at the end; new dedicated connections
    // count one each. A polling loop would send hundreds.
    assert!(sent <= 8, "16 tasks waiting 1 s sent {sent} requests");
    assert!(matches!(
        c.try_acquire("busy", &opts(1_000)).await,
        Err(Error::Busy { .. })
    ));
}

/// Redis command calls so far on `srv` (INFO commandstats, script internals included), minus the
/// INFO calls themselves.
fn commands(srv: &leasehold_testkit::RedisServer) -> u64 {
    let mut con = srv.connection().unwrap();
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut con)
        .unwrap();
    info.lines()
        .filter(|l| l.starts_with("cmdstat_") && !l.starts_with("cmdstat_info:"))
        .filter_map(|l| {
            l.split_once("calls=")?
                .1
                .split(',')
                .next()?
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Round trips and Redis commands per acquire + release cycle on a free name, `wait` zero (a try) or
/// not (a waiting acquire).
async fn free_name_cycle(
    srv: &leasehold_testkit::RedisServer,
    c: &LeaseClient,
    wait: u64,
) -> (f64, f64) {
    const CYCLES: u64 = 50;
    let o = LeaseOptions::builder()
        .ttl(ms(5_000))
        .no_renewal()
        .build()
        .unwrap();
    let (trips, cmds) = (c.round_trips(), commands(srv));
    for _ in 0..CYCLES {
        let l = c.acquire("free", &o, ms(wait)).await.unwrap();
        l.release().await.unwrap();
    }
    (
        (c.round_trips() - trips) as f64 / CYCLES as f64,
        (commands(srv) - cmds) as f64 / CYCLES as f64,
    )
}

#[tokio::test]
async fn a_waiting_acquire_on_a_free_name_costs_what_a_try_costs() {
    let srv = server();
    let c = client(&srv).await;
    // Warm: scripts loaded.
    free_name_cycle(&srv, &c, 0).await;
    free_name_cycle(&srv, &c, 5_000).await;
    let (try_trips, try_cmds) = free_name_cycle(&srv, &c, 0).await;
    let (wait_trips, wait_cmds) = free_name_cycle(&srv, &c, 5_000).await;
    println!("per cycle: try {try_trips} round trips, {try_cmds} commands; wait {wait_trips}, {wait_cmds}");
    assert_eq!(try_trips, 2.0, "one to acquire, one to release");
    assert_eq!(
        wait_trips, try_trips,
        "a waiting acquire on a free name is one round trip"
    );
    assert_eq!(wait_cmds, try_cmds, "and the same commands");
    assert!(wait_cmds <= 6.0, "{wait_cmds} commands per cycle");
}

/// A waiter that finds the name busy pays one round trip more to join the queue, and still comes
/// after those who queued before it (its try does not jump them when the lock is free meanwhile).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_acquire_that_finds_the_name_busy_joins_behind_the_queue() {
    let srv = server();
    let holder = client(&srv).await;
    let first = client(&srv).await;
    let late = client(&srv).await;
    let a = holder.try_acquire("line", &opts(10_000)).await.unwrap();
    let w1 = tokio::spawn(async move { first.acquire("line", &opts(10_000), ms(8_000)).await });
    let key = leasehold::lease::store::redis::keys::LeaseKeys::new("leasehold", "line").unwrap();
    let queued = |n: usize| {
        let key = key.queue.clone();
        let srv = &srv;
        async move {
            eventually(ms(3_000), async || {
                let mut con = srv.connection().unwrap();
                let len: usize = redis::cmd("ZCARD").arg(&key).query(&mut con).unwrap();
                len == n
            })
            .await
        }
    };
    assert!(queued(1).await, "the first waiter queued");
    // The holder's lock vanishes without a release: free, with a waiter queued.
    let mut con = srv.connection().unwrap();
    let _: () = redis::cmd("DEL").arg(lock_key(&a)).query(&mut con).unwrap();
    let before = late.round_trips();
    let got_late = late.acquire("line", &opts(10_000), ms(300)).await;
    assert!(
        matches!(got_late, Err(Error::WaitTimeout { .. })),
        "the late waiter jumped the queue: {got_late:?}"
    );
    let l1 = w1
        .await
        .unwrap()
        .expect("the first waiter was handed the lease");
    assert!(l1.fence() > a.fence());
    assert!(late.round_trips() - before >= 2, "tried, then queued");
    l1.release().await.unwrap();
    drop(a);
}

/// A client that found a name busy joins its queue at once on its next wait (no try first: one
/// round trip fewer); once a step takes the name free, the wait after it tries first again.
#[tokio::test]
async fn a_name_found_busy_is_joined_at_once_and_tried_first_again_once_free() {
    let srv = server();
    let holder = client(&srv).await;
    let c = client(&srv).await;
    let a = holder.try_acquire("hint", &opts(10_000)).await.unwrap();
    let mut trips = Vec::new();
    for _ in 0..2 {
        let before = c.round_trips();
        let r = c.acquire("hint", &opts(10_000), ms(300)).await;
        assert!(matches!(r, Err(Error::WaitTimeout { .. })), "{r:?}");
        trips.push(c.round_trips() - before);
    }
    // The first: a try, a new dedicated connection and its script load, a step, the abandon; the
    // second: the step and the abandon.
    assert_eq!(trips[1], 2, "{trips:?}");
    assert!(trips[0] > trips[1], "{trips:?}");
    a.release().await.unwrap();
    // A name handed over to this client after it found it busy, then free.
    let a = holder.try_acquire("hint2", &opts(10_000)).await.unwrap();
    let waiting = {
        let c = c.clone();
        tokio::spawn(async move { c.acquire("hint2", &opts(10_000), ms(5_000)).await })
    };
    tokio::time::sleep(ms(200)).await;
    a.release().await.unwrap();
    waiting.await.unwrap().unwrap().release().await.unwrap();
    let mut cmds = Vec::new();
    for _ in 0..3 {
        let before = commands(&srv);
        let l = c.acquire("hint2", &opts(10_000), ms(1_000)).await.unwrap();
        l.release().await.unwrap();
        cmds.push(commands(&srv) - before);
    }
    // The queue step that takes it free (and leaves a grant for its BLPOP), then the try's cycle.
    assert!(cmds[0] > cmds[1], "{cmds:?}");
    assert_eq!(cmds[1], cmds[2], "{cmds:?}");
    assert!(cmds[1] <= 6, "{cmds:?}");
}
