//! The scripts against a real redis-server, one call at a time as a client would send them: the
//! queue's order, the hand-over, no barging, dead waiters skipped, given-up tokens refused, stale
//! grants told apart, and each script run twice.
//!
//! Promise: on one real redis-server, the tests show that waiters are served in arrival order (a
//! refresh keeps the place) and nobody jumps a non-empty queue; a release hands the lock to the
//! first waiter with a short first TTL and a new fence; a waiter whose deadline passed is skipped,
//! a lock handed to a dead waiter is free again after that short TTL, and an abandoned waiter
//! leaves the queue and passes on a lock handed to it; stale grants are told apart from new ones;
//! every script run twice has the effect of running once; notes are written only by the holder and
//! published on the change channel; semaphores admit their permits and hand freed ones on; and the
//! scripts touch only the keys `keys.rs` names, each with an expiry, so a hundred thousand names
//! leave nothing behind after the retention.
//!
//! Limit: one server, scripts called directly, one call at a time: no replica, failover, cluster or
//! concurrency between clients is exercised here, and the client's side of the protocol (its
//! clocks, retries, cancellation) is not tested here.

use super::*;
use crate::lease::store::redis::keys::LeaseKeys;
use leasehold_testkit::RedisServer;

const SEC: Duration = Duration::from_secs(1);

type Con = redis::aio::MultiplexedConnection;

async fn setup() -> (RedisServer, Con, LeaseKeys) {
    let (srv, con) = test_server().await;
    (srv, con, LeaseKeys::new("t", "queue").unwrap())
}

fn tuning() -> Tuning {
    Tuning::default()
}

/// An acquire with a TTL of 30 s and, if handed over, a first TTL of 1 s.
async fn acquire(con: &mut Con, k: &LeaseKeys, token: &str, block: Duration) -> AcquireReply {
    acquire_with(con, k, token, block, SEC, &tuning()).await
}

async fn acquire_with(
    con: &mut Con,
    k: &LeaseKeys,
    token: &str,
    block: Duration,
    first_ttl: Duration,
    t: &Tuning,
) -> AcquireReply {
    let ask = Ask {
        ttl: 30 * SEC,
        first_ttl,
        permits: 1,
    };
    let inv = super::acquire(&k.lock, token, ask, block, t);
    AcquireReply::from_value(Ok(invoke(con, &inv).await.unwrap())).unwrap()
}

async fn release(con: &mut Con, k: &LeaseKeys, token: &str) -> bool {
    flag(Ok(invoke(
        con,
        &super::release(&k.lock, token, 1, &tuning()),
    )
    .await
    .unwrap()))
    .unwrap()
}

/// What [`acquire`] asks for.
fn ask() -> Ask {
    Ask {
        ttl: 30 * SEC,
        first_ttl: SEC,
        permits: 1,
    }
}

async fn abandon(con: &mut Con, k: &LeaseKeys, token: &str) -> bool {
    flag(Ok(invoke(
        con,
        &super::abandon(&k.lock, token, &ask(), &tuning()),
    )
    .await
    .unwrap()))
    .unwrap()
}

async fn force_release(con: &mut Con, k: &LeaseKeys, op: &str) -> (bool, i64) {
    let (evicted, fence): (i64, i64) =
        invoke(con, &super::force_release(&k.lock, op, None, &tuning()))
            .await
            .unwrap();
    (evicted == 1, fence)
}

async fn get(con: &mut Con, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(con).await.unwrap()
}

async fn pttl(con: &mut Con, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(con).await.unwrap()
}

async fn exists(con: &mut Con, key: &str) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query_async::<i64>(con)
        .await
        .unwrap()
        == 1
}

/// The queued tokens in order (each entry is `<token>,<first TTL ms>`).
async fn queue(con: &mut Con, k: &LeaseKeys) -> Vec<String> {
    let entries: Vec<String> = redis::cmd("ZRANGE")
        .arg(&k.queue)
        .arg(0)
        .arg(-1)
        .query_async(con)
        .await
        .unwrap();
    entries
        .into_iter()
        .map(|e| e.split(',').next().unwrap().to_owned())
        .collect()
}

/// The queue's score of `entry` (`<token>,<first TTL ms>`): when it joined, in µs.
async fn queue_score(con: &mut Con, k: &LeaseKeys, entry: &str) -> f64 {
    redis::cmd("ZSCORE")
        .arg(&k.queue)
        .arg(entry)
        .query_async(con)
        .await
        .unwrap()
}

/// Whose token the lock holds (it is marked `<token>:q` while waiters are queued behind it).
async fn holder(con: &mut Con, k: &LeaseKeys) -> Option<String> {
    get(con, &k.lock)
        .await
        .map(|v| v.strip_suffix(":q").map(str::to_owned).unwrap_or(v))
}

/// The fence the name's record holds (`<fence>:<flags>:<holder>:<released>`).
async fn record_fence(con: &mut Con, k: &LeaseKeys) -> Option<u64> {
    get(con, &k.fence)
        .await
        .map(|r| r.split(':').next().unwrap().parse().unwrap())
}

/// What the hand-over left on `token`'s wake list (LPOP, as its BLPOP would).
async fn popped_grant(con: &mut Con, k: &LeaseKeys, token: &str) -> Option<HandOver> {
    let v: Option<String> = redis::cmd("LPOP")
        .arg(k.wake(token))
        .query_async(con)
        .await
        .unwrap();
    v.map(|s| HandOver::parse(&s).unwrap())
}

fn fence_of(r: AcquireReply) -> u64 {
    match r {
        AcquireReply::Taken { fence, .. } => fence,
        other => panic!("expected Taken, got {other:?}"),
    }
}

fn is_busy(r: AcquireReply) -> bool {
    matches!(r, AcquireReply::Busy { .. })
}

#[tokio::test]
async fn an_uncontended_cycle_leaves_no_queue_behind() {
    let (_srv, mut con, k) = setup().await;
    let a = acquire(&mut con, &k, "a", Duration::ZERO).await;
    match a {
        AcquireReply::Taken { ttl_ms, .. } => assert_eq!(ttl_ms, 30_000),
        other => panic!("{other:?}"),
    }
    // A try (no wait) told "busy" is not queued.
    assert!(is_busy(acquire(&mut con, &k, "b", Duration::ZERO).await));
    assert!(!exists(&mut con, &k.queue).await);
    assert!(release(&mut con, &k, "a").await);
    for key in [&k.lock, &k.queue, &k.alive("b"), &k.gone, &k.wake("a")] {
        assert!(!exists(&mut con, key).await, "{key} left behind");
    }
    assert!(exists(&mut con, &k.fence).await, "release keeps the fence");
    // The fast release run twice (no queue): the retry finds the marker the rename left, with what
    // was left of the lease's TTL, and says released again; a token that never held it is refused.
    assert_eq!(get(&mut con, &k.released).await.as_deref(), Some("a"));
    let marker_ttl = pttl(&mut con, &k.released).await;
    assert!(marker_ttl > 25_000 && marker_ttl <= 30_000, "{marker_ttl}");
    assert!(
        release(&mut con, &k, "a").await,
        "a retried release says released"
    );
    assert!(!release(&mut con, &k, "b").await, "never ours");
    assert!(!exists(&mut con, &k.lock).await);
}

/// The server's clock now, in microseconds.
async fn server_us(con: &mut Con) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query_async(con).await.unwrap();
    secs * 1_000_000 + micros
}

