//! `leasehold` with a PostgreSQL store, end to end: the real binary against the test database, each
//! test in a schema of its own (created empty; `leasehold migrate` makes the tables).

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use leasehold::db::Database;

const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// An empty schema on the test database, dropped on drop.
struct Schema {
    name: String,
    base: String,
}

fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}

impl Schema {
    fn new() -> Schema {
        let base = leasehold_testkit::postgres_url();
        let name = format!("lh_cli_{:016x}", rand::random::<u64>());
        block_on(async {
            let db = Database::builder(&base)
                .postgres_schema(&name)
                .max_connections(1)
                .connect()
                .await
                .expect("PostgreSQL must be reachable (LEASEHOLD_TEST_DATABASE_URL)");
            db.close().await;
        });
        Schema { name, base }
    }

    /// The store URL, whose connections use this schema.
    fn url(&self) -> String {
        let sep = if self.base.contains('?') { '&' } else { '?' };
        format!("{}{sep}options[search_path]={}", self.base, self.name)
    }

    fn migrated() -> Schema {
        let s = Schema::new();
        let o = run_out(leasehold().args(["migrate", "--store", &s.url()]));
        assert_eq!(o.status.code(), Some(0), "migrate: {}", stderr(&o));
        s
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        // Drop may run inside a panicking test; a thread keeps the runtime out of its way.
        let _ = std::thread::spawn(move || {
            block_on(async {
                if let Ok(db) = Database::connect(&base).await {
                    if let Ok(mut tx) = db.begin().await {
                        let _ = tx
                            .execute(
                                leasehold::sqlx::AssertSqlSafe(format!(
                                    "DROP SCHEMA IF EXISTS {name} CASCADE"
                                )),
                                &[],
                            )
                            .await;
                        let _ = tx.commit().await;
                    }
                    db.close().await;
                }
            })
        })
        .join();
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

#[test]
fn migrate_then_run_status_list_and_force_release_on_postgres() {
    let s = Schema::migrated();
    let url = s.url();
    // Migrating again changes nothing.
    let o = run_out(leasehold().args(["migrate", "--store", &url]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // The nightly job: the command sees its fence.
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
    let fence: u64 = out
        .trim()
        .strip_prefix("fence=")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("no fence in {out:?}"));
    assert!(out.contains("name=nightly-report"), "{out}");

    // Released afterwards: status shows it free with its last fence.
    let o = run_out(leasehold().args(["status", "--json", "--store", &url, "nightly-report"]));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(v["store"], "postgres");
    assert_eq!(v["held"], false);
    assert_eq!(v["fence"], fence);

    // Held by a long command: a second run is busy (75), status and list see it held, a forced
    // release stops the command (76) and advances the fence.
    let mut holder = leasehold()
        .env("LEASEHOLD_STORE", &url)
        .args(["run", "--ttl", "3s", "nightly-report", "--", "sleep", "30"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(15);
    loop {
        let o = run_out(leasehold().args(["status", "--json", "--store", &url, "nightly-report"]));
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        if v["held"] == true {
            break;
        }
        assert!(Instant::now() < until, "the holder never got the lease");
        std::thread::sleep(Duration::from_millis(50));
    }
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
    assert!(v["fence"].as_u64().unwrap() > fence);
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
fn a_database_without_the_tables_is_exit_2_naming_leasehold_migrate() {
    let s = Schema::new();
    for args in [
        vec!["run", "--store", &s.url(), "job", "--", "true"],
        vec!["status", "--store", &s.url(), "job"],
        vec!["list", "--store", &s.url()],
        vec!["release", "--force", "--store", &s.url(), "job"],
    ] {
        let o = run_out(leasehold().args(&args));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("leasehold migrate"), "{}", stderr(&o));
    }
}

#[test]
fn a_malformed_url_is_2_a_server_down_is_69_and_the_password_is_never_printed() {
    let port = leasehold_testkit::free_port();
    let down = format!("postgres://app:hunter2@127.0.0.1:{port}/app");
    for args in [
        vec!["run", "--store", &down, "job", "--", "true"],
        vec!["status", "--store", &down, "job"],
        vec!["list", "--store", &down],
        vec!["release", "--force", "--store", &down, "job"],
        vec!["migrate", "--store", &down],
    ] {
        let o = run_out(leasehold().args(&args));
        assert_eq!(o.status.code(), Some(69), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
        assert!(stderr(&o).contains("app:***@"), "{}", stderr(&o));
    }
    let malformed = "postgres://app:hunter2@127.0.0.1:notaport/app";
    for args in [
        vec!["run", "--store", malformed, "job", "--", "true"],
        vec!["status", "--store", malformed, "job"],
        vec!["migrate", "--store", malformed],
    ] {
        let o = run_out(leasehold().args(&args));
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
    }
    let o = run_out(leasehold().args(["migrate", "--store", "redis://127.0.0.1:6379"]));
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}

#[test]
fn refused_credentials_exit_77_not_69() {
    let url = leasehold_testkit::postgres_url();
    let (scheme, rest) = url.split_once("://").unwrap();
    let host = rest.rsplit_once('@').map_or(rest, |(_, host)| host);
    let bad = format!("{scheme}://leasehold_no_such_role:hunter2@{host}");
    for args in [
        vec!["status", "--store", &bad, "job"],
        vec!["run", "--store", &bad, "job", "--", "true"],
        vec!["migrate", "--store", &bad],
    ] {
        let o = run_out(leasehold().args(&args));
        assert_eq!(o.status.code(), Some(77), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
    }
}
