//! A scheduled job's effect once per slot, kept by the database: two replicas that both ran one slot
//! (the lease did not stop the second: it outlived a pause, or the store forgot the record) record
//! the slot in the transaction of their own writes with `schedule::record_in`; the second finds it
//! taken and rolls back. Without it, both writes land. On every database backend compiled in.
#![cfg(feature = "sql")]

mod sql_support;

use leasehold::db::Param;
use leasehold::inbox::Delivery;
use leasehold::schedule::{record_in, Schedule, Slot};
use sql_support::{each_backend, exec, scalar};

/// An hourly job's slot number `index`.
fn hourly(index: u64) -> Slot {
    Schedule::every(std::time::Duration::from_secs(3_600))
        .unwrap()
        .slot(index)
}

/// The slot these tests record.
fn slot() -> Slot {
    hourly(493_000)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_runs_of_one_slot_write_once_when_the_slot_is_recorded_with_the_writes() {
    for t in each_backend().await {
        let db = t.db.clone();
        exec(
            &db,
            "CREATE TABLE invoices (slot BIGINT NOT NULL, total BIGINT NOT NULL)",
        )
        .await;
        let run = |recorded: bool| {
            let db = db.clone();
            async move {
                let mut tx = db.begin().await.unwrap();
                if recorded
                    && record_in(&mut tx, "invoicing", slot()).await.unwrap() == Delivery::Duplicate
                {
                    tx.rollback().await.unwrap();
                    return false;
                }
                tx.execute(
                    "INSERT INTO invoices (slot, total) VALUES ($1, 100)",
                    &[Param::I64(slot().index as i64)],
                )
                .await
                .unwrap();
                tx.commit().await.unwrap();
                true
            }
        };
        let count = || scalar(&db, "SELECT CAST(COUNT(*) AS BIGINT) FROM invoices", &[]);
        // Unrecorded: both replicas' runs of the slot write.
        assert!(run(false).await && run(false).await);
        assert_eq!(
            count().await,
            Some(2),
            "{:?}: the slot's effect twice",
            t.backend()
        );
        exec(&db, "DELETE FROM invoices").await;
        // Recorded in the same transaction: the second run writes nothing.
        assert!(run(true).await, "the first run applies");
        assert!(!run(true).await, "the second finds the slot taken");
        assert_eq!(count().await, Some(1), "{:?}: once per slot", t.backend());
        // Another slot, or another job, is its own.
        let mut tx = db.begin().await.unwrap();
        let next = hourly(slot().index + 1);
        assert_eq!(
            record_in(&mut tx, "invoicing", next).await.unwrap(),
            Delivery::First
        );
        assert_eq!(
            record_in(&mut tx, "payroll", slot()).await.unwrap(),
            Delivery::First
        );
        tx.rollback().await.unwrap();
        // A job name the inbox cannot key is refused, nothing written.
        let mut tx = db.begin().await.unwrap();
        assert!(record_in(&mut tx, &"j".repeat(300), slot()).await.is_err());
        tx.rollback().await.unwrap();
    }
}