/// An acquire as the client sends it on the common path: on its estimate of the server's clock.
async fn acquire_on(
    con: &mut Con,
    k: &LeaseKeys,
    token: &str,
    block: Duration,
    at: Estimate,
) -> Value {
    let call = acquire_at(&k.lock, token, ask(), block, &tuning(), Some(at));
    invoke(con, &call).await.unwrap()
}

#[tokio::test]
async fn on_an_estimate_the_fast_part_answers_with_the_fence_alone_and_never_lowers_it() {
    let (_srv, mut con, k) = setup().await;
    let now = server_us(&mut con).await;
    let at = Estimate {
        lo: now - 1_000,
        hi: now + 1_000,
    };
    // A free name: the fast part's reply is the estimate's digits, which are the fence.
    let first = acquire_on(&mut con, &k, "a", Duration::ZERO, at).await;
    assert_eq!(first, Value::BulkString(at.hi.to_string().into_bytes()));
    match AcquireReply::from_value(Ok(first)).unwrap() {
        AcquireReply::Taken {
            fence,
            ttl_ms,
            exact,
            ..
        } => assert_eq!((fence, ttl_ms, exact), (at.hi as u64, -1, false)),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        get(&mut con, &k.fence).await,
        Some(format!("{}::a:", at.hi))
    );
    // Run twice: the same lease and fence, with the TTL the lock has.
    let again =
        AcquireReply::from_value(Ok(acquire_on(&mut con, &k, "a", Duration::ZERO, at).await));
    match again.unwrap() {
        AcquireReply::Taken { fence, ttl_ms, .. } => {
            assert_eq!(fence, at.hi as u64);
            assert!(ttl_ms > 25_000 && ttl_ms <= 30_000, "{ttl_ms}");
        }
        other => panic!("{other:?}"),
    }
    let release_on = |token: &'static str| release_at(&k.lock, token, 1, &tuning(), Some(at));
    assert_eq!(
        invoke::<_, i64>(&mut con, &release_on("a")).await.unwrap(),
        1
    );
    assert_eq!(
        invoke::<_, i64>(&mut con, &release_on("a")).await.unwrap(),
        1
    );
    // An estimate at or below the stored fence (acquisitions outran the clock's estimate, or another
    // client's estimate is tighter): the fence still goes up, by the second part.
    let mut last = at.hi as u64;
    for (token, hi) in [("b", at.hi), ("c", at.hi - 500), ("d", 999)] {
        let behind = Estimate { lo: hi - 10, hi };
        let reply = acquire_on(&mut con, &k, token, Duration::ZERO, behind).await;
        assert!(matches!(reply, Value::Array(_)), "{token}: {reply:?}");
        let fence = fence_of(AcquireReply::from_value(Ok(reply)).unwrap());
        assert!(fence > last, "{token}: fence {fence} after {last}");
        last = fence;
        assert_eq!(
            invoke::<_, i64>(&mut con, &release_on(token))
                .await
                .unwrap(),
            1
        );
    }
    // A record only a number (as Redlock and earlier versions wrote it) goes to the second part too.
    let _: () = redis::cmd("SET")
        .arg(&k.fence)
        .arg(last + 1_000_000_000)
        .query_async(&mut con)
        .await
        .unwrap();
    let ahead = server_us(&mut con).await + 1_000;
    let reply = acquire_on(
        &mut con,
        &k,
        "e",
        Duration::ZERO,
        Estimate {
            lo: ahead - 2_000,
            hi: ahead,
        },
    )
    .await;
    assert!(fence_of(AcquireReply::from_value(Ok(reply)).unwrap()) > last + 1_000_000_000);
    assert_eq!(
        invoke::<_, i64>(&mut con, &release_on("e")).await.unwrap(),
        1
    );
    // Waiting on a free name: the grant its BLPOP will pop is on its wake list, with the estimate's
    // bounds as fence and time.
    let ahead = server_us(&mut con).await + 1_000_000_000;
    let at = Estimate {
        lo: ahead - 3_000,
        hi: ahead,
    };
    let reply = acquire_on(&mut con, &k, "f", Duration::from_millis(100), at).await;
    assert_eq!(reply, Value::BulkString(ahead.to_string().into_bytes()));
    let grant = popped_grant(&mut con, &k, "f")
        .await
        .expect("a grant on the wake list");
    assert_eq!(
        (grant.fence, grant.at_us, grant.ttl_ms),
        (ahead as u64, at.lo, 30_000)
    );
}

