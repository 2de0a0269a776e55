//! Multi-step work that calls external systems and may crash half-way: recovery points.
//!
//! Checkout = charge the card (external), then create the shipment (local). The first attempt charges
//! and then crashes; the retry, after the lock timeout, skips the completed charge step and finishes.
//! The external call carries a derived idempotency key, the same on every attempt, so even a charge
//! repeated after a crash *inside* the step is deduplicated by the provider.
//!
//!     cargo run -p leasehold --example recovery_points

#[path = "support/mod.rs"]
mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::idempotency::{Begun, IdempotencyStore};

/// A stand-in for a payment provider that honours idempotency keys.
#[derive(Default, Clone)]
struct Provider(Arc<Mutex<HashMap<String, u32>>>);

impl Provider {
    fn charge(&self, idempotency_key: &str, cents: u32) -> String {
        let mut charges = self.0.lock().unwrap();
        charges.entry(idempotency_key.to_owned()).or_insert(cents);
        format!("ch_{}", &idempotency_key[..12])
    }
}

#[tokio::main]
async fn main() -> leasehold::Result<()> {
    let (db, _dir) = support::database().await?;
    support::fresh_table(
        &db,
        "checkouts",
        "id TEXT PRIMARY KEY, charge TEXT, shipment TEXT",
    )
    .await?;
    let store = IdempotencyStore::new(db.clone()).lock_timeout(Duration::from_millis(300));
    let provider = Provider::default();

    for attempt in 1..=2 {
        let mut run = match store.begin("shop", "checkout-77", b"cart: 1 book").await? {
            Begun::Replay(body) => {
                println!(
                    "attempt {attempt}: replayed {}",
                    String::from_utf8_lossy(&body)
                );
                continue;
            }
            Begun::Run(run) => run,
        };
        println!(
            "attempt {attempt}: resuming after {:?}",
            run.resumed_after()
        );
        let (p, key) = (provider.clone(), run.derived_key("charge"));
        let charged = run
            .step("charge", move |tx| {
                Box::pin(async move {
                    let charge = p.charge(&key, 1999);
                    tx.execute(
                        "INSERT INTO checkouts (id, charge) VALUES ('checkout-77', $1)",
                        &[charge.as_str().into()],
                    )
                    .await?;
                    Ok(())
                })
            })
            .await?;
        println!(
            "attempt {attempt}: charge step {}",
            if charged {
                "ran"
            } else {
                "skipped (done before)"
            }
        );
        if attempt == 1 {
            println!("attempt 1: crashes before shipping");
            drop(run);
            tokio::time::sleep(Duration::from_millis(500)).await; // the lock timeout passes
            continue;
        }
        run.step("ship", |tx| {
            Box::pin(async move {
                tx.execute(
                    "UPDATE checkouts SET shipment = 'parcel-1' WHERE id = 'checkout-77'",
                    &[],
                )
                .await
                .map(|_| ())
            })
        })
        .await?;
        let body = run
            .finish(|_tx| Box::pin(async { Ok(b"{\"status\": \"shipped\"}".to_vec()) }))
            .await?;
        println!(
            "attempt {attempt}: finished {}",
            String::from_utf8_lossy(&body)
        );
    }
    let charges = provider.0.lock().unwrap().len();
    println!("provider charged {charges} time(s)");
    assert_eq!(charges, 1);
    Ok(())
}
