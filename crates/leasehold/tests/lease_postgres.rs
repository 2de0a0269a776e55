//! The PostgreSQL store's own faults, on real servers: a restart and a crash of PostgreSQL mid-lease
//! (a private server, never the shared one), the connection cut under a holder, a holder process
//! paused past its lease (its fenced write refused), racing holder processes, a lost notification,
//! and idle rows going away. Each fault test also runs the unsafe variant, to show the test sees
//! the failure it guards against.
//!
//! The holder processes are this test binary run again with `--ignored --exact child_process` and
//! the role in `LH_CHILD`; `child_process` does nothing when `LH_CHILD` is not set.
#![cfg(feature = "postgres")]

mod lease_support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lease_support::pg::{with_search_path, PgSchema};
use lease_support::{eventually, ms};
use leasehold::db::Database;
use leasehold::{Error, Fence, LeaseClient, LeaseOptions, LostReason};
use leasehold_testkit::{PostgresServer, Proxy};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sqlx::Connection;
use tokio::time::Instant;

async fn client(url: &str, prefix: &str) -> LeaseClient {
    LeaseClient::builder(url)
        .key_prefix(prefix)
        .response_timeout(ms(1_000))
        .connect_timeout(ms(1_000))
        .connect()
        .await
        .expect("connect the PostgreSQL lease store")
}

fn opts(ttl_ms: u64) -> LeaseOptions {
    LeaseOptions::with_ttl(ms(ttl_ms)).unwrap()
}

async fn sql(url: &str) -> sqlx::PgConnection {
    sqlx::PgConnection::connect(url).await.unwrap()
}

/// A private server with leasehold's tables in its `postgres` database.
async fn private_server(settings: &[(&str, &str)]) -> PostgresServer {
    let settings: Vec<(String, String)> = settings
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    let pg = tokio::task::spawn_blocking(move || {
        let mut b = PostgresServer::builder();
        for (k, v) in &settings {
            b = b.setting(k, v);
        }
        b.start()
    })
    .await
    .unwrap()
    .expect("start a private PostgreSQL (initdb and postgres must be installed)");
    let db = Database::connect(&pg.url()).await.unwrap();
    db.migrate().await.unwrap();
    db.close().await;
    pg
}

/// Runs a blocking testkit helper from an async test.
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// How PostgreSQL goes away mid-lease.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outage {
    /// A fast shutdown and a start, well within the lease.
    Restart,
    /// Every server process killed at once, then crash recovery, well within the lease.
    Crash,
    /// Stopped for longer than the lease.
    Long,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_or_crash_of_postgres_mid_lease_keeps_or_loses_it_and_never_gives_two_holders() {
    let mut pg = private_server(&[]).await;
    let url = pg.url();
    let holder = client(&url, "restart").await;
    let contender = client(&url, "restart").await;
    let mut last_fence = Fence::new(0);
    for outage in [Outage::Restart, Outage::Crash, Outage::Long] {
        let a = holder.try_acquire("job", &opts(2_000)).await.unwrap();
        assert!(a.fence() > last_fence, "{} after {}", a.fence(), last_fence);
        let lost = {
            let signal = a.lost();
            tokio::spawn(async move {
                signal.fired().await;
                Instant::now()
            })
        };
        // The contender asks all along; any lease it gets is recorded with the instant it got it.
        let stop = Arc::new(AtomicBool::new(false));
        let asking = {
            let (c, stop) = (contender.clone(), stop.clone());
            tokio::spawn(async move {
                let mut got = Vec::new();
                while !stop.load(Ordering::SeqCst) {
                    if let Ok(l) = c.try_acquire("job", &opts(2_000)).await {
                        got.push((Instant::now(), l.fence()));
                        l.release().await.unwrap();
                    }
                    tokio::time::sleep(ms(50)).await;
                }
                got
            })
        };
        tokio::time::sleep(ms(300)).await;
        blocking(|| match outage {
            Outage::Restart => pg.restart(),
            Outage::Crash => pg.crash_restart(),
            Outage::Long => {
                pg.stop()?;
                std::thread::sleep(ms(2_500));
                pg.start_again()
            }
        })
        .unwrap();
        // Past a renewal after the start (the contender keeps asking meanwhile).
        tokio::time::sleep(ms(1_500)).await;
        stop.store(true, Ordering::SeqCst);
        let got = asking.await.unwrap();
        let lost_at = if a.is_lost() {
            Some(lost.await.unwrap())
        } else {
            lost.abort();
            None
        };
        eprintln!(
            "{outage:?}: {}, the contender got it {} times",
            if lost_at.is_some() { "lost" } else { "kept" },
            got.len()
        );
        match lost_at {
            None => {
                // Kept: the committed row survived, the holder's renewal reached the new server,
                // and nobody else got in.
                assert_ne!(
                    outage,
                    Outage::Long,
                    "the lease outlived an outage longer than it"
                );
                assert!(got.is_empty(), "two holders: the contender got {got:?}");
                let info = contender.inspect("job").await.unwrap();
                assert!(info.held && info.fence == Some(a.fence()), "{info:?}");
                last_fence = a.fence();
                a.release().await.unwrap();
            }
            Some(lost_at) => {
                // Lost: anyone else got it only after the holder was told, with a larger fence.
                for (at, f) in &got {
                    assert!(
                        *at >= lost_at,
                        "the contender got it before the holder was told"
                    );
                    assert!(*f > a.fence(), "{f} after {}", a.fence());
                }
                if outage == Outage::Long {
                    assert!(!got.is_empty(), "the contender never got the expired lease");
                }
                last_fence = got.iter().map(|g| g.1).max().unwrap_or(a.fence());
                assert!(matches!(a.release().await, Err(Error::LeaseLost { .. })));
            }
        }
    }
    // The fence keeps increasing across all three.
    let next = holder.try_acquire("job", &opts(2_000)).await.unwrap();
    assert!(next.fence() > last_fence);
    next.release().await.unwrap();
}