#[tokio::test]
async fn on_an_estimate_a_waiter_behind_a_queue_joins_before_the_library_and_keeps_its_place() {
    let (_srv, mut con, k) = setup().await;
    let est = |now: i64| Estimate {
        lo: now - 1_000,
        hi: now + 1_000,
    };
    assert!(matches!(
        acquire(&mut con, &k, "a", Duration::ZERO).await,
        AcquireReply::Taken { .. }
    ));
    // The first waiter marks the lock (the second part); the next ones join on the fast path.
    assert!(is_busy(acquire(&mut con, &k, "b", SEC).await));
    assert_eq!(get(&mut con, &k.lock).await.as_deref(), Some("a:q"));
    let at = est(server_us(&mut con).await);
    let joined = acquire_on(&mut con, &k, "c", SEC, at).await;
    match AcquireReply::from_value(Ok(joined)).unwrap() {
        AcquireReply::Busy { pttl_ms, .. } => assert_eq!(pttl_ms, -3),
        other => panic!("{other:?}"),
    }
    assert_eq!(queue(&mut con, &k).await, ["b", "c"]);
    let score = queue_score(&mut con, &k, "c,1000").await;
    assert_eq!(score as i64, at.hi, "its place is the estimate's time");
    assert!(!exists(&mut con, &k.alive("c")).await);
    // Run twice with the same arguments (a retry after a reconnect): the same place, and the retry
    // counts as a refresh of it (an alive key), as the library's enqueue does.
    let retried = acquire_on(&mut con, &k, "c", SEC, at).await;
    assert!(matches!(
        AcquireReply::from_value(Ok(retried)).unwrap(),
        AcquireReply::Busy { .. }
    ));
    assert_eq!(queue(&mut con, &k).await, ["b", "c"]);
    let score_again = queue_score(&mut con, &k, "c,1000").await;
    assert_eq!(score_again, score);
    assert!(exists(&mut con, &k.alive("c")).await);
    // Run again later (a refresh): the same place, the lock's TTL read.
    let later = est(server_us(&mut con).await + 5_000);
    let refreshed = acquire_on(&mut con, &k, "c", SEC, later).await;
    match AcquireReply::from_value(Ok(refreshed)).unwrap() {
        AcquireReply::Busy { pttl_ms, .. } => {
            assert!(pttl_ms > 0 && pttl_ms <= 30_000, "{pttl_ms}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(queue(&mut con, &k).await, ["b", "c"]);
    assert!(exists(&mut con, &k.alive("c")).await);
    // The holder's own retry is not a join: it gets its lease back.
    assert!(matches!(
        AcquireReply::from_value(Ok(acquire_on(&mut con, &k, "a", SEC, later).await)),
        Ok(AcquireReply::Taken { .. })
    ));
    assert_eq!(queue(&mut con, &k).await, ["b", "c"]);
    // Served in order: b, then c.
    assert!(release(&mut con, &k, "a").await);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("b"));
    assert!(release(&mut con, &k, "b").await);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("c"));
}

/// A release as the client sends it on the common path: on its estimate of the server's clock.
async fn release_on(con: &mut Con, k: &LeaseKeys, token: &str, at: Estimate) -> i64 {
    invoke(con, &release_at(&k.lock, token, 1, &tuning(), Some(at)))
        .await
        .unwrap()
}

#[tokio::test]
async fn on_an_estimate_the_release_hands_over_before_the_library_and_agrees_with_it() {
    let (_srv, mut con, k) = setup().await;
    let est = |now: i64| Estimate {
        lo: now - 1_000,
        hi: now + 1_000,
    };
    // The common case: the head of the queue, live by its join time, under a plain record.
    let at = est(server_us(&mut con).await);
    acquire_on(&mut con, &k, "a", Duration::ZERO, at).await;
    assert!(is_busy(acquire(&mut con, &k, "b", SEC).await));
    let at = est(server_us(&mut con).await);
    assert_eq!(release_on(&mut con, &k, "a", at).await, 1);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("b"));
    assert_eq!(get(&mut con, &k.lock).await.as_deref(), Some("b:q"));
    let ttl = pttl(&mut con, &k.lock).await;
    assert!(ttl > 0 && ttl <= 1_000, "first TTL {ttl}");
    assert_eq!(
        get(&mut con, &k.fence).await,
        Some(format!("{}:q:b:a", at.hi))
    );
    // Run twice: the retry hears "released" from the record and hands nothing more over.
    assert_eq!(release_on(&mut con, &k, "a", at).await, 1);
    assert_eq!(get(&mut con, &k.lock).await.as_deref(), Some("b:q"));
    let grant = popped_grant(&mut con, &k, "b").await.expect("b was told");
    assert_eq!(
        (grant.fence, grant.at_us, grant.ttl_ms),
        (at.hi as u64, at.lo, 1_000)
    );
    assert!(popped_grant(&mut con, &k, "b").await.is_none(), "told once");
    assert!(queue(&mut con, &k).await.is_empty());

    // A record whose fence outran the estimate: the library's rule takes over after the fast part
    // wrote the record, and the fence still goes up.
    assert!(is_busy(acquire(&mut con, &k, "c", SEC).await));
    let ahead = at.hi as u64 + 1_000_000_000;
    let _: () = redis::cmd("SET")
        .arg(&k.fence)
        .arg(format!("{ahead}:q:b:a"))
        .arg("KEEPTTL")
        .query_async(&mut con)
        .await
        .unwrap();
    let at = est(server_us(&mut con).await);
    assert_eq!(release_on(&mut con, &k, "b", at).await, 1);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("c"));
    let grant = popped_grant(&mut con, &k, "c").await.expect("c was told");
    assert!(grant.fence > ahead, "{} after {ahead}", grant.fence);
    assert_eq!(record_fence(&mut con, &k).await, Some(grant.fence));

    // A head that joined longer ago than the window and kept no alive key is dropped, as the
    // library drops one; the next live waiter gets the lock.
    assert!(is_busy(acquire(&mut con, &k, "e", SEC).await));
    let _: () = redis::cmd("ZADD")
        .arg(&k.queue)
        .arg(1_000)
        .arg("d,1000")
        .query_async(&mut con)
        .await
        .unwrap();
    let at = est(server_us(&mut con).await);
    assert_eq!(release_on(&mut con, &k, "c", at).await, 1);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("e"));
    assert!(popped_grant(&mut con, &k, "d").await.is_none());
    assert!(popped_grant(&mut con, &k, "e").await.is_some());
    assert!(queue(&mut con, &k).await.is_empty());
}

/// A waiter that never takes the lock at once has no estimate of the server's clock now and then
/// (it learns the clock from its releases): its join behind a queue and its release that hands over
/// read `TIME` once and take the same common path, and the release gives the time back.
#[tokio::test]
async fn without_an_estimate_the_join_and_the_hand_over_read_the_clock_once_and_agree() {
    let (_srv, mut con, k) = setup().await;
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    assert!(is_busy(acquire(&mut con, &k, "b", SEC).await));
    assert_eq!(get(&mut con, &k.lock).await.as_deref(), Some("a:q"));
    // The join: busy, its place the server's time it replies, and run twice the same place.
    let before = server_us(&mut con).await;
    let joined = acquire(&mut con, &k, "c", SEC).await;
    let after = server_us(&mut con).await;
    let at = match joined {
        AcquireReply::Busy {
            server_us, exact, ..
        } => {
            assert!(exact, "the script read the clock");
            server_us
        }
        other => panic!("{other:?}"),
    };
    assert!(
        (before..=after).contains(&at),
        "{before} <= {at} <= {after}"
    );
    let score = queue_score(&mut con, &k, "c,1000").await;
    assert_eq!(score as i64, at, "its place is the clock's reading");
    assert!(is_busy(acquire(&mut con, &k, "c", SEC).await));
    assert_eq!(queue(&mut con, &k).await, ["b", "c"]);
    assert!(
        exists(&mut con, &k.alive("c")).await,
        "the rerun refreshed it"
    );

    // The hand-over: the head gets the lock with the clock's reading as its fence, and the reply
    // carries that reading for the releaser to learn.
    let before = server_us(&mut con).await;
    let inv = super::release(&k.lock, "a", 1, &tuning());
    let (ours, told) = renewed(Ok(invoke(&mut con, &inv).await.unwrap())).unwrap();
    let after = server_us(&mut con).await;
    assert!(ours);
    let told = told.expect("the release gives the clock back");
    assert!(
        (before..=after).contains(&told),
        "{before} <= {told} <= {after}"
    );
    assert_eq!(get(&mut con, &k.lock).await.as_deref(), Some("b:q"));
    assert_eq!(get(&mut con, &k.fence).await, Some(format!("{told}:q:b:a")));
    let grant = popped_grant(&mut con, &k, "b").await.expect("b was told");
    assert_eq!((grant.fence, grant.at_us), (told as u64, told));
    // Run twice: "released" again, nothing more handed over.
    assert!(release(&mut con, &k, "a").await);
    assert_eq!(get(&mut con, &k.lock).await.as_deref(), Some("b:q"));
    assert!(popped_grant(&mut con, &k, "b").await.is_none(), "told once");
    assert_eq!(queue(&mut con, &k).await, ["c"]);
    // The next hand-over goes by a fresh reading: the fence goes up.
    assert!(release(&mut con, &k, "b").await);
    let next = popped_grant(&mut con, &k, "c").await.expect("c was told");
    assert!(
        next.fence > grant.fence,
        "{} after {}",
        next.fence,
        grant.fence
    );
}

#[tokio::test]
async fn a_release_hands_the_lock_to_the_first_waiter_with_a_short_first_ttl_and_a_new_fence() {
    let (_srv, mut con, k) = setup().await;
    let fa = fence_of(acquire(&mut con, &k, "a", Duration::ZERO).await);
    assert!(is_busy(acquire(&mut con, &k, "b", SEC).await));
    assert_eq!(queue(&mut con, &k).await, ["b"]);
    assert!(release(&mut con, &k, "a").await);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("b"));
    let ttl = pttl(&mut con, &k.lock).await;
    assert!(ttl > 0 && ttl <= 1_000, "first TTL {ttl}");
    let grant = popped_grant(&mut con, &k, "b").await.expect("b was told");
    assert!(grant.fence > fa);
    assert_eq!(grant.ttl_ms, 1_000);
    assert_eq!(record_fence(&mut con, &k).await, Some(grant.fence));
    assert!(queue(&mut con, &k).await.is_empty());
    // B holds it: a retried acquire of B gets it back (it sends nothing more in the real flow).
    assert_eq!(
        fence_of(acquire(&mut con, &k, "b", Duration::ZERO).await),
        grant.fence
    );
}

