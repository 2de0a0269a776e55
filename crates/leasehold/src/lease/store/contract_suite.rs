//! The lease contract as a suite any store can run against itself, a store of this crate or one
//! written outside it (feature `contract-suite`): the behaviour a user can count on whichever store
//! keeps the lease. Each test takes a [`Harness`] that opens clients on the store under test.
//!
//! Run it with [`contract_suite!`](crate::contract_suite), which writes one `#[tokio::test]` per
//! contract test (a multi-threaded runtime, as the tests need):
//!
//! ```ignore
//! struct MyHarness { /* the store under test, a prefix of its own */ }
//!
//! #[leasehold::lease::store::async_trait]
//! impl leasehold::lease::store::contract_suite::Harness for MyHarness {
//!     async fn client(&self) -> leasehold::LeaseClient { /* a client on the store */ }
//! }
//!
//! leasehold::contract_suite!(async { MyHarness::new() });
//! ```
//!
//! `examples/memory_store.rs` runs it against a toy in-memory store written outside the crate.
//!
//! Promise: a store that passes the suite was seen, through the public API, to keep leases
//! exclusive with fences that grow (also under contention from several clients), to free a lease at
//! its expiry and tell a late release so, to keep one renewed for many TTLs, to let a forced
//! release evict the holder and move the fence past it, to wake a waiter of another client on
//! release and end a wait at its bound, to leave nothing held after a cancelled acquire or a
//! dropped lease, to refuse bad names and election values before sending anything, and to carry
//! elections (one leader, growing terms, hand-over on resignation, observers told of each change)
//! and a scheduled slot run once. Each test uses names of its own, so the tests may share one
//! store.
//!
//! Limit: the suite checks what one process can see (exclusion, fences, expiry, waiting, cancel
//! safety); a store's own faults (restarts, failovers, pauses of the server) need tests of their own.

// The suite is test code shipped as a library: its assertions are its purpose.
#![allow(clippy::missing_panics_doc)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Error, LeaseClient, LeaseOptions, LostReason};

/// The store under test, as the suite needs it.
#[async_trait::async_trait]
pub trait Harness: Send + Sync {
    /// A new client on the store under test that sees only this test's names. Two clients of one
    /// harness must share the store, as two processes would.
    async fn client(&self) -> LeaseClient;
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

async fn eventually(within: Duration, mut f: impl AsyncFnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if Instant::now() > end {
            return false;
        }
        tokio::time::sleep(ms(10)).await;
    }
}

