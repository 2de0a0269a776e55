//! MariaDB for the lease tests: a database of its own per test on the shared test server (or a
//! private one), migrated, and dropped when the test ends.

use leasehold::db::Database;

/// A migrated database, dropped on drop.
pub struct MyDatabase {
    /// The database's name.
    pub name: String,
    /// The server URL without the database.
    root: String,
}

impl MyDatabase {
    /// Creates and migrates a fresh database on the test server (`LEASEHOLD_TEST_MYSQL_URL`).
    pub async fn create() -> MyDatabase {
        Self::create_on(&leasehold_testkit::mysql_url()).await
    }

    /// Creates and migrates a fresh database on the server at `url` (its database is only used to
    /// log in).
    pub async fn create_on(url: &str) -> MyDatabase {
        let name = format!("lh_lease_{:016x}", rand::random::<u64>());
        let admin = Database::builder(url)
            .max_connections(1)
            .connect()
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
        let me = MyDatabase {
            name,
            root: root_of(url),
        };
        let db = Database::connect(&me.url()).await.unwrap();
        db.migrate().await.expect("migrate the test database");
        db.close().await;
        me
    }

    /// The store URL of this database.
    pub fn url(&self) -> String {
        format!("{}/{}", self.root, self.name)
    }
}

/// `url` without its path and query.
fn root_of(url: &str) -> String {
    let head = url.split('?').next().unwrap_or(url);
    let after_scheme = head.find("://").map_or(0, |i| i + 3);
    match head[after_scheme..].find('/') {
        Some(i) => head[..after_scheme + i].to_owned(),
        None => head.to_owned(),
    }
}

impl Drop for MyDatabase {
    fn drop(&mut self) {
        let (url, name) = (self.url(), self.name.clone());
        // Drop runs inside the test's runtime, which must not block on itself: use a thread with a
        // runtime of its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for dropping the database");
            rt.block_on(async {
                if let Ok(db) = Database::builder(&url).max_connections(1).connect().await {
                    if let Ok(mut tx) = db.begin().await {
                        let _ = tx
                            .execute(
                                leasehold::sqlx::AssertSqlSafe(format!(
                                    "DROP DATABASE IF EXISTS {name}"
                                )),
                                &[],
                            )
                            .await;
                        let _ = tx.commit().await;
                    }
                    db.close().await;
                }
            });
        })
        .join();
    }
}