#[tokio::test]
async fn waiters_are_served_in_arrival_order_and_a_refresh_keeps_the_place() {
    let (_srv, mut con, k) = setup().await;
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    for w in ["w1", "w2", "w3"] {
        assert!(is_busy(acquire(&mut con, &k, w, SEC).await));
    }
    // The first refreshes (as it does every block): it keeps its place.
    assert!(is_busy(acquire(&mut con, &k, "w1", SEC).await));
    assert_eq!(queue(&mut con, &k).await, ["w1", "w2", "w3"]);
    let mut holding = "a".to_owned();
    let mut fences = Vec::new();
    for expected in ["w1", "w2", "w3"] {
        assert!(release(&mut con, &k, &holding).await);
        let grant = popped_grant(&mut con, &k, expected)
            .await
            .unwrap_or_else(|| panic!("{expected} was not handed the lock"));
        assert_eq!(holder(&mut con, &k).await.as_deref(), Some(expected));
        fences.push(grant.fence);
        holding = expected.to_owned();
    }
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
    assert!(release(&mut con, &k, &holding).await);
    assert!(!exists(&mut con, &k.lock).await);
}

#[tokio::test]
async fn nobody_jumps_a_non_empty_queue() {
    let (_srv, mut con, k) = setup().await;
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    assert!(is_busy(acquire(&mut con, &k, "b", SEC).await));
    // The holder's lock vanishes without a release (a foreign compare-and-delete, or its expiry).
    redis::cmd("DEL")
        .arg(&k.lock)
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    // A try that finds it free does not take it: the queue goes first, and the contact hands it on.
    match acquire(&mut con, &k, "c", Duration::ZERO).await {
        AcquireReply::Busy { pttl_ms, .. } => assert!(pttl_ms > 0 && pttl_ms <= 1_000),
        other => panic!("barged: {other:?}"),
    }
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("b"));
    assert!(popped_grant(&mut con, &k, "b").await.is_some());
    // A new waiter joins the tail.
    assert!(is_busy(acquire(&mut con, &k, "d", SEC).await));
    assert_eq!(queue(&mut con, &k).await, ["d"]);
}

/// A waiting acquire's first step is a try (block 0) and, when busy, a queue step with the same
/// token. The try, run twice, neither queues nor leaves a grant, and never jumps a queue, also when the
/// lock is free meanwhile; the queue step after it joins the tail.
#[tokio::test]
async fn a_waits_first_try_run_twice_neither_queues_nor_jumps_the_queue() {
    let (_srv, mut con, k) = setup().await;
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    assert!(is_busy(acquire(&mut con, &k, "w", SEC).await));
    for _ in 0..2 {
        assert!(is_busy(acquire(&mut con, &k, "c", Duration::ZERO).await));
    }
    assert_eq!(queue(&mut con, &k).await, ["w"]);
    for key in [k.wake("c"), k.alive("c")] {
        assert!(!exists(&mut con, &key).await, "{key} left by a try");
    }
    assert!(is_busy(acquire(&mut con, &k, "c", SEC).await));
    assert_eq!(queue(&mut con, &k).await, ["w", "c"]);
    // The lock vanishes without a release: the try of a new waiter, twice, hands it to the head once.
    redis::cmd("DEL")
        .arg(&k.lock)
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    for _ in 0..2 {
        assert!(is_busy(acquire(&mut con, &k, "d", Duration::ZERO).await));
    }
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("w"));
    assert!(popped_grant(&mut con, &k, "w").await.is_some());
    assert!(
        popped_grant(&mut con, &k, "w").await.is_none(),
        "handed twice"
    );
    assert_eq!(queue(&mut con, &k).await, ["c"]);
    assert!(!exists(&mut con, &k.wake("d")).await);
}

#[tokio::test]
async fn a_waiter_whose_deadline_passed_is_skipped() {
    let (_srv, mut con, k) = setup().await;
    // A waiter counts as live for one block and the slack after it joined (2 ms here), and after
    // that while it refreshes its place.
    let short = Tuning {
        wait_refresh: Duration::from_millis(1),
        entry_slack: Duration::from_millis(1),
        ..tuning()
    };
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    // "dead" blocked for 1 ms and never came back; "live" refreshed (its second step) and blocks on.
    assert!(is_busy(
        acquire_with(&mut con, &k, "dead", Duration::from_millis(1), SEC, &short).await
    ));
    for _ in 0..2 {
        assert!(is_busy(
            acquire_with(&mut con, &k, "live", 10 * SEC, SEC, &short).await
        ));
    }
    tokio::time::sleep(Duration::from_millis(20)).await;
    let released = flag(Ok(invoke(
        &mut con,
        &super::release(&k.lock, "a", 1, &short),
    )
    .await
    .unwrap()))
    .unwrap();
    assert!(released);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("live"));
    assert!(popped_grant(&mut con, &k, "dead").await.is_none());
    assert!(queue(&mut con, &k).await.is_empty());
    for w in ["dead", "live"] {
        assert!(
            !exists(&mut con, &k.alive(w)).await,
            "{w}'s entry is gone too"
        );
    }
}

#[tokio::test]
async fn a_lock_handed_to_a_dead_waiter_is_free_again_after_its_short_first_ttl() {
    let (_srv, mut con, k) = setup().await;
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    let first = Duration::from_millis(100);
    assert!(is_busy(
        acquire_with(&mut con, &k, "dies", SEC, first, &tuning()).await
    ));
    assert!(is_busy(acquire(&mut con, &k, "next", SEC).await));
    assert!(release(&mut con, &k, "a").await);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("dies"));
    assert!(pttl(&mut con, &k.lock).await <= 100);
    // "dies" never renews. After its short first TTL, the next contact (the next waiter's refresh)
    // hands the lock on.
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert!(!exists(&mut con, &k.lock).await);
    match acquire(&mut con, &k, "next", SEC).await {
        AcquireReply::Taken { ttl_ms, .. } => assert_eq!(ttl_ms, 1_000),
        other => panic!("{other:?}"),
    }
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("next"));
}

#[tokio::test]
async fn an_abandoned_waiter_leaves_the_queue_and_passes_on_a_lock_handed_to_it() {
    let (_srv, mut con, k) = setup().await;
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    for w in ["b", "c"] {
        assert!(is_busy(acquire(&mut con, &k, w, SEC).await));
    }
    // B is handed the lock, and gives up before it hears of it.
    assert!(release(&mut con, &k, "a").await);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("b"));
    assert!(abandon(&mut con, &k, "b").await, "it released B's lock");
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("c"));
    assert!(!exists(&mut con, &k.wake("b")).await);
    // A queued waiter that gives up just leaves.
    assert!(is_busy(acquire(&mut con, &k, "d", SEC).await));
    assert!(!abandon(&mut con, &k, "d").await);
    assert!(queue(&mut con, &k).await.is_empty());
}