/// The acquire statement the store sends, with its guard against an asynchronous commit removed.
fn acquire_without_the_commit_guard() -> String {
    let sql = include_str!("../src/lease/store/postgres/sql/acquire.sql");
    let guard = "set_config('synchronous_commit', 'local', true)";
    assert!(sql.contains(guard), "the guard moved; update this test");
    sql.replace(guard, "NULL")
}

/// With `synchronous_commit = off` on the server (and the WAL writer slow), a crash right after an
/// acquire, and one right after a renewal. The store's acquire and renew turn synchronous commit
/// back on for their own transactions, so the lease, its fence and its renewed expiry survive; the
/// acquire statement without that would lose both, and the next acquirer would get the lease with
/// the same fence: two holders with one fence.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_an_asynchronous_commit_would_issue_a_fence_twice_the_store_prevents_it() {
    let mut pg = private_server(&[
        ("synchronous_commit", "off"),
        ("wal_writer_delay", "10000ms"),
    ])
    .await;
    let url = pg.url();

    // The store: acquire, crash at once, start again.
    let c = client(&url, "crash").await;
    let mut admin = sql(&url).await;
    sqlx::query("CHECKPOINT").execute(&mut admin).await.unwrap();
    let a = c
        .try_acquire(
            "job",
            &LeaseOptions::builder()
                .ttl(ms(30_000))
                .no_renewal()
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    drop(admin);
    blocking(|| pg.crash_restart()).unwrap();
    let c2 = client(&url, "crash").await;
    let info = c2.inspect("job").await.unwrap();
    assert!(
        info.held && info.fence == Some(a.fence()),
        "the lease survived: {info:?}"
    );
    assert!(matches!(
        c2.try_acquire("job", &opts(1_000)).await,
        Err(Error::Busy { .. })
    ));
    let forced = c2.force_release("job").await.unwrap();
    assert!(forced.fence > a.fence());
    std::mem::forget(a); // its connection died with the server; nothing to release

    // A renewal is as durable: the holder's deadline counts from it, so the database must not
    // come back from a crash with the expiry from before it.
    let b = c2
        .try_acquire(
            "renewed",
            &LeaseOptions::builder()
                .ttl(ms(30_000))
                .no_renewal()
                .build()
                .unwrap(),
        )
        .await
        .unwrap();
    tokio::time::sleep(ms(3_000)).await;
    let renewed_at = Instant::now();
    b.renew().await.unwrap();
    blocking(|| pg.crash_restart()).unwrap();
    let c3 = client(&url, "crash").await;
    let left = c3.inspect("renewed").await.unwrap().ttl_ms.unwrap();
    let since = renewed_at.elapsed().as_millis() as u64;
    assert!(
        left + since >= 29_000,
        "the database came back with the expiry from before the renewal: {left} ms left, \
         {since} ms after the renewal"
    );
    std::mem::forget(b);

    // The unsafe variant: the same statement without the guard.
    let unsafe_sql = acquire_without_the_commit_guard();
    let mut conn = sql(&url).await;
    sqlx::query("CHECKPOINT").execute(&mut conn).await.unwrap();
    let take = |token: &'static str| {
        sqlx::query_as::<_, (bool, i64, bool, Option<i64>)>(sqlx::AssertSqlSafe(
            unsafe_sql.as_str(),
        ))
        .bind("crash")
        .bind("unsafe")
        .bind(token)
        .bind(30_000_i64)
        .bind(0_i64)
        .bind(5_000_i64)
    };
    let (taken, first_fence, _, _) = take("first").fetch_one(&mut conn).await.unwrap();
    assert!(taken);
    drop(conn);
    blocking(|| pg.crash_restart()).unwrap();
    let mut conn = sql(&url).await;
    let (taken, second_fence, _, _) = take("second").fetch_one(&mut conn).await.unwrap();
    assert!(
        taken && second_fence <= first_fence,
        "expected the unguarded statement to lose the first lease and reissue its fence \
         (first {first_fence}, second taken={taken} with {second_fence})"
    );
}

