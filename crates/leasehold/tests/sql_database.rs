//! The database handle: URLs pick the backend, bad settings are refused with a clear error, an
//! in-memory SQLite database works with every guard, and leasehold's migrations never touch sqlx's own
//! `_sqlx_migrations` table.

mod sql_support;

use leasehold::db::{Backend, Database};
use leasehold::{Error, Fence};

#[tokio::test]
async fn bad_settings_are_refused_with_what_to_do() {
    for url in ["mssql://u:hunter2@h/db", "", "redis://127.0.0.1"] {
        let err = Database::connect(url).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::Invalid {
                    what: "database url",
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(err.to_string().contains("sqlite::memory:"), "{err}");
    }
    let err = Database::builder("sqlite::memory:")
        .postgres_schema("x")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                what: "postgres schema",
                ..
            }
        ),
        "{err:?}"
    );
    let err = Database::builder(leasehold_testkit::postgres_url())
        .postgres_schema("x; DROP SCHEMA public")
        .connect()
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                what: "postgres schema",
                ..
            }
        ),
        "{err:?}"
    );
    let err = Database::builder("sqlite::memory:")
        .max_connections(0)
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }), "{err:?}");
}

#[tokio::test]
async fn in_memory_sqlite_works() {
    let db = Database::connect("sqlite::memory:").await.unwrap();
    assert_eq!(db.backend(), Backend::Sqlite);
    db.migrate().await.unwrap();
    let tx = db.begin_fenced("r", Fence::new(2)).await.unwrap();
    tx.commit().await.unwrap();
    assert!(matches!(
        db.begin_fenced("r", Fence::new(1)).await,
        Err(Error::StaleFence { .. })
    ));
    assert_eq!(
        leasehold::fence::current(&db, "r").await.unwrap(),
        Some(Fence::new(2))
    );
}

#[tokio::test]
async fn own_migrations_table_leaves_sqlx_migrations_alone() {
    for t in sql_support::each_backend().await {
        let mut tx = t.db.begin().await.unwrap();
        let sqlx_table = tx
            .fetch_i64(
                match t.backend() {
                    Backend::Postgres => {
                        "SELECT COUNT(*) FROM information_schema.tables \
                         WHERE table_schema = current_schema() AND table_name = '_sqlx_migrations'"
                    }
                    Backend::MySql => {
                        "SELECT COUNT(*) FROM information_schema.tables \
                         WHERE table_schema = DATABASE() AND table_name = '_sqlx_migrations'"
                    }
                    _ => "SELECT COUNT(*) FROM sqlite_master WHERE name = '_sqlx_migrations'",
                },
                &[],
            )
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(sqlx_table, Some(0));
        t.cleanup().await;
    }
}

#[tokio::test]
async fn forgetting_migrate_says_what_to_do() {
    let db = Database::connect("sqlite::memory:").await.unwrap();
    let err = db.begin_fenced("r", Fence::new(1)).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Invalid {
                what: "database schema",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("migrate()"), "{err}");
    let mut tx = db.begin().await.unwrap();
    let err = leasehold::inbox::Inbox::new("c")
        .unwrap()
        .record(&mut tx, "m")
        .await
        .unwrap_err();
    assert!(err.to_string().contains("migrate()"), "{err}");
}

#[tokio::test]
async fn forgetting_migrate_says_what_to_do_on_postgres() {
    let schema = format!("lh_test_nomig_{:08x}", rand::random::<u32>());
    let db = Database::builder(leasehold_testkit::postgres_url())
        .postgres_schema(&schema)
        .connect()
        .await
        .unwrap();
    let err = db.begin_fenced("r", Fence::new(1)).await.unwrap_err();
    assert!(err.to_string().contains("migrate()"), "{err}");
    let mut tx = db.begin().await.unwrap();
    tx.execute(
        leasehold::sqlx::AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")),
        &[],
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
}
