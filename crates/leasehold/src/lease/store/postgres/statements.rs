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

/// The channel observers of a name hear its changes on (write_note.sql, a release of a row that
/// carries a note, force_release.sql), with the payload of [`CHANNEL`]. Apart from it, so that a
/// leader writing its record wakes no waiter.
pub(super) const CHANGE_CHANNEL: &str = "leasehold_changes";

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
const WRITE_NOTE: &str = include_str!("sql/write_note.sql");
const READ_NOTE: &str = include_str!("sql/read_note.sql");

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
        .bind(CHANGE_CHANNEL)
}

/// force_release.sql's reply: `(evicted, fence, notified, changed)`.
pub(super) type ForcedRow = (bool, i64, i64, i64);

/// force_release.sql: free `name` whoever holds it, draw a new fence, notify waiters.
pub(super) fn force_release(prefix: String, name: String) -> Statement<ForcedRow> {
    sqlx::query_as(FORCE_RELEASE)
        .bind(prefix)
        .bind(name)
        .bind(CHANNEL)
        .bind(CHANGE_CHANNEL)
}

/// write_note.sql: put `note` in the row of `name` if `token` holds it; one row when written.
pub(super) fn write_note(
    prefix: String,
    name: String,
    token: String,
    note: Vec<u8>,
) -> Statement<(String,)> {
    sqlx::query_as(WRITE_NOTE)
        .bind(prefix)
        .bind(name)
        .bind(token)
        .bind(note)
        .bind(CHANGE_CHANNEL)
}

/// read_note.sql: the note of `name` (`None` in the row: none written).
pub(super) fn read_note(prefix: String, name: String) -> Statement<(Option<Vec<u8>>,)> {
    sqlx::query_as(READ_NOTE).bind(prefix).bind(name)
}

