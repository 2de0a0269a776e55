//! Idempotency keys: a request carrying the same key takes effect once, and its retries get the stored
//! response back.
//!
//! Promise (the semantics of Stripe's idempotency keys and of the IETF `Idempotency-Key` draft): keys
//! are scoped by caller and bound to a fingerprint (SHA-256) of the request. The first attempt claims
//! the key, then runs the work in the same transaction that stores the response and completes the key,
//! so the work's writes and the stored response commit together or not at all. A retry with the same
//! key and request gets the stored response back byte for byte, without running the work. The same key
//! with another request is [`Error::IdempotencyKeyReused`] (422); a retry while the first attempt still
//! runs is [`Error::IdempotencyInProgress`] (409). An attempt abandoned past the lock timeout (its
//! process crashed) is taken over by the next retry, and a slow former owner can then no longer
//! complete the key. Keys expire after a retention period; [`IdempotencyStore::purge`] deletes them.
//!
//! Limit: only writes made through the [`Tx`] handed to the work are exactly-once. An external call made
//! inside the work may happen again on a retry; hand it [`Attempt::derived_key`] so that the other side
//! can deduplicate too, and split multi-step work into [`Attempt::step`]s (recovery points).
//!
//! ```no_run
//! # async fn demo(db: leasehold::db::Database) -> leasehold::Result<()> {
//! use leasehold::idempotency::IdempotencyStore;
//!
//! let store = IdempotencyStore::new(db);
//! let response = store
//!     .run("customer-7", "key-from-the-client", b"POST /orders {sku: 1}", |tx| {
//!         Box::pin(async move {
//!             tx.execute("INSERT INTO orders (sku) VALUES ($1)", &[1_i64.into()]).await?;
//!             Ok(b"{\"order\": \"created\"}".to_vec())
//!         })
//!     })
//!     .await?;
//! println!("replayed: {}", response.replayed);
//! # Ok(()) }
//! ```

use std::time::Duration;

use futures::future::BoxFuture;
use sha2::{Digest, Sha256};

use crate::db::{
    check_key, deadlock_backoff, is_deadlock, missing_tables_hint, Database, Param, Tx,
    DEADLOCK_RETRIES,
};
use crate::{Error, Result};

/// The response of an idempotent request.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Response {
    /// The bytes the work returned the first time.
    pub body: Vec<u8>,
    /// `true` when this call did not run the work but replayed the stored response.
    pub replayed: bool,
}

/// Where idempotency keys live, and the two times that govern them.
///
/// # Examples
///
/// ```
/// # #[tokio::main]
/// # async fn main() -> leasehold::Result<()> {
/// use leasehold::db::Database;
/// use leasehold::idempotency::IdempotencyStore;
///
/// let db = Database::connect("sqlite::memory:").await?;
/// db.migrate().await?;
/// let store = IdempotencyStore::new(db);
/// let first = store
///     .run("client-a", "order-1", b"POST /orders", |_tx| {
///         // The work's writes go in `_tx`, committed with the stored response.
///         Box::pin(async { Ok(b"order 17 created".to_vec()) })
///     })
///     .await?;
/// // The retry of the same request replays the response without running the work.
/// let retry = store
///     .run("client-a", "order-1", b"POST /orders", |_tx| {
///         Box::pin(async { unreachable!("not run twice") })
///     })
///     .await?;
/// assert!(!first.replayed && retry.replayed);
/// assert_eq!(retry.body, first.body);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct IdempotencyStore {
    /// The database holding `leasehold_idempotency_keys`.
    db: Database,
    /// How long an attempt owns its key without finishing a step; past it, a retry takes over (the
    /// attempt is presumed crashed). Must exceed the longest step.
    lock_timeout: Duration,
    /// How long completed keys are kept (and replayed); after it, the key may be reused and
    /// [`IdempotencyStore::purge`] deletes it.
    retention: Duration,
}

/// What [`IdempotencyStore::begin`] found.
#[derive(Debug)]
#[must_use = "a fresh attempt owns the key until it finishes or its lock times out"]
pub enum Begun {
    /// The key was completed before: here is the stored response; do not run the work.
    Replay(Vec<u8>),
    /// This call owns the key now: run the steps (those completed by an earlier attempt are skipped)
    /// and finish.
    Run(Attempt),
}

