//! Conditional updates and state machines on real PostgreSQL and SQLite.
// Runs on every database backend compiled in; Cargo's `required-features` cannot say "either".
#![cfg(feature = "sql")]

mod sql_support;

use leasehold::db::Param;
use leasehold::state::{StateMachine, Stock};
use leasehold::Error;
use sql_support::{each_backend, exec, scalar};

fn orders() -> StateMachine {
    StateMachine::builder("orders")
        .transition("created", "paid")
        .transition("paid", "shipped")
        .transition("created", "cancelled")
        .version_column("version")
        .build()
        .unwrap()
}

/// 200 concurrent buyers for a stock of 50: exactly 50 succeed, the stock ends at 0, 50 reservations.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_hundred_buyers_for_fifty_items() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE sku (id BIGINT PRIMARY KEY, stock BIGINT NOT NULL)",
        )
        .await;
        exec(&db, "INSERT INTO sku VALUES (7, 50)").await;
        let stock = Stock::new("sku", "id", "stock").unwrap();
        let mut tasks = Vec::new();
        for buyer in 0..200 {
            let (db, stock) = (db.clone(), stock.clone());
            tasks.push(tokio::spawn(async move {
                let mut tx = db.begin().await.unwrap();
                let reference = format!("buyer-{buyer}");
                match stock
                    .reserve(&mut tx, Param::I64(7), 1, Some(&reference))
                    .await
                {
                    Ok(r) => {
                        assert!(r.remaining >= 0);
                        tx.commit().await.unwrap();
                        true
                    }
                    Err(Error::Insufficient {
                        requested: 1,
                        available: 0,
                        ..
                    }) => false,
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }));
        }
        let mut sold = 0;
        for task in tasks {
            sold += task.await.unwrap() as i64;
        }
        assert_eq!(sold, 50, "{:?}", t.backend());
        assert_eq!(
            scalar(&db, "SELECT stock FROM sku WHERE id = 7", &[]).await,
            Some(0)
        );
        assert_eq!(
            scalar(&db, "SELECT COUNT(*) FROM leasehold_reservations WHERE item_table = 'sku' AND item_id = '7'", &[]).await,
            Some(50)
        );
        assert_eq!(
            scalar(
                &db,
                "SELECT COUNT(DISTINCT reference) FROM leasehold_reservations",
                &[]
            )
            .await,
            Some(50)
        );
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_decrement_refuses_bad_quantities_and_unknown_items() {
    for t in each_backend().await {
        let db = &t.db;
        exec(
            db,
            "CREATE TABLE sku (id TEXT PRIMARY KEY, stock BIGINT NOT NULL)",
        )
        .await;
        exec(db, "INSERT INTO sku VALUES ('a', 3)").await;
        let stock = Stock::new("sku", "id", "stock").unwrap();
        let mut tx = db.begin().await.unwrap();
        for q in [0, -1, i64::MIN] {
            let err = stock
                .reserve(&mut tx, Param::Text("a"), q, None)
                .await
                .unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Invalid {
                        what: "quantity",
                        ..
                    }
                ),
                "{err:?}"
            );
        }
        let err = stock
            .reserve(&mut tx, Param::Text("a"), 4, None)
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                Error::Insufficient {
                    requested: 4,
                    available: 3,
                    ..
                }
            ),
            "{err:?}"
        );
        let err = stock
            .reserve(&mut tx, Param::Text("zz"), 1, None)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
        let r = stock
            .reserve(&mut tx, Param::Text("a"), 3, Some("all"))
            .await
            .unwrap();
        assert_eq!(r.remaining, 0);
        tx.commit().await.unwrap();
        assert_eq!(
            scalar(db, "SELECT stock FROM sku WHERE id = 'a'", &[]).await,
            Some(0)
        );
        assert_eq!(
            scalar(db, "SELECT COUNT(*) FROM leasehold_reservations", &[]).await,
            Some(1)
        );
        for (table, id, q) in [
            ("sku; DROP TABLE sku", "id", "stock"),
            ("sku", "id OR 1=1", "stock"),
            ("sku", "id", ""),
            ("1sku", "id", "stock"),
        ] {
            let err = Stock::new(table, id, q).unwrap_err();
            assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
            assert!(err.to_string().contains("identifier"), "{err}");
        }
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transitions_follow_the_table_with_distinct_errors() {
    for t in each_backend().await {
        let db = &t.db;
        exec(
            db,
            "CREATE TABLE orders (id TEXT PRIMARY KEY, state TEXT NOT NULL, version BIGINT NOT NULL DEFAULT 0)",
        )
        .await;
        exec(
            db,
            "INSERT INTO orders (id, state) VALUES ('o1', 'created'), ('o2', 'created')",
        )
        .await;
        let sm = orders();
        let mut tx = db.begin().await.unwrap();
        sm.transition(&mut tx, Param::Text("o1"), "created", "paid")
            .await
            .unwrap();
        // Not in the table: refused before the database is asked.
        let err = sm
            .transition(&mut tx, Param::Text("o1"), "paid", "created")
            .await
            .unwrap_err();
        assert!(matches!(err, Error::IllegalTransition { .. }), "{err:?}");
        assert!(!err.is_retryable());
        let err = sm
            .transition(&mut tx, Param::Text("o1"), "created", "shipped")
            .await
            .unwrap_err();
        assert!(matches!(err, Error::IllegalTransition { .. }), "{err:?}");
        // Lost race: o1 is no longer `created`.
        let err = sm
            .transition(&mut tx, Param::Text("o1"), "created", "cancelled")
            .await
            .unwrap_err();
        match &err {
            Error::TransitionRace {
                expected, actual, ..
            } => {
                assert_eq!(
                    (expected.as_str(), actual.as_str()),
                    ("state created", "state paid")
                );
            }
            other => panic!("{other:?}"),
        }
        assert!(err.is_retryable());
        let err = sm
            .transition(&mut tx, Param::Text("nope"), "created", "paid")
            .await
            .unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
        // Optimistic version: o2 is at version 0.
        let err = sm
            .transition_versioned(&mut tx, Param::Text("o2"), "created", "paid", 5)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, Error::TransitionRace { actual, .. } if actual == "version 0"),
            "{err:?}"
        );
        let v = sm
            .transition_versioned(&mut tx, Param::Text("o2"), "created", "paid", 0)
            .await
            .unwrap();
        assert_eq!(v, 1);
        tx.commit().await.unwrap();
        assert_eq!(
            scalar(db, "SELECT version FROM orders WHERE id = 'o1'", &[]).await,
            Some(1)
        );
        assert_eq!(
            scalar(db, "SELECT COUNT(*) FROM orders WHERE state = 'paid'", &[]).await,
            Some(2)
        );
        t.cleanup().await;
    }
}

