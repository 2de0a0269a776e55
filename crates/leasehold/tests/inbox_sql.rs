//! Inbox deduplication on real PostgreSQL and SQLite: 1,000 messages delivered 1 to 3 times each, in
//! random order, by 8 concurrent consumers of which some die mid-transaction; every message is applied
//! exactly once. The same deliveries without the inbox apply messages more than once.
// Runs on every database backend compiled in; Cargo's `required-features` cannot say "either".
#![cfg(feature = "sql")]

mod sql_support;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::db::{Database, Param};
use leasehold::inbox::{Delivery, Inbox};
use leasehold::Error;
use rand::seq::SliceRandom;
use rand::RngExt;
use sql_support::{each_backend, exec, scalar};

const MESSAGES: usize = 1000;

/// Applies one delivery, sometimes dying before commit. Returns whether the broker must redeliver.
async fn consume(db: &Database, inbox: &Inbox, msg: usize, kills: &AtomicUsize) -> bool {
    let id = format!("msg-{msg}");
    let roll: u32 = rand::rng().random_range(0..100);
    if roll < 8 {
        // Killed after the business write, before commit: the transaction is dropped.
        let mut tx = db.begin().await.unwrap();
        if inbox.record(&mut tx, &id).await.unwrap() == Delivery::First {
            tx.execute(
                "UPDATE applied SET n = n + 1 WHERE id = $1",
                &[Param::I64(msg as i64)],
            )
            .await
            .unwrap();
        }
        drop(tx);
        kills.fetch_add(1, Ordering::Relaxed);
        return true;
    }
    if roll < 12 {
        // The consumer task is aborted in the middle of its work.
        let (db, inbox) = (db.clone(), inbox.clone());
        let task = tokio::spawn(async move {
            let mut tx = db.begin().await.unwrap();
            if inbox.record(&mut tx, &id).await.unwrap() == Delivery::First {
                tx.execute(
                    "UPDATE applied SET n = n + 1 WHERE id = $1",
                    &[Param::I64(msg as i64)],
                )
                .await
                .unwrap();
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
            tx.commit().await.unwrap();
        });
        tokio::time::sleep(Duration::from_millis(2)).await;
        task.abort();
        let _ = task.await;
        kills.fetch_add(1, Ordering::Relaxed);
        // Not acknowledged (even if it happened to commit): redeliver, the inbox sorts it out.
        return true;
    }
    let applied = inbox
        .process(db, &format!("msg-{msg}"), move |tx| {
            Box::pin(async move {
                tx.execute(
                    "UPDATE applied SET n = n + 1 WHERE id = $1",
                    &[Param::I64(msg as i64)],
                )
                .await
            })
        })
        .await
        .unwrap();
    if let Some(rows) = applied {
        assert_eq!(rows, 1);
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_message_is_applied_exactly_once_despite_redelivery_and_crashes() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE applied (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .await;
        exec(
            &db,
            "CREATE TABLE naive (id BIGINT PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .await;
        let mut tx = db.begin().await.unwrap();
        for i in 0..MESSAGES as i64 {
            tx.execute("INSERT INTO applied VALUES ($1, 0)", &[Param::I64(i)])
                .await
                .unwrap();
            tx.execute("INSERT INTO naive VALUES ($1, 0)", &[Param::I64(i)])
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();

        let mut deliveries: Vec<usize> = (0..MESSAGES)
            .flat_map(|m| std::iter::repeat_n(m, 1 + m % 3))
            .collect();
        deliveries.shuffle(&mut rand::rng());
        let total_deliveries = deliveries.len();
        let queue = Arc::new(Mutex::new(
            deliveries.iter().copied().collect::<VecDeque<_>>(),
        ));
        let kills = Arc::new(AtomicUsize::new(0));
        let inbox = Inbox::new("billing").unwrap();
        let mut workers = Vec::new();
        for _ in 0..8 {
            let (db, inbox, queue, kills) =
                (db.clone(), inbox.clone(), queue.clone(), kills.clone());
            workers.push(tokio::spawn(async move {
                loop {
                    let Some(msg) = queue.lock().unwrap().pop_front() else {
                        break;
                    };
                    if consume(&db, &inbox, msg, &kills).await {
                        queue.lock().unwrap().push_back(msg);
                    }
                }
            }));
        }
        for w in workers {
            w.await.unwrap();
        }
        let kills = kills.load(Ordering::Relaxed);
        assert!(kills > 0, "the test must kill some consumers");
        assert_eq!(
            scalar(&db, "SELECT COUNT(*) FROM applied WHERE n <> 1", &[]).await,
            Some(0),
            "{:?}",
            t.backend()
        );
        assert_eq!(
            scalar(&db, "SELECT COUNT(*) FROM leasehold_inbox", &[]).await,
            Some(MESSAGES as i64)
        );

        // The same deliveries without the inbox: duplicates are applied again.
        for msg in &deliveries {
            let mut tx = db.begin().await.unwrap();
            tx.execute(
                "UPDATE naive SET n = n + 1 WHERE id = $1",
                &[Param::I64(*msg as i64)],
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
        }
        let doubled = scalar(&db, "SELECT COUNT(*) FROM naive WHERE n > 1", &[])
            .await
            .unwrap();
        assert!(
            doubled > 0,
            "without the inbox, redelivered messages are applied twice"
        );
        eprintln!(
            "{:?}: {total_deliveries} deliveries, {kills} consumers killed; inbox: 0 double-applied; naive: {doubled} double-applied",
            t.backend()
        );
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_is_reported_and_crash_records_nothing() {
    for t in each_backend().await {
        let db = &t.db;
        let inbox = Inbox::new("c").unwrap();
        let mut tx = db.begin().await.unwrap();
        assert_eq!(inbox.record(&mut tx, "m1").await.unwrap(), Delivery::First);
        drop(tx); // crash before commit
        let mut tx = db.begin().await.unwrap();
        assert_eq!(inbox.record(&mut tx, "m1").await.unwrap(), Delivery::First);
        tx.commit().await.unwrap();
        let mut tx = db.begin().await.unwrap();
        assert_eq!(
            inbox.record(&mut tx, "m1").await.unwrap(),
            Delivery::Duplicate
        );
        tx.commit().await.unwrap();
        // Per consumer.
        let other = Inbox::new("other").unwrap();
        let out = other
            .process(db, "m1", |_tx| Box::pin(async { Ok(7) }))
            .await
            .unwrap();
        assert_eq!(out, Some(7));
        let out = other
            .process(db, "m1", |_tx| Box::pin(async { Ok(7) }))
            .await
            .unwrap();
        assert_eq!(out, None);
        // A failing apply records nothing.
        let err = inbox
            .process(db, "m2", |_tx| {
                Box::pin(async { Err::<(), _>(Error::invalid_for_test()) })
            })
            .await;
        assert!(err.is_err());
        let out = inbox
            .process(db, "m2", |_tx| Box::pin(async { Ok(()) }))
            .await
            .unwrap();
        assert_eq!(out, Some(()));
        // Bad input.
        let long = "m".repeat(256);
        for bad in ["", long.as_str()] {
            let err = inbox
                .process(db, bad, |_tx| Box::pin(async { Ok(()) }))
                .await
                .unwrap_err();
            assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
            assert!(matches!(Inbox::new(bad), Err(Error::Invalid { .. })));
        }
        assert_eq!(
            scalar(db, "SELECT COUNT(*) FROM leasehold_inbox", &[]).await,
            Some(3)
        );
        t.cleanup().await;
    }
}

trait ForTest {
    fn invalid_for_test() -> Self;
}

impl ForTest for Error {
    fn invalid_for_test() -> Self {
        Error::NotFound {
            entity: "thing",
            id: "x".into(),
        }
    }
}