/// An attempt that owns an idempotency key: runs recovery-point steps, then finishes.
#[derive(Debug)]
#[must_use = "finish the attempt, or it holds the key until the lock timeout"]
pub struct Attempt {
    /// Where the key lives.
    store: IdempotencyStore,
    /// Caller scope.
    scope: String,
    /// The key.
    key: String,
    /// Random id of this attempt; a takeover replaces it, which fences this attempt out.
    owner: String,
    /// The last step an earlier attempt completed; steps up to and including it are skipped.
    resume_after: Option<String>,
}

/// Validated key and fingerprint.
struct KeyArgs<'a> {
    scope: &'a str,
    key: &'a str,
    fingerprint: String,
}

/// The row of a key, locked until commit (a locking read: the last committed version).
async fn read_key(tx: &mut Tx, args: &KeyArgs<'_>) -> Result<Option<KeyRow>> {
    let select = format!(
        "SELECT fingerprint, locked_until_ms, recovery_point, response, created_at_ms \
         FROM leasehold_idempotency_keys WHERE scope = $1 AND idempotency_key = $2{}",
        tx.dialect().for_update
    );
    // The dialect's own keywords; values are bound.
    let select = tx.dialect().sql(select);
    let row = crate::with_conn!(tx, |c| {
        sqlx::query_as(select)
            .bind(args.scope)
            .bind(args.key)
            .fetch_optional(c)
            .await
    })
    .map_err(|e| missing_tables_hint(e.into()))?;
    Ok(row)
}

/// What the row of a key that was taken says to do.
enum Found {
    /// Past retention: the key was reset for this request, which runs from the start.
    Restart,
    /// Completed with the same request: replay this response.
    Replay(Vec<u8>),
    /// Abandoned (its lock timed out): this attempt owns it now, resuming after this step.
    TakeOver(Option<String>),
}

/// The row of a key, as read when the insert found it taken.
type KeyRow = (String, Option<i64>, String, Option<Vec<u8>>, i64);

impl IdempotencyStore {
    /// A store with a 60 s lock timeout and 24 h retention (Stripe's).
    pub fn new(db: Database) -> Self {
        IdempotencyStore {
            db,
            lock_timeout: Duration::from_secs(60),
            retention: Duration::from_secs(24 * 3600),
        }
    }

    /// How long an unfinished attempt owns its key before a retry may take over.
    #[must_use]
    pub fn lock_timeout(mut self, timeout: Duration) -> Self {
        self.lock_timeout = timeout;
        self
    }

    /// How long completed keys are kept.
    #[must_use]
    pub fn retention(mut self, retention: Duration) -> Self {
        self.retention = retention;
        self
    }

    fn validate<'a>(&self, scope: &'a str, key: &'a str, request: &[u8]) -> Result<KeyArgs<'a>> {
        check_key("idempotency scope", scope)?;
        check_key("idempotency key", key)?;
        if self.lock_timeout.is_zero() {
            return Err(Error::invalid(
                "idempotency lock timeout",
                "must be longer than zero (longer than the slowest step)",
            ));
        }
        Ok(KeyArgs {
            scope,
            key,
            fingerprint: hex::encode(Sha256::digest(request)),
        })
    }

