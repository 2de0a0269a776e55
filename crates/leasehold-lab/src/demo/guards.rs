//! Scene 5: no lock at all. The database itself refuses duplicate orders (idempotency key + unique
//! index), overselling (conditional update) and illegal state transitions (declared state machine),
//! through leasehold's `idempotency` and `state` modules on an embedded SQLite file.
//! Promise: concurrent attempts race for real on one SQLite file; the verdict counts rows. Limit: these
//! guards cover what fits in one local transaction; work with external side effects needs more.

use std::str::FromStr;
use std::time::Duration;

use futures::future::join_all;
use leasehold::db::{Database, Param};
use leasehold::idempotency::IdempotencyStore;
use leasehold::state::{StateMachine, Stock};
use leasehold::Error;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use super::stage::{sqlite_url, Actor, Stage, Timeline};
use super::Outcome;

const ORDER_REQUEST: &[u8] = b"POST /orders {user: 42, sku: sku-1, amount: 1999}";

async fn open(st: &Stage) -> anyhow::Result<Database> {
    let opts = SqliteConnectOptions::from_str(&sqlite_url(&st.db_path(5)))?
        .create_if_missing(true)
        .busy_timeout(Duration::from_secs(10));
    let pool = SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(opts)
        .await?;
    for ddl in [
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, request_id TEXT NOT NULL, amount INTEGER NOT NULL, status TEXT NOT NULL)",
        "CREATE UNIQUE INDEX uk_order_request ON orders (user_id, request_id)",
        "CREATE TABLE sku (id TEXT PRIMARY KEY, stock INTEGER NOT NULL CHECK (stock >= 0))",
        "INSERT INTO sku (id, stock) VALUES ('sku-1', 3)",
    ] {
        sqlx::query(ddl).execute(&pool).await?;
    }
    let db = Database::from_sqlite(pool);
    db.migrate().await?;
    Ok(db)
}

/// What the first act showed: one order from five attempts.
struct Orders {
    orders: i64,
    ran: u32,
    deduplicated: u32,
    reuse_refused: bool,
    unique_refused: bool,
}

/// What the second act showed: three units sold to five buyers.
struct Sales {
    left: i64,
    reserved: i64,
    sold: u32,
    oversell_refused: u32,
}

/// What the third act showed: one payment, no move back.
struct Payments {
    paid: u32,
    illegal_refused: bool,
    status: String,
}

/// Scene 5.
pub(crate) async fn database_guards(st: &mut Stage) -> anyhow::Result<Outcome> {
    let db = open(st).await?;
    let pool = db.sqlite().expect("SQLite").clone();
    let tl = Timeline::new(st.style);
    let Orders {
        orders,
        ran,
        deduplicated,
        reuse_refused,
        unique_refused,
    } = duplicate_orders(&db, &pool, &tl).await?;
    let Sales {
        left,
        reserved,
        sold,
        oversell_refused,
    } = last_units(&db, &pool, &tl).await?;
    let Payments {
        paid,
        illegal_refused,
        status,
    } = payment_callbacks(&db, &pool, &tl).await?;
    let shown_ok = orders == 1
        && ran == 1
        && deduplicated == 3
        && reuse_refused
        && unique_refused
        && left == 0
        && reserved == 3
        && sold == 3
        && oversell_refused == 2
        && paid == 1
        && illegal_refused
        && status == "PAID";
    Ok(Outcome {
        shown: shown_ok,
        verdict: format!(
            "{orders} order from 5 attempts (ran {ran}, deduplicated {deduplicated}, key reuse refused: {reuse_refused}, unique index refused the bypass: {unique_refused}); stock {left}, {reserved} reserved for 5 buyers ({oversell_refused} refused); paid {paid} time, PAID -> CREATED refused: {illegal_refused}, status {status}"
        ),
        lesson: "when one transaction can state the rule, let the database enforce it: no lock to lose",
        redis_commands: tl.redis_commands,
    })
}

