//! PostgreSQL for the lease tests: a schema of its own per test on the shared test database, migrated,
//! and dropped when the test ends (a failing test's schema is dropped too; its rows tell nothing
//! the assertion did not).

use leasehold::db::Database;

/// A migrated schema, dropped on drop.
pub struct PgSchema {
    /// The schema's name.
    pub name: String,
    /// The database URL without the schema.
    base: String,
}

impl PgSchema {
    /// Creates and migrates a fresh schema on the test database (`LEASEHOLD_TEST_DATABASE_URL`).
    pub async fn create() -> PgSchema {
        Self::create_on(&leasehold_testkit::postgres_url()).await
    }

    /// Creates and migrates a fresh schema on the database at `base`.
    pub async fn create_on(base: &str) -> PgSchema {
        let name = format!("lh_lease_{:016x}", rand::random::<u64>());
        let db = Database::builder(base)
            .postgres_schema(&name)
            .max_connections(1)
            .connect()
            .await
            .expect("PostgreSQL must be reachable (LEASEHOLD_TEST_DATABASE_URL)");
        db.migrate().await.expect("migrate the test schema");
        db.close().await;
        PgSchema {
            name,
            base: base.to_owned(),
        }
    }

    /// The store URL whose connections use this schema.
    pub fn url(&self) -> String {
        with_search_path(&self.base, &self.name)
    }
}

/// `base` with `search_path` set to `schema` on every connection it opens.
pub fn with_search_path(base: &str, schema: &str) -> String {
    let sep = if base.contains('?') { '&' } else { '?' };
    format!("{base}{sep}options[search_path]={schema}")
}

impl Drop for PgSchema {
    fn drop(&mut self) {
        let (base, name) = (self.base.clone(), self.name.clone());
        // Drop runs inside the test's runtime, which must not block on itself: use a thread with a
        // runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for dropping the schema");
            rt.block_on(async {
                if let Ok(mut conn) = <sqlx::PgConnection as sqlx::Connection>::connect(&base).await
                {
                    let sql = format!("DROP SCHEMA IF EXISTS {name} CASCADE");
                    let _ = sqlx::query(leasehold::sqlx::AssertSqlSafe(sql.as_str()))
                        .execute(&mut conn)
                        .await;
                }
            });
        })
        .join();
    }
}
