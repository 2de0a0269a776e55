//! The limits of `run --once-per` and `history` as a user meets them: a period's limits are
//! checked and reported as the period's (a long period's retention is derived without an error
//! the user cannot connect to their input), and `history --limit 0` is a usage error.

use leasehold_testkit::RedisServer;

mod cli_support;
use cli_support::leasehold;

fn run(redis: &RedisServer, args: &[&str]) -> (Option<i32>, String) {
    let o = leasehold(redis).args(args).output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn periods_up_to_the_longest_run_and_longer_ones_are_refused_as_the_period() {
    let redis = RedisServer::start().unwrap();
    for period in ["184d", "365d", "366d"] {
        let name = format!("yearly-{period}");
        let (code, err) = run(&redis, &["run", "--once-per", period, &name, "--", "true"]);
        assert_eq!(code, Some(0), "--once-per {period}: {err}");
        assert!(!err.contains("retention"), "{err}");
        // The slot is done: a second firing in the same slot does not run it.
        let (code, err) = run(
            &redis,
            &[
                "run",
                "--once-per",
                period,
                &name,
                "--",
                "sh",
                "-c",
                "exit 9",
            ],
        );
        assert_eq!(code, Some(0), "done once per slot: {err}");
    }
    let (code, err) = run(
        &redis,
        &["run", "--once-per", "400d", "too-long", "--", "true"],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("schedule period") && err.contains("400d") && err.contains("366d"),
        "the period's own limits, in the user's units: {err}"
    );
    assert!(!err.contains("retention"), "{err}");
    // An explicit retention out of range is still named as the retention.
    let (code, err) = run(&redis, &["run", "--retention", "800d", "r", "--", "true"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("retention") && err.contains("800d"), "{err}");
}

#[test]
fn history_limit_zero_is_a_usage_error() {
    let redis = RedisServer::start().unwrap();
    let (code, err) = run(&redis, &["history", "--limit", "0", "job"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--limit"), "{err}");
    let (code, err) = run(&redis, &["history", "--limit", "1", "job"]);
    assert_ne!(code, Some(2), "{err}");
}
