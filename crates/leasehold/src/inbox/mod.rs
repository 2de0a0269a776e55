//! Inbox deduplication: a message id is recorded in the same transaction as the business write, so a
//! redelivered message is recognised and skipped.
//!
//! Promise: for a consumer, a message's business writes commit at most once, and exactly once if it
//! is redelivered until one delivery commits (at-least-once delivery + this inbox = effectively once).
//! A consumer that crashes before commit records nothing, so the redelivery runs it. Limit: ordering is
//! not preserved, effects outside the transaction (e-mails, HTTP calls) are not deduplicated, and ids
//! are kept until you delete them (`DELETE FROM leasehold_inbox WHERE processed_at_ms < ...`).
//!
//! ```no_run
//! # async fn demo(db: leasehold::db::Database) -> leasehold::Result<()> {
//! use leasehold::inbox::{Delivery, Inbox};
//!
//! let inbox = Inbox::new("billing")?;
//! let mut tx = db.begin().await?;
//! if inbox.record(&mut tx, "msg-42").await? == Delivery::First {
//!     tx.execute("UPDATE accounts SET paid = paid + 1 WHERE id = $1", &["acct-1".into()]).await?;
//! }
//! tx.commit().await?; // then acknowledge the message to the broker
//! # Ok(()) }
//! ```

use futures::future::BoxFuture;

use crate::db::{check_key, missing_tables_hint, Database, Param, Tx};
use crate::Result;

/// Whether this delivery of a message is the first to be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Delivery {
    /// Not seen before: apply it in this transaction.
    First,
    /// Already applied by an earlier delivery: skip it (and acknowledge it).
    Duplicate,
}

/// The inbox of one consumer: message ids it has applied.
///
/// # Examples
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> leasehold::Result<()> {
/// use leasehold::db::Database;
/// use leasehold::inbox::Inbox;
///
/// let db = Database::connect("sqlite::memory:").await?;
/// db.migrate().await?;
/// let inbox = Inbox::new("billing")?;
/// // The message's effect is written in `_tx`, in the same transaction as its id.
/// let first = inbox.process(&db, "msg-1", |_tx| Box::pin(async { Ok(1) })).await?;
/// let redelivered = inbox.process(&db, "msg-1", |_tx| Box::pin(async { Ok(1) })).await?;
/// assert_eq!((first, redelivered), (Some(1), None));
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Inbox {
    /// Who consumes; the same message id may be applied once per consumer.
    consumer: String,
}

impl Inbox {
    /// An inbox for `consumer` (1..=255 bytes).
    pub fn new(consumer: &str) -> crate::Result<Self> {
        check_key("inbox consumer", consumer)?;
        Ok(Inbox {
            consumer: consumer.to_owned(),
        })
    }

    /// The consumer name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// Records `message_id` in `tx`. [`Delivery::First`]: apply the message in `tx` and commit.
    /// [`Delivery::Duplicate`]: an earlier delivery committed; skip. If another delivery of the same
    /// message is in flight, this waits for it (PostgreSQL row lock, SQLite write lock) and then
    /// answers by its outcome.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe for `tx`: dropped before the database answered, the message may or may not
    /// be recorded in the transaction; drop `tx` too (it rolls back, undoing it). Nothing is committed
    /// by this call.
    pub async fn record(&self, tx: &mut Tx, message_id: &str) -> Result<Delivery> {
        check_key("message id", message_id)?;
        let now = tx.now_ms().await?;
        let (insert, if_absent) = tx.dialect().insert_ignore;
        let inserted = tx
            .execute(
                // The dialect's own keywords; values are bound.
                sqlx::AssertSqlSafe(format!(
                    "{insert} leasehold_inbox (consumer, message_id, processed_at_ms) \
                     VALUES ($1, $2, $3){if_absent}"
                )),
                &[
                    Param::Text(&self.consumer),
                    Param::Text(message_id),
                    Param::I64(now),
                ],
            )
            .await
            .map_err(missing_tables_hint)?;
        crate::db::metrics::inbox(inserted != 1);
        Ok(if inserted == 1 {
            Delivery::First
        } else {
            Delivery::Duplicate
        })
    }

    /// Begins a transaction, records the message, runs `apply` in it if this is the first delivery,
    /// and commits. Returns `Some(result)` when applied, `None` for a duplicate. If `apply` fails,
    /// nothing is recorded and the error is returned (the redelivery will run it again).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe until the commit: dropped before it, the transaction rolls back, so neither the
    /// message nor `apply`'s writes are recorded and the redelivery runs it again. Dropped while the
    /// commit is in flight, both or neither were committed (see [`Tx::commit`]).
    pub async fn process<T, F>(
        &self,
        db: &Database,
        message_id: &str,
        apply: F,
    ) -> Result<Option<T>>
    where
        F: for<'t> FnOnce(&'t mut Tx) -> BoxFuture<'t, Result<T>> + Send,
        T: Send,
    {
        check_key("message id", message_id)?;
        let mut tx = db.begin().await?;
        match self.record(&mut tx, message_id).await? {
            Delivery::Duplicate => {
                tx.commit().await?;
                Ok(None)
            }
            Delivery::First => {
                let out = apply(&mut tx).await?;
                tx.commit().await?;
                Ok(Some(out))
            }
        }
    }
}
