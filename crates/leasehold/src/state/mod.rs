//! Conditional updates and state machines: rules the database enforces in one statement.
//!
//! Promise: a [`StateMachine`] transition happens only if it is in the declared table *and* the row is
//! still in the expected state (and version) at the moment of the `UPDATE ... WHERE state = $from`;
//! a [`Stock`] quantity never goes below zero, and each successful decrement writes a reservation
//! record in the same transaction. Both work on your own tables, whose names are checked to be plain
//! identifiers; values are always bound, never formatted into SQL. Limit: only rules you declared are
//! enforced, and only for writes that go through these calls (a raw `UPDATE` elsewhere bypasses them;
//! a `CHECK (quantity >= 0)` constraint on your table is a good second line).
//!
//! ```no_run
//! # async fn demo(db: leasehold::db::Database) -> leasehold::Result<()> {
//! use leasehold::db::Param;
//! use leasehold::state::{StateMachine, Stock};
//!
//! let orders = StateMachine::builder("orders")
//!     .transition("created", "paid")
//!     .transition("paid", "shipped")
//!     .transition("created", "cancelled")
//!     .build()?;
//! let stock = Stock::new("sku", "id", "stock")?;
//!
//! let mut tx = db.begin().await?;
//! stock.reserve(&mut tx, Param::I64(7), 1, Some("order-42")).await?; // Err(Insufficient) at zero
//! orders.transition(&mut tx, Param::Text("order-42"), "created", "paid").await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```

use std::collections::BTreeSet;

use crate::db::{check_identifier, check_key, Param, Tx};
use crate::{Error, Result};

/// A declared transition table over a state column of your own table.
#[derive(Debug, Clone)]
pub struct StateMachine {
    /// Your table (validated identifier).
    table: String,
    /// Its key column.
    id_column: String,
    /// The column holding the state as text.
    state_column: String,
    /// Optional optimistic version column (`BIGINT`), incremented by every transition.
    version_column: Option<String>,
    /// Allowed `(from, to)` pairs.
    transitions: BTreeSet<(String, String)>,
}

/// Builder for [`StateMachine`]; `build()` validates every name.
#[derive(Debug, Clone)]
#[must_use = "call .build() to get the state machine"]
pub struct StateMachineBuilder {
    /// See [`StateMachine`].
    table: String,
    /// Default `id`.
    id_column: String,
    /// Default `state`.
    state_column: String,
    /// Default none.
    version_column: Option<String>,
    /// In declaration order, validated in `build()`.
    transitions: Vec<(String, String)>,
}

impl StateMachineBuilder {
    /// The key column (default `id`).
    pub fn id_column(mut self, column: &str) -> Self {
        self.id_column = column.to_owned();
        self
    }

    /// The state column (default `state`), holding the state as text.
    pub fn state_column(mut self, column: &str) -> Self {
        self.state_column = column.to_owned();
        self
    }

    /// An optimistic version column (`BIGINT`), incremented by every transition and checked by
    /// [`StateMachine::transition_versioned`].
    pub fn version_column(mut self, column: &str) -> Self {
        self.version_column = Some(column.to_owned());
        self
    }

    /// Allows `from -> to`.
    pub fn transition(mut self, from: &str, to: &str) -> Self {
        self.transitions.push((from.to_owned(), to.to_owned()));
        self
    }

    /// Validates identifiers (`[A-Za-z_][A-Za-z0-9_]*`) and states (1..=255 bytes).
    pub fn build(self) -> Result<StateMachine> {
        check_identifier("state machine table", &self.table)?;
        check_identifier("state machine id column", &self.id_column)?;
        check_identifier("state machine state column", &self.state_column)?;
        if let Some(v) = &self.version_column {
            check_identifier("state machine version column", v)?;
        }
        if self.transitions.is_empty() {
            return Err(Error::invalid(
                "state machine",
                "declare at least one transition with .transition(from, to)",
            ));
        }
        for (from, to) in &self.transitions {
            check_key("state name", from)?;
            check_key("state name", to)?;
        }
        Ok(StateMachine {
            table: self.table,
            id_column: self.id_column,
            state_column: self.state_column,
            version_column: self.version_column,
            transitions: self.transitions.into_iter().collect(),
        })
    }
}

impl StateMachine {
    /// Starts declaring a state machine over `table`.
    pub fn builder(table: &str) -> StateMachineBuilder {
        StateMachineBuilder {
            table: table.to_owned(),
            id_column: "id".to_owned(),
            state_column: "state".to_owned(),
            version_column: None,
            transitions: Vec::new(),
        }
    }

    /// Whether `from -> to` is declared.
    pub fn allows(&self, from: &str, to: &str) -> bool {
        self.transitions.contains(&(from.to_owned(), to.to_owned()))
    }

