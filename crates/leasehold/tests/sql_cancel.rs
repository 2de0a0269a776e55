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
