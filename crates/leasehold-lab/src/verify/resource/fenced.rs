//! The fenced strategies' writes: leasehold's fenced transactions on the cell's tables.
//!
//! Limit: the fence is checked by leasehold's `leasehold_fences` row of the cell, in the same
//! database as the business tables; a resource elsewhere is not modelled.

use anyhow::Context as _;

use super::{Outcome, Plan, Resource};

/// The fenced strategies' writes (`Strategy::fenced`), through leasehold's own fenced transactions
/// ([`leasehold::db::Database::begin_fenced`]): the fence is checked and stored first thing in the
/// transaction that carries the business write.
#[derive(Debug)]
pub(crate) struct Fenced {
    db: leasehold::db::Database,
    /// The fenced resource's name in `leasehold_fences` (one per cell).
    resource: String,
}

impl Fenced {
    /// Opens leasehold's database handle on the same database as the cell's tables (on PostgreSQL in
    /// the cell's schema, so `leasehold_fences` is the cell's own).
    pub(crate) async fn connect(url: &str, prefix: &str, resource: &str) -> anyhow::Result<Self> {
        let mut builder = leasehold::db::Database::builder(url).max_connections(2);
        if let Some((schema, _)) = prefix.split_once('.') {
            builder = builder.postgres_schema(schema);
        }
        let db = builder
            .connect()
            .await
            .context("leasehold database for fenced writes")?;
        Ok(Self {
            db,
            resource: resource.to_owned(),
        })
    }

    /// Creates leasehold's tables (the harness does this once per cell).
    pub(crate) async fn migrate(&self) -> anyhow::Result<()> {
        self.db.migrate().await?;
        Ok(())
    }

    async fn begin(&self, fence: i64) -> anyhow::Result<Option<leasehold::db::Tx>> {
        let fence = leasehold::Fence::new(u64::try_from(fence).context("negative fence")?);
        match self.db.begin_fenced(&self.resource, fence).await {
            Ok(tx) => Ok(Some(tx)),
            Err(leasehold::Error::StaleFence { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Announces `fence` to the resource before reading, in a fenced transaction of its own, so a
    /// holder whose lease was superseded cannot write between our read and our write (a fence checked
    /// only at the write would let it). `false` when the fence is already stale.
    pub(crate) async fn register(&self, fence: i64) -> anyhow::Result<bool> {
        match self.begin(fence).await? {
            Some(tx) => {
                tx.commit().await?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Writes `plan` in a fenced transaction on `resource`'s tables.
    pub(crate) async fn write(
        &self,
        resource: &Resource,
        plan: &Plan,
        writer: i64,
        fence: i64,
    ) -> anyhow::Result<Outcome> {
        use leasehold::db::Param;
        if matches!(plan, Plan::Skip) {
            return Ok(Outcome::Skipped);
        }
        let Some(mut tx) = self.begin(fence).await? else {
            return Ok(Outcome::Stale);
        };
        let (w, f) = (Param::I64(writer), Param::I64(fence));
        match plan {
            Plan::Counter { read } => {
                let sql = format!(
                    "UPDATE {} SET value = $1, writer = $2, fence = $3 WHERE id = 1",
                    resource.t("counter")
                );
                tx.execute(
                    sqlx::AssertSqlSafe(sql.as_str()),
                    &[Param::I64(read + 1), w, f],
                )
                .await?;
            }
            Plan::CreateOrder { request } => {
                let sql = format!(
                    "INSERT INTO {} (request_id, writer, fence) VALUES ($1, $2, $3)",
                    resource.t("orders")
                );
                tx.execute(
                    sqlx::AssertSqlSafe(sql.as_str()),
                    &[Param::Text(request), w, f],
                )
                .await?;
            }
            Plan::Sell { read } => {
                let sql = format!(
                    "UPDATE {} SET units = $1, writer = $2, fence = $3 WHERE id = 1",
                    resource.t("stock")
                );
                tx.execute(
                    sqlx::AssertSqlSafe(sql.as_str()),
                    &[Param::I64(read - 1), w, f],
                )
                .await?;
            }
            Plan::Transition { order, to, .. } => {
                let sql = format!(
                    "UPDATE {} SET state = $1, writer = $2, fence = $3 WHERE id = $4",
                    resource.t("order_state")
                );
                tx.execute(
                    sqlx::AssertSqlSafe(sql.as_str()),
                    &[Param::Text(to), w, f, Param::I64(*order)],
                )
                .await?;
            }
            Plan::Apply { message } => {
                let sql = format!(
                    "UPDATE {} SET balance = balance + 10 WHERE id = 1",
                    resource.t("account")
                );
                tx.execute(sqlx::AssertSqlSafe(sql.as_str()), &[]).await?;
                let sql = format!(
                    "INSERT INTO {} (message_id, writer, fence) VALUES ($1, $2, $3)",
                    resource.t("applied")
                );
                tx.execute(
                    sqlx::AssertSqlSafe(sql.as_str()),
                    &[Param::Text(message), w, f],
                )
                .await?;
            }
            Plan::Skip => unreachable!("handled above"),
        }
        tx.commit().await?;
        Ok(Outcome::Accepted)
    }

    pub(crate) async fn close(&self) {
        self.db.close().await;
    }
}
