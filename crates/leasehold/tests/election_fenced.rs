//! A deposed leader that keeps acting: its leadership lapsed (it stopped renewing, as a paused
//! process does), a successor leads with a higher term, and the old leader, unaware, writes. Unfenced,
//! its write lands after its successor's (split brain, the bug every election recipe warns of);
//! fenced with its term, the database refuses it and keeps the successor's write. A private
//! redis-server keeps the election, an SQLite file is the resource.
#![cfg(all(feature = "redis", feature = "sqlite"))]

mod lease_support;

use std::time::Duration;

use leasehold::db::{Database, Param};
use leasehold::election::Election;
use leasehold::{Error, LeaseClient, LeaseOptions};

async fn owner(db: &Database) -> String {
    let mut tx = db.begin().await.unwrap();
    let v: String = leasehold::with_conn!(tx, |c| {
        sqlx::query_scalar("SELECT owner FROM schedule WHERE id = 1")
            .fetch_one(c)
            .await
    })
    .unwrap();
    tx.commit().await.unwrap();
    v
}

/// Runs the scene; the resource's last writer, and how the deposed leader's write ended.
async fn scene(fenced: bool) -> (String, Result<(), Error>) {
    let srv = lease_support::server();
    let dir = tempfile::tempdir().unwrap();
    let db = Database::connect(&format!("sqlite:{}", dir.path().join("app.db").display()))
        .await
        .unwrap();
    db.migrate().await.unwrap();
    let mut tx = db.begin().await.unwrap();
    tx.execute(
        "CREATE TABLE schedule (id BIGINT PRIMARY KEY, owner TEXT NOT NULL)",
        &[],
    )
    .await
    .unwrap();
    tx.execute("INSERT INTO schedule VALUES (1, 'nobody')", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let a = LeaseClient::connect(&srv.url()).await.unwrap();
    let b = LeaseClient::connect(&srv.url()).await.unwrap();
    // A stops renewing: what a leader paused past its lease (GC, SIGSTOP) looks like from outside.
    let paused = LeaseOptions::builder()
        .ttl(Duration::from_millis(300))
        .no_renewal()
        .build()
        .unwrap();
    let opts = LeaseOptions::with_ttl(Duration::from_secs(10)).unwrap();
    let old = Election::new(&a, "scheduler", &paused)
        .unwrap()
        .campaign("a", Duration::ZERO)
        .await
        .unwrap();
    let old_term = old.term();
    // B waits its turn and leads once A's lease lapses.
    let new = Election::new(&b, "scheduler", &opts)
        .unwrap()
        .campaign("b", Duration::from_secs(5))
        .await
        .unwrap();
    assert!(new.term() > old_term, "the successor's term is higher");

    let write = |who: &'static str, term: leasehold::Fence, fence: bool| {
        let db = db.clone();
        async move {
            let mut tx = if fence {
                db.begin_fenced("scheduler", term).await?
            } else {
                db.begin().await?
            };
            tx.execute(
                "UPDATE schedule SET owner = $1 WHERE id = 1",
                &[Param::Text(who)],
            )
            .await?;
            tx.commit().await
        }
    };
    write("b", new.term(), fenced).await.unwrap();
    // A resumes, believes it still leads (it has not looked at its lost signal), and writes.
    let late = write("a", old_term, fenced).await;
    new.resign().await.unwrap();
    drop(old);
    (owner(&db).await, late)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unfenced_deposed_leader_overwrites_its_successor() {
    let (last, late) = scene(false).await;
    assert!(late.is_ok(), "nothing stops it: {late:?}");
    assert_eq!(
        last, "a",
        "the deposed leader's write landed after its successor's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deposed_leader_fenced_with_its_term_is_refused() {
    let (last, late) = scene(true).await;
    assert!(
        matches!(late, Err(Error::StaleFence { .. })),
        "the term is a fence: {late:?}"
    );
    assert_eq!(last, "b", "the successor's write stands");
}