#[tokio::test]
async fn an_acquire_that_arrives_after_its_abandon_does_nothing() {
    // A waiting acquire goes on a dedicated connection, the abandon on the shared one: the abandon can
    // overtake it. The late acquire must neither take a free lock nor join the queue.
    let (_srv, mut con, k) = setup().await;
    assert!(!abandon(&mut con, &k, "late").await);
    assert_eq!(
        acquire(&mut con, &k, "late", SEC).await,
        AcquireReply::GivenUp
    );
    assert!(!exists(&mut con, &k.lock).await, "the late acquire took it");
    assert!(queue(&mut con, &k).await.is_empty());
    // Others are not affected.
    fence_of(acquire(&mut con, &k, "other", Duration::ZERO).await);
    let remembered = pttl(&mut con, &k.gone).await;
    assert!(remembered > 0 && remembered <= 60_000, "{remembered}");
}

#[tokio::test]
async fn a_stale_grant_is_told_apart_from_a_new_one() {
    let (_srv, mut con, k) = setup().await;
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    assert!(is_busy(acquire(&mut con, &k, "b", SEC).await));
    assert!(release(&mut con, &k, "a").await);
    // B never took up the grant (its connection dropped) and the lock went elsewhere meanwhile: a
    // forced release evicts B and drops its grant with it.
    assert!(exists(&mut con, &k.wake("b")).await);
    let (evicted, _) = force_release(&mut con, &k, "op1").await;
    assert!(evicted);
    assert!(
        !exists(&mut con, &k.wake("b")).await,
        "the evicted holder's grant is gone"
    );
    fence_of(acquire(&mut con, &k, "c", Duration::ZERO).await);
    // A grant that outlived its lock another way (the lock key deleted by someone else) is older
    // than B's next step, which is how B's client tells it from a grant made for that step.
    assert!(is_busy(acquire(&mut con, &k, "b", SEC).await));
    assert!(release(&mut con, &k, "c").await);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("b"));
    redis::cmd("DEL")
        .arg(&k.lock)
        .exec_async(&mut con)
        .await
        .unwrap();
    fence_of(acquire(&mut con, &k, "d", Duration::ZERO).await);
    let step = acquire(&mut con, &k, "b", SEC).await;
    let AcquireReply::Busy { server_us, .. } = step else {
        panic!("{step:?}")
    };
    let stale = popped_grant(&mut con, &k, "b")
        .await
        .expect("the old grant");
    assert!(
        super::super::queue::grant_is_stale(&stale, server_us),
        "{stale:?} vs {server_us}"
    );
    // A grant made after the step is not.
    assert!(release(&mut con, &k, "d").await);
    let fresh = popped_grant(&mut con, &k, "b")
        .await
        .expect("b was handed the lock");
    assert!(
        !super::super::queue::grant_is_stale(&fresh, server_us),
        "{fresh:?} vs {server_us}"
    );
}

#[tokio::test]
async fn a_taken_step_leaves_the_grant_for_its_own_blpop() {
    let (_srv, mut con, k) = setup().await;
    let f = fence_of(acquire(&mut con, &k, "a", SEC).await);
    let grant = popped_grant(&mut con, &k, "a")
        .await
        .expect("the BLPOP that follows returns at once");
    assert_eq!(grant.fence, f);
}

/// The renewal of `a`'s lease, run twice: still ours, the server's clock read each time when asked
/// (never going back), not read when not asked; a token that is not the holder's renews nothing.
async fn renewed_twice_renews_once(con: &mut Con, k: &LeaseKeys) {
    let mut times = Vec::new();
    for _ in 0..2 {
        let (ours, at) = super::renewed(Ok(invoke(con, &renew(&k.lock, "a", 30 * SEC, 1, true))
            .await
            .unwrap()))
        .unwrap();
        assert!(ours, "renewed");
        times.push(at.expect("a renewal carries the server's time"));
    }
    // Twice: still ours, the server's clock read each time (it never goes back on one server).
    assert!(times[1] >= times[0], "{times:?}");
    let now: (i64, i64) = redis::cmd("TIME").query_async(con).await.unwrap();
    assert!(
        (now.0 * 1_000_000 + now.1 - times[1]).abs() < 5_000_000,
        "{times:?} vs {now:?}"
    );
    // Not asked for the clock: ours, and no time read.
    assert_eq!(
        super::renewed(Ok(invoke(con, &renew(&k.lock, "a", 30 * SEC, 1, false))
            .await
            .unwrap()))
        .unwrap(),
        (true, None)
    );
    // Not ours: 0, no time, nothing touched.
    assert_eq!(
        super::renewed(Ok(invoke(con, &renew(&k.lock, "z", SEC, 1, true))
            .await
            .unwrap()))
        .unwrap(),
        (false, None)
    );
}

/// renew_many.lua renews the locks of a batch that hold their tokens (bare or marked `:q`), leaves
/// the others, flags a key of another type for a renewal alone, reads the clock when asked; run twice,
/// the same effect as once.
#[tokio::test]
async fn renew_many_renews_only_its_own_locks_and_run_twice_as_once() {
    let (_srv, mut con, _) = setup().await;
    let k: Vec<LeaseKeys> = (0..4)
        .map(|i| LeaseKeys::new("t", &format!("many-{i}")).unwrap())
        .collect();
    for (key, value) in [
        (&k[0].lock, "a"),
        (&k[1].lock, "b:q"),
        (&k[2].lock, "other"),
    ] {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PX")
            .arg(1_000)
            .query_async::<()>(&mut con)
            .await
            .unwrap();
    }
    redis::cmd("RPUSH")
        .arg(&k[3].lock)
        .arg("not a lock")
        .query_async::<()>(&mut con)
        .await
        .unwrap();
    let batch = [
        (k[0].lock.as_str(), "a", 30 * SEC),
        (k[1].lock.as_str(), "b", 20 * SEC),
        (k[2].lock.as_str(), "c", 30 * SEC),
        (k[3].lock.as_str(), "d", 30 * SEC),
    ];
    let before = server_us(&mut con).await;
    for clock in [true, true, false] {
        let reply = invoke_value(&mut con, &super::renew_many(&batch, clock)).await;
        let (flags, at) = renewed_many(Ok(reply), batch.len()).unwrap();
        assert_eq!(flags, [Some(true), Some(true), Some(false), None]);
        assert_eq!(at.is_some(), clock);
        if let Some(at) = at {
            assert!(at >= before, "{at} < {before}");
        }
        let ttls = [
            pttl(&mut con, &k[0].lock).await,
            pttl(&mut con, &k[1].lock).await,
            pttl(&mut con, &k[2].lock).await,
        ];
        assert!(
            ttls[0] > 29_000 && ttls[1] > 19_000 && ttls[1] <= 20_000,
            "{ttls:?}"
        );
        assert!(ttls[2] <= 1_000, "someone else's lock renewed: {ttls:?}");
        assert_eq!(get(&mut con, &k[1].lock).await.as_deref(), Some("b:q"));
    }
}

async fn invoke_value(con: &mut Con, call: &Call) -> redis::Value {
    invoke(con, call).await.unwrap()
}