/// Rewrites `url` to go through `proxy` instead of its own host and port.
fn through(url: &str, proxy: &Proxy) -> String {
    let opts: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
    let direct = format!("@{}:{}", opts.get_host(), opts.get_port());
    assert!(
        url.contains(&direct),
        "cannot find {direct} in the test URL"
    );
    url.replacen(&direct, &format!("@{}", proxy.addr()), 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_connection_fires_the_lost_signal_by_the_deadline() {
    let schema = PgSchema::create().await;
    let url = schema.url();
    let upstream = {
        let o: sqlx::postgres::PgConnectOptions = url.parse().unwrap();
        let mut addrs = tokio::net::lookup_host((o.get_host().to_owned(), o.get_port()))
            .await
            .unwrap();
        addrs.next().unwrap()
    };
    let proxy = Proxy::start(upstream).await.unwrap();
    let holder = client(&through(&url, &proxy), "cut").await;
    let other = client(&url, "cut").await;
    let a = holder.try_acquire("job", &opts(1_000)).await.unwrap();
    let acquired = Instant::now();
    tokio::time::sleep(ms(200)).await;
    proxy.cut();
    let reason = tokio::time::timeout(ms(3_000), a.lost().fired())
        .await
        .expect("the signal fires");
    let lost_at = Instant::now();
    assert_eq!(reason, LostReason::DeadlinePassed);
    // The deadline is 1 s minus the drift allowance after the acquire was sent; 200 ms of slack
    // for a loaded machine's scheduler.
    assert!(
        lost_at - acquired <= ms(1_200),
        "fired {:?} after the acquire, past the 1 s lease",
        lost_at - acquired
    );
    // The database expires it by its own clock; the other client gets it only after the holder
    // was told, with a larger fence.
    let b = other.acquire("job", &opts(5_000), ms(5_000)).await.unwrap();
    let b_at = Instant::now();
    assert!(b.fence() > a.fence());
    assert!(b_at >= lost_at);
    // Why the signal matters: a holder that stopped only when the store said "not yours" would
    // still be working now; the store cannot tell it anything through the cut.
    match a.renew().await {
        Err(Error::LeaseLost { .. }) => {} // the guard refuses: the signal fired
        other => panic!("{other:?}"),
    }
    let naive_told = tokio::time::timeout(ms(500), holder.inspect("job")).await;
    assert!(
        !matches!(naive_told, Ok(Ok(ref i)) if i.fence == Some(b.fence())),
        "a holder relying on the store's answer cannot hear it through the cut: {naive_told:?}"
    );
    b.release().await.unwrap();
    drop(proxy);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_misses_the_notification_gets_the_lease_within_the_holders_remaining_time() {
    let schema = PgSchema::create().await;
    let url = schema.url();
    let holder = client(&url, "quiet").await;
    let waiter = client(&url, "quiet").await;
    let a = holder.try_acquire("job", &opts(2_000)).await.unwrap();
    let started = Instant::now();
    let task = tokio::spawn(async move {
        let b = waiter
            .acquire("job", &opts(2_000), ms(20_000))
            .await
            .unwrap();
        (Instant::now(), b)
    });
    tokio::time::sleep(ms(300)).await;
    // Freed behind the store's back: nobody is notified (as when the notification is lost).
    let mut conn = sql(&url).await;
    sqlx::query("UPDATE leasehold_leases SET token = NULL WHERE prefix = 'quiet'")
        .execute(&mut conn)
        .await
        .unwrap();
    let (got_at, b) = task.await.unwrap();
    let waited = got_at - started;
    assert!(
        waited <= ms(2_000 + 250 + 500),
        "the wait ends by the holder's remaining time plus jitter, not the 20 s bound: {waited:?}"
    );
    assert!(waited >= ms(1_000), "woken early by something: {waited:?}");
    assert!(b.fence() > a.fence());
    b.release().await.unwrap();
    std::mem::forget(a);
}

async fn count_rows(url: &str, prefix: &str) -> i64 {
    let mut conn = sql(url).await;
    sqlx::query_scalar("SELECT count(*) FROM leasehold_leases WHERE prefix = $1")
        .bind(prefix)
        .fetch_one(&mut conn)
        .await
        .unwrap()
}

/// `n` distinct names acquired and released, plus crashed holders that never release: every row
/// is gone after the (shortened) retention, and a name reused after its row was deleted still gets
/// a larger fence.
async fn idle_rows_go_back_to_baseline(n: usize) {
    let schema = PgSchema::create().await;
    let url = schema.url();
    let c = LeaseClient::builder(&url)
        .key_prefix("idle")
        .retention(ms(1_000))
        .connect()
        .await
        .unwrap();
    let baseline = count_rows(&url, "idle").await;
    let o = opts(30_000);
    let mut first_fence = None;
    let tasks: Vec<_> = (0..8)
        .map(|t| {
            let (c, o) = (c.clone(), o.clone());
            tokio::spawn(async move {
                let mut fence = None;
                for i in (t..n).step_by(8) {
                    let l = c.try_acquire(&format!("order:{i}"), &o).await.unwrap();
                    if i == 0 {
                        fence = Some(l.fence());
                    }
                    l.release().await.unwrap();
                }
                fence
            })
        })
        .collect();
    for t in tasks {
        if let Some(f) = t.await.unwrap() {
            first_fence = Some(f);
        }
    }
    // Crashed holders: they never release, their leases expire.
    let short = LeaseOptions::builder()
        .ttl(ms(50))
        .no_renewal()
        .build()
        .unwrap();
    for i in 0..10 {
        std::mem::forget(
            c.try_acquire(&format!("crashed:{i}"), &short)
                .await
                .unwrap(),
        );
    }
    assert!(count_rows(&url, "idle").await >= baseline + 10);
    assert!(
        eventually(ms(30_000), async || count_rows(&url, "idle").await
            == baseline)
        .await,
        "rows left: {}",
        count_rows(&url, "idle").await - baseline
    );
    let again = c.try_acquire("order:0", &o).await.unwrap();
    assert!(again.fence() > first_fence.unwrap());
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_rows_go_away_after_the_retention() {
    idle_rows_go_back_to_baseline(1_000).await;
}

/// The issue's figure: 100,000 names. `cargo test -p leasehold --test lease_postgres -- --ignored
/// a_hundred_thousand`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "about two minutes; the 1,000-name version runs by default"]
async fn a_hundred_thousand_idle_names_leave_no_row() {
    idle_rows_go_back_to_baseline(100_000).await;
}

// ---- holder processes -------------------------------------------------------------------------

/// A child process running [`child_process`] in `role`, its stdout piped.
fn spawn_child(role: &str, url: &str, prefix: &str) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_process",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("LH_CHILD", role)
        .env("LH_CHILD_URL", url)
        .env("LH_CHILD_PREFIX", prefix)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap()
}

/// Marks what a child reports, among the test harness's own output (which may share the line).
const REPORT: &str = "@@ ";

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{REPORT}{line}").unwrap();
    out.flush().unwrap();
}

/// Not a test: the body of the holder processes the tests below start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper the process tests run in child processes"]
async fn child_process() {
    let Ok(role) = std::env::var("LH_CHILD") else {
        return;
    };
    let url = std::env::var("LH_CHILD_URL").unwrap();
    let prefix = std::env::var("LH_CHILD_PREFIX").unwrap();
    match role.as_str() {
        "paused-writer" => paused_writer(&url, &prefix).await,
        "racer" => racer(&url, &prefix, true).await,
        "unlocked-racer" => racer(&url, &prefix, false).await,
        other => panic!("unknown role {other}"),
    }
}

/// Takes the lease, writes under it once, then announces a second write and pauses briefly before
/// doing it (the parent SIGSTOPs it there): on resume it writes without checking again, fenced to
/// `ledger` and unfenced to `ledger_unfenced`, and reports what happened.
async fn paused_writer(url: &str, prefix: &str) {
    let c = client(url, prefix).await;
    let db = Database::connect(url).await.unwrap();
    let lease = c.try_acquire("nightly", &opts(1_000)).await.unwrap();
    say(&format!("FENCE {}", lease.fence()));
    let write = async |writer: &str| -> leasehold::Result<()> {
        let mut tx = db.begin_fenced("ledger", lease.fence()).await?;
        tx.execute(
            "UPDATE ledger SET writer = $1",
            &[leasehold::db::Param::Text(writer)],
        )
        .await?;
        tx.commit().await
    };
    write("first").await.unwrap();
    say("WRITING");
    tokio::time::sleep(ms(300)).await;
    match write("paused").await {
        Ok(()) => say("FENCED accepted"),
        Err(Error::StaleFence { .. }) => say("FENCED refused"),
        Err(e) => say(&format!("FENCED error {e}")),
    }
    let mut tx = db.begin().await.unwrap();
    tx.execute("UPDATE ledger_unfenced SET writer = 'paused'", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    say("UNFENCED written");
    let reason = tokio::time::timeout(ms(3_000), lease.lost().fired()).await;
    say(&format!("LOST {}", reason.is_ok()));
}

/// Five acquisitions of `race` (waiting for each), or five entries without a lease when
/// `locked` is false; inside, a shared counter must read 1, and the fence is logged with the
/// database's clock.
async fn racer(url: &str, prefix: &str, locked: bool) {
    let c = client(url, prefix).await;
    let mut conn = sql(url).await;
    let mut overlaps = 0;
    for _ in 0..5 {
        let lease = if locked {
            Some(c.acquire("race", &opts(5_000), ms(60_000)).await.unwrap())
        } else {
            None
        };
        let inside: i64 =
            sqlx::query_scalar("UPDATE race SET inside = inside + 1 RETURNING inside")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        if inside != 1 {
            overlaps += 1;
        }
        if let Some(l) = &lease {
            sqlx::query("INSERT INTO race_log (fence, at) VALUES ($1, clock_timestamp())")
                .bind(l.fence().as_i64())
                .execute(&mut conn)
                .await
                .unwrap();
        }
        tokio::time::sleep(ms(20)).await;
        sqlx::query("UPDATE race SET inside = inside - 1")
            .execute(&mut conn)
            .await
            .unwrap();
        if let Some(l) = lease {
            l.release().await.unwrap();
        }
    }
    say(&format!("OVERLAPS {overlaps}"));
}

/// What a child reports, line by line, until it exits.
fn lines(child: &mut Child) -> impl Iterator<Item = String> {
    BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.split_once(REPORT).map(|(_, report)| report.to_owned()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_process_paused_past_its_lease_is_refused_by_the_fence_an_unfenced_write_is_not() {
    let schema = PgSchema::create().await;
    let url = schema.url();
    let mut conn = sql(&url).await;
    for table in ["ledger", "ledger_unfenced"] {
        sqlx::query(leasehold::sqlx::AssertSqlSafe(format!(
            "CREATE TABLE {table} (writer TEXT)"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
        sqlx::query(leasehold::sqlx::AssertSqlSafe(format!(
            "INSERT INTO {table} VALUES ('none')"
        )))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    let mut child = spawn_child("paused-writer", &url, "paused");
    let pid = Pid::from_raw(child.id() as i32);
    let mut out = lines(&mut child);
    let first_fence: u64 = out
        .next()
        .and_then(|l| l.strip_prefix("FENCE ").and_then(|f| f.parse().ok()))
        .expect("the child reports its fence");
    assert_eq!(out.next().as_deref(), Some("WRITING"));
    kill(pid, Signal::SIGSTOP).unwrap();
    // Paused past its 1 s lease: the database expires it by its own clock, someone else takes it
    // and writes with a larger fence.
    let other = client(&url, "paused").await;
    let b = other
        .acquire("nightly", &opts(5_000), ms(5_000))
        .await
        .unwrap();
    assert!(b.fence().get() > first_fence);
    let db = Database::connect(&url).await.unwrap();
    let mut tx = db.begin_fenced("ledger", b.fence()).await.unwrap();
    tx.execute("UPDATE ledger SET writer = 'second'", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    sqlx::query("UPDATE ledger_unfenced SET writer = 'second'")
        .execute(&mut conn)
        .await
        .unwrap();
    kill(pid, Signal::SIGCONT).unwrap();
    let rest: Vec<String> = out.collect();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        rest,
        ["FENCED refused", "UNFENCED written", "LOST true"],
        "the paused holder's fenced write must be refused and its loss signalled"
    );
    let fenced: String = sqlx::query_scalar("SELECT writer FROM ledger")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let unfenced: String = sqlx::query_scalar("SELECT writer FROM ledger_unfenced")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(fenced, "second");
    assert_eq!(
        unfenced, "paused",
        "the unsafe variant: without a fence the paused holder overwrote the new holder's write"
    );
    b.release().await.unwrap();
}

async fn race(url: &str, role: &str) -> (u32, Vec<i64>) {
    let mut conn = sql(url).await;
    sqlx::raw_sql(
        "DROP TABLE IF EXISTS race; CREATE TABLE race (inside BIGINT NOT NULL); \
         INSERT INTO race VALUES (0); DROP TABLE IF EXISTS race_log; \
         CREATE TABLE race_log (fence BIGINT NOT NULL, at TIMESTAMPTZ NOT NULL)",
    )
    .execute(&mut conn)
    .await
    .unwrap();
    let mut children: Vec<Child> = (0..4).map(|_| spawn_child(role, url, "race")).collect();
    let mut overlaps = 0;
    for child in &mut children {
        let last = lines(child).last().unwrap_or_default();
        overlaps += last
            .strip_prefix("OVERLAPS ")
            .and_then(|n| n.parse::<u32>().ok())
            .expect("the child reports its overlaps");
        assert!(child.wait().unwrap().success());
    }
    let fences: Vec<i64> = sqlx::query_scalar("SELECT fence FROM race_log ORDER BY at")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    (overlaps, fences)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_holder_processes_never_overlap_and_their_fences_grow() {
    let schema = PgSchema::create().await;
    let url = schema.url();
    let (overlaps, fences) = race(&url, "racer").await;
    assert_eq!(overlaps, 0, "two processes held the lease at once");
    assert_eq!(fences.len(), 20);
    assert!(
        fences.windows(2).all(|w| w[1] > w[0]),
        "fences in holding order must strictly increase: {fences:?}"
    );
    // The unsafe variant: the same processes without the lease do overlap.
    let (overlaps, _) = race(&url, "unlocked-racer").await;
    assert!(
        overlaps > 0,
        "the overlap detector saw nothing without a lease"
    );
}

// ---- bad input --------------------------------------------------------------------------------

#[tokio::test]
async fn bad_urls_a_database_down_or_never_migrated_get_clear_errors_and_hide_the_password() {
    // Malformed.
    let e = LeaseClient::connect("postgres://u:s3cret@host:notaport/db")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "{e:?}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    // Down: nothing listens on the port.
    let port = leasehold_testkit::free_port();
    let e = LeaseClient::builder(format!("postgres://u:s3cret@127.0.0.1:{port}/db"))
        .connect_timeout(ms(500))
        .connect()
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    // Reachable, but leasehold's tables were never created: the message names the fix.
    let empty = format!("lh_empty_{:016x}", rand::random::<u64>());
    let url = with_search_path(&leasehold_testkit::postgres_url(), &empty);
    let e = LeaseClient::connect(&url).await.unwrap_err();
    match &e {
        Error::Invalid { what, why } => {
            assert_eq!(*what, "database schema");
            assert!(
                why.contains("leasehold migrate") && why.contains("migrate()"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
    // A Redis-only option is refused before anything is sent, and nothing is left held.
    let schema = PgSchema::create().await;
    let c = client(&schema.url(), "bad").await;
    let replicas = LeaseOptions::builder()
        .wait_for_replicas(1, ms(100), leasehold::ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    let e = c.try_acquire("x", &replicas).await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Invalid {
                what: "replica wait",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(!c.inspect("x").await.unwrap().held);
    assert_eq!(c.store_kind(), leasehold::StoreKind::POSTGRES);
    assert!(c.key_of("x").unwrap().contains("leasehold_leases"));
    // A client's Debug output and location never show the password: the test URL's own, or one
    // added where it has none (the local test server trusts local connections).
    let url = schema.url();
    let userinfo = url
        .split_once("://")
        .and_then(|(_, rest)| rest.split_once('@'))
        .map(|(userinfo, _)| userinfo.to_owned())
        .unwrap_or_default();
    let (url, secret) = match userinfo.split_once(':') {
        Some((_, password)) if !password.is_empty() => (url.clone(), password.to_owned()),
        _ => (
            url.replacen(
                &format!("://{userinfo}@"),
                &format!("://{userinfo}:s3cret@"),
                1,
            ),
            "s3cret".to_owned(),
        ),
    };
    let c = client(&url, "bad").await;
    let waiting = c.acquire("y", &opts(1_000), ms(10)).await; // opens the listening session
    assert!(waiting.is_ok(), "{waiting:?}");
    // The forms a password takes when printed: in a URL, or as a quoted string field. (A test
    // password such as `postgres` also appears as the user name, so a bare search would not do.)
    for shown in [format!("{c:?}"), c.location().to_owned()] {
        for leak in [format!(":{secret}@"), format!("\"{secret}\"")] {
            assert!(!shown.contains(&leak), "{shown}");
        }
    }
}

/// A login PostgreSQL refuses (no such role, or a wrong password: SQLSTATE 28000 / 28P01) is the
/// credentials' fault (`Error::Unauthorized`, exit 77 in the CLI), not an outage to retry (69).
#[tokio::test]
async fn a_refused_login_is_unauthorized_not_unreachable() {
    let url = leasehold_testkit::postgres_url();
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let bad = format!("{scheme}://leasehold_no_such_role:not-the-pw@{host}");
    match LeaseClient::connect(&bad).await.err() {
        Some(e @ Error::Unauthorized { .. }) => {
            let shown = e.to_string();
            assert!(
                !shown.contains("not-the-pw"),
                "the password is redacted: {shown}"
            );
        }
        other => panic!("{bad}: {other:?}"),
    }
    // The right credentials on the same server connect: the test tells the two apart.
    let schema = PgSchema::create().await;
    client(&schema.url(), "auth").await;
}

/// The lease contract suite (`leasehold::contract_suite!`: the tests every store runs, a store written
/// outside the crate too) on this store.
mod contract {
    #[allow(unused_imports)]
    use super::lease_support;
    #[allow(unused_imports)]
    use super::lease_support::contract::*;

    leasehold::contract_suite!(Env::open("postgres", async {
        // A schema of its own on the test PostgreSQL database, migrated.
        lease_support::pg::PgSchema::create().await
    }));
}