fn opts(ttl_ms: u64) -> LeaseOptions {
    LeaseOptions::with_ttl(ms(ttl_ms)).unwrap()
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn exclusive_with_growing_fences(env: impl Harness) {
    let c = env.client().await;
    let o = opts(5_000);
    let a = c.try_acquire("orders", &o).await.unwrap();
    assert_eq!(a.name(), "orders");
    assert_eq!(a.token().len(), 32);
    assert!(a.remaining() > ms(4_000) && a.remaining() <= ms(5_000));
    // Before anyone else tries: the last fence issued is the holder's. (After a refused attempt it
    // may be higher on a store of several servers: a Redlock contender refused by a majority may
    // still have raised the fence on a minority that the holder's acquire had not reached.)
    let info = c.inspect("orders").await.unwrap();
    assert!(info.held);
    assert_eq!(info.fence, Some(a.fence()));
    match c.try_acquire("orders", &o).await {
        Err(Error::Busy { name, remaining }) => {
            assert_eq!(name, "orders");
            if let Some(r) = remaining {
                assert!(r <= ms(5_000), "{r:?}");
            }
        }
        other => panic!("expected Busy, got {other:?}"),
    }
    // Another client (another process, as far as the store can tell) is excluded too.
    let other = env.client().await;
    assert!(matches!(
        other.try_acquire("orders", &o).await,
        Err(Error::Busy { .. })
    ));
    let info = c.inspect("orders").await.unwrap();
    assert!(info.held);
    assert!(
        info.fence >= Some(a.fence()),
        "{:?} < {}",
        info.fence,
        a.fence()
    );
    let first = a.fence();
    a.release().await.unwrap();
    assert!(!c.inspect("orders").await.unwrap().held);
    let b = other.try_acquire("orders", &o).await.unwrap();
    assert!(b.fence() > first, "{} must exceed {}", b.fence(), first);
    // Other names are independent.
    let n = c.try_acquire("other-name", &o).await.unwrap();
    n.release().await.unwrap();
    b.release().await.unwrap();
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn expiry_frees_it_and_a_late_release_is_told(env: impl Harness) {
    let c = env.client().await;
    let short = LeaseOptions::builder()
        .ttl(ms(300))
        .no_renewal()
        .build()
        .unwrap();
    let a = c.try_acquire("job", &short).await.unwrap();
    let reason = tokio::time::timeout(ms(3_000), a.lost().fired())
        .await
        .expect("the signal fires at the deadline");
    assert_eq!(reason, LostReason::DeadlinePassed);
    // The store expires it on its own clock.
    assert!(eventually(ms(5_000), async || !c.inspect("job").await.unwrap().held).await);
    let b = c.try_acquire("job", &opts(5_000)).await.unwrap();
    assert!(b.fence() > a.fence());
    // A wakes up late and releases: it must not free B's lease, and must be told.
    assert!(matches!(a.release().await, Err(Error::LeaseLost { .. })));
    assert!(c.inspect("job").await.unwrap().held, "B still holds it");
    b.release().await.unwrap();
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn renewal_keeps_it_for_many_ttls(env: impl Harness) {
    let c = env.client().await;
    let a = c.try_acquire("long", &opts(400)).await.unwrap();
    tokio::time::sleep(ms(1_600)).await;
    assert!(!a.is_lost(), "renewed in the background");
    assert!(matches!(
        c.try_acquire("long", &opts(400)).await,
        Err(Error::Busy { .. })
    ));
    a.renew().await.unwrap();
    a.release().await.unwrap();
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn force_release_evicts_and_the_fence_moves_past_the_holder(env: impl Harness) {
    let c = env.client().await;
    let a = c.try_acquire("stuck", &opts(800)).await.unwrap();
    let forced = c.force_release("stuck").await.unwrap();
    assert!(forced.evicted);
    assert!(forced.fence > a.fence());
    // The holder hears of it at its next renewal.
    let reason = tokio::time::timeout(ms(3_000), a.lost().fired())
        .await
        .expect("the holder is told");
    assert_eq!(reason, LostReason::NotOurs);
    let b = c.try_acquire("stuck", &opts(5_000)).await.unwrap();
    assert!(b.fence() > forced.fence);
    b.release().await.unwrap();
    let again = c.force_release("stuck").await.unwrap();
    assert!(!again.evicted);
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn list_and_inspect_see_names(env: impl Harness) {
    let c = env.client().await;
    let a = c.try_acquire("report-a", &opts(5_000)).await.unwrap();
    let b = c.try_acquire("report-b", &opts(5_000)).await.unwrap();
    let z = c.try_acquire("zeta", &opts(5_000)).await.unwrap();
    b.release().await.unwrap();
    let names: Vec<String> = c
        .list("report-*")
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.name)
        .collect();
    assert!(names.contains(&"report-a".to_owned()), "{names:?}");
    assert!(!names.contains(&"zeta".to_owned()), "{names:?}");
    let all = c.list("*").await.unwrap();
    assert!(all.iter().any(|i| i.name == "zeta" && i.held), "{all:?}");
    let never = c.inspect("never-taken").await.unwrap();
    assert!(!never.held && never.ttl_ms.is_none());
    a.release().await.unwrap();
    z.release().await.unwrap();
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn a_dropped_lease_is_released_in_the_background(env: impl Harness) {
    let c = env.client().await;
    drop(c.try_acquire("dropped", &opts(30_000)).await.unwrap());
    assert!(
        eventually(ms(5_000), async || !c
            .inspect("dropped")
            .await
            .unwrap()
            .held)
        .await,
        "released long before its 30 s TTL"
    );
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn max_hold_ends_it(env: impl Harness) {
    let c = env.client().await;
    let o = LeaseOptions::builder()
        .ttl(ms(600))
        .max_hold(ms(400))
        .build()
        .unwrap();
    let a = c.try_acquire("capped", &o).await.unwrap();
    let reason = tokio::time::timeout(ms(3_000), a.lost().fired())
        .await
        .unwrap();
    assert_eq!(reason, LostReason::MaxHoldReached);
    assert!(matches!(a.release().await, Err(Error::LeaseLost { .. })));
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn a_release_wakes_a_waiter_from_another_client(env: impl Harness) {
    let holder = env.client().await;
    let waiter = env.client().await;
    let a = holder.try_acquire("handoff", &opts(20_000)).await.unwrap();
    let fence_a = a.fence();
    let task = tokio::spawn(async move {
        let started = tokio::time::Instant::now();
        let b = waiter
            .acquire("handoff", &opts(20_000), ms(15_000))
            .await
            .unwrap();
        (started.elapsed(), b.fence(), b)
    });
    tokio::time::sleep(ms(300)).await;
    a.release().await.unwrap();
    let (waited, fence_b, b) = task.await.unwrap();
    assert!(fence_b > fence_a);
    assert!(
        waited < ms(10_000),
        "woken by the release, not by the 20 s TTL: waited {waited:?}"
    );
    b.release().await.unwrap();
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn contenders_never_overlap(env: impl Harness) {
    // 8 clients x 2 tasks, 5 acquisitions each, a shared "resource" that counts holders.
    let inside = Arc::new(AtomicU64::new(0));
    let fences = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let c = env.client().await;
        for _ in 0..2 {
            let (c, inside, fences) = (c.clone(), inside.clone(), fences.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..5 {
                    let l = c
                        .acquire("counter", &opts(5_000), ms(60_000))
                        .await
                        .unwrap();
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
    assert_eq!(fences.len(), 80);
    assert!(
        fences.windows(2).all(|w| w[1] > w[0]),
        "fences in acquisition order must strictly increase"
    );
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn a_wait_gives_up_at_its_bound(env: impl Harness) {
    let c = env.client().await;
    let a = c.try_acquire("held", &opts(10_000)).await.unwrap();
    let other = env.client().await;
    let started = tokio::time::Instant::now();
    match other.acquire("held", &opts(10_000), ms(500)).await {
        Err(Error::WaitTimeout { .. }) => {}
        r => panic!("expected WaitTimeout, got {r:?}"),
    }
    assert!(started.elapsed() < ms(3_000));
    a.release().await.unwrap();
    // Giving up left nothing behind that blocks the next one.
    other
        .try_acquire("held", &opts(1_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn a_cancelled_acquire_leaves_nothing_held(env: impl Harness) {
    let c = env.client().await;
    let o = opts(30_000);
    for i in 0..20 {
        let name = format!("cancel-{i}");
        // Cancel at once, or after a few polls: wherever it stops, nothing may stay held.
        let fut = c.try_acquire(&name, &o);
        let _ = tokio::time::timeout(Duration::from_micros(i * 50), fut).await;
    }
    for i in 0..20 {
        let name = format!("cancel-{i}");
        assert!(
            eventually(ms(5_000), async || !c.inspect(&name).await.unwrap().held).await,
            "{name} stayed held after its acquire was cancelled"
        );
    }
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn with_lease_runs_the_work_and_stops_it_on_loss(env: impl Harness) {
    let c = env.client().await;
    let out = c
        .with_lease("scoped", &opts(5_000), ms(1_000), async |l| l.fence())
        .await
        .unwrap();
    assert!(
        !c.inspect("scoped").await.unwrap().held,
        "released after the work"
    );
    assert_eq!(c.inspect("scoped").await.unwrap().fence, Some(out));
    // Lost mid-work (an operator's forced release): the work is cancelled and the loss returned.
    let operator = env.client().await;
    let finished = Arc::new(AtomicU64::new(0));
    let f = finished.clone();
    let r = c
        .with_lease("scoped", &opts(600), ms(1_000), async move |_l| {
            tokio::spawn(async move {
                tokio::time::sleep(ms(100)).await;
                operator.force_release("scoped").await.unwrap();
            });
            tokio::time::sleep(ms(10_000)).await;
            f.store(1, Ordering::SeqCst);
        })
        .await;
    assert!(matches!(r, Err(Error::LeaseLost { .. })), "{r:?}");
    assert_eq!(finished.load(Ordering::SeqCst), 0, "the work was cancelled");
}

/// Contract test (see the module doc).
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn garbage_names_are_refused_before_anything_is_sent(env: impl Harness) {
    let c = env.client().await;
    let before = c.round_trips();
    for bad in [
        "",
        "a{b",
        "x}",
        "tab\there",
        &"n".repeat(crate::lease::MAX_NAME_LEN + 1),
    ] {
        for r in [
            c.try_acquire(bad, &opts(1_000)).await.map(drop),
            c.acquire(bad, &opts(1_000), ms(100)).await.map(drop),
            c.inspect(bad).await.map(drop),
            c.force_release(bad).await.map(drop),
        ] {
            assert!(
                matches!(
                    r,
                    Err(Error::Invalid {
                        what: "lease name",
                        ..
                    })
                ),
                "{bad:?}: {r:?}"
            );
        }
    }
    assert_eq!(c.round_trips(), before, "nothing reached the store");
}

/// Contract test (see the module doc): one leader at a time, each term above the last, and what
/// `leader()` reads is the current leader's record.
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn an_election_has_one_leader_and_terms_grow(env: impl Harness) {
    use crate::election::Election;
    let (a, b) = (env.client().await, env.client().await);
    let o = opts(5_000);
    let ea = Election::new(&a, "scheduler", &o)
        .unwrap()
        .with_holder("replica-a")
        .unwrap();
    let eb = Election::new(&b, "scheduler", &o)
        .unwrap()
        .with_holder("replica-b")
        .unwrap();
    assert_eq!(eb.leader().await.unwrap(), None, "nobody leads yet");
    let first = ea.campaign("10.0.0.1:80", Duration::ZERO).await.unwrap();
    let seen = eb.leader().await.unwrap().expect("a leads");
    assert_eq!(seen.term, first.term());
    assert_eq!(seen.value.as_deref(), Some("10.0.0.1:80"));
    assert_eq!(seen.holder.as_deref(), Some("replica-a"));
    assert!(seen.since_unix_ms.is_some());
    assert!(
        matches!(
            eb.campaign("10.0.0.2:80", Duration::ZERO).await,
            Err(Error::Busy { .. })
        ),
        "one leader at a time"
    );
    let term = first.term();
    first.resign().await.unwrap();
    assert_eq!(
        ea.leader().await.unwrap(),
        None,
        "nobody leads after a resignation"
    );
    let second = eb.campaign("10.0.0.2:80", ms(5_000)).await.unwrap();
    assert!(second.term() > term, "{} must exceed {term}", second.term());
    let seen = ea.leader().await.unwrap().expect("b leads");
    assert_eq!(
        (seen.term, seen.value.as_deref(), seen.holder.as_deref()),
        (second.term(), Some("10.0.0.2:80"), Some("replica-b"))
    );
    second.resign().await.unwrap();
}

/// Contract test (see the module doc): a resignation hands over to a waiting candidate at once, not
/// after a TTL.
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn a_resignation_hands_over_within_a_round_trip(env: impl Harness) {
    use crate::election::Election;
    let (a, b) = (env.client().await, env.client().await);
    // A TTL far above the bound below: only the wake-up can make it.
    let o = opts(20_000);
    let ea = Election::new(&a, "controller", &o).unwrap();
    let eb = Election::new(&b, "controller", &o).unwrap();
    let first = ea.campaign("a", Duration::ZERO).await.unwrap();
    let standby = tokio::spawn(async move {
        let l = eb.campaign("b", ms(15_000)).await;
        (l, Instant::now())
    });
    // Let the standby queue up behind the leader.
    tokio::time::sleep(ms(300)).await;
    let resigned_at = Instant::now();
    first.resign().await.unwrap();
    let (second, led_at) = standby.await.unwrap();
    let second = second.expect("the standby leads");
    let took = led_at.duration_since(resigned_at);
    assert!(took < ms(2_000), "hand-over took {took:?} (TTL 20 s)");
    second.resign().await.unwrap();
}

/// Contract test (see the module doc): `proclaim` changes the value and keeps the term; a leader
/// deposed by a forced release can proclaim nothing more, and is told.
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn proclaim_changes_the_value_and_a_deposed_leader_cannot(env: impl Harness) {
    use crate::election::Election;
    let (a, op) = (env.client().await, env.client().await);
    let e = Election::new(&a, "router", &opts(5_000)).unwrap();
    let mut l = e.campaign("v1", Duration::ZERO).await.unwrap();
    l.proclaim("v2").await.unwrap();
    let seen = e.leader().await.unwrap().expect("it leads");
    assert_eq!((seen.term, seen.value.as_deref()), (l.term(), Some("v2")));
    assert_eq!(l.value(), "v2");
    op.force_release("router").await.unwrap();
    let r = l.proclaim("v3").await;
    assert!(matches!(r, Err(Error::LeaseLost { .. })), "{r:?}");
    assert_eq!(l.value(), "v2", "the value kept is the last one written");
    assert!(l.lost().is_fired(), "a refused write fires the lost signal");
    assert_eq!(
        e.leader().await.unwrap(),
        None,
        "nobody leads after the eviction"
    );
    // A plain lease on an election's name leads without a record: seen, with no value.
    let plain = op.try_acquire("router", &opts(5_000)).await.unwrap();
    let seen = e.leader().await.unwrap().expect("the plain holder");
    assert_eq!((seen.term, seen.value), (plain.fence(), None));
    plain.release().await.unwrap();
}

/// Contract test (see the module doc): an observer reports each change once, in order.
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn an_observer_sees_each_change(env: impl Harness) {
    use crate::election::Election;
    let c = env.client().await;
    let e = Election::new(&c, "observed", &opts(5_000)).unwrap();
    let mut watch = e.observe().every(ms(20));
    let next = async |w: &mut crate::election::Observer| {
        tokio::time::timeout(ms(5_000), w.changed())
            .await
            .expect("a change is seen")
            .unwrap()
    };
    assert_eq!(next(&mut watch).await, None, "first: nobody");
    let mut l = e.campaign("one", Duration::ZERO).await.unwrap();
    assert_eq!(
        next(&mut watch).await.and_then(|x| x.value).as_deref(),
        Some("one")
    );
    l.proclaim("two").await.unwrap();
    assert_eq!(
        next(&mut watch).await.and_then(|x| x.value).as_deref(),
        Some("two")
    );
    l.resign().await.unwrap();
    assert_eq!(next(&mut watch).await, None, "resigned: nobody");
}

/// Contract test (see the module doc): on a store that pushes changes (Redis, PostgreSQL, etcd) an
/// observer hears of each change (a new leader, a new value, a resignation, a forced release, a
/// lapsed lease) far sooner than its safety interval; on one that cannot, within its poll interval.
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn an_observer_is_told_of_a_change_within_a_round_trip(env: impl Harness) {
    use crate::election::{Election, Leader, Observer};
    let (a, b, op) = (env.client().await, env.client().await, env.client().await);
    let kind = a.store_kind().name();
    let pushes = matches!(kind, "redis" | "postgres" | "etcd");
    let every = ms(250);
    let o = opts(10_000);
    let e = Election::new(&a, "pushed", &o).unwrap();
    // Far above every bound below: only a notice can make them.
    let mut watch = Election::new(&b, "pushed", &o)
        .unwrap()
        .observe()
        .every(every)
        .safety_every(ms(2_000));
    assert_eq!(watch.changed().await.unwrap(), None, "first: nobody");
    assert_eq!(
        watch.is_pushed(),
        pushes,
        "does the {kind} store push changes?"
    );
    let bound = if pushes { ms(100) } else { every + ms(250) };
    // How long after `done` the observer reports what `want` accepts.
    let until = async |w: &mut Observer, done: Instant, want: &dyn Fn(&Option<Leader>) -> bool| loop {
        let seen = tokio::time::timeout(ms(5_000), w.changed())
            .await
            .expect("a change is seen")
            .unwrap();
        if want(&seen) {
            return Instant::now().saturating_duration_since(done);
        }
    };
    let value = |v: &'static str| {
        move |l: &Option<Leader>| l.as_ref().and_then(|l| l.value.as_deref()) == Some(v)
    };
    let nobody = |l: &Option<Leader>| l.is_none();
    let mut delays = Vec::new();
    let mut l = e.campaign("one", Duration::ZERO).await.unwrap();
    delays.push((
        "new leader",
        until(&mut watch, Instant::now(), &value("one")).await,
    ));
    l.proclaim("two").await.unwrap();
    delays.push((
        "new value",
        until(&mut watch, Instant::now(), &value("two")).await,
    ));
    l.resign().await.unwrap();
    delays.push(("resigned", until(&mut watch, Instant::now(), &nobody).await));
    let _l = e.campaign("three", Duration::ZERO).await.unwrap();
    until(&mut watch, Instant::now(), &value("three")).await;
    op.force_release("pushed").await.unwrap();
    delays.push((
        "forced release",
        until(&mut watch, Instant::now(), &nobody).await,
    ));
    for (change, took) in &delays {
        assert!(
            *took < bound,
            "{kind}: {change} seen after {took:?} (bound {bound:?}; all: {delays:?})"
        );
    }
    // A lapsed lease (a leader killed, or cut off): seen at its known end, which nobody announces.
    let short = LeaseOptions::builder()
        .ttl(ms(800))
        .no_renewal()
        .build()
        .unwrap();
    let lapsing = Election::new(&a, "pushed", &short).unwrap();
    let _gone = lapsing.campaign("four", Duration::ZERO).await.unwrap();
    let seen = tokio::time::timeout(ms(5_000), async {
        loop {
            if let Some(l) = watch.changed().await.unwrap() {
                if l.value.as_deref() == Some("four") {
                    return l;
                }
            }
        }
    })
    .await
    .expect("the new leader is seen");
    let read_at = Instant::now();
    let end = ms(seen.ttl_ms.expect("a held lease has a TTL"));
    let took = until(&mut watch, read_at, &nobody).await;
    // etcd keeps a lease for at least its minimum TTL (2 s with its defaults) whatever was asked,
    // and revokes expired leases on its own cadence (every 500 ms); the others expire on time.
    let (end, slack) = match (pushes, kind) {
        (true, "etcd") => (end.max(ms(2_000)), ms(700)),
        (true, _) => (end, ms(150)),
        (false, _) => (end, every + ms(250)),
    };
    assert!(
        took < end + slack,
        "{kind}: lapse seen {took:?} after a read that left {end:?}"
    );
}

/// Contract test (see the module doc): a bad value or holder is refused before anything is sent,
/// and leaves nothing held.
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn garbage_election_values_are_refused_before_anything_is_sent(env: impl Harness) {
    use crate::election::{Election, MAX_HOLDER_LEN, MAX_VALUE_LEN};
    let c = env.client().await;
    let o = opts(5_000);
    assert!(matches!(
        Election::new(&c, "bad{name", &o),
        Err(Error::Invalid { .. })
    ));
    let sem = LeaseOptions::builder().permits(3).build().unwrap();
    assert!(matches!(
        Election::new(&c, "elect", &sem),
        Err(Error::Invalid { .. })
    ));
    let e = Election::new(&c, "elect", &o).unwrap();
    assert!(e
        .clone()
        .with_holder(&"h".repeat(MAX_HOLDER_LEN + 1))
        .is_err());
    assert!(e.clone().with_holder("two\nlines").is_err());
    let before = c.round_trips();
    for bad in ["bell\u{7}", "new\nline", &"v".repeat(MAX_VALUE_LEN + 1)] {
        let r = e.campaign(bad, ms(100)).await.map(drop);
        assert!(matches!(r, Err(Error::Invalid { .. })), "{bad:?}: {r:?}");
    }
    assert_eq!(c.round_trips(), before, "nothing reached the store");
    let mut l = e.campaign("ok", Duration::ZERO).await.unwrap();
    assert!(matches!(
        l.proclaim("bad\u{0}").await,
        Err(Error::Invalid { .. })
    ));
    assert_eq!(
        e.leader().await.unwrap().and_then(|x| x.value).as_deref(),
        Some("ok")
    );
    l.resign().await.unwrap();
}

/// Contract test (see the module doc): a scheduled job's slot is claimed once, recorded done only
/// on success, run again after a failure, and its record is kept for `history`.
///
/// # Cancel safety
///
/// A test's body: dropped mid-way, the leases it holds are released in the background as any
/// dropped `Lease` is, and a wait under way is abandoned; its names are its own.
pub async fn a_slot_runs_once_and_its_record_is_kept(env: impl Harness) {
    use crate::schedule::{claim, history, Claim, Outcome, Schedule};
    let (a, b) = (env.client().await, env.client().await);
    let o = opts(5_000);
    let slot = Schedule::every(Duration::from_secs(60)).unwrap().now();
    let Claim::Run(first) = claim(&a, "report", slot, &o, 3, "replica-a").await.unwrap() else {
        panic!("the first claim runs it");
    };
    assert!(
        matches!(
            claim(&b, "report", slot, &o, 3, "replica-b").await.unwrap(),
            Claim::Busy
        ),
        "running elsewhere"
    );
    let failed = first.finish(Some(2), false).await.unwrap();
    assert_eq!((failed.outcome, failed.attempts), (Outcome::Failed, 1));
    let Claim::Run(second) = claim(&b, "report", slot, &o, 3, "replica-b").await.unwrap() else {
        panic!("a failed slot runs again");
    };
    assert_eq!(second.record().attempts, 2);
    let fence = second.fence();
    let done = second.finish(Some(0), false).await.unwrap();
    assert_eq!(done.outcome, Outcome::Done);
    match claim(&a, "report", slot, &o, 3, "replica-a").await.unwrap() {
        Claim::Done(r) => {
            assert_eq!(
                (r.holder.as_str(), r.fence, r.exit_code),
                ("replica-b", fence, Some(0))
            );
        }
        other => panic!("done means done: {other:?}"),
    }
    // Another slot of the same job is its own.
    let next = Schedule::every(Duration::from_secs(60))
        .unwrap()
        .slot(slot.index + 1);
    let Claim::Run(later) = claim(&a, "report", next, &o, 3, "replica-a").await.unwrap() else {
        panic!("the next slot runs");
    };
    later.finish(Some(0), false).await.unwrap();
    let h = history(&a, "report", 10).await.unwrap();
    let seen: Vec<(u64, Outcome, u32)> = h
        .iter()
        .map(|r| (r.slot.index, r.outcome, r.attempts))
        .collect();
    assert_eq!(
        seen,
        [
            (next.index, Outcome::Done, 1),
            (slot.index, Outcome::Done, 2)
        ]
    );
    assert!(history(&a, "other-job", 10).await.unwrap().is_empty());
    assert!(matches!(
        claim(&a, "bad{job", slot, &o, 3, "h").await,
        Err(Error::Invalid { .. })
    ));
    assert!(matches!(
        claim(&a, "report", slot, &o, 0, "h").await,
        Err(Error::Invalid { .. })
    ));
}

/// Writes one `#[tokio::test]` per contract test, each running it against the harness the
/// expression gives (an `async` block or any future of a [`Harness`]).
#[macro_export]
macro_rules! contract_suite {
    ($harness:expr) => {
        $crate::contract_suite!(@tests $harness;
            exclusive_with_growing_fences,
            expiry_frees_it_and_a_late_release_is_told,
            renewal_keeps_it_for_many_ttls,
            force_release_evicts_and_the_fence_moves_past_the_holder,
            list_and_inspect_see_names,
            a_dropped_lease_is_released_in_the_background,
            max_hold_ends_it,
            a_release_wakes_a_waiter_from_another_client,
            contenders_never_overlap,
            a_wait_gives_up_at_its_bound,
            a_cancelled_acquire_leaves_nothing_held,
            with_lease_runs_the_work_and_stops_it_on_loss,
            garbage_names_are_refused_before_anything_is_sent,
            an_election_has_one_leader_and_terms_grow,
            a_resignation_hands_over_within_a_round_trip,
            proclaim_changes_the_value_and_a_deposed_leader_cannot,
            an_observer_sees_each_change,
            an_observer_is_told_of_a_change_within_a_round_trip,
            garbage_election_values_are_refused_before_anything_is_sent,
            a_slot_runs_once_and_its_record_is_kept,
        );
    };
    (@tests $harness:expr; $($test:ident),* $(,)?) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            $crate::lease::store::contract_suite::$test($harness.await).await
        }
    )*};
}
