//! The database-guard strategy's writes: no lock, leasehold's guards on the cell's tables.
//!
//! Limit: each workload gets the one guard that fits it; combinations of guards are not modelled.

use anyhow::Context as _;

use super::{Outcome, Plan, TRANSITIONS};

/// The database-guard strategy's writes, through leasehold's own guards on a [`leasehold::db::Tx`]:
/// [`leasehold::state::Stock`] (bounded decrement), [`leasehold::state::StateMachine`] (declared
/// transitions), [`leasehold::inbox::Inbox`] (message dedup in the business transaction), plus a
/// unique index (orders) and a conditional update (the counter) written as plain SQL.
#[derive(Debug)]
pub(crate) struct Guards {
    db: leasehold::db::Database,
    /// The cell's table name prefix as seen on the leasehold connection (no schema on PostgreSQL,
    /// where the connection's search path is the cell's schema).
    bare_prefix: String,
    consumer: String,
}

impl Guards {
    pub(crate) async fn connect(url: &str, prefix: &str, consumer: &str) -> anyhow::Result<Self> {
        let mut builder = leasehold::db::Database::builder(url).max_connections(2);
        let bare_prefix = match prefix.split_once('.') {
            Some((schema, rest)) => {
                builder = builder.postgres_schema(schema);
                rest.to_owned()
            }
            None => prefix.to_owned(),
        };
        let db = builder
            .connect()
            .await
            .context("leasehold database for the guards")?;
        Ok(Self {
            db,
            bare_prefix,
            consumer: consumer.replace(':', "-"),
        })
    }

    fn t(&self, table: &str) -> String {
        format!("{}{table}", self.bare_prefix)
    }

    /// Creates leasehold's tables (the harness does this once per cell).
    pub(crate) async fn migrate(&self) -> anyhow::Result<()> {
        self.db.migrate().await?;
        Ok(())
    }

    pub(crate) async fn close(&self) {
        self.db.close().await;
    }

    /// Writes `plan` with the guard that fits it; [`Outcome::Guarded`] when the guard refused.
    pub(crate) async fn write(&self, plan: &Plan, writer: i64) -> anyhow::Result<Outcome> {
        use leasehold::db::Param;
        use leasehold::Error;
        if matches!(plan, Plan::Skip) {
            return Ok(Outcome::Skipped);
        }
        let mut tx = self.db.begin().await?;
        let w = Param::I64(writer);
        let applied = match plan {
            Plan::Counter { read } => {
                let sql = format!(
                    "UPDATE {} SET value = $1, writer = $2 WHERE id = 1 AND value = $3",
                    self.t("counter")
                );
                tx.execute(
                    sqlx::AssertSqlSafe(sql.as_str()),
                    &[Param::I64(read + 1), w, Param::I64(*read)],
                )
                .await?
                    == 1
            }
            Plan::CreateOrder { request } => {
                let sql = format!(
                    "INSERT INTO {} (request_id, writer, fence) VALUES ($1, $2, 0) ON CONFLICT (request_id) DO NOTHING",
                    self.t("orders")
                );
                tx.execute(
                    sqlx::AssertSqlSafe(sql.as_str()),
                    &[Param::Text(request), w],
                )
                .await?
                    == 1
            }
            Plan::Sell { .. } => {
                // The writer column first (the history trigger fires on the quantity only).
                let sql = format!("UPDATE {} SET writer = $1 WHERE id = 1", self.t("stock"));
                tx.execute(sqlx::AssertSqlSafe(sql.as_str()), &[w]).await?;
                let stock = leasehold::state::Stock::new(&self.t("stock"), "id", "units")?;
                match stock.reserve(&mut tx, Param::I64(1), 1, None).await {
                    Ok(_) => true,
                    Err(Error::Insufficient { .. }) => false,
                    Err(e) => return Err(e.into()),
                }
            }
            Plan::Transition { order, from, to } => {
                let sql = format!(
                    "UPDATE {} SET writer = $1 WHERE id = $2",
                    self.t("order_state")
                );
                tx.execute(sqlx::AssertSqlSafe(sql.as_str()), &[w, Param::I64(*order)])
                    .await?;
                let mut machine = leasehold::state::StateMachine::builder(&self.t("order_state"));
                for (f, t) in TRANSITIONS {
                    machine = machine.transition(f, t);
                }
                match machine
                    .build()?
                    .transition(&mut tx, Param::I64(*order), from, to)
                    .await
                {
                    Ok(()) => true,
                    Err(Error::TransitionRace { .. }) => false,
                    Err(e) => return Err(e.into()),
                }
            }
            Plan::Apply { message } => {
                let inbox = leasehold::inbox::Inbox::new(&self.consumer)?;
                match inbox.record(&mut tx, message).await? {
                    leasehold::inbox::Delivery::First => {
                        let sql = format!(
                            "UPDATE {} SET balance = balance + 10 WHERE id = 1",
                            self.t("account")
                        );
                        tx.execute(sqlx::AssertSqlSafe(sql.as_str()), &[]).await?;
                        let sql = format!(
                            "INSERT INTO {} (message_id, writer, fence) VALUES ($1, $2, 0)",
                            self.t("applied")
                        );
                        tx.execute(
                            sqlx::AssertSqlSafe(sql.as_str()),
                            &[Param::Text(message), w],
                        )
                        .await?;
                        true
                    }
                    leasehold::inbox::Delivery::Duplicate => false,
                }
            }
            Plan::Skip => unreachable!("handled above"),
        };
        if applied {
            tx.commit().await?;
            Ok(Outcome::Accepted)
        } else {
            tx.rollback().await?;
            Ok(Outcome::Guarded)
        }
    }
}
