//! Idempotency keys on real PostgreSQL and SQLite.
// Runs on every database backend compiled in; Cargo's `required-features` cannot say "either".
#![cfg(feature = "sql")]

mod sql_support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::db::Param;
use leasehold::idempotency::{Begun, IdempotencyStore};
use leasehold::Error;
use sql_support::{each_backend, exec, scalar};

/// Work that leaves a visible effect and returns a response with a random part, so a replayed response
/// can be told apart from a second run.
fn order_work(
    key: String,
) -> impl for<'t> FnOnce(
    &'t mut leasehold::db::Tx,
) -> futures::future::BoxFuture<'t, leasehold::Result<Vec<u8>>>
       + Send {
    move |tx| {
        Box::pin(async move {
            tx.execute(
                "UPDATE effects SET n = n + 1 WHERE k = $1",
                &[Param::Text(&key)],
            )
            .await?;
            // Stay in flight a little so duplicates arrive while it runs.
            tokio::time::sleep(Duration::from_millis(30)).await;
            Ok(format!("order for {key}: {:032x}", rand::random::<u128>()).into_bytes())
        })
    }
}

/// 20 keys, 10 concurrent duplicates each: the work runs once per key; every caller gets the same
/// bytes or an in-progress conflict; a later retry gets the same bytes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_duplicates_run_the_work_once() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE effects (k TEXT PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .await;
        let store = IdempotencyStore::new(db.clone());
        let mut tasks = Vec::new();
        for k in 0..20 {
            let key = format!("key-{k}");
            let mut tx = db.begin().await.unwrap();
            tx.execute("INSERT INTO effects VALUES ($1, 0)", &[Param::Text(&key)])
                .await
                .unwrap();
            tx.commit().await.unwrap();
            for _ in 0..10 {
                let (store, key) = (store.clone(), key.clone());
                tasks.push(tokio::spawn(async move {
                    let r = store
                        .run("client-a", &key, b"POST /orders", order_work(key.clone()))
                        .await;
                    (key, r)
                }));
            }
        }
        let mut bodies: HashMap<String, Vec<u8>> = HashMap::new();
        let (mut fresh, mut replayed, mut in_progress) = (0, 0, 0);
        for task in tasks {
            let (key, r) = task.await.unwrap();
            match r {
                Ok(resp) => {
                    if resp.replayed {
                        replayed += 1
                    } else {
                        fresh += 1
                    }
                    let first = bodies.entry(key).or_insert_with(|| resp.body.clone());
                    assert_eq!(
                        *first,
                        resp.body,
                        "{:?}: different bodies for one key",
                        t.backend()
                    );
                }
                Err(Error::IdempotencyInProgress { .. }) => in_progress += 1,
                Err(e) => panic!("{e:?}"),
            }
        }
        assert_eq!(
            fresh,
            20,
            "{:?}: exactly one fresh run per key",
            t.backend()
        );
        assert_eq!(fresh + replayed + in_progress, 200);
        assert_eq!(
            scalar(&db, "SELECT CAST(SUM(n) AS BIGINT) FROM effects", &[]).await,
            Some(20)
        );
        assert_eq!(
            scalar(&db, "SELECT MAX(n) FROM effects", &[]).await,
            Some(1)
        );
        // Everyone retrying now gets the stored bytes, without running the work.
        for k in 0..20 {
            let key = format!("key-{k}");
            let resp = store
                .run("client-a", &key, b"POST /orders", order_work(key.clone()))
                .await
                .unwrap();
            assert!(resp.replayed);
            if let Some(body) = bodies.get(&key) {
                assert_eq!(&resp.body, body);
            }
        }
        assert_eq!(
            scalar(&db, "SELECT CAST(SUM(n) AS BIGINT) FROM effects", &[]).await,
            Some(20)
        );
        // Another caller's scope is independent.
        let resp = store
            .run(
                "client-b",
                "key-0",
                b"POST /orders",
                order_work("key-0".into()),
            )
            .await
            .unwrap();
        assert!(!resp.replayed);
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_key_different_request_is_refused() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE effects (k TEXT PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .await;
        exec(&db, "INSERT INTO effects VALUES ('k', 0)").await;
        let store = IdempotencyStore::new(db.clone());
        store
            .run("c", "k", b"amount=10", order_work("k".into()))
            .await
            .unwrap();
        let err = store
            .run("c", "k", b"amount=99", order_work("k".into()))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::IdempotencyKeyReused { .. }), "{err:?}");
        assert!(!err.is_retryable());
        assert_eq!(scalar(&db, "SELECT n FROM effects", &[]).await, Some(1));
        t.cleanup().await;
    }
}

