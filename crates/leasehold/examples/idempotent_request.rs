//! Requests may be duplicated (client retries, double clicks, a gateway timing out and retrying):
//! give each request an idempotency key.
//!
//! The first attempt creates the order and stores the response in the same transaction; the retry
//! gets the stored response back byte for byte without creating a second order; the same key with a
//! different body is refused (HTTP 422).
//!
//!     cargo run -p leasehold --example idempotent_request

#[path = "support/mod.rs"]
mod support;

use futures::future::BoxFuture;
use leasehold::db::Tx;
use leasehold::idempotency::IdempotencyStore;
use leasehold::Error;

/// The business work: creates an order, returns the response body.
fn create_order(tx: &mut Tx) -> BoxFuture<'_, leasehold::Result<Vec<u8>>> {
    Box::pin(async move {
        let id = format!("ord-{:08x}", rand::random::<u32>());
        tx.execute("INSERT INTO orders VALUES ($1, 42)", &[id.as_str().into()])
            .await?;
        Ok(format!(r#"{{"order": "{id}"}}"#).into_bytes())
    })
}

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    let (db, _dir) = support::database().await?;
    support::fresh_table(&db, "orders", "id TEXT PRIMARY KEY, amount BIGINT NOT NULL").await?;
    let store = IdempotencyStore::new(db.clone());

    let request = br#"{"amount": 42}"#;

    let first = store
        .run("customer-7", "3f1c-checkout", request, create_order)
        .await?;
    println!(
        "first:  {} (replayed: {})",
        String::from_utf8_lossy(&first.body),
        first.replayed
    );
    let retry = store
        .run("customer-7", "3f1c-checkout", request, create_order)
        .await?;
    println!(
        "retry:  {} (replayed: {})",
        String::from_utf8_lossy(&retry.body),
        retry.replayed
    );
    assert_eq!(first.body, retry.body);

    match store
        .run(
            "customer-7",
            "3f1c-checkout",
            br#"{"amount": 9000}"#,
            create_order,
        )
        .await
    {
        Err(e @ Error::IdempotencyKeyReused { .. }) => println!("other body: {e}"),
        other => panic!("expected a reused-key error, got {other:?}"),
    }

    let mut tx = db.begin().await?;
    let orders = tx.fetch_i64("SELECT COUNT(*) FROM orders", &[]).await?;
    tx.commit().await?;
    println!("orders created: {}", orders.unwrap_or_default());
    assert_eq!(orders, Some(1));
    Ok(())
}
