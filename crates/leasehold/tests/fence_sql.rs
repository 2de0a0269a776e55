//! Fenced writes on real PostgreSQL and SQLite: stale writers are refused and leave no trace, the same
//! fence is accepted twice, writers of one resource serialise, and concurrent writers with interleaved
//! fences never leave a stale value behind.
// Runs on every database backend compiled in; Cargo's `required-features` cannot say "either".
#![cfg(feature = "sql")]

mod sql_support;

use std::sync::Arc;

use leasehold::db::Param;
use leasehold::{fence, Error, Fence};
use sql_support::{each_backend, exec, scalar};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_fence_is_refused_and_leaves_no_trace() {
    for t in each_backend().await {
        let db = &t.db;
        exec(
            db,
            "CREATE TABLE ledger (account TEXT PRIMARY KEY, balance BIGINT NOT NULL)",
        )
        .await;
        exec(db, "INSERT INTO ledger VALUES ('a', 0), ('b', 0)").await;

        // Holder with fence 7 writes.
        let mut tx = db.begin_fenced("ledger:a", Fence::new(7)).await.unwrap();
        tx.execute(
            "UPDATE ledger SET balance = balance + 10 WHERE account = $1",
            &["a".into()],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();

        // A superseded holder (fence 3) writes first, then fences: refused, write rolled back.
        let mut tx = db.begin().await.unwrap();
        tx.execute(
            "UPDATE ledger SET balance = balance + 1000 WHERE account = $1",
            &["a".into()],
        )
        .await
        .unwrap();
        let err = fence::check(&mut tx, "ledger:a", Fence::new(3))
            .await
            .unwrap_err();
        drop(tx);
        match err {
            Error::StaleFence {
                resource,
                presented,
                current,
            } => {
                assert_eq!(resource, "ledger:a");
                assert_eq!(presented, Fence::new(3));
                assert_eq!(current, Fence::new(7));
            }
            other => panic!("{:?}: expected StaleFence, got {other:?}", t.backend()),
        }
        // Without the fence, the same late write goes through and leaves a stale result: the unsafe
        // strategy the fence exists to stop.
        // Account `b` gets the same history, but the late writer does not present its fence.
        let mut tx = db.begin_fenced("ledger:b", Fence::new(7)).await.unwrap();
        tx.execute(
            "UPDATE ledger SET balance = balance + 10 WHERE account = $1",
            &["b".into()],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        let mut naive = db.begin().await.unwrap();
        naive
            .execute(
                "UPDATE ledger SET balance = balance + 1000 WHERE account = $1",
                &["b".into()],
            )
            .await
            .unwrap();
        naive.commit().await.unwrap();
        assert_eq!(
            scalar(db, "SELECT balance FROM ledger WHERE account = 'b'", &[]).await,
            Some(1010),
            "the unfenced stale write lands"
        );
        // And through begin_fenced.
        let err = db
            .begin_fenced("ledger:a", Fence::new(6))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::StaleFence { .. }), "{err:?}");
        assert!(!err.is_retryable());

        assert_eq!(
            scalar(db, "SELECT balance FROM ledger WHERE account = 'a'", &[]).await,
            Some(10)
        );
        assert_eq!(
            fence::current(db, "ledger:a").await.unwrap(),
            Some(Fence::new(7))
        );
        // Other resources are independent.
        assert_eq!(fence::current(db, "ledger:c").await.unwrap(), None);
        let tx = db.begin_fenced("ledger:c", Fence::new(1)).await.unwrap();
        tx.commit().await.unwrap();
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_fence_twice_and_newer_fences_are_accepted() {
    for t in each_backend().await {
        let db = &t.db;
        for f in [5, 5, 6, 6, 100] {
            let tx = db.begin_fenced("job", Fence::new(f)).await.unwrap();
            tx.commit().await.unwrap();
            assert_eq!(
                fence::current(db, "job").await.unwrap(),
                Some(Fence::new(f))
            );
        }
        // A fence rolled back is not remembered.
        let tx = db.begin_fenced("job", Fence::new(200)).await.unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(
            fence::current(db, "job").await.unwrap(),
            Some(Fence::new(100))
        );
        t.cleanup().await;
    }
}

/// Read-modify-write under the fence: 40 writers with the same fence each read the counter and write
/// it back plus one. If writers of one resource were not serialised until commit, updates would be
/// lost and the counter would end below 40.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_of_one_resource_serialise_until_commit() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE counter (id INTEGER PRIMARY KEY, n BIGINT NOT NULL)",
        )
        .await;
        exec(&db, "INSERT INTO counter VALUES (1, 0)").await;
        // Two independent pools, as two processes would have.
        let other = t.another_pool().await;
        let mut tasks = Vec::new();
        for i in 0..40 {
            let db = if i % 2 == 0 {
                db.clone()
            } else {
                other.clone()
            };
            tasks.push(tokio::spawn(async move {
                let mut tx = db.begin_fenced("counter:1", Fence::new(1)).await.unwrap();
                let n = tx
                    .fetch_i64("SELECT n FROM counter WHERE id = 1", &[])
                    .await
                    .unwrap()
                    .unwrap();
                tokio::task::yield_now().await;
                tx.execute(
                    "UPDATE counter SET n = $1 WHERE id = 1",
                    &[Param::I64(n + 1)],
                )
                .await
                .unwrap();
                tx.commit().await.unwrap();
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(
            scalar(&db, "SELECT n FROM counter WHERE id = 1", &[]).await,
            Some(40)
        );
        t.cleanup().await;
    }
}

/// 60 writers with shuffled fences 1..=20 (3 each) race to write "value = my fence". Whatever the
/// interleaving: the final value is the highest fence, committed writes happen in non-decreasing fence
/// order, and every refused writer's fence was older than the one stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interleaved_fences_never_leave_a_stale_value() {
    use rand::seq::SliceRandom;
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE cell (id INTEGER PRIMARY KEY, value BIGINT NOT NULL)",
        )
        .await;
        exec(
            &db,
            "CREATE TABLE cell_history (seq BIGINT PRIMARY KEY, fence BIGINT NOT NULL)",
        )
        .await;
        exec(&db, "INSERT INTO cell VALUES (1, 0)").await;
        let mut fences: Vec<u64> = (1..=20).flat_map(|f| [f, f, f]).collect();
        fences.shuffle(&mut rand::rng());
        let seq = Arc::new(std::sync::atomic::AtomicI64::new(0));
        let mut tasks = Vec::new();
        for f in fences {
            let db = db.clone();
            let _ = &seq;
            tasks.push(tokio::spawn(async move {
                match db.begin_fenced("cell:1", Fence::new(f)).await {
                    Ok(mut tx) => {
                        tx.execute(
                            "UPDATE cell SET value = $1 WHERE id = 1",
                            &[Param::I64(f as i64)],
                        )
                        .await
                        .unwrap();
                        // The resource's lock is held: history seq = count + 1 is race-free.
                        tx.execute(
                            "INSERT INTO cell_history (seq, fence) \
                             SELECT COALESCE(MAX(seq), 0) + 1, $1 FROM cell_history",
                            &[Param::I64(f as i64)],
                        )
                        .await
                        .unwrap();
                        tx.commit().await.unwrap();
                        Ok(f)
                    }
                    Err(Error::StaleFence {
                        presented, current, ..
                    }) => {
                        assert!(
                            presented < current,
                            "refused {presented} although stored {current}"
                        );
                        Err(f)
                    }
                    Err(e) => panic!("unexpected {e:?}"),
                }
            }));
        }
        let mut accepted = 0;
        for task in tasks {
            if task.await.unwrap().is_ok() {
                accepted += 1;
            }
        }
        assert_eq!(
            scalar(&db, "SELECT value FROM cell WHERE id = 1", &[]).await,
            Some(20)
        );
        let mut tx = db.begin().await.unwrap();
        let history: Vec<i64> = leasehold::with_conn!(tx, |c| {
            sqlx::query_scalar("SELECT fence FROM cell_history ORDER BY seq")
                .fetch_all(c)
                .await
        })
        .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(history.len(), accepted);
        assert!(
            history.windows(2).all(|w| w[0] <= w[1]),
            "{:?}: out of order {history:?}",
            t.backend()
        );
        assert_eq!(*history.last().unwrap(), 20);
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_refused_before_anything_is_written() {
    for t in each_backend().await {
        let db = &t.db;
        let long = "r".repeat(256);
        for (resource, f) in [("", 1), (long.as_str(), 1), ("ok", u64::MAX)] {
            let err = db.begin_fenced(resource, Fence::new(f)).await.unwrap_err();
            assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
            assert!(!err.is_retryable());
        }
        assert!(fence::current(db, "").await.is_err());
        assert_eq!(
            scalar(db, "SELECT COUNT(*) FROM leasehold_fences", &[]).await,
            Some(0)
        );
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrate_is_idempotent_and_safe_concurrently() {
    for t in each_backend().await {
        let mut tasks = Vec::new();
        for _ in 0..8 {
            let db = t.db.clone();
            tasks.push(tokio::spawn(async move { db.migrate().await }));
        }
        for task in tasks {
            task.await.unwrap().unwrap();
        }
        // PostgreSQL and MariaDB have the lease store's table, its notes column and the fence
        // function too (and PostgreSQL the idempotency owner column, which MariaDB's first migration
        // has already).
        let shipped = match t.backend() {
            leasehold::db::Backend::Postgres => 5,
            leasehold::db::Backend::MySql => 4,
            _ => 2,
        };
        assert_eq!(
            scalar(
                &t.db,
                "SELECT COUNT(*) FROM leasehold_schema_migrations",
                &[]
            )
            .await,
            Some(shipped)
        );
        // Up to date: another run applies nothing, and says so.
        assert_eq!(t.db.migrate_counted().await.unwrap(), 0);
        t.cleanup().await;
    }
}

#[tokio::test]
async fn migrate_says_how_many_migrations_it_applied() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("fresh.db").display());
    let db = leasehold::db::Database::connect(&url).await.unwrap();
    // A database without leasehold's tables gets every migration, once.
    assert_eq!(db.migrate_counted().await.unwrap(), 2);
    assert_eq!(db.migrate_counted().await.unwrap(), 0);
    db.migrate().await.unwrap();
    assert_eq!(
        scalar(&db, "SELECT COUNT(*) FROM leasehold_schema_migrations", &[]).await,
        Some(2)
    );
    db.close().await;
}
