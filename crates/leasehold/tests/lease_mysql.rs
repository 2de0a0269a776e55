//! The MariaDB store's own faults, on real servers: a restart and a crash of MariaDB mid-lease (a
//! private server, never the shared one), a holder process killed and one paused past its lease
//! (its fenced write refused, its unfenced write not), a fence that keeps growing after the name's row
//! was deleted, and the errors a wrong URL, bad credentials, a missing permission or a database never
//! migrated get. Each fault test also runs the unsafe variant where there is one, to show the test
//! sees the failure it guards against.
//!
//! The holder processes are this test binary run again with `--ignored --exact child_process` and
//! the role in `LH_CHILD`; `child_process` does nothing when `LH_CHILD` is not set.
#![cfg(feature = "mysql")]

mod lease_support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lease_support::ms;
use lease_support::my::MyDatabase;
use leasehold::db::{Database, Param};
use leasehold::{Error, Fence, LeaseClient, LeaseOptions};
use leasehold_testkit::MariaDbServer;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::time::Instant;

async fn client(url: &str, prefix: &str) -> LeaseClient {
    LeaseClient::builder(url)
        .key_prefix(prefix)
        .response_timeout(ms(1_000))
        .connect_timeout(ms(1_000))
        .connect()
        .await
        .expect("connect the MariaDB lease store")
}

fn opts(ttl_ms: u64) -> LeaseOptions {
    LeaseOptions::with_ttl(ms(ttl_ms)).unwrap()
}

/// Runs one statement of the test's own on `url`.
async fn exec(url: &str, sql: &str, params: &[Param<'_>]) {
    let db = Database::builder(url)
        .max_connections(1)
        .connect()
        .await
        .unwrap();
    let mut tx = db.begin().await.unwrap();
    tx.execute(leasehold::sqlx::AssertSqlSafe(sql.to_owned()), params)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    db.close().await;
}

async fn text(url: &str, sql: &'static str) -> String {
    let db = Database::builder(url)
        .max_connections(1)
        .connect()
        .await
        .unwrap();
    let mut tx = db.begin().await.unwrap();
    let v: String =
        leasehold::with_conn!(tx, |c| sqlx::query_scalar(sql).fetch_one(c).await).unwrap();
    tx.commit().await.unwrap();
    db.close().await;
    v
}

/// A private server with leasehold's tables in its `test` database.
async fn private_server() -> MariaDbServer {
    let srv = tokio::task::spawn_blocking(MariaDbServer::start)
        .await
        .unwrap()
        .expect("start a private MariaDB (mariadb-server must be installed)");
    let db = Database::connect(&srv.url()).await.unwrap();
    db.migrate().await.unwrap();
    db.close().await;
    srv
}

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// How MariaDB goes away mid-lease.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Outage {
    /// A clean shutdown and a start, within the lease.
    Restart,
    /// SIGKILL, then InnoDB's crash recovery, within the lease.
    Crash,
    /// Stopped for longer than the lease.
    Long,
}

