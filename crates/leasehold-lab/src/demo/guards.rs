//! Scene 5: no lock at all. The database itself refuses duplicate orders (unique index on the
//! idempotency key), overselling (conditional update) and illegal state transitions (state machine).
//! Promise: concurrent attempts race for real on one SQLite file; the verdict counts rows. Limit: these
//! guards cover what fits in one local transaction; work with external side effects needs more.

use std::str::FromStr;
use std::time::Duration;

use futures::future::join_all;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};

use super::stage::{sqlite_url, Actor, Stage, Timeline};
use super::Outcome;

async fn open(st: &Stage) -> anyhow::Result<SqlitePool> {
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
        "CREATE TABLE sku (id TEXT PRIMARY KEY, stock INTEGER NOT NULL)",
        "CREATE TABLE reservations (sku_id TEXT NOT NULL, buyer TEXT NOT NULL)",
        "CREATE TABLE order_transitions (from_state TEXT NOT NULL, to_state TEXT NOT NULL, PRIMARY KEY (from_state, to_state))",
        "INSERT INTO order_transitions VALUES ('CREATED','PAID'), ('CREATED','CANCELLED'), ('PAID','SHIPPED'), ('PAID','REFUNDED')",
    ] {
        sqlx::query(ddl).execute(&pool).await?;
    }
    Ok(pool)
}

/// Scene 5.
pub(crate) async fn database_guards(st: &mut Stage) -> anyhow::Result<Outcome> {
    let pool = open(st).await?;
    let tl = Timeline::new(st.style);

    // 1. Three deliveries of the same order request (a client retry, a double click, a redelivery).
    tl.say(
        Actor::Observer,
        "three copies of one order request (user 42, request_id req-7f3a) arrive at once; no lock",
    );
    let inserts = join_all((0..3).map(|_| {
        let pool = pool.clone();
        async move {
            sqlx::query("INSERT INTO orders (user_id, request_id, amount, status) VALUES (42, 'req-7f3a', 1999, 'CREATED')")
                .execute(&pool)
                .await
        }
    }))
    .await;
    let mut dup_refused = 0;
    for r in &inserts {
        let outcome = match r {
            Ok(_) => "1 row".to_owned(),
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                dup_refused += 1;
                "refused: UNIQUE constraint (user_id, request_id); look up the existing order instead".to_owned()
            }
            Err(e) => format!("error: {e}"),
        };
        tl.sql(
            Actor::A,
            "INSERT INTO orders (user_id, request_id, ...) VALUES (42, 'req-7f3a', ...)",
            &outcome,
        );
    }
    let orders: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM orders WHERE user_id = 42 AND request_id = 'req-7f3a'",
    )
    .fetch_one(&pool)
    .await?;
    tl.sql(
        Actor::Observer,
        "SELECT COUNT(*) FROM orders WHERE request_id = 'req-7f3a'",
        &orders.to_string(),
    );

    // 2. Five buyers race for three units.
    sqlx::query("INSERT INTO sku (id, stock) VALUES ('sku-1', 3)")
        .execute(&pool)
        .await?;
    tl.say(
        Actor::Observer,
        "five buyers race for the last 3 units of sku-1; no lock",
    );
    let buys = join_all((1..=5).map(|i| {
        let pool = pool.clone();
        async move {
            let mut tx = pool.begin().await?;
            let n =
                sqlx::query("UPDATE sku SET stock = stock - 1 WHERE id = 'sku-1' AND stock >= 1")
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
            if n == 1 {
                sqlx::query("INSERT INTO reservations (sku_id, buyer) VALUES ('sku-1', ?)")
                    .bind(format!("buyer-{i}"))
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            Ok::<u64, sqlx::Error>(n)
        }
    }))
    .await;
    let mut sold = 0;
    let mut oversell_refused = 0;
    for r in &buys {
        let outcome = match r {
            Ok(1) => {
                sold += 1;
                "1 row: reserved".to_owned()
            }
            Ok(_) => {
                oversell_refused += 1;
                "0 rows: sold out, refused".to_owned()
            }
            Err(e) => format!("error: {e}"),
        };
        tl.sql(
            Actor::B,
            "UPDATE sku SET stock = stock - 1 WHERE id = 'sku-1' AND stock >= 1",
            &outcome,
        );
    }
    let stock: i64 = sqlx::query_scalar("SELECT stock FROM sku WHERE id = 'sku-1'")
        .fetch_one(&pool)
        .await?;
    let reserved: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM reservations")
        .fetch_one(&pool)
        .await?;
    tl.sql(
        Actor::Observer,
        "SELECT stock FROM sku; SELECT COUNT(*) FROM reservations",
        &format!("{stock}; {reserved}"),
    );

    // 3. The order's state machine: two payment callbacks at once, then an illegal move back.
    tl.say(Actor::Observer, "two payment callbacks for the order arrive at once, then a buggy job tries PAID -> CREATED");
    let transition = |to: &'static str, from: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query(
                "UPDATE orders SET status = ?1 WHERE request_id = 'req-7f3a' AND status = ?2 \
                 AND EXISTS (SELECT 1 FROM order_transitions WHERE from_state = ?2 AND to_state = ?1)",
            )
            .bind(to)
            .bind(from)
            .execute(&pool)
            .await
            .map(|r| r.rows_affected())
        }
    };
    let pays = join_all([transition("PAID", "CREATED"), transition("PAID", "CREATED")]).await;
    let mut paid = 0;
    for r in &pays {
        let n = *r.as_ref().map_err(|e| anyhow::anyhow!("{e}"))?;
        paid += n;
        tl.sql(
            Actor::C,
            "UPDATE orders SET status = 'PAID' WHERE ... AND status = 'CREATED' AND (CREATED->PAID allowed)",
            if n == 1 { "1 row: paid" } else { "0 rows: already paid, nothing to do" },
        );
    }
    let back = transition("CREATED", "PAID").await?;
    tl.sql(
        Actor::C,
        "UPDATE orders SET status = 'CREATED' WHERE ... AND status = 'PAID' AND (PAID->CREATED allowed)",
        if back == 0 { "0 rows: PAID -> CREATED is not in the transition table, refused" } else { "1 row" },
    );
    let status: String =
        sqlx::query_scalar("SELECT status FROM orders WHERE request_id = 'req-7f3a'")
            .fetch_one(&pool)
            .await?;
    tl.sql(
        Actor::Observer,
        "SELECT status FROM orders WHERE request_id = 'req-7f3a'",
        &status,
    );

    let shown_ok = orders == 1
        && dup_refused == 2
        && stock == 0
        && reserved == 3
        && sold == 3
        && oversell_refused == 2
        && paid == 1
        && back == 0
        && status == "PAID";
    Ok(Outcome {
        shown: shown_ok,
        verdict: format!(
            "{orders} order for 3 copies ({dup_refused} refused by the unique index); stock {stock}, {reserved} reserved for 5 buyers ({oversell_refused} refused); paid once, PAID -> CREATED refused, status {status}"
        ),
        lesson: "when one transaction can state the rule, let the database enforce it: no lock to lose",
        redis_commands: tl.redis_commands,
    })
}
