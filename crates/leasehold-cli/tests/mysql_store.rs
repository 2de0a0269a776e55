//! `leasehold` with a MariaDB store (`mysql://`, `mariadb://`), end to end: the real binary against
//! the test MariaDB server (`LEASEHOLD_TEST_MYSQL_URL`), each test in a database of its own (created
//! empty; `leasehold migrate` makes the tables), and the lease looked at in MariaDB itself, so that a
//! command that took its lease anywhere else fails here.

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold::db::{Database, Param};

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// The key prefix `leasehold` uses when none is given: the lease rows' `prefix` column.
const DEFAULT_PREFIX: &str = "leasehold";

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

/// An empty database on the test server, dropped on drop.
struct MyDatabase {
    name: String,
    /// The server's URL without a database: `mysql://user:password@host:port`.
    root: String,
}

impl MyDatabase {
    fn new() -> MyDatabase {
        let server = leasehold_testkit::mysql_url();
        let name = format!("lh_cli_{:016x}", rand::random::<u64>());
        run_sql(&server, &format!("CREATE DATABASE {name}"));
        MyDatabase {
            name,
            root: root_of(&server),
        }
    }

    /// The store URL of this database, with `scheme` (`mysql` or `mariadb`).
    fn url(&self, scheme: &str) -> String {
        let rest = self.root.split_once("://").map_or("", |(_, rest)| rest);
        format!("{scheme}://{rest}/{}", self.name)
    }

    /// What MariaDB itself holds for lease `name` under the default prefix: (fence, held now),
    /// where held means a holder's token with a lease that has not run out on the server's clock.
    fn lease_row(&self, name: &str) -> Option<(i64, bool)> {
        let url = self.url("mysql");
        block_on(async {
            let db = Database::builder(&url)
                .max_connections(1)
                .connect()
                .await
                .expect("the test MariaDB");
            let mut tx = db.begin().await.unwrap();
            let params = [Param::Text(DEFAULT_PREFIX), Param::Text(name)];
            let fence = tx
                .fetch_i64(
                    "SELECT fence FROM leasehold_leases WHERE prefix = $1 AND name = $2",
                    &params,
                )
                .await
                .unwrap();
            let held = tx
                .fetch_i64(
                    "SELECT CAST(token IS NOT NULL AND expires_at > UTC_TIMESTAMP(6) AS SIGNED) \
                     FROM leasehold_leases WHERE prefix = $1 AND name = $2",
                    &params,
                )
                .await
                .unwrap();
            tx.commit().await.unwrap();
            db.close().await;
            fence.map(|f| (f, held == Some(1)))
        })
    }

    /// Whether the database has leasehold's lease table (MariaDB's own catalogue says).
    fn has_lease_table(&self) -> bool {
        let url = self.url("mysql");
        let name = self.name.clone();
        block_on(async move {
            let db = Database::connect(&url).await.expect("the test MariaDB");
            let mut tx = db.begin().await.unwrap();
            let n = tx
                .fetch_i64(
                    "SELECT COUNT(*) FROM information_schema.tables \
                     WHERE table_schema = $1 AND table_name = 'leasehold_leases'",
                    &[Param::Text(&name)],
                )
                .await
                .unwrap();
            tx.commit().await.unwrap();
            db.close().await;
            n == Some(1)
        })
    }
}

impl Drop for MyDatabase {
    fn drop(&mut self) {
        let (server, name) = (leasehold_testkit::mysql_url(), self.name.clone());
        // Drop may run inside a panicking test; a thread keeps the runtime out of its way.
        let _ = std::thread::spawn(move || {
            run_sql(&server, &format!("DROP DATABASE IF EXISTS {name}"))
        })
        .join();
    }
}

/// Runs one statement of the test's own on the server at `url`.
fn run_sql(url: &str, sql: &str) {
    let url = url.to_owned();
    let sql = sql.to_owned();
    block_on(async move {
        let db = Database::builder(&url)
            .max_connections(1)
            .connect()
            .await
            .expect("MariaDB must be reachable (LEASEHOLD_TEST_MYSQL_URL)");
        let mut tx = db.begin().await.unwrap();
        tx.execute(leasehold::sqlx::AssertSqlSafe(sql), &[])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        db.close().await;
    });
}

/// `url` without its database and query.
fn root_of(url: &str) -> String {
    let head = url.split('?').next().unwrap_or(url);
    let after_scheme = head.find("://").map_or(0, |i| i + 3);
    match head[after_scheme..].find('/') {
        Some(i) => head[..after_scheme + i].to_owned(),
        None => head.to_owned(),
    }
}

