//! The lease store's SQL, one `.sql` file per statement, each behind one function that binds its
//! parameters (their order is written once, here) and one type for its reply.
//!
//! Promise: every statement is a single statement (its own transaction), so no lock is held across a
//! round trip: a client that pauses or vanishes mid-call blocks nobody. Each has the same effect run
//! twice as once (acquire and release by token; force-release advances the fence once more).
//! Limit: atomic on one PostgreSQL server; what a standby has seen is up to its replication.

use std::time::Duration;

use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::Postgres;

/// The channel every release with waiters notifies on; the payload is `<prefix>\x1f<name>` (neither
/// may hold a control character, so the separator is unambiguous).
pub(super) const CHANNEL: &str = "leasehold_leases";

/// Separator between prefix and name in a notification's payload.
pub(super) const PAYLOAD_SEPARATOR: char = '\u{1f}';

/// Added to the waiting marker's lifetime beyond the longest wait it announces, to cover the reply's
/// travel to the contender. A marker that outlives its waiters costs one needless notification per
/// release, no more.
pub(super) const WAITING_SLACK: Duration = Duration::from_secs(5);

/// Most leases renewed or released by one statement; a larger batch is sent as several statements.
pub(super) const CHUNK: usize = 5_000;

/// Most idle rows one sweep statement deletes; a sweep repeats while it fills the batch.
pub(super) const SWEEP_BATCH: i64 = 1_000;

const ACQUIRE: &str = include_str!("sql/acquire.sql");
const RENEW: &str = include_str!("sql/renew.sql");
const RELEASE: &str = include_str!("sql/release.sql");
const FORCE_RELEASE: &str = include_str!("sql/force_release.sql");
const INSPECT: &str = include_str!("sql/inspect.sql");
const LIST: &str = include_str!("sql/list.sql");
const SWEEP: &str = include_str!("sql/sweep.sql");
const PROBE: &str = include_str!("sql/probe.sql");

/// A statement ready to send; it owns its parameters, so it can be built again for a retry.
type Statement<R> = QueryAs<'static, Postgres, R, PgArguments>;

/// Milliseconds as SQL BIGINT, at least 1 (a zero TTL would be an instant expiry).
fn ms(d: Duration) -> i64 {
    ms_or_zero(d).max(1)
}

fn ms_or_zero(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// acquire.sql's reply: `(taken, fence, waiting, remaining_ms)`.
pub(super) type AcquireRow = (bool, i64, bool, Option<i64>);

/// acquire.sql: take `name` with `token` for `ttl` if free; when busy and `wait` is not zero, mark
/// that a contender waits (so the holder's release notifies).
pub(super) fn acquire(
    prefix: String,
    name: String,
    token: String,
    ttl: Duration,
    wait: Duration,
) -> Statement<AcquireRow> {
    sqlx::query_as(ACQUIRE)
        .bind(prefix)
        .bind(name)
        .bind(token)
        .bind(ms(ttl))
        .bind(ms_or_zero(wait))
        .bind(ms(WAITING_SLACK))
}

/// renew.sql's reply: one `(name, token)` per renewed lease.
pub(super) type RenewedRow = (String, String);

/// renew.sql: reset the TTL of each `(name, token, ttl)` still held.
pub(super) fn renew(
    prefix: String,
    names: Vec<String>,
    tokens: Vec<String>,
    ttls: Vec<Duration>,
) -> Statement<RenewedRow> {
    let ttls: Vec<i64> = ttls.into_iter().map(ms).collect();
    sqlx::query_as(RENEW)
        .bind(prefix)
        .bind(names)
        .bind(tokens)
        .bind(ttls)
}

/// release.sql's reply: `(name, token, released, notified)` per asked lease.
pub(super) type ReleasedRow = (String, String, bool, i64);

/// release.sql: free each `(name, token)` still held, notify the waiters of those that have some.
pub(super) fn release(
    prefix: String,
    names: Vec<String>,
    tokens: Vec<String>,
) -> Statement<ReleasedRow> {
    sqlx::query_as(RELEASE)
        .bind(prefix)
        .bind(names)
        .bind(tokens)
        .bind(CHANNEL)
}

/// force_release.sql's reply: `(evicted, fence, notified)`.
pub(super) type ForcedRow = (bool, i64, i64);

/// force_release.sql: free `name` whoever holds it, draw a new fence, notify waiters.
pub(super) fn force_release(prefix: String, name: String) -> Statement<ForcedRow> {
    sqlx::query_as(FORCE_RELEASE)
        .bind(prefix)
        .bind(name)
        .bind(CHANNEL)
}

/// inspect.sql's and list.sql's reply: `(name, held, remaining_ms, fence)`.
pub(super) type InfoRow = (String, bool, Option<i64>, Option<i64>);

/// inspect.sql: the state of each name, in the order asked.
pub(super) fn inspect(prefix: String, names: Vec<String>) -> Statement<InfoRow> {
    sqlx::query_as(INSPECT).bind(prefix).bind(names)
}

/// list.sql: the names under `prefix` matching the anchored regular expression `regex`.
pub(super) fn list(prefix: String, regex: String) -> Statement<InfoRow> {
    sqlx::query_as(LIST).bind(prefix).bind(regex)
}

/// sweep.sql: delete at most [`SWEEP_BATCH`] rows idle for longer than `retention`. Run with
/// `execute`: the reply says how many rows were deleted.
pub(super) fn sweep(retention: Duration) -> sqlx::query::Query<'static, Postgres, PgArguments> {
    sqlx::query(SWEEP).bind(ms(retention)).bind(SWEEP_BATCH)
}

/// probe.sql's reply: `(has_table, seq_cache, fsync)`.
pub(super) type ProbeRow = (bool, Option<i64>, String);

/// probe.sql: whether `migrate()` ran, the fence sequence's cache, `fsync`.
pub(super) fn probe() -> Statement<ProbeRow> {
    sqlx::query_as(PROBE)
}

/// The lease name a notification's payload carries, if it is under `prefix` (release.sql and
/// force_release.sql build it).
pub(super) fn payload_name<'a>(payload: &'a str, prefix: &str) -> Option<&'a str> {
    payload
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix(PAYLOAD_SEPARATOR))
}