/// Asks for `job` every 50 ms until `stop`, recording when it got it and with which fence.
fn keep_asking(
    c: LeaseClient,
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<Vec<(Instant, Fence)>> {
    tokio::spawn(async move {
        let mut got = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            if let Ok(l) = c.try_acquire("job", &opts(3_000)).await {
                got.push((Instant::now(), l.fence()));
                let _ = l.release().await;
            }
            tokio::time::sleep(ms(50)).await;
        }
        got
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_or_crash_of_mariadb_mid_lease_keeps_or_loses_it_and_never_gives_two_holders() {
    let mut srv = private_server().await;
    let url = srv.url();
    let holder = client(&url, "restart").await;
    let contender = client(&url, "restart").await;
    let mut last_fence = Fence::new(0);
    for outage in [Outage::Restart, Outage::Crash, Outage::Long] {
        let a = holder.try_acquire("job", &opts(3_000)).await.unwrap();
        assert!(a.fence() > last_fence, "{} after {}", a.fence(), last_fence);
        let lost = {
            let signal = a.lost();
            tokio::spawn(async move {
                signal.fired().await;
                Instant::now()
            })
        };
        let stop = Arc::new(AtomicBool::new(false));
        let asking = keep_asking(contender.clone(), stop.clone());
        tokio::time::sleep(ms(300)).await;
        blocking(|| match outage {
            Outage::Restart => srv.restart(),
            Outage::Crash => srv.crash_restart(),
            Outage::Long => {
                srv.stop()?;
                std::thread::sleep(ms(3_500));
                srv.start_again()
            }
        })
        .unwrap();
        tokio::time::sleep(ms(2_000)).await;
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
                assert_ne!(outage, Outage::Long, "the lease outlived a longer outage");
                assert!(got.is_empty(), "two holders: the contender got {got:?}");
                let info = contender.inspect("job").await.unwrap();
                assert!(info.held && info.fence == Some(a.fence()), "{info:?}");
                last_fence = a.fence();
                a.release().await.unwrap();
            }
            Some(lost_at) => {
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
    let next = holder.try_acquire("job", &opts(2_000)).await.unwrap();
    assert!(next.fence() > last_fence);
    next.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fence_grows_after_the_row_is_gone_where_a_counter_would_restart() {
    let db = MyDatabase::create().await;
    let url = db.url();
    let c = client(&url, "swept").await;
    let a = c.try_acquire("job", &opts(5_000)).await.unwrap();
    let first = a.fence();
    a.release().await.unwrap();
    // What the idle sweep does after the retention (and what a restore from an old backup does).
    exec(
        &url,
        "DELETE FROM leasehold_leases WHERE prefix = 'swept'",
        &[],
    )
    .await;
    let b = c.try_acquire("job", &opts(5_000)).await.unwrap();
    assert!(b.fence() > first, "{} after {first}", b.fence());
    b.release().await.unwrap();
    // The unsafe variant: a per-name counter without the clock floor (`stored + 1` on a new row)
    // starts again at 1, below the fence the resource already accepted.
    let stored_in_a_new_row = 0_u64;
    assert!(Fence::new(stored_in_a_new_row + 1) < first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_process_frees_the_lease_at_its_ttl_and_the_next_fence_is_larger() {
    let db = MyDatabase::create().await;
    let url = db.url();
    let mut child = spawn_child("holder", &url, "killed");
    let mut out = lines(&mut child);
    let fence: u64 = out
        .next()
        .and_then(|l| l.strip_prefix("FENCE ").and_then(|f| f.parse().ok()))
        .expect("the child reports its fence");
    let c = client(&url, "killed").await;
    assert!(c.inspect("nightly").await.unwrap().held);
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    child.wait().unwrap();
    let started = Instant::now();
    let b = c
        .acquire("nightly", &opts(5_000), ms(10_000))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(b.fence().get() > fence);
    // The crashed holder's 1.5 s lease ran out by the database clock; nobody released it.
    assert!(waited <= ms(2_500), "{waited:?}");
    b.release().await.unwrap();
}

// ---- holder processes -------------------------------------------------------------------------

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

const REPORT: &str = "@@ ";

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{REPORT}{line}").unwrap();
    out.flush().unwrap();
}

fn lines(child: &mut Child) -> impl Iterator<Item = String> {
    BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| l.split_once(REPORT).map(|(_, report)| report.to_owned()))
}

/// Not a test: the body of the holder processes the tests start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a helper the process tests run in child processes"]
async fn child_process() {
    let Ok(role) = std::env::var("LH_CHILD") else {
        return;
    };
    let url = std::env::var("LH_CHILD_URL").unwrap();
    let prefix = std::env::var("LH_CHILD_PREFIX").unwrap();
    match role.as_str() {
        "holder" => {
            let c = client(&url, &prefix).await;
            let lease = c.try_acquire("nightly", &opts(1_500)).await.unwrap();
            say(&format!("FENCE {}", lease.fence()));
            tokio::time::sleep(ms(60_000)).await;
        }
        "paused-writer" => paused_writer(&url, &prefix).await,
        other => panic!("unknown role {other}"),
    }
}

/// Takes the lease, writes under it once, announces a second write and pauses briefly before doing
/// it (the parent SIGSTOPs it there): on resume it writes fenced to `ledger` and unfenced to
/// `ledger_unfenced`, and reports what happened.
async fn paused_writer(url: &str, prefix: &str) {
    let c = client(url, prefix).await;
    let db = Database::connect(url).await.unwrap();
    let lease = c.try_acquire("nightly", &opts(1_000)).await.unwrap();
    say(&format!("FENCE {}", lease.fence()));
    let write = async |writer: &str| -> leasehold::Result<()> {
        let mut tx = db.begin_fenced("ledger", lease.fence()).await?;
        tx.execute("UPDATE ledger SET writer = $1", &[Param::Text(writer)])
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_holder_process_paused_past_its_lease_is_refused_by_the_fence_an_unfenced_write_is_not() {
    let db = MyDatabase::create().await;
    let url = db.url();
    for table in ["ledger", "ledger_unfenced"] {
        exec(&url, &format!("CREATE TABLE {table} (writer TEXT)"), &[]).await;
        exec(&url, &format!("INSERT INTO {table} VALUES ('none')"), &[]).await;
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
    let other = client(&url, "paused").await;
    let b = other
        .acquire("nightly", &opts(5_000), ms(5_000))
        .await
        .unwrap();
    assert!(b.fence().get() > first_fence);
    let guards = Database::connect(&url).await.unwrap();
    let mut tx = guards.begin_fenced("ledger", b.fence()).await.unwrap();
    tx.execute("UPDATE ledger SET writer = 'second'", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    exec(&url, "UPDATE ledger_unfenced SET writer = 'second'", &[]).await;
    kill(pid, Signal::SIGCONT).unwrap();
    let rest: Vec<String> = out.collect();
    assert!(child.wait().unwrap().success());
    assert_eq!(
        rest,
        ["FENCED refused", "UNFENCED written", "LOST true"],
        "the paused holder's fenced write must be refused and its loss signalled"
    );
    assert_eq!(text(&url, "SELECT writer FROM ledger").await, "second");
    assert_eq!(
        text(&url, "SELECT writer FROM ledger_unfenced").await,
        "paused",
        "the unsafe variant: without a fence the paused holder overwrote the new holder's write"
    );
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_credentials_permissions_or_no_table_get_clear_errors_and_hide_the_password() {
    // Malformed.
    let e = LeaseClient::connect("mysql://u:s3cret@host:notaport/db")
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Invalid { .. }), "{e:?}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    // Down: nothing listens on the port.
    let port = leasehold_testkit::free_port();
    let e = LeaseClient::builder(format!("mariadb://u:s3cret@127.0.0.1:{port}/db"))
        .connect_timeout(ms(500))
        .connect()
        .await
        .unwrap_err();
    assert!(e.is_unavailable(), "{e:?}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    let db = MyDatabase::create().await;
    let root = db.url();
    // A wrong password: Unauthorized (exit 77), not "unavailable".
    let user = format!("lh_u_{:08x}", rand::random::<u32>());
    exec(
        &root,
        &format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'right'"),
        &[],
    )
    .await;
    let wrong = with_user(&root, &user, "s3cret");
    let e = LeaseClient::connect(&wrong).await.unwrap_err();
    assert!(matches!(e, Error::Unauthorized { .. }), "{e:?}");
    assert!(!e.to_string().contains("s3cret"), "{e}");
    // The right password but no privilege on the database: Denied.
    let e = LeaseClient::connect(&with_user(&root, &user, "right"))
        .await
        .unwrap_err();
    assert!(matches!(e, Error::Denied { .. }), "{e:?}");
    // Read-only on the table: connect works, an acquire is Denied, nothing held.
    exec(
        &root,
        &format!("GRANT SELECT ON {}.* TO '{user}'@'%'", db.name),
        &[],
    )
    .await;
    let ro = client(&with_user(&root, &user, "right"), "bad").await;
    let e = ro.try_acquire("x", &opts(1_000)).await.unwrap_err();
    assert!(matches!(e, Error::Denied { .. }), "{e:?}");
    exec(&root, &format!("DROP USER '{user}'@'%'"), &[]).await;
    // Reachable, but never migrated: the message names the fix.
    exec(&root, "DROP TABLE leasehold_leases", &[]).await;
    let e = LeaseClient::connect(&root).await.unwrap_err();
    match &e {
        Error::Invalid { what, why } => {
            assert_eq!(*what, "database schema");
            assert!(why.contains("leasehold migrate"), "{why}");
        }
        other => panic!("{other:?}"),
    }
}

/// `url` with `user:password` as its credentials.
fn with_user(url: &str, user: &str, password: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{user}:{password}@{host}")
}

/// A port nobody listens on is "refused", at once: not "timed out after 4000 ms" after the pool's
/// two seconds of retrying.
#[tokio::test]
async fn a_refused_port_says_refused_at_once() {
    let url = format!(
        "mysql://leasehold:leasehold@127.0.0.1:{}/test",
        leasehold_testkit::free_port()
    );
    let started = Instant::now();
    let e = LeaseClient::builder(&url)
        .connect_timeout(ms(2_000))
        .connect()
        .await
        .unwrap_err();
    let took = started.elapsed();
    let report = e.report().to_string();
    assert!(report.contains("refused"), "{report}");
    assert!(!report.contains("timed out"), "{report}");
    assert!(e.is_unavailable(), "{e:?}");
    assert!(took < ms(1_000), "took {took:?}: {report}");
}

/// The lease contract suite (`leasehold::contract_suite!`: the tests every store runs, a store written
/// outside the crate too) on this store.
mod contract {
    #[allow(unused_imports)]
    use super::lease_support;
    #[allow(unused_imports)]
    use super::lease_support::contract::*;

    leasehold::contract_suite!(Env::open("mysql", async {
        // A database of its own on the test MariaDB server, migrated.
        lease_support::my::MyDatabase::create().await
    }));
}
