//! The SQL resource the workloads write to, and the history it records of what it accepted.
//!
//! Every business table has a trigger that appends to `history` in the same transaction as the write
//! it records, with the database's own clock, the writer and the fence written with the row. The
//! checker reads only this table, so a worker cannot claim a write the database did not accept.
//! The plain writes are here; the fenced strategies write through `fenced.rs` and the database
//! guards through `guards.rs`, each over leasehold's own API. Limit: the history timestamps come from the database clock and the lease intervals from the
//! workers' clocks; on one machine they agree, against a remote database they may be skewed.

use std::time::Duration;

use anyhow::Context as _;
use sqlx::any::AnyPoolOptions;
use sqlx::AnyPool;
use sqlx::{Executor as _, Row as _};

use super::strategy::Strategy;
use super::Workload;

pub(crate) mod fenced;
pub(crate) mod guards;

/// Units of stock the inventory workload starts with: more than any run sells, so every sale is a
/// write and an oversell shows as a sale that did not take a unit out of stock.
pub(crate) const INITIAL_STOCK: i64 = 100_000;

/// Which SQL dialect the URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    Postgres,
    Sqlite,
}

impl Dialect {
    pub(crate) fn of(url: &str) -> anyhow::Result<Self> {
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Ok(Self::Postgres)
        } else if url.starts_with("sqlite:") {
            Ok(Self::Sqlite)
        } else if url.starts_with("mysql://") || url.starts_with("mariadb://") {
            // The resource's SQL (its triggers, `$N` parameters, `ON CONFLICT`, a schema per cell)
            // exists for PostgreSQL and SQLite only; MariaDB is a lease store here.
            anyhow::bail!(
                "--database {url:?}: the resource runs on PostgreSQL or SQLite only (a postgres://user@host/db or sqlite://path URL); MariaDB is verified as a lease store (--strategy mysql-lease,mysql-lease-fence), on a private server the harness starts"
            )
        } else {
            anyhow::bail!(
                "--database {url:?}: expected a postgres://user@host/db or sqlite://path URL"
            )
        }
    }

    fn now_ms(self) -> &'static str {
        match self {
            Self::Postgres => "(extract(epoch from clock_timestamp()) * 1000)::bigint",
            Self::Sqlite => "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
        }
    }

    fn serial(self) -> &'static str {
        match self {
            Self::Postgres => "BIGSERIAL PRIMARY KEY",
            Self::Sqlite => "INTEGER PRIMARY KEY AUTOINCREMENT",
        }
    }
}

/// One accepted write, as the resource recorded it.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct HistoryRow {
    /// Order in which the resource accepted the writes.
    pub(crate) seq: i64,
    /// Database clock, Unix milliseconds.
    pub(crate) at_ms: i64,
    /// The counter, request id, order id or message id written.
    pub(crate) item: String,
    /// The value before the write (`None` for inserts).
    pub(crate) old: Option<String>,
    /// The value after the write.
    pub(crate) new: Option<String>,
    /// Worker slot that wrote it.
    pub(crate) writer: i64,
    /// Fence presented with the write (0 when the strategy has none).
    pub(crate) fence: i64,
}

/// What a worker read and intends to write after its critical section.
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    /// Counter: write `read + 1` (conditional on `read` for the database guard).
    Counter { read: i64 },
    /// Orders: create the order for `request` (nobody had yet when we looked).
    CreateOrder { request: String },
    /// Inventory: sell one unit, writing `read - 1`.
    Sell { read: i64 },
    /// State machine: move `order` from `from` to `to`.
    Transition {
        order: i64,
        from: String,
        to: String,
    },
    /// Inbox: apply `message` (it was not applied yet when we looked).
    Apply { message: String },
    /// Nothing to write (already done, or a final state).
    Skip,
}

/// What the resource did with a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Outcome {
    /// Committed.
    Accepted,
    /// Refused: the fence presented was older than one the resource already accepted.
    Stale,
    /// Refused by a database guard (unique key, conditional update, state check, inbox).
    Guarded,
    /// Nothing to write.
    Skipped,
}

/// The legal transitions of the order state machine.
pub(crate) const TRANSITIONS: &[(&str, &str)] = &[
    ("created", "paid"),
    ("paid", "shipped"),
    ("shipped", "delivered"),
];

fn next_state(from: &str) -> Option<&'static str> {
    TRANSITIONS
        .iter()
        .find(|(f, _)| *f == from)
        .map(|(_, t)| *t)
}

/// A connection pool to the resource plus the names of this cell's tables.
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pool: AnyPool,
    dialect: Dialect,
    /// Prefix of every table of this cell (`schema.` on PostgreSQL, `cN_` on SQLite).
    prefix: String,
}

