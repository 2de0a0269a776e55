//! The lease's metrics, read back through a debugging recorder (one test: the recorder is global to
//! this test binary).

mod lease_support;

use lease_support::*;
use leasehold::lease::metrics as m;
use leasehold::{Error, LeaseOptions};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;

type Entries = Vec<(
    metrics_util::CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

fn counter(entries: &Entries, name: &str, label: Option<(&str, &str)>) -> u64 {
    entries
        .iter()
        .filter(|(k, ..)| k.kind() == MetricKind::Counter && k.key().name() == name)
        .filter(|(k, ..)| match label {
            Some((l, v)) => k.key().labels().any(|x| x.key() == l && x.value() == v),
            None => true,
        })
        .map(|(.., v)| match v {
            DebugValue::Counter(n) => *n,
            _ => 0,
        })
        .sum()
}

fn gauge(entries: &Entries, name: &str) -> f64 {
    entries
        .iter()
        .filter(|(k, ..)| k.kind() == MetricKind::Gauge && k.key().name() == name)
        .map(|(.., v)| match v {
            DebugValue::Gauge(g) => g.into_inner(),
            _ => 0.0,
        })
        .sum()
}

fn samples(entries: &Entries, name: &str) -> usize {
    entries
        .iter()
        .filter(|(k, ..)| k.kind() == MetricKind::Histogram && k.key().name() == name)
        .map(|(.., v)| match v {
            DebugValue::Histogram(h) => h.len(),
            _ => 0,
        })
        .sum()
}

#[tokio::test]
async fn acquisitions_contention_renewals_losses_and_times_are_recorded() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("first recorder in this binary");

    let mut srv = server();
    let c = client(&srv).await;
    let a = c.try_acquire("m", &opts(300)).await.unwrap(); // acquired
    assert!(matches!(
        c.try_acquire("m", &opts(300)).await,
        Err(Error::Busy { .. })
    )); // busy
    assert!(matches!(
        c.acquire("m", &opts(300), ms(150)).await,
        Err(Error::WaitTimeout { .. })
    )); // timeout
    tokio::time::sleep(ms(450)).await; // renewals every 100 ms
    a.release().await.unwrap(); // hold time
    let b = c
        .try_acquire(
            "m",
            &LeaseOptions::builder()
                .ttl(ms(100))
                .no_renewal()
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    let _ = tokio::time::timeout(ms(2_000), b.lost().fired())
        .await
        .unwrap(); // lost: deadline

    let e: Entries = snapshotter.snapshot().into_vec();
    assert_eq!(
        counter(&e, m::ACQUISITIONS_TOTAL, Some(("outcome", "acquired"))),
        2
    );
    assert_eq!(
        counter(&e, m::ACQUISITIONS_TOTAL, Some(("outcome", "busy"))),
        1
    );
    assert_eq!(
        counter(&e, m::ACQUISITIONS_TOTAL, Some(("outcome", "timeout"))),
        1
    );
    assert!(counter(&e, m::CONTENTION_TOTAL, None) >= 2);
    assert!(counter(&e, m::RENEWALS_TOTAL, Some(("outcome", "renewed"))) >= 2);
    assert_eq!(
        counter(&e, m::RENEWALS_TOTAL, Some(("outcome", "not_ours"))),
        0
    );
    assert_eq!(
        counter(&e, m::LOST_TOTAL, Some(("reason", "deadline_passed"))),
        1
    );
    assert_eq!(
        counter(&e, m::RELEASES_TOTAL, Some(("outcome", "released"))),
        1
    );
    assert_eq!(samples(&e, m::ACQUIRE_WAIT_SECONDS), 4);
    assert_eq!(samples(&e, m::HOLD_SECONDS), 2, "one release, one loss");
    assert_eq!(
        counter(&e, m::SUSPECT_TOTAL, None),
        0,
        "nothing was at risk"
    );

    // A lease whose renewals fail is suspect (counted once, and in the gauge while it lasts), then
    // lost (out of the gauge).
    let o = LeaseOptions::builder()
        .ttl(ms(1_200))
        .renew_every(ms(200))
        .build()
        .unwrap();
    let s = c.try_acquire("s", &o).await.unwrap();
    let mut health = s.health();
    srv.pause().unwrap();
    tokio::time::timeout(ms(2_000), health.at_risk())
        .await
        .expect("suspect while the server is stopped");
    let e: Entries = snapshotter.snapshot().into_vec();
    assert_eq!(
        counter(&e, m::SUSPECT_TOTAL, Some(("reason", "renewal_failing"))),
        1
    );
    let suspect_now = gauge(&e, m::SUSPECT_LEASES);
    assert_eq!(suspect_now, 1.0);
    let _ = tokio::time::timeout(ms(3_000), s.lost().fired())
        .await
        .expect("lost at the deadline");
    srv.resume().unwrap();
    // The debugging recorder's snapshot hands over what changed since the last one: the gauge's
    // two readings add up to its value now.
    let e: Entries = snapshotter.snapshot().into_vec();
    assert_eq!(
        suspect_now + gauge(&e, m::SUSPECT_LEASES),
        0.0,
        "a lost lease is not suspect"
    );
}