    /// One-step idempotent work: claims the key, runs `work` in the transaction that stores its
    /// response, commits. Returns the stored response without running `work` when the key was
    /// completed before with the same request.
    ///
    /// If `work` fails, its transaction rolls back, the key is released at once, and the error is
    /// returned; a retry runs the work again.
    ///
    /// # Cancel safety
    ///
    /// As [`begin`](Self::begin) then [`Attempt::finish`]: dropped while `work` runs, its transaction
    /// rolls back and the key stays claimed by this attempt until the lock timeout, after which a retry
    /// takes it over; dropped while the final commit is in flight, the response may or may not be
    /// stored.
    pub async fn run<F>(&self, scope: &str, key: &str, request: &[u8], work: F) -> Result<Response>
    where
        F: for<'t> FnOnce(&'t mut Tx) -> BoxFuture<'t, Result<Vec<u8>>> + Send,
    {
        match self.begin(scope, key, request).await? {
            Begun::Replay(body) => Ok(Response {
                body,
                replayed: true,
            }),
            Begun::Run(attempt) => {
                let body = attempt.finish(work).await?;
                Ok(Response {
                    body,
                    replayed: false,
                })
            }
        }
    }

    /// Claims `key` in `scope` for this `request` (in its own short transaction), or says the stored
    /// response should be replayed.
    ///
    /// Errors: [`Error::IdempotencyKeyReused`] if the key was used with another request,
    /// [`Error::IdempotencyInProgress`] if another attempt owns it and its lock has not timed out,
    /// [`Error::Invalid`] for an empty key or scope or one over 255 bytes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe until its transaction commits: dropped before, nothing is claimed. Dropped while
    /// the commit is in flight, the key may be claimed by an attempt nobody holds: a retry gets
    /// [`Error::IdempotencyInProgress`] until the lock timeout, then takes the key over.
    pub async fn begin(&self, scope: &str, key: &str, request: &[u8]) -> Result<Begun> {
        let args = self.validate(scope, key, request)?;
        let mut attempt = 0;
        loop {
            match self.claim(&args).await {
                // Concurrent first attempts of one key can deadlock on InnoDB (each insert's shared
                // lock on the other's new row); the loser was rolled back whole and asks again.
                Err(e) if is_deadlock(&e) && attempt < DEADLOCK_RETRIES => {
                    attempt += 1;
                    deadlock_backoff(attempt).await;
                }
                other => return other,
            }
        }
    }

    /// One try of [`IdempotencyStore::begin`], in one short transaction.
    async fn claim(&self, args: &KeyArgs<'_>) -> Result<Begun> {
        let owner = hex::encode(rand::random::<[u8; 16]>());
        let lock_ms = millis(self.lock_timeout);

        let mut claim = "fresh";
        let mut tx = self.db.begin().await?;
        let now = tx.now_ms().await?;
        // InnoDB: lock an existing row exclusively first; an insert that finds the key taken would
        // take a shared lock, and two of them upgrading to the locking read deadlock.
        let found = if tx.dialect().lock_before_insert {
            read_key(&mut tx, args).await?
        } else {
            None
        };
        let (insert, if_absent) = tx.dialect().insert_ignore;
        let inserted = if found.is_some() {
            0
        } else {
            tx.execute(
                // The dialect's own keywords; values are bound.
                sqlx::AssertSqlSafe(format!(
                    "{insert} leasehold_idempotency_keys (scope, idempotency_key, fingerprint, \
                     locked_until_ms, recovery_point, created_at_ms, owner) \
                     VALUES ($1, $2, $3, $4, '', $5, $6){if_absent}"
                )),
                &[
                    args.scope.into(),
                    args.key.into(),
                    Param::Text(&args.fingerprint),
                    Param::I64(now.saturating_add(lock_ms)),
                    Param::I64(now),
                    Param::Text(&owner),
                ],
            )
            .await
            .map_err(missing_tables_hint)?
        };
        let resume_after = if inserted == 1 {
            None
        } else {
            match self.found_taken(&mut tx, args, &owner, now, found).await? {
                Found::Restart => None,
                Found::Replay(body) => {
                    crate::db::metrics::idempotency("replayed");
                    tx.commit().await?;
                    return Ok(Begun::Replay(body));
                }
                Found::TakeOver(recovery_point) => {
                    claim = "taken_over";
                    recovery_point
                }
            }
        };
        tx.commit().await?;
        crate::db::metrics::idempotency(claim);
        Ok(Begun::Run(Attempt {
            store: self.clone(),
            scope: args.scope.to_owned(),
            key: args.key.to_owned(),
            owner,
            resume_after,
        }))
    }

    /// The key was taken when we tried to insert it: decides, from its row (locked until commit),
    /// whether this request starts over (the key is past retention), replays, is refused, or takes
    /// over an abandoned attempt.
    async fn found_taken(
        &self,
        tx: &mut Tx,
        args: &KeyArgs<'_>,
        owner: &str,
        now: i64,
        row: Option<KeyRow>,
    ) -> Result<Found> {
        let lock_ms = millis(self.lock_timeout);
        let retention_ms = millis(self.retention);
        let row = match row {
            Some(row) => Some(row),
            None => read_key(tx, args).await?,
        };
        let Some((fingerprint, locked_until, recovery_point, response, created_at)) = row else {
            // Purged between our insert and our read; the caller may simply retry.
            return Err(Error::IdempotencyInProgress {
                key: args.key.to_owned(),
            });
        };
        let expired = created_at < now.saturating_sub(retention_ms);
        let done = response.is_some();
        if expired && (done || locked_until.unwrap_or(0) <= now) {
            // Past retention: the key is free again; start over as a new request.
            tx.execute(
                "UPDATE leasehold_idempotency_keys SET fingerprint = $3, locked_until_ms = $4, \
                 recovery_point = '', response = NULL, created_at_ms = $5, completed_at_ms = NULL, \
                 owner = $6 WHERE scope = $1 AND idempotency_key = $2",
                &[
                    args.scope.into(),
                    args.key.into(),
                    Param::Text(&args.fingerprint),
                    Param::I64(now.saturating_add(lock_ms)),
                    Param::I64(now),
                    Param::Text(owner),
                ],
            )
            .await?;
            Ok(Found::Restart)
        } else if fingerprint != args.fingerprint {
            crate::db::metrics::idempotency("reused");
            Err(Error::IdempotencyKeyReused {
                key: args.key.to_owned(),
            })
        } else if let Some(body) = response {
            Ok(Found::Replay(body))
        } else if locked_until.unwrap_or(0) > now {
            crate::db::metrics::idempotency("in_progress");
            Err(Error::IdempotencyInProgress {
                key: args.key.to_owned(),
            })
        } else {
            // Abandoned: take over, resuming after the last completed step.
            tx.execute(
                "UPDATE leasehold_idempotency_keys SET locked_until_ms = $3, owner = $4 \
                 WHERE scope = $1 AND idempotency_key = $2",
                &[
                    args.scope.into(),
                    args.key.into(),
                    Param::I64(now.saturating_add(lock_ms)),
                    Param::Text(owner),
                ],
            )
            .await?;
            tracing::info!(scope = args.scope, key = args.key, %recovery_point, "taking over an abandoned idempotency key");
            Ok(Found::TakeOver(
                (!recovery_point.is_empty()).then_some(recovery_point),
            ))
        }
    }

    /// Deletes keys older than the retention (completed ones, and abandoned ones whose lock has
    /// expired); returns how many. Keys still owned by a running attempt are kept.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before its commit, nothing is deleted; during it, the keys may or may not
    /// be deleted (a later purge deletes them).
    pub async fn purge(&self) -> Result<u64> {
        let mut tx = self.db.begin().await?;
        let now = tx.now_ms().await?;
        let n = tx
            .execute(
                "DELETE FROM leasehold_idempotency_keys WHERE created_at_ms < $1 \
                 AND (response IS NOT NULL OR locked_until_ms IS NULL OR locked_until_ms <= $2)",
                &[
                    Param::I64(now.saturating_sub(millis(self.retention))),
                    Param::I64(now),
                ],
            )
            .await?;
        tx.commit().await?;
        Ok(n)
    }
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Attempt {
    /// The last step an earlier (abandoned) attempt completed, if this attempt took one over.
    pub fn resumed_after(&self) -> Option<&str> {
        self.resume_after.as_deref()
    }

    /// A key for an external call made in `step`: the same for every attempt of this idempotency key
    /// (hex SHA-256 of scope, key and step), different for every step. Pass it as the
    /// `Idempotency-Key` of the downstream request so the other side deduplicates retries too.
    pub fn derived_key(&self, step: &str) -> String {
        let mut h = Sha256::new();
        for part in [self.scope.as_str(), self.key.as_str(), step] {
            h.update((part.len() as u64).to_be_bytes());
            h.update(part.as_bytes());
        }
        hex::encode(h.finalize())
    }

    /// Runs one recovery-point step in its own transaction, which also records `name` as the last
    /// completed step. Returns `Ok(false)` without running `work` when an earlier attempt already
    /// completed this step (steps must be called in the same order on every attempt).
    ///
    /// Fails with [`Error::IdempotencyInProgress`] (and runs nothing) if another attempt took the key
    /// over because this one exceeded the lock timeout.
    ///
    /// # Cancel safety
    ///
    /// Dropped before the step's commit, the step's transaction rolls back (its writes and its recovery
    /// point with it) and the key stays claimed until the lock timeout, after which a retry takes it
    /// over and runs this step again. Dropped while the commit is in flight, the step may or may not be
    /// recorded done.
    pub async fn step<F>(&mut self, name: &str, work: F) -> Result<bool>
    where
        F: for<'t> FnOnce(&'t mut Tx) -> BoxFuture<'t, Result<()>> + Send,
    {
        check_key("idempotency step name", name)?;
        if let Some(done) = &self.resume_after {
            if done == name {
                self.resume_after = None;
            }
            return Ok(false);
        }
        let mut tx = self.claim_for_step().await?;
        if let Err(e) = work(&mut tx).await {
            drop(tx);
            self.release().await;
            return Err(e);
        }
        tx.execute(
            "UPDATE leasehold_idempotency_keys SET recovery_point = $3 \
             WHERE scope = $1 AND idempotency_key = $2",
            &[
                Param::Text(&self.scope),
                Param::Text(&self.key),
                Param::Text(name),
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(true)
    }

    /// Runs the last step, whose result is the response: stored in the same transaction, which
    /// completes the key. Returns the response.
    ///
    /// # Cancel safety
    ///
    /// As [`step`](Self::step): dropped before the commit, nothing of the last step is stored and a
    /// retry takes the key over after the lock timeout; during the commit, the response may or may not
    /// be stored.
    pub async fn finish<F>(mut self, work: F) -> Result<Vec<u8>>
    where
        F: for<'t> FnOnce(&'t mut Tx) -> BoxFuture<'t, Result<Vec<u8>>> + Send,
    {
        if let Some(step) = self.resume_after.take() {
            // Steps were skipped up to `step` but the caller did not reach it: its order changed.
            return Err(Error::invalid(
                "idempotency steps",
                format!(
                    "an earlier attempt completed step `{step}`, which this attempt never reached; \
                     call the steps in the same order on every attempt"
                ),
            ));
        }
        let mut tx = self.claim_for_step().await?;
        let body = match work(&mut tx).await {
            Ok(body) => body,
            Err(e) => {
                drop(tx);
                self.release().await;
                return Err(e);
            }
        };
        let now = tx.now_ms().await?;
        tx.execute(
            "UPDATE leasehold_idempotency_keys SET response = $3, completed_at_ms = $4, \
             locked_until_ms = NULL WHERE scope = $1 AND idempotency_key = $2",
            &[
                Param::Text(&self.scope),
                Param::Text(&self.key),
                Param::Bytes(&body),
                Param::I64(now),
            ],
        )
        .await?;
        tx.commit().await?;
        Ok(body)
    }

    /// Begins a step's transaction: checks (and locks, until commit) that this attempt still owns the
    /// key, and extends its lock.
    ///
    /// On InnoDB this update can lose a deadlock to concurrent first requests of the same key
    /// (each holding the shared lock its duplicate insert took, all upgrading): nothing but the
    /// update ran in the transaction, so it is begun again, a few times, before any work runs.
    async fn claim_for_step(&self) -> Result<Tx> {
        let mut attempt = 0;
        loop {
            match self.try_claim_for_step().await {
                Err(e) if is_deadlock(&e) && attempt < DEADLOCK_RETRIES => {
                    attempt += 1;
                    deadlock_backoff(attempt).await;
                }
                other => return other,
            }
        }
    }

    /// One try of [`Attempt::claim_for_step`].
    async fn try_claim_for_step(&self) -> Result<Tx> {
        let mut tx = self.store.db.begin().await?;
        let now = tx.now_ms().await?;
        let owned = tx
            .execute(
                "UPDATE leasehold_idempotency_keys SET locked_until_ms = $4 \
                 WHERE scope = $1 AND idempotency_key = $2 AND owner = $3 AND response IS NULL",
                &[
                    Param::Text(&self.scope),
                    Param::Text(&self.key),
                    Param::Text(&self.owner),
                    Param::I64(now.saturating_add(millis(self.store.lock_timeout))),
                ],
            )
            .await?;
        if owned == 1 {
            Ok(tx)
        } else {
            Err(Error::IdempotencyInProgress {
                key: self.key.clone(),
            })
        }
    }

    /// After a failed step: let the next retry take over at once instead of after the lock timeout.
    /// Best effort; if it fails, the lock timeout does the same later.
    async fn release(&self) {
        let result = async {
            let mut tx = self.store.db.begin().await?;
            tx.execute(
                "UPDATE leasehold_idempotency_keys SET locked_until_ms = 0 \
                 WHERE scope = $1 AND idempotency_key = $2 AND owner = $3 AND response IS NULL",
                &[
                    Param::Text(&self.scope),
                    Param::Text(&self.key),
                    Param::Text(&self.owner),
                ],
            )
            .await?;
            tx.commit().await
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(key = %self.key, error = %e, "could not release idempotency key after a failed step");
        }
    }
}