/// A crashed first attempt keeps the key until the lock timeout, then a retry takes over; the old
/// attempt, if it was only slow, can no longer complete the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_attempt_is_taken_over_after_the_lock_timeout() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE effects (k TEXT PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .await;
        exec(&db, "INSERT INTO effects VALUES ('k', 0)").await;
        let store = IdempotencyStore::new(db.clone()).lock_timeout(Duration::from_millis(300));
        let Begun::Run(slow) = store.begin("c", "k", b"req").await.unwrap() else {
            panic!()
        };
        // While its lock runs, a retry is told it is in progress.
        let err = store
            .run("c", "k", b"req", order_work("k".into()))
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::IdempotencyInProgress { .. }),
            "{err:?}"
        );
        assert!(err.is_retryable());
        tokio::time::sleep(Duration::from_millis(600)).await;
        let resp = store
            .run("c", "k", b"req", order_work("k".into()))
            .await
            .unwrap();
        assert!(!resp.replayed);
        // The slow first attempt wakes up: refused, its work never commits.
        let err = slow.finish(order_work("k".into())).await.unwrap_err();
        assert!(
            matches!(err, Error::IdempotencyInProgress { .. }),
            "{err:?}"
        );
        assert_eq!(scalar(&db, "SELECT n FROM effects", &[]).await, Some(1));
        let again = store
            .run("c", "k", b"req", order_work("k".into()))
            .await
            .unwrap();
        assert_eq!(again.body, resp.body);
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_work_rolls_back_and_releases_the_key() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE effects (k TEXT PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .await;
        exec(&db, "INSERT INTO effects VALUES ('k', 0)").await;
        let store = IdempotencyStore::new(db.clone());
        let err = store
            .run("c", "k", b"req", |tx| {
                Box::pin(async move {
                    tx.execute("UPDATE effects SET n = n + 1", &[]).await?;
                    Err(Error::Insufficient {
                        id: "x".into(),
                        requested: 1,
                        available: 0,
                    })
                })
            })
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Insufficient { .. }));
        assert_eq!(scalar(&db, "SELECT n FROM effects", &[]).await, Some(0));
        // Retry at once (no lock timeout to wait out).
        let resp = store
            .run("c", "k", b"req", order_work("k".into()))
            .await
            .unwrap();
        assert!(!resp.replayed);
        assert_eq!(scalar(&db, "SELECT n FROM effects", &[]).await, Some(1));
        t.cleanup().await;
    }
}

