//! Real databases for the SQL tests: PostgreSQL in a schema of its own per test (so tests run in
//! parallel without colliding), SQLite in a temporary file.
#![allow(dead_code, unreachable_pub)]

use leasehold::db::{Backend, Database};

/// A migrated database that cleans up after itself when [`TestDb::cleanup`] is awaited.
pub struct TestDb {
    pub db: Database,
    /// PostgreSQL schema to drop at the end.
    schema: Option<String>,
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
            tx.execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"), &[])
                .await
                .unwrap();
            tx.commit().await.unwrap();
            db.close().await;
        }
    }
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
    dbs
}

/// Creates a table with portable SQL.
pub async fn exec(db: &Database, sql: &str) {
    let mut tx = db.begin().await.unwrap();
    tx.execute(sql, &[]).await.unwrap();
    tx.commit().await.unwrap();
}

/// Reads one BIGINT with portable SQL.
pub async fn scalar(db: &Database, sql: &str, params: &[leasehold::db::Param<'_>]) -> Option<i64> {
    let mut tx = db.begin().await.unwrap();
    let v = tx.fetch_i64(sql, params).await.unwrap();
    tx.commit().await.unwrap();
    v
}
