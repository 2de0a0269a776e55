//! Observers under faults: a restarted Redis ends the store's pub/sub session; the client opens it
//! again, subscribes every observed name again and tells every observer to read, so a change after
//! the restart is pushed as before. The safety interval is set far above every bound here, so only a
//! notice (or the reconnect's own) can make them.

mod lease_support;

use std::time::{Duration, Instant};

use lease_support::{client, ms, opts, server};
use leasehold::election::Election;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_observer_is_pushed_again_after_the_server_restarts() {
    let mut srv = server();
    let (a, b) = (client(&srv).await, client(&srv).await);
    let o = opts(10_000);
    let mut watch = Election::new(&b, "watched", &o)
        .unwrap()
        .observe()
        .safety_every(Duration::from_secs(60));
    assert_eq!(watch.changed().await.unwrap(), None, "first: nobody");
    assert!(watch.is_pushed(), "a Redis pushes changes");
    let leader = Election::new(&a, "watched", &o).unwrap();
    let first = leader.campaign("one", Duration::ZERO).await.unwrap();
    let seen = tokio::time::timeout(ms(1_000), watch.changed())
        .await
        .expect("pushed")
        .unwrap();
    assert_eq!(seen.and_then(|l| l.value).as_deref(), Some("one"));

    // Restarted empty: the session drops; reopened, it makes every observer read (nobody leads).
    srv.restart().unwrap();
    let seen = tokio::time::timeout(ms(5_000), async {
        loop {
            // A read on the shared connection may meet the broken pipe first: call again.
            match watch.changed().await {
                Ok(seen) => return seen,
                Err(e) => eprintln!("a read across the restart: {e}"),
            }
        }
    })
    .await
    .expect("the reopened session makes the observer read");
    assert_eq!(seen, None, "the restarted server kept nothing");
    drop(first);

    // A change after the restart is pushed: the name was subscribed again.
    let end = Instant::now() + ms(5_000);
    let second = loop {
        match leader.campaign("two", Duration::ZERO).await {
            Ok(l) => break l,
            Err(e) if Instant::now() < end => {
                eprintln!("campaign after the restart: {e}");
                tokio::time::sleep(ms(50)).await;
            }
            Err(e) => panic!("no campaign after the restart: {e}"),
        }
    };
    let done = Instant::now();
    let seen = tokio::time::timeout(ms(5_000), async {
        loop {
            if let Some(l) = watch.changed().await.unwrap() {
                if l.value.as_deref() == Some("two") {
                    return Instant::now();
                }
            }
        }
    })
    .await
    .expect("the change after the restart is seen");
    let took = seen.saturating_duration_since(done);
    assert!(
        took < ms(100),
        "seen {took:?} after the change (safety interval 60 s)"
    );
    second.resign().await.unwrap();
}