    /// Moves row `id` from `from` to `to` in one conditional `UPDATE`. Errors:
    /// [`Error::IllegalTransition`] (not declared; nothing is sent to the database),
    /// [`Error::NotFound`] (no such row), [`Error::TransitionRace`] (the row is no longer in `from`;
    /// `actual` tells where it is).
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe for `tx`: dropped before the database answered, the statement may or may not
    /// have run inside the transaction; drop `tx` too (it rolls back, undoing it). Nothing is committed
    /// by this call.
    pub async fn transition(&self, tx: &mut Tx, id: Param<'_>, from: &str, to: &str) -> Result<()> {
        self.apply(tx, id, from, to, None).await.map(|_| ())
    }

    /// Like [`StateMachine::transition`], and also requires the version column to hold
    /// `expected_version`; returns the new version. A version mismatch is
    /// [`Error::TransitionRace`] naming the versions.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe for `tx`: dropped before the database answered, the statement may or may not
    /// have run inside the transaction; drop `tx` too (it rolls back, undoing it). Nothing is committed
    /// by this call.
    pub async fn transition_versioned(
        &self,
        tx: &mut Tx,
        id: Param<'_>,
        from: &str,
        to: &str,
        expected_version: i64,
    ) -> Result<i64> {
        if self.version_column.is_none() {
            return Err(Error::invalid(
                "state machine",
                "transition_versioned needs .version_column(...) in the builder",
            ));
        }
        self.apply(tx, id, from, to, Some(expected_version))
            .await
            .map(|v| v.unwrap_or(expected_version + 1))
    }

    async fn apply(
        &self,
        tx: &mut Tx,
        id: Param<'_>,
        from: &str,
        to: &str,
        expected_version: Option<i64>,
    ) -> Result<Option<i64>> {
        if !self.allows(from, to) {
            return Err(Error::IllegalTransition {
                from: from.to_owned(),
                to: to.to_owned(),
            });
        }
        let (t, idc, sc) = (&self.table, &self.id_column, &self.state_column);
        // The identifiers in the SQL below were checked when the machine was built
        // (`check_identifier`); values are bound.
        let affected = match (&self.version_column, expected_version) {
            (Some(vc), Some(v)) => tx
                .update_returning_i64(
                    &format!(
                        "UPDATE {t} SET {sc} = $1, {vc} = {vc} + 1 \
                         WHERE {idc} = $2 AND {sc} = $3 AND {vc} = $4"
                    ),
                    vc,
                    &format!("SELECT {vc} FROM {t} WHERE {idc} = $2"),
                    &[Param::Text(to), id, Param::Text(from), Param::I64(v)],
                )
                .await?
                .map(Some),
            (Some(vc), None) => tx
                .update_returning_i64(
                    &format!(
                        "UPDATE {t} SET {sc} = $1, {vc} = {vc} + 1 WHERE {idc} = $2 AND {sc} = $3"
                    ),
                    vc,
                    &format!("SELECT {vc} FROM {t} WHERE {idc} = $2"),
                    &[Param::Text(to), id, Param::Text(from)],
                )
                .await?
                .map(Some),
            (None, _) => {
                let n = tx
                    .execute(
                        sqlx::AssertSqlSafe(format!(
                            "UPDATE {t} SET {sc} = $1 WHERE {idc} = $2 AND {sc} = $3"
                        )),
                        &[Param::Text(to), id, Param::Text(from)],
                    )
                    .await?;
                (n == 1).then_some(None)
            }
        };
        match affected {
            Some(version) => Ok(version),
            None => Err(self.why_not(tx, id, from, expected_version).await?),
        }
    }

    /// Nothing matched the transition's `UPDATE`: finds out why, for a precise error.
    async fn why_not(
        &self,
        tx: &mut Tx,
        id: Param<'_>,
        from: &str,
        expected_version: Option<i64>,
    ) -> Result<Error> {
        let (t, idc, sc) = (&self.table, &self.id_column, &self.state_column);
        let version_sql = self
            .version_column
            .as_deref()
            .map(|vc| format!(", {vc}"))
            .unwrap_or_default();
        let sql = format!("SELECT {sc}{version_sql} FROM {t} WHERE {idc} = $1");
        // Checked identifiers (`check_identifier`), the id bound.
        let sql = tx.dialect().sql(sql);
        let row: Option<(String, Option<i64>)> = crate::with_conn!(tx, |c| {
            let q = id.bind(sqlx::query(sql));
            match q.fetch_optional(c).await {
                Ok(Some(r)) => {
                    use sqlx::Row;
                    let state: String = r.try_get(0)?;
                    let version: Option<i64> = if self.version_column.is_some() {
                        r.try_get(1)?
                    } else {
                        None
                    };
                    Ok(Some((state, version)))
                }
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            }
        })?;
        let id_text = param_text(id);
        Ok(match row {
            None => Error::NotFound {
                entity: "row",
                id: format!("{t}.{idc} = {id_text}"),
            },
            Some((state, _)) if state != from => Error::TransitionRace {
                entity: "row",
                id: format!("{t}.{idc} = {id_text}"),
                expected: format!("state {from}"),
                actual: format!("state {state}"),
            },
            Some((_, version)) => Error::TransitionRace {
                entity: "row",
                id: format!("{t}.{idc} = {id_text}"),
                expected: format!("version {}", expected_version.unwrap_or_default()),
                actual: format!(
                    "version {}",
                    version.map(|v| v.to_string()).unwrap_or_default()
                ),
            },
        })
    }
}

