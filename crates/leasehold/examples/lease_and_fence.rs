//! A lease makes overlap rare; a fence makes it harmless. Real leases from Redis, a real pause.
//!
//! Worker A takes the lease `ledger` (300 ms, no renewal, to stand in for a process paused past its
//! lease), then "pauses" for 600 ms. The lease expires; worker B takes it, with a larger fence, and
//! writes. A wakes up and writes too: Redis never stopped it (nothing can), but the database refuses its
//! stale fence. Needs Redis at `LEASEHOLD_REDIS_URL` (default `redis://127.0.0.1:6379`).
//!
//!     cargo run -p leasehold --example lease_and_fence

#[path = "support/mod.rs"]
mod support;

use std::time::Duration;

use leasehold::{Error, LeaseClient, LeaseOptions};

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    let (db, _dir) = support::database().await?;
    support::ledger_with(&db, 100).await?;

    let url =
        std::env::var("LEASEHOLD_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let redis = LeaseClient::connect(&url).await?;
    let name = format!("example-ledger-{:08x}", rand::random::<u32>());
    let short = LeaseOptions::builder()
        .ttl(Duration::from_millis(300))
        .no_renewal()
        .build()?;

    let a = redis.try_acquire(&name, &short).await?;
    println!("A holds the lease, fence {}", a.fence());
    tokio::time::sleep(Duration::from_millis(600)).await; // A is paused past its lease

    let b = redis
        .try_acquire(&name, &LeaseOptions::with_ttl(Duration::from_secs(5))?)
        .await?;
    println!("B holds the lease, fence {}", b.fence());
    let mut tx = db.begin_fenced("ledger:acct-1", b.fence()).await?;
    tx.execute(
        "UPDATE ledger SET balance = balance - 30 WHERE account = 'acct-1'",
        &[],
    )
    .await?;
    tx.commit().await?;
    println!("B debited 30");

    // A resumes, unaware (unless it checks a.lost() first, which it should).
    match db.begin_fenced("ledger:acct-1", a.fence()).await {
        Err(Error::StaleFence {
            presented, current, ..
        }) => {
            println!("A's late write refused: fence {presented} < {current}");
        }
        Ok(_) => unreachable!("a superseded fence is never accepted"),
        Err(e) => return Err(e),
    }
    b.release().await?;
    let _ = a.release().await; // not ours any more: released nothing

    let mut tx = db.begin().await?;
    let balance = tx.fetch_i64("SELECT balance FROM ledger", &[]).await?;
    tx.commit().await?;
    println!("balance: {} (debited once)", balance.unwrap_or_default());
    assert_eq!(balance, Some(70));
    Ok(())
}