/// Act 1: three deliveries of one order request (a client retry, a double click, a redelivery),
/// a late retry, a reuse of the key for another request, and a code path around the store.
async fn duplicate_orders(
    db: &Database,
    pool: &sqlx::SqlitePool,
    tl: &Timeline,
) -> anyhow::Result<Orders> {
    tl.say(
        Actor::Observer,
        "three copies of one order request (user 42, Idempotency-Key req-7f3a) arrive at once, then a late retry; no lock",
    );
    let store = IdempotencyStore::new(db.clone());
    let place_order = |store: IdempotencyStore, request: &'static [u8]| async move {
        store
            .run("user-42", "req-7f3a", request, |tx| {
                Box::pin(async move {
                    tx.execute(
                        "INSERT INTO orders (user_id, request_id, amount, status) VALUES (42, 'req-7f3a', 1999, 'CREATED')",
                        &[],
                    )
                    .await?;
                    Ok(b"201 order created".to_vec())
                })
            })
            .await
    };
    let copies = join_all((0..3).map(|_| place_order(store.clone(), ORDER_REQUEST))).await;
    let retry = place_order(store.clone(), ORDER_REQUEST).await;
    let mut ran = 0;
    let mut deduplicated = 0;
    let shown_call = "idempotency.run(user-42, req-7f3a): INSERT INTO orders ...";
    for r in copies.iter().chain(std::iter::once(&retry)) {
        let outcome = match r {
            Ok(resp) if !resp.replayed => {
                ran += 1;
                format!("ran: {}", String::from_utf8_lossy(&resp.body))
            }
            Ok(resp) => {
                deduplicated += 1;
                format!(
                    "replayed the stored response ({}), nothing inserted",
                    String::from_utf8_lossy(&resp.body)
                )
            }
            Err(e @ Error::IdempotencyInProgress { .. }) => {
                deduplicated += 1;
                format!("refused (409): {e}")
            }
            Err(e) => format!("error: {}", e.report()),
        };
        tl.sql(Actor::A, shown_call, &outcome);
    }
    let reused = place_order(
        store.clone(),
        b"POST /orders {user: 42, sku: sku-1, amount: 1}",
    )
    .await;
    let reuse_refused = matches!(reused, Err(Error::IdempotencyKeyReused { .. }));
    tl.sql(
        Actor::A,
        "idempotency.run(user-42, req-7f3a) with another amount",
        &match &reused {
            Err(e) => format!("refused (422): {e}"),
            Ok(_) => "accepted".to_owned(),
        },
    );
    // A second code path that bypasses the idempotency store still hits the unique index.
    tl.say(
        Actor::Observer,
        "an old code path inserts the same request directly, bypassing the idempotency store",
    );
    let direct = sqlx::query(
        "INSERT INTO orders (user_id, request_id, amount, status) VALUES (42, 'req-7f3a', 1999, 'CREATED')",
    )
    .execute(pool)
    .await;
    let unique_refused =
        matches!(&direct, Err(sqlx::Error::Database(e)) if e.is_unique_violation());
    tl.sql(
        Actor::A,
        "INSERT INTO orders (user_id, request_id, ...) VALUES (42, 'req-7f3a', ...)",
        &match &direct {
            Err(e) => format!("refused: {e} (unique index on (user_id, request_id))"),
            Ok(_) => "1 row".to_owned(),
        },
    );
    let orders: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM orders WHERE user_id = 42 AND request_id = 'req-7f3a'",
    )
    .fetch_one(pool)
    .await?;
    tl.sql(
        Actor::Observer,
        "SELECT COUNT(*) FROM orders WHERE request_id = 'req-7f3a'",
        &orders.to_string(),
    );
    Ok(Orders {
        orders,
        ran,
        deduplicated,
        reuse_refused,
        unique_refused,
    })
}

