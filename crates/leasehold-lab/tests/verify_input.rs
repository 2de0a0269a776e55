//! `leasehold verify` refuses bad input with an error naming what was wrong, before it starts
//! anything, and reports a worker that cannot start as an error cell rather than a clean result.

use leasehold_lab::verify::{run, Fault, FencedWriter, Strategy, VerifyArgs, Workload};

#[tokio::test]
async fn a_database_url_of_an_unknown_kind_is_refused() {
    let args = VerifyArgs {
        database: Some("mysql://root@localhost/db".into()),
        ..VerifyArgs::default()
    };
    let err = run(args).await.unwrap_err().to_string();
    assert!(
        err.contains("--database") && err.contains("postgres://"),
        "{err}"
    );
}

#[tokio::test]
async fn the_psql_writer_without_a_postgres_resource_is_refused_naming_the_option_to_add() {
    for database in [
        None,
        Some("sqlite:///tmp/leasehold-verify-input.sqlite".to_owned()),
    ] {
        let args = VerifyArgs {
            database,
            fenced_writer: FencedWriter::Psql,
            ..VerifyArgs::default()
        };
        let err = run(args).await.unwrap_err().to_string();
        assert!(
            err.contains("--fenced-writer psql") && err.contains("--database postgres://"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_redis_address_without_a_scheme_is_refused() {
    let args = VerifyArgs {
        redis: Some("localhost:6379".into()),
        ..VerifyArgs::default()
    };
    let err = format!("{:#}", run(args).await.unwrap_err());
    assert!(err.contains("--redis"), "{err}");
}

#[tokio::test]
async fn a_worker_that_cannot_start_makes_an_error_cell_and_exit_code_2() {
    if !leasehold_testkit::redis_server_available() {
        panic!("redis-server is required (apt-get install -y redis-server)");
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cells.json");
    let args = VerifyArgs {
        workload: vec![Workload::Counter],
        fault: vec![Fault::Pause, Fault::NetCut],
        strategy: vec![Strategy::DB_GUARDS],
        worker_exe: Some(dir.path().join("no-such-program")),
        json: Some(json.clone()),
        ..VerifyArgs::default()
    };
    assert_eq!(run(args).await.unwrap(), 2);
    let cells: Vec<serde_json::Value> =
        serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    assert_eq!(cells.len(), 2);
    assert_eq!(cells[0]["status"], "error");
    assert!(
        cells[0]["note"].as_str().unwrap().contains("cannot spawn"),
        "{}",
        cells[0]
    );
    assert!(
        cells[0]["violations"].is_null(),
        "an error cell counts nothing"
    );
    assert_eq!(
        cells[1]["status"], "not-applicable",
        "no Redis, so no network fault"
    );
}