#[tokio::test]
async fn every_script_run_twice_has_the_effect_of_running_once() {
    // A client that retries after a reconnect sends the same call again; the first one may have
    // run. Each script, really run twice against the server:
    let (_srv, mut con, k) = setup().await;
    let first = acquire(&mut con, &k, "a", Duration::ZERO).await;
    let again = acquire(&mut con, &k, "a", Duration::ZERO).await;
    assert_eq!(
        fence_of(first),
        fence_of(again),
        "a retried acquire gets the same lease and fence"
    );
    // A waiter's step, twice: queued once.
    for _ in 0..2 {
        assert!(is_busy(acquire(&mut con, &k, "w", SEC).await));
    }
    assert_eq!(queue(&mut con, &k).await, ["w"]);
    renewed_twice_renews_once(&mut con, &k).await;
    // Released twice: it says released both times and hands over once.
    assert!(release(&mut con, &k, "a").await);
    assert!(
        release(&mut con, &k, "a").await,
        "a retried release says released"
    );
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("w"));
    let grant = popped_grant(&mut con, &k, "w").await.unwrap();
    assert!(
        popped_grant(&mut con, &k, "w").await.is_none(),
        "handed twice"
    );
    // The hand-over's retried step: the same lease and fence, not "busy".
    assert_eq!(fence_of(acquire(&mut con, &k, "w", SEC).await), grant.fence);
    // Abandoned twice: nothing more happens the second time.
    assert!(is_busy(acquire(&mut con, &k, "x", SEC).await));
    assert!(!abandon(&mut con, &k, "x").await);
    assert!(!abandon(&mut con, &k, "x").await);
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("w"));
    // Forced twice with the same request id: one eviction, one fence; the waiter the first run
    // handed the lock to keeps it.
    assert!(is_busy(acquire(&mut con, &k, "y", SEC).await));
    let (e1, f1) = force_release(&mut con, &k, "op").await;
    let (e2, f2) = force_release(&mut con, &k, "op").await;
    assert!(e1 && e2 && f1 == f2, "{e1} {f1} / {e2} {f2}");
    assert_eq!(holder(&mut con, &k).await.as_deref(), Some("y"));
    // A new forced release is a new request: it evicts y and moves the fence up.
    let (e3, f3) = force_release(&mut con, &k, "op2").await;
    assert!(e3 && f3 > f2);
    // Someone who never held it is told "not yours".
    assert!(!release(&mut con, &k, "nobody").await);
}

#[tokio::test]
async fn the_scripts_touch_only_the_keys_keys_rs_names_and_each_expires() {
    let (_srv, mut con, k) = setup().await;
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    for w in ["b", "c", "b"] {
        acquire(&mut con, &k, w, SEC).await;
    }
    assert!(
        exists(&mut con, &k.alive("b")).await,
        "b refreshed its place"
    );
    abandon(&mut con, &k, "c").await;
    release(&mut con, &k, "a").await;
    force_release(&mut con, &k, "op").await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut con)
        .await
        .unwrap();
    let named = [&k.lock, &k.fence, &k.queue, &k.gone, &k.released, &k.forced];
    // At least the record, the given-up token, the forced release's result and b's liveness.
    assert!(keys.len() >= 4, "{keys:?}");
    for key in &keys {
        assert!(
            named.contains(&key)
                || key.starts_with(&k.wake_prefix)
                || key.starts_with(&k.alive_prefix),
            "{key} is not a key keys.rs names"
        );
        let ttl = pttl(&mut con, key).await;
        assert!(ttl > 0, "{key} has no expiry ({ttl})");
    }
}

async fn note(con: &mut Con, k: &LeaseKeys, token: &str, note: &[u8]) -> bool {
    flag(Ok(invoke(
        con,
        &super::note(&k.lock, token, note, 60 * SEC),
    )
    .await
    .unwrap()))
    .unwrap()
}

async fn read_note(con: &mut Con, k: &LeaseKeys) -> Option<Vec<u8>> {
    invoke(con, &super::read_note(&k.lock)).await.unwrap()
}

#[tokio::test]
async fn a_note_is_written_only_by_the_holder_run_twice_as_once_and_expires() {
    let (_srv, mut con, k) = setup().await;
    assert_eq!(
        read_note(&mut con, &k).await,
        None,
        "none before any holder"
    );
    assert!(
        !note(&mut con, &k, "a", b"early").await,
        "nobody holds it: not written"
    );
    assert_eq!(read_note(&mut con, &k).await, None);
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    // Twice: written both times, the same note.
    assert!(note(&mut con, &k, "a", b"leader a").await);
    assert!(note(&mut con, &k, "a", b"leader a").await);
    assert_eq!(
        read_note(&mut con, &k).await.as_deref(),
        Some(&b"leader a"[..])
    );
    // Someone else's token: refused, the note untouched.
    assert!(!note(&mut con, &k, "b", b"usurper").await);
    assert_eq!(
        read_note(&mut con, &k).await.as_deref(),
        Some(&b"leader a"[..])
    );
    // The note is the key keys.rs names, with the retention asked for as its expiry.
    let ttl = pttl(&mut con, &k.note).await;
    assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
    // It outlives the holding (readers match it to the holder by its content).
    release(&mut con, &k, "a").await;
    assert!(!note(&mut con, &k, "a", b"after release").await);
    assert_eq!(
        read_note(&mut con, &k).await.as_deref(),
        Some(&b"leader a"[..])
    );
    // A note key that is not a string is named as foreign by check.lua.
    redis::cmd("DEL")
        .arg(&k.note)
        .exec_async(&mut con)
        .await
        .unwrap();
    redis::cmd("HSET")
        .arg(&k.note)
        .arg("f")
        .arg("v")
        .exec_async(&mut con)
        .await
        .unwrap();
    let found = foreign_of(invoke(&mut con, &check(&k.lock)).await.unwrap()).unwrap();
    assert_eq!(found.map(|(key, _)| key), Some(k.note.clone()));
    assert!(
        invoke::<_, Option<Vec<u8>>>(&mut con, &super::read_note(&k.lock))
            .await
            .is_err()
    );
}

/// note.lua publishes each written note on the name's change channel (run twice: two notices, each
/// only "read again"); a refused write publishes nothing; a user whose ACL refuses the channel still
/// has the note written.
#[tokio::test]
async fn a_written_note_is_published_on_the_change_channel() {
    use futures::StreamExt as _;
    let (srv, mut con, k) = setup().await;
    let channel = super::super::changes::channel_of(&k.lock);
    assert_eq!(channel, "{t:queue}:changed");
    let mut sub = redis::Client::open(srv.url())
        .unwrap()
        .get_async_pubsub()
        .await
        .unwrap();
    sub.subscribe(&channel).await.unwrap();
    acquire(&mut con, &k, "a", Duration::ZERO).await;
    assert!(!note(&mut con, &k, "b", b"usurper").await);
    assert!(note(&mut con, &k, "a", b"leader a").await);
    assert!(note(&mut con, &k, "a", b"leader a").await);
    let mut messages = sub.on_message();
    for _ in 0..2 {
        let m = tokio::time::timeout(Duration::from_secs(2), messages.next())
            .await
            .expect("a notice per written note")
            .unwrap();
        assert_eq!(m.get_channel_name(), channel);
    }
    assert!(
        tokio::time::timeout(Duration::from_millis(200), messages.next())
            .await
            .is_err(),
        "the refused write published nothing"
    );
    drop(messages);
    // A user that may run the scripts but not publish: the note is written all the same.
    redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "nochan",
            "on",
            ">pw",
            "~*",
            "+@all",
            "resetchannels",
        ])
        .exec_async(&mut con)
        .await
        .unwrap();
    let mut limited = redis::Client::open(format!(
        "redis://nochan:pw@{}",
        srv.url().trim_start_matches("redis://")
    ))
    .unwrap()
    .get_multiplexed_async_connection()
    .await
    .unwrap();
    assert!(note(&mut limited, &k, "a", b"leader a, quietly").await);
    assert_eq!(
        read_note(&mut con, &k).await.as_deref(),
        Some(&b"leader a, quietly"[..])
    );
}

