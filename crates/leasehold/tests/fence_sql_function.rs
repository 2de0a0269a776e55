//! The SQL fence function (`leasehold_fence(resource, fence)`, installed by the migrations on
//! PostgreSQL and MariaDB/MySQL) against the Rust guard on one resource: they share one record and
//! one rule, so a writer of either kind refuses the other's superseded writers, a refusal names both
//! fences under SQLSTATE `LHF01` and leaves nothing of its transaction, and an unfenced writer is not
//! stopped (the unsafe variant). SQLite has no stored functions: its users run the upsert themselves
//! (`docs/fencing.md`).
#![cfg(any(feature = "postgres", feature = "mysql"))]

mod sql_support;

use leasehold::db::{Backend, Database, Param, Tx};
use leasehold::{fence, Error, Fence};
use sql_support::{exec, scalar, TestDb};

/// The databases with the function: one of each of PostgreSQL and MariaDB compiled in.
async fn backends_with_the_function() -> Vec<TestDb> {
    let mut dbs = Vec::new();
    #[cfg(feature = "postgres")]
    dbs.push(sql_support::postgres().await);
    #[cfg(feature = "mysql")]
    dbs.push(sql_support::mysql().await);
    dbs
}

/// The one statement a writer outside Rust sends.
fn call(backend: Backend) -> &'static str {
    match backend {
        Backend::MySql => "CALL leasehold_fence($1, $2)",
        _ => "SELECT leasehold_fence($1, $2)",
    }
}

/// Calls the function in `tx` as a foreign writer would.
async fn sql_fence(tx: &mut Tx, resource: &str, f: i64) -> leasehold::Result<u64> {
    tx.execute(call(tx.backend()), &[Param::Text(resource), Param::I64(f)])
        .await
}

/// The SQLSTATE and message of a database error, or a panic naming what came instead.
fn sqlstate(err: &Error) -> (String, String) {
    match err {
        Error::Database(sqlx::Error::Database(db)) => (
            db.code().map(|c| c.into_owned()).unwrap_or_default(),
            db.message().to_owned(),
        ),
        other => panic!("expected a database error, got {other:?}"),
    }
}

/// Writes `value` to account `a` in a transaction fenced by the SQL function; Ok when committed.
async fn foreign_write(db: &Database, f: i64, value: i64) -> leasehold::Result<()> {
    let mut tx = db.begin().await?;
    sql_fence(&mut tx, "ledger:a", f).await?;
    tx.execute(
        "UPDATE ledger SET balance = $1 WHERE account = 'a'",
        &[Param::I64(value)],
    )
    .await?;
    tx.commit().await
}

/// Writes `value` through the Rust guard.
async fn rust_write(db: &Database, f: u64, value: i64) -> leasehold::Result<()> {
    let mut tx = db.begin_fenced("ledger:a", Fence::new(f)).await?;
    tx.execute(
        "UPDATE ledger SET balance = $1 WHERE account = 'a'",
        &[Param::I64(value)],
    )
    .await?;
    tx.commit().await
}

async fn balance(db: &Database) -> Option<i64> {
    scalar(db, "SELECT balance FROM ledger WHERE account = 'a'", &[]).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_function_and_the_rust_guard_agree_on_one_resource() {
    for t in backends_with_the_function().await {
        let db = &t.db;
        let be = t.backend();
        exec(
            db,
            "CREATE TABLE ledger (account TEXT PRIMARY KEY, balance BIGINT NOT NULL)",
        )
        .await;
        exec(db, "INSERT INTO ledger VALUES ('a', 0)").await;

        // Rust accepts 7; the function refuses 3, naming both, and the write after it is gone.
        rust_write(db, 7, 70).await.unwrap();
        let err = foreign_write(db, 3, 30).await.unwrap_err();
        let (code, message) = sqlstate(&err);
        assert_eq!(code, "LHF01", "{be:?}: {message}");
        assert!(
            message.contains("presented 3") && message.contains("accepted 7"),
            "{be:?}: the message names both fences: {message}"
        );
        assert!(message.contains("ledger:a"), "{be:?}: {message}");
        assert_eq!(
            balance(db).await,
            Some(70),
            "{be:?}: the stale write is gone"
        );

        // The function accepts the same fence and a newer one, and returns it (PostgreSQL).
        foreign_write(db, 7, 71).await.unwrap();
        foreign_write(db, 9, 90).await.unwrap();
        if be == Backend::Postgres {
            let mut tx = db.begin().await.unwrap();
            let got = tx
                .fetch_i64(
                    "SELECT leasehold_fence($1, $2)",
                    &[Param::Text("ledger:a"), Param::I64(9)],
                )
                .await
                .unwrap();
            assert_eq!(got, Some(9));
            tx.rollback().await.unwrap();
        }
        // Rust now refuses 8, reading the function's record.
        match rust_write(db, 8, 80).await.unwrap_err() {
            Error::StaleFence {
                presented, current, ..
            } => {
                assert_eq!((presented, current), (Fence::new(8), Fence::new(9)));
            }
            other => panic!("{be:?}: expected StaleFence, got {other:?}"),
        }
        assert_eq!(balance(db).await, Some(90));
        assert_eq!(
            fence::current(db, "ledger:a").await.unwrap(),
            Some(Fence::new(9))
        );

        // The unsafe variant: the same late writer without the function lands its stale value.
        let mut tx = db.begin().await.unwrap();
        tx.execute("UPDATE ledger SET balance = 30 WHERE account = 'a'", &[])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            balance(db).await,
            Some(30),
            "{be:?}: unfenced, nothing stops it"
        );
        t.cleanup().await;
    }
}

