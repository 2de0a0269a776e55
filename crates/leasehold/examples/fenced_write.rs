//! The critical section must not run twice *and* you hold a lease: fence the write at the resource.
//!
//! Holder A gets fence 1, then pauses (GC, a stopped VM) past its lease. Holder B gets fence 2 and
//! writes. A wakes up, still believing it holds the lease, and writes: the database refuses it with
//! `StaleFence`, and nothing of A's transaction is committed.
//!
//!     cargo run -p leasehold --example fenced_write
//!
//! The fences here are plain numbers, as a lease would hand them out (`lease.fence()`); the resource
//! side does not care where they come from.

#[path = "support/mod.rs"]
mod support;

use leasehold::{Error, Fence};

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    let (db, _dir) = support::database().await?;
    support::ledger_with(&db, 100).await?;

    let fence_a = Fence::new(1); // A acquired the lease first ...
    let fence_b = Fence::new(2); // ... its lease expired while A was paused; B acquired it.

    // B writes: read-modify-write is safe, writers of this resource are serialised until commit.
    let mut tx = db.begin_fenced("ledger:acct-1", fence_b).await?;
    let balance = tx
        .fetch_i64(
            "SELECT balance FROM ledger WHERE account = $1",
            &["acct-1".into()],
        )
        .await?
        .unwrap_or_default();
    tx.execute(
        "UPDATE ledger SET balance = $1 WHERE account = $2",
        &[(balance - 30).into(), "acct-1".into()],
    )
    .await?;
    tx.commit().await?;
    println!("B (fence {fence_b}) debited 30");

    // A resumes and tries the same debit with its old fence.
    match db.begin_fenced("ledger:acct-1", fence_a).await {
        Err(Error::StaleFence {
            presented, current, ..
        }) => {
            println!(
                "A (fence {presented}) refused: the resource already accepted fence {current}"
            );
        }
        Ok(_) => unreachable!("a stale fence is never accepted"),
        Err(e) => return Err(e),
    }

    let mut tx = db.begin().await?;
    let balance = tx.fetch_i64("SELECT balance FROM ledger", &[]).await?;
    tx.commit().await?;
    println!("balance: {} (debited once)", balance.unwrap_or_default());
    assert_eq!(balance, Some(70));
    Ok(())
}