fn param_text(p: Param<'_>) -> String {
    match p {
        Param::I64(v) => v.to_string(),
        Param::F64(v) => v.to_string(),
        Param::Text(v) => v.to_owned(),
        Param::Bytes(v) => hex::encode(v),
        Param::Bool(v) => v.to_string(),
        Param::Null => "NULL".to_owned(),
    }
}

/// A bounded quantity column of your own table (inventory, seats, credits): decrements that never go
/// below zero, each with a reservation record in `leasehold_reservations` in the same transaction.
#[derive(Debug, Clone)]
pub struct Stock {
    /// Your table (validated identifier).
    table: String,
    /// Its key column.
    id_column: String,
    /// The `BIGINT` quantity column.
    quantity_column: String,
}

/// A successful decrement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Reservation {
    /// Id of the `leasehold_reservations` row written with it.
    pub id: i64,
    /// Quantity left after the decrement.
    pub remaining: i64,
}

impl Stock {
    /// A bounded quantity at `table.quantity_column`, rows keyed by `id_column`.
    pub fn new(table: &str, id_column: &str, quantity_column: &str) -> Result<Self> {
        check_identifier("stock table", table)?;
        check_identifier("stock id column", id_column)?;
        check_identifier("stock quantity column", quantity_column)?;
        Ok(Stock {
            table: table.to_owned(),
            id_column: id_column.to_owned(),
            quantity_column: quantity_column.to_owned(),
        })
    }

    /// Takes `quantity` (> 0) from item `id` in one conditional `UPDATE ... WHERE qty >= $n`, and records
    /// a reservation (with an optional `reference`, e.g. the order id) in the same transaction.
    /// Errors: [`Error::Insufficient`] (nothing taken), [`Error::NotFound`], [`Error::Invalid`] for a
    /// zero or negative quantity.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe for `tx`: dropped before the database answered, the update and its reservation may or may not
    /// have run inside the transaction; drop `tx` too (it rolls back, undoing it). Nothing is committed
    /// by this call.
    pub async fn reserve(
        &self,
        tx: &mut Tx,
        id: Param<'_>,
        quantity: i64,
        reference: Option<&str>,
    ) -> Result<Reservation> {
        if quantity <= 0 {
            return Err(Error::invalid(
                "quantity",
                format!("{quantity} must be at least 1; to give stock back, update your table"),
            ));
        }
        if let Some(r) = reference {
            check_key("reservation reference", r)?;
        }
        let (t, idc, qc) = (&self.table, &self.id_column, &self.quantity_column);
        let remaining = tx
            .update_returning_i64(
                &format!("UPDATE {t} SET {qc} = {qc} - $1 WHERE {idc} = $2 AND {qc} >= $1"),
                qc,
                &format!("SELECT {qc} FROM {t} WHERE {idc} = $2"),
                &[Param::I64(quantity), id],
            )
            .await?;
        let id_text = param_text(id);
        let Some(remaining) = remaining else {
            let available_sql = format!("SELECT {qc} FROM {t} WHERE {idc} = $1");
            // Checked identifiers (`check_identifier`), the id bound.
            let available_sql = tx.dialect().sql(available_sql);
            let available = crate::with_conn!(tx, |c| {
                id.bind(sqlx::query(available_sql))
                    .fetch_optional(c)
                    .await
                    .and_then(|row| {
                        use sqlx::Row;
                        row.map(|r| r.try_get::<i64, _>(0)).transpose()
                    })
            })?;
            return Err(match available {
                None => Error::NotFound {
                    entity: "item",
                    id: format!("{t}.{idc} = {id_text}"),
                },
                Some(available) => Error::Insufficient {
                    id: id_text,
                    requested: quantity,
                    available,
                },
            });
        };
        let now = tx.now_ms().await?;
        let reservation = tx
            .insert_returning_id(
                "INSERT INTO leasehold_reservations \
                 (item_table, item_id, quantity, reference, created_at_ms) \
                 VALUES ($1, $2, $3, $4, $5)",
                &[
                    Param::Text(t),
                    Param::Text(&id_text),
                    Param::I64(quantity),
                    reference.map(Param::Text).unwrap_or(Param::Null),
                    Param::I64(now),
                ],
            )
            .await?;
        Ok(Reservation {
            id: reservation,
            remaining,
        })
    }
}
