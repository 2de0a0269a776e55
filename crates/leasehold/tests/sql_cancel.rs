//! Cancelling (aborting) a task in the middle of a transaction never leaves a pooled connection stuck
//! inside a transaction nobody owns.

use std::time::Duration;

use leasehold::db::Database;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_while_begin_waits_for_the_sqlite_write_lock() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("t.db").display());
    let db = Database::builder(&url)
        .max_connections(1)
        .connect()
        .await
        .unwrap();
    db.migrate().await.unwrap();
    let other = Database::connect(&url).await.unwrap();
    for _ in 0..5 {
        let holder = other.begin().await.unwrap(); // takes the write lock
        let db2 = db.clone();
        let task = tokio::spawn(async move {
            let tx = db2.begin().await.unwrap(); // waits (busy timeout) for the write lock
            tokio::time::sleep(Duration::from_secs(60)).await;
            drop(tx);
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        task.abort();
        let _ = task.await;
        holder.commit().await.unwrap();
        // The only pooled connection must be usable and not inside a stray transaction.
        let mut tx = tokio::time::timeout(Duration::from_secs(10), db.begin())
            .await
            .unwrap()
            .unwrap();
        tx.execute(
            "INSERT INTO leasehold_inbox VALUES ('c', $1, 0)",
            &[leasehold::db::Param::I64(rand::random::<i64>())],
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
        // And `other` can take the write lock again (nobody holds it).
        let t = tokio::time::timeout(Duration::from_secs(10), other.begin())
            .await
            .unwrap()
            .unwrap();
        t.rollback().await.unwrap();
    }
}

/// Aborts a task at random points of a transaction (while beginning, mid-query, idle before commit),
/// 200 times, on both backends, with pools small enough that the same connections are reused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn abort_at_random_points_never_poisons_the_pool() {
    use rand::RngExt;
    let dir = tempfile::tempdir().unwrap();
    let sqlite_url = format!("sqlite:{}", dir.path().join("t.db").display());
    let schema = format!("lh_test_cancel_{:08x}", rand::random::<u32>());
    let pg = Database::builder(leasehold_testkit::postgres_url())
        .postgres_schema(&schema)
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    let sqlite = Database::builder(&sqlite_url)
        .max_connections(2)
        .connect()
        .await
        .unwrap();
    // MariaDB: a connection left mid-reply by an aborted task used to be pooled again after a ping
    // and then answer nothing; it is closed now (`db::mysql::MyTx`).
    let maria = Database::builder(leasehold_testkit::mysql_url())
        .max_connections(2)
        .connect()
        .await
        .expect("MariaDB must be reachable (LEASEHOLD_TEST_MYSQL_URL)");
    let consumer = format!("c{:08x}", rand::random::<u32>());
    for db in [&pg, &sqlite, &maria] {
        db.migrate().await.unwrap();
        let mut tasks = Vec::new();
        for i in 0..200_i64 {
            let db2 = db.clone();
            let idle = Duration::from_millis(rand::rng().random_range(0..3));
            let consumer = consumer.clone();
            let task = tokio::spawn(async move {
                let mut tx = db2.begin().await.unwrap();
                let inbox = leasehold::inbox::Inbox::new(&consumer).unwrap();
                inbox.record(&mut tx, &format!("m{i}")).await.unwrap();
                tx.execute(
                    "UPDATE leasehold_inbox SET processed_at_ms = processed_at_ms + 1 WHERE consumer = $1",
                    &[leasehold::db::Param::Text(&consumer)],
                )
                .await
                .unwrap();
                tokio::time::sleep(idle).await;
                tx.commit().await.unwrap();
            });
            let delay = rand::rng().random_range(0..4_000);
            let abort = tokio::spawn(async move {
                tokio::time::sleep(Duration::from_micros(delay)).await;
                task.abort();
                match task.await {
                    Err(e) if e.is_cancelled() => None,
                    Err(e) => Some(format!("task panicked: {e}")),
                    Ok(()) => None,
                }
            });
            tasks.push(abort);
        }
        for t in tasks {
            if let Some(problem) = t.await.unwrap() {
                panic!("{:?}: {problem}", db.backend());
            }
        }
        // Every pooled connection still works.
        for _ in 0..4 {
            let mut tx = tokio::time::timeout(Duration::from_secs(10), db.begin())
                .await
                .unwrap()
                .unwrap_or_else(|e| panic!("{:?}: {e:?}", db.backend()));
            tx.fetch_i64("SELECT COUNT(*) FROM leasehold_inbox", &[])
                .await
                .unwrap();
            tx.commit().await.unwrap();
        }
    }
    let mut tx = maria.begin().await.unwrap();
    tx.execute(
        "DELETE FROM leasehold_inbox WHERE consumer = $1",
        &[leasehold::db::Param::Text(&consumer)],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    maria.close().await;
    pg.close().await;
    let admin = Database::connect(&leasehold_testkit::postgres_url())
        .await
        .unwrap();
    let mut tx = admin.begin().await.unwrap();
    tx.execute(
        leasehold::sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")),
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}