/// Act 2: five buyers race for three units.
async fn last_units(
    db: &Database,
    pool: &sqlx::SqlitePool,
    tl: &Timeline,
) -> anyhow::Result<Sales> {
    tl.say(
        Actor::Observer,
        "five buyers race for the last 3 units of sku-1; no lock",
    );
    let stock = Stock::new("sku", "id", "stock")?;
    let buys = join_all((1..=5).map(|i| {
        let (db, stock) = (db.clone(), stock.clone());
        async move {
            let buyer = format!("buyer-{i}");
            let mut tx = db.begin().await?;
            let r = stock
                .reserve(&mut tx, Param::Text("sku-1"), 1, Some(&buyer))
                .await;
            if r.is_ok() {
                tx.commit().await?;
            }
            r
        }
    }))
    .await;
    let mut sold = 0;
    let mut oversell_refused = 0;
    for r in &buys {
        let outcome = match r {
            Ok(res) => {
                sold += 1;
                format!("1 row: reserved, {} left", res.remaining)
            }
            Err(e @ Error::Insufficient { .. }) => {
                oversell_refused += 1;
                format!("0 rows, refused: {e}")
            }
            Err(e) => format!("error: {}", e.report()),
        };
        tl.sql(
            Actor::B,
            "UPDATE sku SET stock = stock - 1 WHERE id = 'sku-1' AND stock >= 1 RETURNING stock",
            &outcome,
        );
    }
    let left: i64 = sqlx::query_scalar("SELECT stock FROM sku WHERE id = 'sku-1'")
        .fetch_one(pool)
        .await?;
    let reserved: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM leasehold_reservations WHERE item_table = 'sku' AND item_id = 'sku-1'",
    )
    .fetch_one(pool)
    .await?;
    tl.sql(
        Actor::Observer,
        "SELECT stock FROM sku; SELECT COUNT(*) FROM leasehold_reservations",
        &format!("{left}; {reserved}"),
    );
    Ok(Sales {
        left,
        reserved,
        sold,
        oversell_refused,
    })
}

/// Act 3: the order's state machine: two payment callbacks at once, then an illegal move back.
async fn payment_callbacks(
    db: &Database,
    pool: &sqlx::SqlitePool,
    tl: &Timeline,
) -> anyhow::Result<Payments> {
    tl.say(
        Actor::Observer,
        "two payment callbacks for the order arrive at once, then a buggy job tries PAID -> CREATED",
    );
    let machine = StateMachine::builder("orders")
        .id_column("request_id")
        .state_column("status")
        .transition("CREATED", "PAID")
        .transition("CREATED", "CANCELLED")
        .transition("PAID", "SHIPPED")
        .transition("PAID", "REFUNDED")
        .build()?;
    let move_order = |from: &'static str, to: &'static str| {
        let (db, machine) = (db.clone(), machine.clone());
        async move {
            let mut tx = db.begin().await?;
            let r = machine
                .transition(&mut tx, Param::Text("req-7f3a"), from, to)
                .await;
            if r.is_ok() {
                tx.commit().await?;
            }
            r
        }
    };
    let pays = join_all([move_order("CREATED", "PAID"), move_order("CREATED", "PAID")]).await;
    let mut paid = 0;
    for r in &pays {
        let outcome = match r {
            Ok(()) => {
                paid += 1;
                "1 row: paid".to_owned()
            }
            Err(e @ Error::TransitionRace { .. }) => format!("0 rows, refused: {e}"),
            Err(e) => format!("error: {}", e.report()),
        };
        tl.sql(
            Actor::C,
            "UPDATE orders SET status = 'PAID' WHERE request_id = 'req-7f3a' AND status = 'CREATED'",
            &outcome,
        );
    }
    let back = move_order("PAID", "CREATED").await;
    let illegal_refused = matches!(back, Err(Error::IllegalTransition { .. }));
    tl.sql(
        Actor::C,
        "transition PAID -> CREATED",
        &match &back {
            Err(e) => format!("refused before any SQL: {e}"),
            Ok(()) => "1 row".to_owned(),
        },
    );
    let status: String =
        sqlx::query_scalar("SELECT status FROM orders WHERE request_id = 'req-7f3a'")
            .fetch_one(pool)
            .await?;
    tl.sql(
        Actor::Observer,
        "SELECT status FROM orders WHERE request_id = 'req-7f3a'",
        &status,
    );
    Ok(Payments {
        paid,
        illegal_refused,
        status,
    })
}