/// `leasehold` with a clean environment for its own variables.
fn leasehold() -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_STORE")
        .env_remove("LEASEHOLD_KEY_PREFIX")
        .env("NO_COLOR", "1");
    c
}

fn run_out(c: &mut Command) -> Output {
    c.stdin(Stdio::null()).output().expect("leasehold runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Polls `f` every 50 ms for up to 15 s; panics with `what` if it never holds.
fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(15);
    while !f() {
        assert!(Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn migrate_then_run_holds_the_lease_in_mariadb_itself() {
    let db = MyDatabase::new();
    let url = db.url("mysql");

    // Before the migration the store refuses, naming the fix.
    let o = run_out(leasehold().args(["run", "--store", &url, "nightly-report", "--", "true"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("leasehold migrate"), "{}", stderr(&o));
    assert!(!db.has_lease_table());

    let o = run_out(leasehold().args(["migrate", "--store", &url]));
    assert_eq!(o.status.code(), Some(0), "migrate: {}", stderr(&o));
    assert!(
        db.has_lease_table(),
        "migrate made no lease table in MariaDB"
    );
    // Migrating again, under the other scheme, changes nothing.
    let o = run_out(leasehold().args(["migrate", "--store", &db.url("mariadb")]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // The nightly job: the command sees the fence MariaDB issued, and the row is free afterwards.
    let o = run_out(leasehold().env("LEASEHOLD_STORE", &url).args([
        "run",
        "nightly-report",
        "--",
        "sh",
        "-c",
        "echo fence=$LEASEHOLD_FENCE name=$LEASEHOLD_NAME",
    ]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let fence: i64 = out
        .trim()
        .strip_prefix("fence=")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("no fence in {out:?}"));
    assert!(out.contains("name=nightly-report"), "{out}");
    assert_eq!(db.lease_row("nightly-report"), Some((fence, false)));
    let o = run_out(leasehold().args(["status", "--json", "--store", &url, "nightly-report"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["store"], "mysql");
    assert_eq!(v["held"], false);
    assert_eq!(v["fence"], fence);

    held_by_a_long_command(&db, fence);
}

/// A long command holds the lease (through `mariadb://`): MariaDB's own row says held, with a fence
/// above `fence`; a second run is busy (75); a forced release frees the row, advances the fence and
/// stops the command (76).
fn held_by_a_long_command(db: &MyDatabase, fence: i64) {
    let url = db.url("mysql");
    let mut holder = leasehold()
        .env("LEASEHOLD_STORE", db.url("mariadb"))
        .args(["run", "--ttl", "3s", "nightly-report", "--", "sleep", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the holder's lease never showed in MariaDB", || {
        db.lease_row("nightly-report")
            .is_some_and(|(f, held)| held && f > fence)
    });
    let (held_fence, _) = db.lease_row("nightly-report").unwrap();
    let o = run_out(leasehold().env("LEASEHOLD_STORE", &url).args([
        "run",
        "nightly-report",
        "--",
        "true",
    ]));
    assert_eq!(o.status.code(), Some(75), "{}", stderr(&o));
    let o = run_out(leasehold().args(["list", "--store", &url, "nightly-*"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("nightly-report: held"),
        "{}",
        stdout(&o)
    );
    let o = run_out(leasehold().args([
        "release",
        "--force",
        "--json",
        "--store",
        &url,
        "nightly-report",
    ]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["evicted"], true);
    let forced_fence = v["fence"].as_i64().unwrap();
    assert!(
        forced_fence > held_fence,
        "{forced_fence} after {held_fence}"
    );
    assert_eq!(db.lease_row("nightly-report"), Some((forced_fence, false)));
    let until = Instant::now() + Duration::from_secs(15);
    let status = loop {
        if let Some(st) = holder.try_wait().unwrap() {
            break st;
        }
        assert!(Instant::now() < until, "the evicted run did not stop");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(76));
}

#[test]
fn a_mariadb_down_is_69_and_the_password_is_never_printed() {
    let port = leasehold_testkit::free_port();
    for scheme in ["mysql", "mariadb"] {
        let down = format!("{scheme}://app:hunter2@127.0.0.1:{port}/app");
        let mut commands = vec![
            vec!["run", "--store", &down, "job", "--", "true"],
            vec!["status", "--store", &down, "job"],
        ];
        // Once is enough for migrate: it waits out its 10 s connect deadline.
        if scheme == "mysql" {
            commands.push(vec!["migrate", "--store", &down]);
        }
        for args in commands {
            let o = run_out(leasehold().args(&args));
            assert_eq!(o.status.code(), Some(69), "{args:?}: {}", stderr(&o));
            assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
            assert!(stderr(&o).contains("app:***@"), "{}", stderr(&o));
        }
    }
}