/// The server's wall clock now, in milliseconds since the Unix epoch.
pub(super) fn wall_clock_ms() -> Statement<(i64,)> {
    sqlx::query_as("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
}

/// inspect.sql's and list.sql's reply: `(name, held, remaining_ms, fence)`.
pub(super) type InfoRow = (String, bool, Option<i64>, Option<i64>);

/// inspect.sql: the state of each name, in the order asked.
pub(super) fn inspect(prefix: String, names: Vec<String>) -> Statement<InfoRow> {
    sqlx::query_as(INSPECT).bind(prefix).bind(names)
}

/// list.sql: every name under `prefix` (the caller keeps those its glob matches).
pub(super) fn list(prefix: String) -> Statement<InfoRow> {
    sqlx::query_as(LIST).bind(prefix)
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

#[cfg(test)]
mod tests {
    use std::str::FromStr;

    use sqlx::postgres::{PgConnectOptions, PgConnection};
    use sqlx::Connection;

    use super::*;

    const SEC: Duration = Duration::from_secs(1);
    const P: &str = "t";

    /// A migrated schema of its own on the test database, and connections that use it; dropped
    /// by [`Schema::drop_now`] at the end of a passing test.
    struct Schema {
        name: String,
        options: PgConnectOptions,
    }

    impl Schema {
        async fn new() -> Schema {
            let url = leasehold_testkit::postgres_url();
            let name = format!("lh_stmt_{:016x}", rand::random::<u64>());
            let db = crate::db::Database::builder(&url)
                .postgres_schema(&name)
                .max_connections(1)
                .connect()
                .await
                .expect("PostgreSQL must be reachable (LEASEHOLD_TEST_DATABASE_URL)");
            db.migrate().await.unwrap();
            db.close().await;
            let options = PgConnectOptions::from_str(&url)
                .unwrap()
                .options([("search_path", name.as_str())]);
            Schema { name, options }
        }

        async fn conn(&self) -> PgConnection {
            PgConnection::connect_with(&self.options).await.unwrap()
        }

        async fn drop_now(self, mut conn: PgConnection) {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "DROP SCHEMA {} CASCADE",
                self.name
            )))
            .execute(&mut conn)
            .await
            .unwrap();
        }
    }

    async fn acquire_(
        c: &mut PgConnection,
        token: &str,
        ttl: Duration,
        wait: Duration,
    ) -> AcquireRow {
        acquire(P.into(), "n".into(), token.into(), ttl, wait)
            .fetch_one(c)
            .await
            .unwrap()
    }

    async fn release_(c: &mut PgConnection, token: &str) -> (bool, i64) {
        let (_, _, released, notified) = release(P.into(), vec!["n".into()], vec![token.into()])
            .fetch_one(c)
            .await
            .unwrap();
        (released, notified)
    }

    async fn renew_(c: &mut PgConnection, token: &str) -> bool {
        !renew(
            P.into(),
            vec!["n".into()],
            vec![token.into()],
            vec![30 * SEC],
        )
        .fetch_all(c)
        .await
        .unwrap()
        .is_empty()
    }

    async fn force_(c: &mut PgConnection) -> (bool, i64, i64, i64) {
        force_release(P.into(), "n".into())
            .fetch_one(c)
            .await
            .unwrap()
    }

    async fn row_count(c: &mut PgConnection) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM leasehold_leases")
            .fetch_one(c)
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn every_statement_run_twice_has_the_effect_of_running_once() {
        // A call retried on a fresh connection sends the same statement again; the first one may
        // have run. Each statement, really run twice against the server:
        let s = Schema::new().await;
        let mut c = s.conn().await;
        let first = acquire_(&mut c, "a", 30 * SEC, SEC).await;
        let again = acquire_(&mut c, "a", 30 * SEC, SEC).await;
        assert!(first.0, "{first:?}");
        assert_eq!(
            (first.0, first.1),
            (again.0, again.1),
            "a retried acquire gets the same lease and fence"
        );
        assert!(renew_(&mut c, "a").await && renew_(&mut c, "a").await);
        assert!(release_(&mut c, "a").await.0);
        assert!(
            release_(&mut c, "a").await.0,
            "a retried release says released"
        );
        assert!(!renew_(&mut c, "a").await, "released: renewing is refused");
        // The next holder is untouched by a late retry of the previous holder's release, and its
        // fence is above the first holder's.
        let b = acquire_(&mut c, "b", 30 * SEC, SEC).await;
        assert!(b.0 && b.1 > first.1, "{b:?} after {first:?}");
        assert!(release_(&mut c, "a").await.0);
        assert!(
            !acquire_(&mut c, "c", 30 * SEC, Duration::ZERO).await.0,
            "b's lease must survive a's retried release"
        );
        // Someone who never held it is told "not yours", before and after a release.
        assert!(!release_(&mut c, "c").await.0);
        let (e1, f1, _, _) = force_(&mut c).await;
        let (e2, f2, _, _) = force_(&mut c).await;
        assert!(
            e1 && !e2 && f1 > b.1 && f2 > f1,
            "forced twice: evicts once, the fence only moves up"
        );
        assert!(
            !release_(&mut c, "b").await.0,
            "the evicted holder's release is refused"
        );
        s.drop_now(c).await;
    }

    #[tokio::test]
    async fn only_a_release_someone_waits_for_notifies() {
        let s = Schema::new().await;
        let mut c = s.conn().await;
        assert!(!acquire_(&mut c, "a", 30 * SEC, 10 * SEC).await.2);
        // A try (no wait) told "busy" announces no waiter.
        assert!(!acquire_(&mut c, "b", 30 * SEC, Duration::ZERO).await.0);
        assert_eq!(release_(&mut c, "a").await, (true, 0), "nobody to notify");

        assert!(acquire_(&mut c, "a", 30 * SEC, SEC).await.0);
        let busy = acquire_(&mut c, "b", 30 * SEC, 5 * SEC).await;
        assert!(!busy.0 && busy.3.is_some_and(|ms| ms > 25_000), "{busy:?}");
        assert_eq!(
            release_(&mut c, "a").await,
            (true, 1),
            "the waiter is notified"
        );
        // B takes it; the marker now covers B's hold, so B's release notifies the next one too.
        let taken = acquire_(&mut c, "b", 30 * SEC, 5 * SEC).await;
        assert!(taken.0 && taken.2, "{taken:?}");
        assert_eq!(release_(&mut c, "b").await, (true, 1));
        // Forcing notifies a waiter as well.
        assert!(acquire_(&mut c, "c", 30 * SEC, SEC).await.0);
        assert!(!acquire_(&mut c, "d", 30 * SEC, 5 * SEC).await.0);
        assert_eq!(force_(&mut c).await.2, 1);
        s.drop_now(c).await;
    }

    #[tokio::test]
    async fn a_waiter_already_covered_by_the_marker_writes_nothing() {
        let s = Schema::new().await;
        let mut c = s.conn().await;
        assert!(acquire_(&mut c, "a", 30 * SEC, SEC).await.0);
        assert!(!acquire_(&mut c, "b", 30 * SEC, 20 * SEC).await.0);
        let xmin = || sqlx::query_scalar::<_, String>("SELECT xmin::text FROM leasehold_leases");
        let before = xmin().fetch_one(&mut c).await.unwrap();
        // A shorter wait is covered: no new row version.
        assert!(!acquire_(&mut c, "b", 30 * SEC, 10 * SEC).await.0);
        assert_eq!(xmin().fetch_one(&mut c).await.unwrap(), before);
        s.drop_now(c).await;
    }

    #[tokio::test]
    async fn idle_rows_are_swept_after_the_retention_and_held_ones_never() {
        let s = Schema::new().await;
        let mut c = s.conn().await;
        for (i, token) in ["a", "b", "c"].iter().enumerate() {
            acquire(
                P.into(),
                format!("n{i}"),
                (*token).into(),
                30 * SEC,
                Duration::ZERO,
            )
            .fetch_one(&mut c)
            .await
            .unwrap();
        }
        release(P.into(), vec!["n0".into()], vec!["a".into()])
            .fetch_all(&mut c)
            .await
            .unwrap();
        // n1: a holder that crashed: expired, never released.
        acquire(
            P.into(),
            "n1".into(),
            "b".into(),
            Duration::from_millis(1),
            Duration::ZERO,
        )
        .fetch_one(&mut c)
        .await
        .unwrap();
        let swept = sweep(Duration::from_secs(3600))
            .execute(&mut c)
            .await
            .unwrap();
        assert_eq!(
            swept.rows_affected(),
            0,
            "nothing is older than the retention"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        let swept = sweep(Duration::from_millis(10))
            .execute(&mut c)
            .await
            .unwrap();
        assert_eq!(
            swept.rows_affected(),
            2,
            "the released row and the expired one"
        );
        assert_eq!(row_count(&mut c).await, 1, "n2 is held: it stays");
        s.drop_now(c).await;
    }

    /// The fence rule's one hazard: a fence drawn before the statement waits, written after a later
    /// holder's larger fence was committed and its row deleted. The interleaving is forced with an
    /// open transaction that plays the later holder (it takes the lease, then its row vanishes, in
    /// one commit) while the first acquirer waits.
    async fn interleave(s: &Schema, naive: bool) -> (i64, i64) {
        let mut setup = s.conn().await;
        // A free row with an old fence, as any name that was held before.
        acquire_(&mut setup, "old", 30 * SEC, Duration::ZERO).await;
        release_(&mut setup, "old").await;
        let mut t = s.conn().await;
        let mut first = s.conn().await;
        let first_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut first)
            .await
            .unwrap();
        sqlx::query("BEGIN").execute(&mut t).await.unwrap();
        if naive {
            // The later holder's session holds the row while the first acquirer draws its fence.
            sqlx::query("SELECT 1 FROM leasehold_leases WHERE prefix = $1 FOR UPDATE")
                .bind(P)
                .execute(&mut t)
                .await
                .unwrap();
        } else {
            // The later holder runs the store's own acquire (advisory lock first).
            acquire_(&mut t, "later", 30 * SEC, Duration::ZERO).await;
        }
        let waiting = tokio::spawn(async move {
            if naive {
                sqlx::query_scalar::<_, i64>(NAIVE_ACQUIRE)
                    .bind(P)
                    .bind("n")
                    .bind("first")
                    .fetch_one(&mut first)
                    .await
                    .unwrap()
            } else {
                acquire_(&mut first, "first", 30 * SEC, Duration::ZERO)
                    .await
                    .1
            }
        });
        // Until the first acquirer is blocked on a lock.
        loop {
            let blocked: Option<String> =
                sqlx::query_scalar("SELECT wait_event_type FROM pg_stat_activity WHERE pid = $1")
                    .bind(first_pid)
                    .fetch_one(&mut setup)
                    .await
                    .unwrap();
            if blocked.as_deref() == Some("Lock") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let later: i64 = if naive {
            sqlx::query_scalar(
                "UPDATE leasehold_leases SET token = 'later', \
                 fence = nextval('leasehold_lease_fence'), \
                 expires_at = clock_timestamp() + interval '30 seconds' \
                 WHERE prefix = $1 RETURNING fence",
            )
            .bind(P)
            .fetch_one(&mut t)
            .await
            .unwrap()
        } else {
            sqlx::query_scalar("SELECT fence FROM leasehold_leases WHERE prefix = $1")
                .bind(P)
                .fetch_one(&mut t)
                .await
                .unwrap()
        };
        // The later holder's row vanishes (released and swept) in the same commit.
        sqlx::query("DELETE FROM leasehold_leases WHERE prefix = $1")
            .bind(P)
            .execute(&mut t)
            .await
            .unwrap();
        sqlx::query("COMMIT").execute(&mut t).await.unwrap();
        let first = waiting.await.unwrap();
        (later, first)
    }

    /// What a one-statement upsert without the advisory lock looks like: the fence is drawn in
    /// VALUES, before the statement waits for the row.
    const NAIVE_ACQUIRE: &str = "INSERT INTO leasehold_leases AS l (prefix, name, token, fence, expires_at) \
         VALUES ($1, $2, $3, nextval('leasehold_lease_fence'), clock_timestamp() + interval '30 seconds') \
         ON CONFLICT (prefix, name) DO UPDATE SET token = excluded.token, fence = excluded.fence, \
         expires_at = excluded.expires_at \
         WHERE l.token IS NULL OR l.expires_at <= clock_timestamp() \
         RETURNING fence";

    #[tokio::test]
    async fn a_fence_is_drawn_after_every_earlier_fence_of_the_name_was_stored() {
        let s = Schema::new().await;
        let (later, first) = interleave(&s, true).await;
        assert!(
            first < later,
            "the naive upsert should show the hazard: it wrote {first} after {later} was issued"
        );
        let s2 = Schema::new().await;
        let (later, first) = interleave(&s2, false).await;
        assert!(
            first > later,
            "the store's acquire must draw its fence after the later holder's: {first} vs {later}"
        );
        let c = s.conn().await;
        s.drop_now(c).await;
        let c = s2.conn().await;
        s2.drop_now(c).await;
    }

    #[tokio::test]
    async fn the_probe_finds_the_tables_and_the_sequence_without_cache() {
        let s = Schema::new().await;
        let mut c = s.conn().await;
        let (has_table, cache, _) = probe().fetch_one(&mut c).await.unwrap();
        assert!(has_table);
        assert_eq!(cache, Some(1));
        s.drop_now(c).await;
    }
}
