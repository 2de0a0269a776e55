//! The fenced strategies' writes: leasehold's fenced transactions on the cell's tables, from Rust or
//! from outside it (`--fenced-writer psql`: a `psql` process calling the SQL function
//! `leasehold_fence` in its own transaction, as a shell job or a service in another language does).
//!
//! Limit: the fence is checked by leasehold's `leasehold_fences` row of the cell, in the same
//! database as the business tables; a resource elsewhere is not modelled. The `psql` writer runs on
//! PostgreSQL only (SQLite has no server-side function; MariaDB is no resource here).

use anyhow::Context as _;

use super::{Dialect, Outcome, Plan, Resource};
use crate::psql::{quoted, Psql};

/// Who writes the fenced strategies' writes (`leasehold verify --fenced-writer`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FencedWriter {
    /// leasehold's own fenced transactions from Rust (`Database::begin_fenced`).
    #[default]
    Rust,
    /// A `psql` process per write, outside Rust: `BEGIN; SELECT leasehold_fence(resource, fence);`
    /// the write; `COMMIT`, a refusal (SQLSTATE LHF01) counted as stale. PostgreSQL only.
    Psql,
}

impl FencedWriter {
    /// Whether `database` can take this writer's writes: the `psql` writer needs a PostgreSQL URL
    /// and the `psql` program. The error says what to change.
    pub(crate) fn check(self, database: &str) -> anyhow::Result<()> {
        if self == Self::Rust {
            return Ok(());
        }
        if Dialect::of(database)? != Dialect::Postgres {
            anyhow::bail!(
                "--fenced-writer psql needs a PostgreSQL resource: add --database postgres://user@host/db (the SQL function leasehold_fence exists on PostgreSQL and MariaDB only, and the resource runs on PostgreSQL or SQLite)"
            );
        }
        crate::psql::check_available("--fenced-writer psql")
    }
}

/// The fenced strategies' writes (`Strategy::fenced`), through leasehold's own fenced transactions
/// ([`leasehold::db::Database::begin_fenced`]): the fence is checked and stored first thing in the
/// transaction that carries the business write.
#[derive(Debug)]
pub(crate) struct Fenced {
    db: leasehold::db::Database,
    /// The fenced resource's name in `leasehold_fences` (one per cell).
    resource: String,
    /// Set when the writes go through `psql` instead of `db`.
    psql: Option<Psql>,
}

impl Fenced {
    /// Opens leasehold's database handle on the same database as the cell's tables (on PostgreSQL in
    /// the cell's schema, so `leasehold_fences` is the cell's own).
    pub(crate) async fn connect(
        url: &str,
        prefix: &str,
        resource: &str,
        writer: FencedWriter,
    ) -> anyhow::Result<Self> {
        let mut builder = leasehold::db::Database::builder(url).max_connections(2);
        let schema = prefix.split_once('.').map(|(schema, _)| schema);
        if let Some(schema) = schema {
            builder = builder.postgres_schema(schema);
        }
        let psql = (writer == FencedWriter::Psql).then(|| Psql::new(url, schema));
        let db = builder
            .connect()
            .await
            .context("leasehold database for fenced writes")?;
        Ok(Self {
            db,
            resource: resource.to_owned(),
            psql,
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
        if let Some(psql) = &self.psql {
            return Ok(psql.fenced(&self.resource, fence, &[]).await?.is_ok());
        }
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
        if let Some(psql) = &self.psql {
            let statements = psql_write(resource, plan, writer, fence);
            return Ok(
                match psql.fenced(&self.resource, fence, &statements).await? {
                    Ok(()) => Outcome::Accepted,
                    Err(_refused) => Outcome::Stale,
                },
            );
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

/// The statements of `plan`'s write as the `psql` writer sends them (values written out: `psql`
/// takes no parameters), the same writes as [`Fenced::write`]'s.
fn psql_write(resource: &Resource, plan: &Plan, writer: i64, fence: i64) -> Vec<String> {
    match plan {
        Plan::Counter { read } => vec![format!(
            "UPDATE {} SET value = {}, writer = {writer}, fence = {fence} WHERE id = 1",
            resource.t("counter"),
            read + 1
        )],
        Plan::CreateOrder { request } => vec![format!(
            "INSERT INTO {} (request_id, writer, fence) VALUES ({}, {writer}, {fence})",
            resource.t("orders"),
            quoted(request)
        )],
        Plan::Sell { read } => vec![format!(
            "UPDATE {} SET units = {}, writer = {writer}, fence = {fence} WHERE id = 1",
            resource.t("stock"),
            read - 1
        )],
        Plan::Transition { order, to, .. } => vec![format!(
            "UPDATE {} SET state = {}, writer = {writer}, fence = {fence} WHERE id = {order}",
            resource.t("order_state"),
            quoted(to)
        )],
        Plan::Apply { message } => vec![
            format!(
                "UPDATE {} SET balance = balance + 10 WHERE id = 1",
                resource.t("account")
            ),
            format!(
                "INSERT INTO {} (message_id, writer, fence) VALUES ({}, {writer}, {fence})",
                resource.t("applied"),
                quoted(message)
            ),
        ],
        Plan::Skip => Vec::new(),
    }
}