/// Recovery points: step 1 (an external charge) commits, the process dies before step 2; the retry
/// skips step 1, runs step 2 and finishes. The external side saw one derived key, twice at most, and
/// charged once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_step_work_resumes_after_the_last_completed_step() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(&db, "CREATE TABLE steps (name TEXT NOT NULL)").await;
        let store = IdempotencyStore::new(db.clone()).lock_timeout(Duration::from_millis(200));
        // The "payment provider": deduplicates by idempotency key, counts real charges.
        let provider: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let charge = |provider: Arc<Mutex<HashMap<String, u32>>>, key: String| {
            *provider.lock().unwrap().entry(key).or_default() += 1;
        };

        let Begun::Run(mut first) = store.begin("c", "checkout-1", b"cart=3").await.unwrap() else {
            panic!()
        };
        let derived = first.derived_key("charge");
        let (p, k) = (provider.clone(), derived.clone());
        let ran = first
            .step("charge", move |tx| {
                Box::pin(async move {
                    charge(p, k);
                    tx.execute("INSERT INTO steps VALUES ('charge')", &[])
                        .await?;
                    Ok(())
                })
            })
            .await
            .unwrap();
        assert!(ran);
        drop(first); // crash before "ship"

        tokio::time::sleep(Duration::from_millis(400)).await;
        let Begun::Run(mut second) = store.begin("c", "checkout-1", b"cart=3").await.unwrap()
        else {
            panic!()
        };
        assert_eq!(second.resumed_after(), Some("charge"));
        assert_eq!(
            second.derived_key("charge"),
            derived,
            "derived keys are deterministic"
        );
        assert_ne!(second.derived_key("ship"), derived);
        let (p, k) = (provider.clone(), second.derived_key("charge"));
        let ran = second
            .step("charge", move |_tx| {
                Box::pin(async move {
                    charge(p, k);
                    Ok(())
                })
            })
            .await
            .unwrap();
        assert!(!ran, "a completed step is skipped");
        let ran = second
            .step("ship", |tx| {
                Box::pin(async move {
                    tx.execute("INSERT INTO steps VALUES ('ship')", &[])
                        .await
                        .map(|_| ())
                })
            })
            .await
            .unwrap();
        assert!(ran);
        let body = second
            .finish(|_tx| Box::pin(async { Ok(b"shipped".to_vec()) }))
            .await
            .unwrap();
        assert_eq!(body, b"shipped");
        assert_eq!(
            scalar(&db, "SELECT COUNT(*) FROM steps WHERE name = 'charge'", &[]).await,
            Some(1)
        );
        assert_eq!(
            scalar(&db, "SELECT COUNT(*) FROM steps WHERE name = 'ship'", &[]).await,
            Some(1)
        );
        assert_eq!(provider.lock().unwrap().get(&derived), Some(&1));
        match store.begin("c", "checkout-1", b"cart=3").await.unwrap() {
            Begun::Replay(b) => assert_eq!(b, b"shipped"),
            Begun::Run(_) => panic!("completed key must replay"),
        }
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_expire_after_retention_and_purge_deletes_them() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE effects (k TEXT PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .await;
        exec(&db, "INSERT INTO effects VALUES ('k', 0)").await;
        // A retention long enough that two runs on a loaded machine stay inside it.
        let short = IdempotencyStore::new(db.clone()).retention(Duration::from_millis(1000));
        short
            .run("c", "k", b"req", order_work("k".into()))
            .await
            .unwrap();
        short
            .run("c", "k2", b"req", |_tx| Box::pin(async { Ok(vec![]) }))
            .await
            .unwrap();
        assert_eq!(
            short.purge().await.unwrap(),
            0,
            "nothing is older than the retention yet"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Expired: the key may be used again, even with another request.
        let resp = short
            .run("c", "k", b"other", order_work("k".into()))
            .await
            .unwrap();
        assert!(!resp.replayed);
        assert_eq!(
            short.purge().await.unwrap(),
            1,
            "k2 expired; k was just reused"
        );
        assert_eq!(
            scalar(&db, "SELECT COUNT(*) FROM leasehold_idempotency_keys", &[]).await,
            Some(1)
        );
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_keys_are_refused_and_nothing_is_written() {
    for t in each_backend().await {
        let store = IdempotencyStore::new(t.db.clone());
        let long = "k".repeat(256);
        for (scope, key) in [
            ("c", ""),
            ("c", long.as_str()),
            ("", "k"),
            (long.as_str(), "k"),
        ] {
            let err = store
                .run(scope, key, b"r", |_tx| {
                    Box::pin(async { panic!("work must not run") })
                })
                .await
                .unwrap_err();
            assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
            assert!(err.to_string().contains("idempotency"), "{err}");
        }
        let err = IdempotencyStore::new(t.db.clone())
            .lock_timeout(Duration::ZERO)
            .run("c", "k", b"r", |_tx| Box::pin(async { Ok(vec![]) }))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
        assert_eq!(
            scalar(
                &t.db,
                "SELECT COUNT(*) FROM leasehold_idempotency_keys",
                &[]
            )
            .await,
            Some(0)
        );
        t.cleanup().await;
    }
}