impl Resource {
    /// Connects to `url`; `prefix` names this cell's tables.
    pub(crate) async fn connect(url: &str, prefix: &str, max: u32) -> anyhow::Result<Self> {
        sqlx::any::install_default_drivers();
        let dialect = Dialect::of(url)?;
        let url = match dialect {
            Dialect::Sqlite if !url.contains('?') => format!("{url}?mode=rwc"),
            _ => url.to_owned(),
        };
        let pool = AnyPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(30))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if dialect == Dialect::Sqlite {
                        conn.execute("PRAGMA busy_timeout = 30000").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                    }
                    Ok(())
                })
            })
            .connect(&url)
            .await
            .with_context(|| format!("cannot connect to the database {url:?}"))?;
        Ok(Self {
            pool,
            dialect,
            prefix: prefix.to_owned(),
        })
    }

    pub(crate) fn t(&self, table: &str) -> String {
        format!("{}{table}", self.prefix)
    }

    /// A name usable for triggers, functions and indexes (no schema dot).
    fn tag(&self, name: &str) -> String {
        format!("{}{name}", self.prefix.replace('.', "_"))
    }

    /// Creates this cell's tables, triggers and (for the database-guard strategy) constraints.
    pub(crate) async fn setup(&self, workload: Workload, strategy: Strategy) -> anyhow::Result<()> {
        let d = self.dialect;
        let mut ddl: Vec<String> = Vec::new();
        if d == Dialect::Sqlite {
            ddl.push("PRAGMA journal_mode = WAL".into());
        } else if let Some((schema, _)) = self.prefix.split_once('.') {
            ddl.push(format!("CREATE SCHEMA IF NOT EXISTS {schema}"));
        }
        ddl.push(format!(
            "CREATE TABLE {} (seq {}, at_ms BIGINT NOT NULL, item TEXT NOT NULL, old_val TEXT, new_val TEXT, writer BIGINT NOT NULL, fence BIGINT NOT NULL)",
            self.t("history"),
            d.serial()
        ));
        let guards = strategy.guarded();
        let (table, event, item, old, new) = match workload {
            Workload::Counter => {
                ddl.push(format!("CREATE TABLE {} (id BIGINT PRIMARY KEY, value BIGINT NOT NULL, writer BIGINT NOT NULL DEFAULT 0, fence BIGINT NOT NULL DEFAULT 0)", self.t("counter")));
                ddl.push(format!(
                    "INSERT INTO {} (id, value) VALUES (1, 0)",
                    self.t("counter")
                ));
                (
                    "counter",
                    "UPDATE OF value",
                    "CAST(NEW.id AS TEXT)",
                    "CAST(OLD.value AS TEXT)",
                    "CAST(NEW.value AS TEXT)",
                )
            }
            Workload::Orders => {
                ddl.push(format!("CREATE TABLE {} (id {}, request_id TEXT NOT NULL, writer BIGINT NOT NULL, fence BIGINT NOT NULL)", self.t("orders"), d.serial()));
                if guards {
                    ddl.push(format!(
                        "CREATE UNIQUE INDEX {} ON {} (request_id)",
                        self.tag("uk_order_request"),
                        self.t("orders")
                    ));
                }
                ("orders", "INSERT", "NEW.request_id", "NULL", "'created'")
            }
            Workload::Inventory => {
                ddl.push(format!("CREATE TABLE {} (id BIGINT PRIMARY KEY, units BIGINT NOT NULL, writer BIGINT NOT NULL DEFAULT 0, fence BIGINT NOT NULL DEFAULT 0)", self.t("stock")));
                ddl.push(format!(
                    "INSERT INTO {} (id, units) VALUES (1, {INITIAL_STOCK})",
                    self.t("stock")
                ));
                (
                    "stock",
                    "UPDATE OF units",
                    "CAST(NEW.id AS TEXT)",
                    "CAST(OLD.units AS TEXT)",
                    "CAST(NEW.units AS TEXT)",
                )
            }
            Workload::Transitions => {
                ddl.push(format!("CREATE TABLE {} (id BIGINT PRIMARY KEY, state TEXT NOT NULL, writer BIGINT NOT NULL DEFAULT 0, fence BIGINT NOT NULL DEFAULT 0)", self.t("order_state")));
                (
                    "order_state",
                    "UPDATE OF state",
                    "CAST(NEW.id AS TEXT)",
                    "OLD.state",
                    "NEW.state",
                )
            }
            Workload::Messages => {
                ddl.push(format!(
                    "CREATE TABLE {} (id BIGINT PRIMARY KEY, balance BIGINT NOT NULL)",
                    self.t("account")
                ));
                ddl.push(format!(
                    "INSERT INTO {} (id, balance) VALUES (1, 0)",
                    self.t("account")
                ));
                ddl.push(format!("CREATE TABLE {} (id {}, message_id TEXT NOT NULL, writer BIGINT NOT NULL, fence BIGINT NOT NULL)", self.t("applied"), d.serial()));
                if guards {
                    ddl.push(format!(
                        "CREATE TABLE {} (message_id TEXT PRIMARY KEY)",
                        self.t("inbox")
                    ));
                }
                ("applied", "INSERT", "NEW.message_id", "NULL", "'applied'")
            }
        };
        let insert = format!(
            "INSERT INTO {} (at_ms, item, old_val, new_val, writer, fence) VALUES ({}, {item}, {old}, {new}, NEW.writer, NEW.fence)",
            self.t("history"),
            d.now_ms()
        );
        match d {
            Dialect::Sqlite => ddl.push(format!(
                "CREATE TRIGGER {} AFTER {event} ON {} BEGIN {insert}; END",
                self.tag("record"),
                self.t(table)
            )),
            Dialect::Postgres => {
                let func = format!("{}record_fn", self.prefix);
                ddl.push(format!(
                    "CREATE FUNCTION {func}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN {insert}; RETURN NEW; END $$"
                ));
                ddl.push(format!(
                    "CREATE TRIGGER record AFTER {event} ON {} FOR EACH ROW EXECUTE FUNCTION {func}()",
                    self.t(table)
                ));
            }
        }
        for statement in ddl {
            self.pool
                .execute(sqlx::AssertSqlSafe(statement.as_str()))
                .await
                .with_context(|| format!("setting up the resource: {statement}"))?;
        }
        Ok(())
    }

    /// Drops this cell's PostgreSQL schema (SQLite files are removed with their directory).
    pub(crate) async fn teardown(&self) -> anyhow::Result<()> {
        if self.dialect == Dialect::Postgres {
            if let Some((schema, _)) = self.prefix.split_once('.') {
                self.pool
                    .execute(sqlx::AssertSqlSafe(format!(
                        "DROP SCHEMA IF EXISTS {schema} CASCADE"
                    )))
                    .await?;
            }
        }
        self.pool.close().await;
        Ok(())
    }

    /// The history of accepted writes, in acceptance order.
    pub(crate) async fn history(&self) -> anyhow::Result<Vec<HistoryRow>> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT seq, at_ms, item, old_val, new_val, writer, fence FROM {} ORDER BY seq",
            self.t("history")
        )))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|r| {
                Ok(HistoryRow {
                    seq: r.try_get(0)?,
                    at_ms: r.try_get(1)?,
                    item: r.try_get(2)?,
                    old: r.try_get(3)?,
                    new: r.try_get(4)?,
                    writer: r.try_get(5)?,
                    fence: r.try_get(6)?,
                })
            })
            .collect::<Result<_, sqlx::Error>>()
            .map_err(Into::into)
    }

    /// The next item of a queue whose items are `<prefix>N` strings in `column` of `table`: one past
    /// the highest done so far. Items are only ever taken in this order, so every lower one is done.
    async fn next_item(&self, table: &str, column: &str, prefix: &str) -> anyhow::Result<String> {
        let next: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT COALESCE(MAX(CAST(SUBSTR({column}, {}) AS BIGINT)), -1) + 1 FROM {}",
            prefix.len() + 1,
            self.t(table)
        )))
        .fetch_one(&self.pool)
        .await?;
        Ok(format!("{prefix}{next}"))
    }

    /// Reads what the next operation of `workload` needs and decides what to write.
    ///
    /// Orders, messages and transitions work like a queue that redelivers until the work is done:
    /// every worker takes the oldest request with no order, the oldest message not applied, the
    /// oldest order not delivered. So whoever gets the lock after a holder stalls works on the very
    /// item the stalled holder read, however far ahead or behind the workers' own op counts are.
    pub(crate) async fn read(&self, workload: Workload) -> anyhow::Result<Plan> {
        Ok(match workload {
            Workload::Counter => {
                let read: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT value FROM {} WHERE id = 1",
                    self.t("counter")
                )))
                .fetch_one(&self.pool)
                .await?;
                Plan::Counter { read }
            }
            Workload::Orders => Plan::CreateOrder {
                request: self.next_item("orders", "request_id", "req-").await?,
            },
            Workload::Inventory => {
                let read: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT units FROM {} WHERE id = 1",
                    self.t("stock")
                )))
                .fetch_one(&self.pool)
                .await?;
                if read > 0 {
                    Plan::Sell { read }
                } else {
                    Plan::Skip
                }
            }
            Workload::Transitions => {
                let oldest: Option<(i64, String)> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT id, state FROM {} WHERE state <> 'delivered' ORDER BY id LIMIT 1",
                    self.t("order_state")
                )))
                .fetch_optional(&self.pool)
                .await?;
                let (order, from) = match oldest {
                    Some(found) => found,
                    None => {
                        // Every order is delivered: a new one arrives.
                        let order: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                            "SELECT COALESCE(MAX(id), -1) + 1 FROM {}",
                            self.t("order_state")
                        )))
                        .fetch_one(&self.pool)
                        .await?;
                        sqlx::query(sqlx::AssertSqlSafe(format!(
                            "INSERT INTO {} (id, state) VALUES ($1, 'created') ON CONFLICT (id) DO NOTHING",
                            self.t("order_state")
                        )))
                        .bind(order)
                        .execute(&self.pool)
                        .await?;
                        let from: String = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                            "SELECT state FROM {} WHERE id = $1",
                            self.t("order_state")
                        )))
                        .bind(order)
                        .fetch_one(&self.pool)
                        .await?;
                        (order, from)
                    }
                };
                match next_state(&from) {
                    Some(to) => Plan::Transition {
                        order,
                        from,
                        to: to.to_owned(),
                    },
                    None => Plan::Skip,
                }
            }
            Workload::Messages => Plan::Apply {
                message: self.next_item("applied", "message_id", "msg-").await?,
            },
        })
    }

    /// Writes `plan` as `strategy` does: plainly (the lock is trusted) or guarded by the database
    /// (conditional statements, unique keys, inbox). The fenced strategy writes through [`Fenced`].
    pub(crate) async fn write(
        &self,
        plan: &Plan,
        strategy: Strategy,
        writer: i64,
        fence: i64,
    ) -> anyhow::Result<Outcome> {
        if matches!(plan, Plan::Skip) {
            return Ok(Outcome::Skipped);
        }
        let guarded = strategy.guarded();
        let mut tx = self.pool.begin().await?;
        let applied = match plan {
            Plan::Counter { read } => {
                let cond = if guarded { " AND value = $4" } else { "" };
                let sql = format!(
                    "UPDATE {} SET value = $1, writer = $2, fence = $3 WHERE id = 1{cond}",
                    self.t("counter")
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                    .bind(read + 1)
                    .bind(writer)
                    .bind(fence);
                if guarded {
                    q = q.bind(*read);
                }
                q.execute(&mut *tx).await?.rows_affected() == 1
            }
            Plan::CreateOrder { request } => {
                let on_conflict = if guarded {
                    " ON CONFLICT (request_id) DO NOTHING"
                } else {
                    ""
                };
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO {} (request_id, writer, fence) VALUES ($1, $2, $3){on_conflict}",
                    self.t("orders")
                )))
                .bind(request)
                .bind(writer)
                .bind(fence)
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    == 1
            }
            Plan::Sell { read } => {
                let sql = if guarded {
                    format!("UPDATE {} SET units = units - 1, writer = $1, fence = $2 WHERE id = 1 AND units > 0", self.t("stock"))
                } else {
                    format!(
                        "UPDATE {} SET units = $3, writer = $1, fence = $2 WHERE id = 1",
                        self.t("stock")
                    )
                };
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                    .bind(writer)
                    .bind(fence);
                if !guarded {
                    q = q.bind(read - 1);
                }
                q.execute(&mut *tx).await?.rows_affected() == 1
            }
            Plan::Transition { order, from, to } => {
                let cond = if guarded { " AND state = $5" } else { "" };
                let sql = format!(
                    "UPDATE {} SET state = $1, writer = $2, fence = $3 WHERE id = $4{cond}",
                    self.t("order_state")
                );
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.as_str()))
                    .bind(to)
                    .bind(writer)
                    .bind(fence)
                    .bind(*order);
                if guarded {
                    q = q.bind(from);
                }
                q.execute(&mut *tx).await?.rows_affected() == 1
            }
            Plan::Apply { message } => self.apply(&mut tx, message, guarded, writer, fence).await?,
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

    /// The messages workload's write: apply `message` to the balance, once per message id when
    /// `guarded` (the inbox table), in `tx`. Whether it was applied.
    async fn apply(
        &self,
        tx: &mut sqlx::Transaction<'_, sqlx::Any>,
        message: &str,
        guarded: bool,
        writer: i64,
        fence: i64,
    ) -> anyhow::Result<bool> {
        let first = if guarded {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {} (message_id) VALUES ($1) ON CONFLICT (message_id) DO NOTHING",
                self.t("inbox")
            )))
            .bind(message)
            .execute(&mut **tx)
            .await?
            .rows_affected()
                == 1
        } else {
            true
        };
        if first {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "UPDATE {} SET balance = balance + 10 WHERE id = 1",
                self.t("account")
            )))
            .execute(&mut **tx)
            .await?;
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "INSERT INTO {} (message_id, writer, fence) VALUES ($1, $2, $3)",
                self.t("applied")
            )))
            .bind(message)
            .bind(writer)
            .bind(fence)
            .execute(&mut **tx)
            .await?;
        }
        Ok(first)
    }
}
