//! A lease at risk before it is lost: renewals failing on a stopped server, and a server whose clock
//! runs faster than ours (libfaketime on a private redis-server). Each against a real redis-server.

mod lease_support;

use std::time::{Duration, Instant};

use lease_support::*;
use leasehold::{LeaseHealth, LeaseOptions, LostReason, SuspectReason};
use leasehold_testkit::RedisServer;

#[tokio::test]
async fn renewals_failing_make_the_lease_suspect_then_lost_at_its_deadline() {
    let mut srv = server();
    let c = client(&srv).await;
    let o = LeaseOptions::builder()
        .ttl(ms(1_500))
        .renew_every(ms(300))
        .build()
        .unwrap();
    let lease = c.try_acquire("at-risk", &o).await.unwrap();
    let mut health = lease.health();
    tokio::time::sleep(ms(400)).await;
    assert_eq!(health.current(), LeaseHealth::Held, "renewed on time");

    srv.pause().unwrap();
    let paused = Instant::now();
    let at_risk = tokio::time::timeout(ms(1_400), health.at_risk())
        .await
        .expect("suspect before the deadline");
    let suspect_after = paused.elapsed();
    assert_eq!(
        at_risk,
        LeaseHealth::Suspect {
            reason: SuspectReason::RenewalFailing
        }
    );
    assert!(!lease.is_lost(), "suspect, not lost yet: {suspect_after:?}");
    assert!(lease.remaining() > Duration::ZERO);

    let reason = tokio::time::timeout(ms(3_000), lease.lost().fired())
        .await
        .expect("lost at the deadline");
    let lost_after = paused.elapsed();
    srv.resume().unwrap();
    assert_eq!(reason, LostReason::DeadlinePassed);
    assert!(
        suspect_after < lost_after,
        "{suspect_after:?} then {lost_after:?}"
    );
    assert_eq!(
        health.changed().await,
        LeaseHealth::Lost {
            reason: LostReason::DeadlinePassed
        }
    );
}

#[tokio::test]
async fn a_renewal_that_gets_through_again_makes_the_lease_held_again() {
    let mut srv = server();
    let c = client(&srv).await;
    let o = LeaseOptions::builder()
        .ttl(ms(4_000))
        .renew_every(ms(300))
        .build()
        .unwrap();
    let lease = c.try_acquire("wobbly", &o).await.unwrap();
    let mut health = lease.health();
    srv.pause().unwrap();
    let at_risk = tokio::time::timeout(ms(2_000), health.at_risk()).await;
    srv.resume().unwrap();
    assert!(at_risk.expect("suspect while stopped").is_suspect());
    let back = tokio::time::timeout(ms(3_000), async {
        loop {
            if health.changed().await.is_held() {
                return;
            }
        }
    })
    .await;
    assert!(back.is_ok(), "held again: {:?}", health.current());
    assert!(!lease.is_lost());
    lease.release().await.unwrap();
}

/// A private redis-server whose wall clock (the one it expires keys by, and `TIME`) runs twice as
/// fast as real time.
fn fast_server() -> RedisServer {
    RedisServer::builder()
        .clock_rate(2.0)
        .start()
        .expect("a redis-server under libfaketime (apt-get install faketime)")
}

#[tokio::test]
async fn a_store_clock_twice_as_fast_is_suspect_and_the_holder_gives_up_by_the_store_ttl() {
    let mut srv = fast_server();
    // The unsafe reading first: a key set for 3 s on this server is gone after about 1.5 s of ours.
    {
        let mut con = srv.connection().unwrap();
        let _: () = redis::cmd("SET")
            .arg("probe")
            .arg("x")
            .arg("PX")
            .arg(3_000)
            .query(&mut con)
            .unwrap();
        std::thread::sleep(ms(1_700));
        let left: i64 = redis::cmd("PTTL").arg("probe").query(&mut con).unwrap();
        assert_eq!(
            left, -2,
            "the fast server expired a 3 s key within 1.7 s of ours"
        );
    }

    let c = client(&srv).await;
    let o = LeaseOptions::builder()
        .ttl(ms(3_000))
        .renew_every(ms(1_000))
        .build()
        .unwrap();
    let lease = c.try_acquire("fast-store", &o).await.unwrap();
    // Before any renewal only the acquire's sample exists: nothing known, the deadline is ours.
    assert!(lease.remaining() > ms(2_500), "{:?}", lease.remaining());
    let mut health = lease.health();
    let at_risk = tokio::time::timeout(ms(2_500), health.at_risk())
        .await
        .expect("suspect at the first renewal");
    match at_risk {
        LeaseHealth::Suspect {
            reason: SuspectReason::StoreClockFast { per_million },
        } => assert!(
            (800_000..1_200_000).contains(&per_million),
            "about twice as fast: {per_million} ppm"
        ),
        other => panic!("expected a fast store clock, got {other:?}"),
    }
    // The deadline now counts the store's 3 s TTL at its rate: about 1.5 s of ours.
    assert!(lease.remaining() <= ms(1_500), "{:?}", lease.remaining());
    // Renewals come at the store's rate too, so the lease is kept while the server answers: over
    // three store TTLs of real time it is never lost, in the store or here.
    tokio::time::sleep(ms(4_500)).await;
    assert!(!lease.is_lost(), "kept at the store's rate");
    assert!(c.inspect("fast-store").await.unwrap().held);

    // The server stops answering: the holder gives up by the store's TTL (about 1.5 s of ours after
    // the last renewal, sent at most 0.5 s before the pause), not by its own 3 s.
    srv.pause().unwrap();
    let paused = Instant::now();
    let reason = tokio::time::timeout(ms(4_000), lease.lost().fired())
        .await
        .expect("lost");
    let after = paused.elapsed();
    srv.resume().unwrap();
    assert_eq!(reason, LostReason::DeadlinePassed);
    assert!(
        after < ms(1_500 + 300),
        "gave up {after:?} after the pause; by its own clock it would be 2.5 s or more"
    );
}