// Semaphores: the same queue and hand-over, N holders.

async fn sem_acquire(
    con: &mut Con,
    k: &LeaseKeys,
    token: &str,
    permits: u32,
    block: Duration,
) -> AcquireReply {
    let ask = Ask {
        ttl: 30 * SEC,
        first_ttl: SEC,
        permits,
    };
    let inv = super::acquire(&k.lock, token, ask, block, &tuning());
    AcquireReply::from_value(Ok(invoke(con, &inv).await.unwrap())).unwrap()
}

async fn sem_release(con: &mut Con, k: &LeaseKeys, token: &str) -> bool {
    flag(Ok(invoke(
        con,
        &super::release(&k.lock, token, 3, &tuning()),
    )
    .await
    .unwrap()))
    .unwrap()
}

async fn holders(con: &mut Con, k: &LeaseKeys) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(&k.holders)
        .arg(0)
        .arg(-1)
        .query_async(con)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_semaphore_admits_its_permits_then_queues_and_hands_each_freed_permit_on() {
    let (_srv, mut con, k) = setup().await;
    let mut fences = Vec::new();
    for t in ["a", "b", "c"] {
        fences.push(fence_of(
            sem_acquire(&mut con, &k, t, 3, Duration::ZERO).await,
        ));
    }
    assert!(fences.windows(2).all(|w| w[1] > w[0]), "{fences:?}");
    // The fourth waits in the queue; a try is busy and does not queue.
    assert!(is_busy(sem_acquire(&mut con, &k, "d", 3, SEC).await));
    assert!(is_busy(
        sem_acquire(&mut con, &k, "e", 3, Duration::ZERO).await
    ));
    assert_eq!(queue(&mut con, &k).await, ["d"]);
    assert!(
        !exists(&mut con, &k.lock).await,
        "a semaphore has no lock key"
    );
    // B gives its permit back: it goes to D, with a new fence and the short first TTL.
    assert!(sem_release(&mut con, &k, "b").await);
    let grant = popped_grant(&mut con, &k, "d").await.expect("d was told");
    assert!(grant.fence > fences[2]);
    assert_eq!(grant.ttl_ms, 1_000);
    let mut now = holders(&mut con, &k).await;
    now.sort();
    assert_eq!(now, ["a", "c", "d"]);
    // Run twice: D's retried step gets its permit back, B's retried release says released.
    assert_eq!(
        fence_of(sem_acquire(&mut con, &k, "d", 3, SEC).await),
        grant.fence
    );
    assert!(sem_release(&mut con, &k, "b").await);
    assert_eq!(holders(&mut con, &k).await.len(), 3);
    // A permit nobody renews runs out; the next contact gives it away.
    let renewed: Value = invoke(
        &mut con,
        &renew(&k.lock, "a", Duration::from_millis(1), 3, true),
    )
    .await
    .unwrap();
    assert!(matches!(super::renewed(Ok(renewed)), Ok((true, Some(_)))));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(
        !sem_release(&mut con, &k, "a").await,
        "an expired permit is not ours"
    );
    fence_of(sem_acquire(&mut con, &k, "f", 3, Duration::ZERO).await);
    for t in ["c", "d", "f"] {
        assert!(sem_release(&mut con, &k, t).await, "{t}");
    }
    assert!(holders(&mut con, &k).await.is_empty());
}

#[tokio::test]
async fn everyone_using_a_name_must_ask_for_the_same_permits() {
    let (_srv, mut con, k) = setup().await;
    fence_of(sem_acquire(&mut con, &k, "a", 3, Duration::ZERO).await);
    assert_eq!(
        sem_acquire(&mut con, &k, "b", 2, Duration::ZERO).await,
        AcquireReply::PermitsInUse { permits: 3 }
    );
    assert_eq!(
        acquire(&mut con, &k, "c", Duration::ZERO).await,
        AcquireReply::PermitsInUse { permits: 3 }
    );
    assert!(sem_release(&mut con, &k, "a").await);
    // Free again: any count may be used now, and the name is a lock for a lock's acquire.
    fence_of(acquire(&mut con, &k, "lock", Duration::ZERO).await);
    assert_eq!(
        sem_acquire(&mut con, &k, "d", 3, Duration::ZERO).await,
        AcquireReply::PermitsInUse { permits: 1 }
    );
    // A foreign SET NX PX lock on the key counts as a lock too.
    assert!(release(&mut con, &k, "lock").await);
    let _: () = redis::cmd("SET")
        .arg(&k.lock)
        .arg("foreign")
        .arg("PX")
        .arg(30_000)
        .query_async(&mut con)
        .await
        .unwrap();
    assert_eq!(
        sem_acquire(&mut con, &k, "e", 3, Duration::ZERO).await,
        AcquireReply::PermitsInUse { permits: 1 }
    );
}

#[tokio::test]
async fn a_forced_release_evicts_one_permit_holder_or_all_and_hands_the_permits_on() {
    let (_srv, mut con, k) = setup().await;
    for t in ["a", "b", "c"] {
        fence_of(sem_acquire(&mut con, &k, t, 3, Duration::ZERO).await);
    }
    for w in ["w1", "w2", "w3"] {
        assert!(is_busy(sem_acquire(&mut con, &k, w, 3, SEC).await));
    }
    let one = |op: &'static str, token: &'static str| {
        super::force_release(&k.lock, op, Some(token), &tuning())
    };
    let (evicted, _): (i64, i64) = invoke(&mut con, &one("op1", "b")).await.unwrap();
    assert_eq!(evicted, 1);
    let mut now = holders(&mut con, &k).await;
    now.sort();
    assert_eq!(now, ["a", "c", "w1"]);
    let (evicted, _): (i64, i64) = invoke(&mut con, &one("op2", "nobody")).await.unwrap();
    assert_eq!(evicted, 0);
    // Everyone: the three permits go to the next three waiters (two are left).
    let (evicted, _) = force_release(&mut con, &k, "op3").await;
    assert!(evicted);
    let mut now = holders(&mut con, &k).await;
    now.sort();
    assert_eq!(now, ["w2", "w3"]);
}

#[tokio::test]
async fn an_abandoned_permit_is_handed_on() {
    let (_srv, mut con, k) = setup().await;
    for t in ["a", "b"] {
        fence_of(sem_acquire(&mut con, &k, t, 2, Duration::ZERO).await);
    }
    for w in ["w1", "w2"] {
        assert!(is_busy(sem_acquire(&mut con, &k, w, 2, SEC).await));
    }
    let release_b = flag(Ok(invoke(
        &mut con,
        &super::release(&k.lock, "b", 2, &tuning()),
    )
    .await
    .unwrap()))
    .unwrap();
    assert!(release_b);
    // W1 got B's permit and gave up before hearing of it: it goes to W2.
    assert!(abandon(&mut con, &k, "w1").await);
    let mut now = holders(&mut con, &k).await;
    now.sort();
    assert_eq!(now, ["a", "w2"]);
}

// Bounded footprint: nothing of a name outlives the retention after its last use.

