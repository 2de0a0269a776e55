//! The operation fits in one database transaction: let the database enforce the rule, no lock needed.
//!
//! 20 concurrent buyers for 5 items: a conditional `UPDATE ... WHERE stock >= 1` never oversells, each
//! sale writes a reservation in the same transaction, and the order moves `created -> paid` through a
//! declared state machine (an illegal or lost transition is refused with its own error).
//!
//!     cargo run -p leasehold --example inventory

#[path = "support/mod.rs"]
mod support;

use leasehold::db::Param;
use leasehold::state::{StateMachine, Stock};
use leasehold::Error;

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    let (db, _dir) = support::database().await?;
    support::fresh_table(&db, "sku", "id BIGINT PRIMARY KEY, stock BIGINT NOT NULL").await?;
    support::fresh_table(&db, "orders", "id TEXT PRIMARY KEY, state TEXT NOT NULL").await?;
    let mut tx = db.begin().await?;
    tx.execute("INSERT INTO sku VALUES (1, 5)", &[]).await?;
    tx.commit().await?;

    let stock = Stock::new("sku", "id", "stock")?;
    let orders = StateMachine::builder("orders")
        .transition("created", "paid")
        .transition("paid", "shipped")
        .transition("created", "cancelled")
        .build()?;

    let mut buyers = Vec::new();
    for n in 0..20 {
        let (db, stock, orders) = (db.clone(), stock.clone(), orders.clone());
        buyers.push(tokio::spawn(async move {
            let order = format!("order-{n}");
            let mut tx = db.begin().await?;
            tx.execute(
                "INSERT INTO orders VALUES ($1, 'created')",
                &[order.as_str().into()],
            )
            .await?;
            match stock.reserve(&mut tx, Param::I64(1), 1, Some(&order)).await {
                Ok(_) => {
                    orders
                        .transition(&mut tx, Param::Text(&order), "created", "paid")
                        .await?;
                    tx.commit().await?;
                    Ok(true)
                }
                Err(Error::Insufficient { .. }) => Ok(false), // sold out: the order is rolled back
                Err(e) => Err(e),
            }
        }));
    }
    let mut sold = 0;
    for b in buyers {
        sold += b.await.expect("buyer task panicked")? as i64;
    }

    let mut tx = db.begin().await?;
    let left = tx
        .fetch_i64("SELECT stock FROM sku WHERE id = 1", &[])
        .await?;
    let paid = tx
        .fetch_i64("SELECT COUNT(*) FROM orders WHERE state = 'paid'", &[])
        .await?;
    let err = orders
        .transition(&mut tx, Param::Text("order-0"), "paid", "created")
        .await
        .unwrap_err();
    tx.commit().await?;
    println!(
        "sold {sold}, stock left {}, paid orders {}",
        left.unwrap_or(-1),
        paid.unwrap_or(-1)
    );
    println!("going back: {err}");
    assert_eq!((sold, left, paid), (5, Some(0), Some(5)));
    Ok(())
}
