//! Messages may be delivered more than once (at-least-once queues, webhook retries): record each
//! message id in the same transaction as its effect.
//!
//! Five deliveries of three payment notifications, one consumer crashing before commit: each payment
//! is applied exactly once.
//!
//!     cargo run -p leasehold --example inbox_consumer

#[path = "support/mod.rs"]
mod support;

use leasehold::inbox::{Delivery, Inbox};

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    let (db, _dir) = support::database().await?;
    support::fresh_table(&db, "accounts", "id TEXT PRIMARY KEY, paid BIGINT NOT NULL").await?;
    let mut tx = db.begin().await?;
    tx.execute("INSERT INTO accounts VALUES ('acct-1', 0)", &[])
        .await?;
    tx.commit().await?;

    let inbox = Inbox::new("payments")?;
    // (message id, amount, does the consumer crash before commit?)
    let deliveries = [
        ("pay-1", 10, false),
        ("pay-2", 20, true), // crash: nothing recorded, so the redelivery below applies it
        ("pay-1", 10, false), // duplicate
        ("pay-2", 20, false),
        ("pay-3", 30, false),
    ];
    for (id, amount, crash) in deliveries {
        let mut tx = db.begin().await?;
        let delivery = inbox.record(&mut tx, id).await?;
        if delivery == Delivery::First {
            tx.execute(
                "UPDATE accounts SET paid = paid + $1 WHERE id = 'acct-1'",
                &[i64::from(amount).into()],
            )
            .await?;
        }
        if crash {
            drop(tx); // the process dies: the transaction rolls back
            println!("{id}: consumer crashed before commit");
            continue;
        }
        tx.commit().await?; // then acknowledge to the broker
        println!("{id}: {delivery:?}");
    }

    let mut tx = db.begin().await?;
    let paid = tx.fetch_i64("SELECT paid FROM accounts", &[]).await?;
    tx.commit().await?;
    println!(
        "paid: {} (10 + 20 + 30, each once)",
        paid.unwrap_or_default()
    );
    assert_eq!(paid, Some(60));
    Ok(())
}