/// `used_memory` without the clients' buffers (those of this test's own connection move with the
/// size of its last pipeline, not with what the names left).
async fn used_memory(con: &mut Con) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(con)
        .await
        .unwrap();
    let field = |name: &str| -> i64 {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    field("used_memory:") - field("mem_clients_normal:")
}

async fn dbsize(con: &mut Con) -> i64 {
    redis::cmd("DBSIZE").query_async(con).await.unwrap()
}

/// Every key and its TTL (SCAN, never KEYS).
async fn keys_and_ttls(con: &mut Con) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, keys): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query_async(con)
            .await
            .unwrap();
        for k in keys {
            let t = pttl(con, &k).await;
            out.push((k, t));
        }
        cursor = next;
        if cursor == 0 {
            return out;
        }
    }
}

/// `names` names acquired and released, plus contended names (queue keys, wake lists, given-up
/// tokens) and semaphores, all with 1 s TTLs and a 1 s retention. Returns the first name's fence.
async fn workload(con: &mut Con, prefix: &str, names: usize, t: &Tuning) -> u64 {
    let ask = |permits| Ask {
        ttl: SEC,
        first_ttl: SEC,
        permits,
    };
    let lock = |i: usize| LeaseKeys::new(prefix, &format!("order:{i}")).unwrap().lock;
    let mut first_fence = 0;
    for chunk in (0..names).collect::<Vec<_>>().chunks(1_000) {
        let take: Vec<_> = chunk
            .iter()
            .map(|&i| super::acquire(&lock(i), "a", ask(1), Duration::ZERO, t))
            .collect();
        let replies = pipeline(con, take, None).await.unwrap();
        if chunk[0] == 0 {
            first_fence = fence_of(AcquireReply::from_value(replies[0].clone()).unwrap());
        }
        let give: Vec<_> = chunk
            .iter()
            .map(|&i| super::release(&lock(i), "a", 1, t))
            .collect();
        for r in pipeline(con, give, None).await.unwrap() {
            assert!(flag(r).unwrap());
        }
    }
    for i in 0..200 {
        let k = LeaseKeys::new(prefix, &format!("busy:{i}")).unwrap();
        let inv = |token, block| super::acquire(&k.lock, token, ask(1), block, t);
        invoke::<_, Value>(con, &inv("a", Duration::ZERO))
            .await
            .unwrap();
        for w in ["b", "c"] {
            invoke::<_, Value>(con, &inv(w, SEC)).await.unwrap();
        }
        invoke::<_, Value>(con, &super::abandon(&k.lock, "c", &ask(1), t))
            .await
            .unwrap();
        // Handed to b, which never takes the grant up nor releases: its lock runs out.
        invoke::<_, Value>(con, &super::release(&k.lock, "a", 1, t))
            .await
            .unwrap();
        let s = LeaseKeys::new(prefix, &format!("pool:{i}")).unwrap();
        for h in ["x", "y", "z"] {
            let inv = super::acquire(&s.lock, h, ask(2), SEC, t);
            invoke::<_, Value>(con, &inv).await.unwrap();
        }
        invoke::<_, Value>(con, &super::release(&s.lock, "x", 2, t))
            .await
            .unwrap();
    }
    first_fence
}

/// Waits (up to 60 s) until the server holds no key.
async fn until_empty(con: &mut Con) {
    for _ in 0..600 {
        if dbsize(con).await == 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{} keys left after the retention", dbsize(con).await);
}

#[tokio::test]
async fn a_hundred_thousand_names_leave_nothing_behind_after_the_retention() {
    // Active expiry at 100 Hz so that 100,000 expired keys are gone in seconds.
    let srv = RedisServer::builder()
        .arg("--hz")
        .arg("100")
        .start()
        .unwrap();
    let mut con = redis::Client::open(srv.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let t = Tuning::with_retention(SEC);
    // Running scripts grows some of Redis's own buffers once (about 150 KB, whether 10,000 or
    // 300,000 names went through): a warm-up on other names, so that the baseline has them.
    workload(&mut con, "warm", 2_000, &t).await;
    until_empty(&mut con).await;
    let baseline = used_memory(&mut con).await;
    let names = 100_000;
    let first_fence = workload(&mut con, "t", names, &t).await;
    let live = keys_and_ttls(&mut con).await;
    assert!(live.len() > 1_000, "{} keys", live.len());
    // -2: it expired between SCAN and PTTL; -1 would be a key without expiry.
    let forever: Vec<_> = live.iter().filter(|(_, t)| *t == -1).collect();
    assert!(forever.is_empty(), "keys without expiry: {forever:?}");
    until_empty(&mut con).await;
    // What is left does not grow with the names (about 40 KB after 20,000, 50 KB after 300,000, in
    // Redis's own structures; 50-105 KB after 100,000 since the scripts check the format of the
    // counters and carry the foreign-key check, the most on a loaded machine). The bound is two
    // bytes per name: one fence key alone costs ~100 bytes, so keys of even 2 % of the names left
    // behind (a missing expiry) are 10 times over it.
    let tolerance = 2 * i64::try_from(names).unwrap();
    let mut grown = i64::MAX;
    for _ in 0..100 {
        grown = used_memory(&mut con).await - baseline;
        if grown <= tolerance {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("used_memory {grown} bytes above the baseline after {names} names and the retention");
    assert!(grown <= tolerance, "{grown} bytes more than before");
    // A name used again after its fence key expired still gets a larger fence.
    let lock0 = LeaseKeys::new("t", "order:0").unwrap().lock;
    let ask = Ask {
        ttl: SEC,
        first_ttl: SEC,
        permits: 1,
    };
    let again = invoke::<_, Value>(
        &mut con,
        &super::acquire(&lock0, "b", ask, Duration::ZERO, &t),
    )
    .await
    .unwrap();
    assert!(fence_of(AcquireReply::from_value(Ok(again)).unwrap()) > first_fence);
}

/// The ACL check on a server without `redis.acl_check_cmd` (older than Redis 7.0; here the script's
/// `redis` shadowed by a table without it) judges nothing and says so with an empty list, so that
/// the version check after it refuses the server by its version instead of a Lua error; on this
/// server, the same script finds the refused command of a user without it.
#[tokio::test]
async fn the_acl_check_leaves_an_older_server_to_the_version_check() {
    let (_srv, mut con, _) = setup().await;
    let script = include_str!("acl.lua");
    let args = ["3", "rename", "RENAME", "{t:}:a", "{t:}:b"];
    let older = format!(
        "local redis = setmetatable({{acl_check_cmd = false}}, {{__index = redis}})\n{script}"
    );
    let refused: Vec<String> = redis::cmd("EVAL")
        .arg(&older)
        .arg(0)
        .arg(&args)
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(refused.is_empty(), "{refused:?}");
    let () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "norename", "on", "nopass", "~*", "+@all", "-rename",
        ])
        .query_async(&mut con)
        .await
        .unwrap();
    let () = redis::cmd("AUTH")
        .arg(&["norename", "x"])
        .query_async(&mut con)
        .await
        .unwrap();
    // Run twice with the same arguments (a retry after a reconnect): the same answer, nothing written.
    for _ in 0..2 {
        let refused: Vec<String> = redis::cmd("EVAL")
            .arg(script)
            .arg(0)
            .arg(&args)
            .query_async(&mut con)
            .await
            .unwrap();
        assert_eq!(refused, ["rename"]);
    }
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut con)
        .await
        .unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}