/// 20 concurrent attempts to move one order out of `created` (half pay, half cancel): exactly one
/// wins, the others lose the race with a precise error, and the row ends in the winner's state.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_transitions_have_one_winner() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(&db, "CREATE TABLE orders (id BIGINT PRIMARY KEY, state TEXT NOT NULL, version BIGINT NOT NULL DEFAULT 0)").await;
        exec(&db, "INSERT INTO orders (id, state) VALUES (1, 'created')").await;
        let sm = orders();
        let mut tasks = Vec::new();
        for i in 0..20 {
            let (db, sm) = (db.clone(), sm.clone());
            tasks.push(tokio::spawn(async move {
                let to = if i % 2 == 0 { "paid" } else { "cancelled" };
                let mut tx = db.begin().await.unwrap();
                match sm.transition(&mut tx, Param::I64(1), "created", to).await {
                    Ok(()) => {
                        tx.commit().await.unwrap();
                        Some(to)
                    }
                    Err(Error::TransitionRace { .. }) => None,
                    Err(e) => panic!("{e:?}"),
                }
            }));
        }
        let mut winners = Vec::new();
        for task in tasks {
            winners.extend(task.await.unwrap());
        }
        assert_eq!(winners.len(), 1, "{:?}", t.backend());
        let mut tx = db.begin().await.unwrap();
        let state: String = leasehold::with_conn!(tx, |c| {
            sqlx::query_scalar("SELECT state FROM orders WHERE id = 1")
                .fetch_one(c)
                .await
        })
        .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(state, winners[0]);
        assert_eq!(
            scalar(&db, "SELECT version FROM orders WHERE id = 1", &[]).await,
            Some(1)
        );
        t.cleanup().await;
    }
}

#[test]
fn bad_declarations_are_refused() {
    let err = StateMachine::builder("orders").build().unwrap_err();
    assert!(err.to_string().contains("at least one transition"), "{err}");
    for (table, col) in [("orders\"", "state"), ("orders", "state--"), ("", "state")] {
        let err = StateMachine::builder(table)
            .state_column(col)
            .transition("a", "b")
            .build()
            .unwrap_err();
        assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
    }
    let err = StateMachine::builder("orders")
        .transition("", "b")
        .build()
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                what: "state name",
                ..
            }
        ),
        "{err:?}"
    );
}
