//! Real databases for the SQL tests: PostgreSQL in a schema of its own per test, MariaDB/MySQL in a
//! database of its own per test (so tests run in parallel without colliding), SQLite in a temporary
//! file.
#![allow(dead_code, unreachable_pub)]

use leasehold::db::{Backend, Database};

/// A migrated database that cleans up after itself when [`TestDb::cleanup`] is awaited.
pub struct TestDb {
    pub db: Database,
    /// PostgreSQL schema to drop at the end.
    schema: Option<String>,
    /// MariaDB database to drop at the end.
    mysql_database: Option<String>,
    /// Keeps the SQLite file alive.
    _dir: Option<tempfile::TempDir>,
    /// How to open a second, independent pool on the same database (as another process would).
    url: String,
}

impl TestDb {
    pub fn backend(&self) -> Backend {
        self.db.backend()
    }

    /// A second pool on the same database, sharing nothing with the first but the data.
    pub async fn another_pool(&self) -> Database {
        let mut b = Database::builder(&self.url);
        if let Some(schema) = &self.schema {
            b = b.postgres_schema(schema);
        }
        b.connect().await.unwrap()
    }

    /// Drops the PostgreSQL schema (a failing test leaves it behind for inspection).
    pub async fn cleanup(self) {
        self.db.close().await;
        if let Some(schema) = self.schema {
            let db = Database::connect(&leasehold_testkit::postgres_url())
                .await
                .unwrap();
            let mut tx = db.begin().await.unwrap();
            tx.execute(
                leasehold::sqlx::AssertSqlSafe(format!("DROP SCHEMA IF EXISTS {schema} CASCADE")),
                &[],
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            db.close().await;
        }
        if let Some(name) = self.mysql_database {
            drop_mysql_database(&name).await;
        }
    }
}

/// `base` (a MariaDB URL) pointing at database `name`.
fn mysql_url_for(base: &str, name: &str) -> String {
    let (head, query) = base.split_once('?').map_or((base, ""), |(h, q)| (h, q));
    let root = head.rsplit_once('/').map_or(head, |(r, _)| r);
    let query = if query.is_empty() {
        String::new()
    } else {
        format!("?{query}")
    };
    format!("{root}/{name}{query}")
}

async fn drop_mysql_database(name: &str) {
    let db = Database::connect(&leasehold_testkit::mysql_url())
        .await
        .unwrap();
    let mut tx = db.begin().await.unwrap();
    tx.execute(
        leasehold::sqlx::AssertSqlSafe(format!("DROP DATABASE IF EXISTS {name}")),
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    db.close().await;
}

pub async fn mysql_with(max_connections: u32) -> TestDb {
    let name = format!("lh_test_{:016x}", rand::random::<u64>());
    let admin = Database::connect(&leasehold_testkit::mysql_url())
        .await
        .expect("MariaDB must be reachable (LEASEHOLD_TEST_MYSQL_URL)");
    let mut tx = admin.begin().await.unwrap();
    tx.execute(
        leasehold::sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")),
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    admin.close().await;
    let url = mysql_url_for(&leasehold_testkit::mysql_url(), &name);
    let db = Database::builder(&url)
        .max_connections(max_connections)
        .connect()
        .await
        .unwrap();
    db.migrate().await.unwrap();
    TestDb {
        db,
        schema: None,
        mysql_database: Some(name),
        _dir: None,
        url,
    }
}

pub async fn mysql() -> TestDb {
    mysql_with(10).await
}

pub async fn postgres_with(max_connections: u32) -> TestDb {
    let schema = format!("lh_test_{:016x}", rand::random::<u64>());
    let db = Database::builder(leasehold_testkit::postgres_url())
        .postgres_schema(&schema)
        .max_connections(max_connections)
        .connect()
        .await
        .expect("PostgreSQL must be reachable (LEASEHOLD_TEST_DATABASE_URL)");
    db.migrate().await.unwrap();
    TestDb {
        db,
        schema: Some(schema),
        mysql_database: None,
        _dir: None,
        url: leasehold_testkit::postgres_url(),
    }
}

pub async fn postgres() -> TestDb {
    postgres_with(10).await
}

pub async fn sqlite() -> TestDb {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("test.db").display());
    let db = Database::connect(&url).await.unwrap();
    db.migrate().await.unwrap();
    TestDb {
        db,
        schema: None,
        mysql_database: None,
        _dir: Some(dir),
        url,
    }
}

/// One of each backend compiled in (both with the default features), so that a build with one
/// database feature runs the same tests on that backend alone.
pub async fn each_backend() -> Vec<TestDb> {
    let mut dbs = Vec::new();
    if Backend::Postgres.is_compiled() {
        dbs.push(postgres().await);
    }
    if Backend::Sqlite.is_compiled() {
        dbs.push(sqlite().await);
    }
    if Backend::MySql.is_compiled() {
        dbs.push(mysql().await);
    }
    dbs
}

/// The tests' SQL for `backend`: MySQL keys cannot be `TEXT` (a key needs a length) and its casts
/// say `SIGNED`, not `BIGINT`; everything else the tests write is shared.
pub fn portable(backend: Backend, sql: &str) -> String {
    if backend == Backend::MySql {
        sql.replace("TEXT PRIMARY KEY", "VARCHAR(255) PRIMARY KEY")
            .replace("AS BIGINT)", "AS SIGNED)")
    } else {
        sql.to_owned()
    }
}

/// Creates a table with portable SQL.
pub async fn exec(db: &Database, sql: &str) {
    let mut tx = db.begin().await.unwrap();
    tx.execute(
        leasehold::sqlx::AssertSqlSafe(portable(db.backend(), sql)),
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}

/// Reads one BIGINT with portable SQL.
pub async fn scalar(db: &Database, sql: &str, params: &[leasehold::db::Param<'_>]) -> Option<i64> {
    let mut tx = db.begin().await.unwrap();
    let v = tx
        .fetch_i64(
            leasehold::sqlx::AssertSqlSafe(portable(db.backend(), sql)),
            params,
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    v
}