/// 60 writers with shuffled fences 1..=20, every other one through the SQL function and the rest
/// through the Rust guard, race to write "value = my fence" and append to a history. Whatever the
/// interleaving: the final value is the highest fence and the committed history never goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_writers_racing_never_leave_a_stale_value() {
    use rand::seq::SliceRandom;
    for t in backends_with_the_function().await {
        let db = t.db.clone();
        let be = t.backend();
        exec(
            &db,
            "CREATE TABLE ledger (account TEXT PRIMARY KEY, balance BIGINT NOT NULL)",
        )
        .await;
        exec(
            &db,
            "CREATE TABLE history (seq BIGINT PRIMARY KEY, fence BIGINT NOT NULL)",
        )
        .await;
        exec(&db, "INSERT INTO ledger VALUES ('a', 0)").await;
        let other = t.another_pool().await;
        let mut fences: Vec<u64> = (1..=20).flat_map(|f| [f, f, f]).collect();
        fences.shuffle(&mut rand::rng());
        let mut tasks = Vec::new();
        for (i, f) in fences.into_iter().enumerate() {
            let db = if i % 2 == 0 {
                db.clone()
            } else {
                other.clone()
            };
            tasks.push(tokio::spawn(async move {
                let fenced = if i % 2 == 0 {
                    db.begin_fenced("ledger:a", Fence::new(f)).await
                } else {
                    match db.begin().await {
                        Ok(mut tx) => sql_fence(&mut tx, "ledger:a", f as i64).await.map(|_| tx),
                        Err(e) => Err(e),
                    }
                };
                let mut tx = match fenced {
                    Ok(tx) => tx,
                    Err(Error::StaleFence { .. }) => return false,
                    Err(e) => {
                        let (code, message) = sqlstate(&e);
                        assert_eq!(code, "LHF01", "{message}");
                        return false;
                    }
                };
                tx.execute(
                    "UPDATE ledger SET balance = $1 WHERE account = 'a'",
                    &[Param::I64(f as i64)],
                )
                .await
                .unwrap();
                tx.execute(
                    "INSERT INTO history (seq, fence) SELECT COALESCE(MAX(seq), 0) + 1, $1 FROM history",
                    &[Param::I64(f as i64)],
                )
                .await
                .unwrap();
                tx.commit().await.unwrap();
                true
            }));
        }
        let mut accepted = 0;
        for task in tasks {
            accepted += usize::from(task.await.unwrap());
        }
        assert_eq!(balance(&db).await, Some(20), "{be:?}");
        let mut tx = db.begin().await.unwrap();
        let history: Vec<i64> = leasehold::with_conn!(tx, |c| {
            sqlx::query_scalar("SELECT fence FROM history ORDER BY seq")
                .fetch_all(c)
                .await
        })
        .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(history.len(), accepted);
        assert!(
            history.windows(2).all(|w| w[0] <= w[1]),
            "{be:?}: out of order {history:?}"
        );
        other.close().await;
        t.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_refused_naming_what_was_wrong() {
    for t in backends_with_the_function().await {
        let db = &t.db;
        let be = t.backend();
        for (resource, f, says) in [
            ("", 1, "resource name"),
            ("r", -1, "got -1"),
            ("line\nbreak", -5, "got -5"),
        ] {
            let mut tx = db.begin().await.unwrap();
            let err = sql_fence(&mut tx, resource, f).await.unwrap_err();
            drop(tx);
            let (code, message) = sqlstate(&err);
            assert_eq!(code, "22023", "{be:?}: {message}");
            assert!(message.contains(says), "{be:?}: {message}");
        }
        assert_eq!(
            scalar(db, "SELECT COUNT(*) FROM leasehold_fences", &[]).await,
            Some(0)
        );
        t.cleanup().await;
    }
}

/// The migration that installs the function, run twice more by hand (as a migration cut short is run
/// again whole on MariaDB): the function is still there, once, with the same rule and the same record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installing_the_function_twice_has_the_effect_of_installing_it_once() {
    for t in backends_with_the_function().await {
        let db = &t.db;
        let be = t.backend();
        let mut tx = db.begin().await.unwrap();
        sql_fence(&mut tx, "r", 5).await.unwrap();
        tx.commit().await.unwrap();
        let script: &'static str = match be {
            Backend::MySql => include_str!("../migrations/mysql/20261204000001_fence_function.sql"),
            _ => include_str!("../migrations/postgres/20261204000001_fence_function.sql"),
        };
        for _ in 0..2 {
            let mut tx = db.begin().await.unwrap();
            leasehold::with_conn!(tx, |c| sqlx::raw_sql(script).execute(c).await.map(|_| ()))
                .unwrap();
            tx.commit().await.unwrap();
        }
        let mut tx = db.begin().await.unwrap();
        let (code, _) = sqlstate(&sql_fence(&mut tx, "r", 4).await.unwrap_err());
        assert_eq!(code, "LHF01", "{be:?}: the rule and the record survived");
        drop(tx);
        let mut tx = db.begin().await.unwrap();
        sql_fence(&mut tx, "r", 6).await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(fence::current(db, "r").await.unwrap(), Some(Fence::new(6)));
        t.cleanup().await;
    }
}
