//! The manual page, `--help`, options from `LEASEHOLD_*` variables and flock's short flags, as a
//! user meets them: the real binary.

use std::process::{Command, Output, Stdio};
use std::time::Duration;

use leasehold_testkit::RedisServer;

mod cli_support;
use cli_support::{clean_env, eventually, leasehold, BIN};

/// `leasehold` with no store reachable: whatever is refused must be refused before connecting
/// (exit 69 would say it was not).
fn offline(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(BIN);
    clean_env(&mut c)
        .env("LEASEHOLD_REDIS_URL", "redis://127.0.0.1:1")
        .envs(env.iter().copied())
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(o: &[u8]) -> String {
    String::from_utf8_lossy(o).into_owned()
}

#[test]
fn the_manual_page_has_every_option_exit_status_environment_and_files() {
    let out = offline(&["man"], &[]);
    assert_eq!(out.status.code(), Some(0));
    let page = text(&out.stdout);
    for want in [
        "\\-\\-ttl",
        "\\-\\-once\\-per",
        "\\-\\-metrics\\-file",
        "\\-\\-on\\-lead",
        "EXIT STATUS",
        "ENVIRONMENT",
        "FILES",
        "LEASEHOLD_STORE",
        "LEASEHOLD_TTL",
        "LEASEHOLD_FENCE",
        "126/127",
        ".SH \"LEASEHOLD RUN\"",
        ".SH \"LEASEHOLD CRON CHECK\"",
    ] {
        assert!(page.contains(want), "the page lacks {want}");
    }
    // Every variable an option of any subcommand reads is in ENVIRONMENT.
    for var in cli_support::OPTION_VARIABLES {
        assert!(
            page.contains(&format!("\\fB{var}\\fR")),
            "ENVIRONMENT lacks {var}"
        );
    }
    // No reference to pages that are never generated (leasehold-run(1) and the like).
    for name in ["run", "elect", "cron", "status"] {
        let page_name = format!("leasehold\\-{name}");
        assert!(
            !page.contains(&page_name),
            "a reference to {page_name}(1), which does not exist"
        );
    }
    assert!(!page.contains("__run\\-watcher") && !page.contains("__run-watcher"));
}

#[test]
fn help_is_wrapped_and_grouped_and_every_subcommand_lists_its_exit_statuses() {
    let out = offline(&["run", "--help"], &[("COLUMNS", "80")]);
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for heading in [
        "Store:",
        "Lease:",
        "Scheduled job (--once-per):",
        "Monitoring:",
        "Exit status:",
    ] {
        assert!(help.lines().any(|l| l == heading), "no {heading}\n{help}");
    }
    // Wrapped: only an unbreakable word (a URL form) may run past the width.
    let long: Vec<&str> = help
        .lines()
        .filter(|l| l.chars().count() > 100 && l.trim().contains(' '))
        .collect();
    assert!(long.is_empty(), "lines not wrapped: {long:#?}");
    assert!(help.contains("-w, --wait") && help.contains("-n, --no-wait"));
    assert!(help.contains("-E, --busy-exit-code"));
}

#[test]
fn bad_values_from_flags_or_variables_are_exit_2_naming_what_was_wrong() {
    let run = ["run", "x", "--", "true"];
    for (env, says) in [
        (("LEASEHOLD_TTL", "garbage"), "LEASEHOLD_TTL"),
        (("LEASEHOLD_WAIT", "30"), "LEASEHOLD_WAIT"),
        (("LEASEHOLD_GRACE", "-1s"), "LEASEHOLD_GRACE"),
        (
            ("LEASEHOLD_METRICS_ADDR", ":99999"),
            "LEASEHOLD_METRICS_ADDR",
        ),
        (("LEASEHOLD_HEALTH", "nowhere"), "LEASEHOLD_HEALTH"),
        (
            ("LEASEHOLD_BUSY_EXIT_CODE", "300"),
            "LEASEHOLD_BUSY_EXIT_CODE",
        ),
        (("LEASEHOLD_ON_SUSPECT", "maybe"), "LEASEHOLD_ON_SUSPECT"),
        (("LEASEHOLD_RETENTION", "soon"), "LEASEHOLD_RETENTION"),
    ] {
        let out = offline(&run, &[env]);
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{env:?}: {err}");
        assert!(err.contains(says) && err.contains(env.1), "{env:?}: {err}");
    }
    // A variable that conflicts with a flag is named too.
    let out = offline(
        &["run", "--once-per", "1h", "x", "--", "true"],
        &[("LEASEHOLD_WAIT", "5s")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("LEASEHOLD_WAIT"),
        "{}",
        text(&out.stderr)
    );
    // The flag wins over the variable.
    let out = offline(
        &["run", "--ttl", "garbage", "x", "--", "true"],
        &[("LEASEHOLD_TTL", "1m")],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !text(&out.stderr).contains("LEASEHOLD_TTL"),
        "{}",
        text(&out.stderr)
    );
    // Durations are echoed as written, not in milliseconds.
    let out = offline(&["run", "--ttl", "25h", "x", "--", "true"], &[]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("25h") && err.contains("1d") && !err.contains("90000000"),
        "{err}"
    );
    let out = offline(
        &["run", "--ttl", "3s", "--grace", "3s", "x", "--", "true"],
        &[],
    );
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("3s lease") && !err.contains(" ms"), "{err}");
}

#[test]
fn flocks_short_flags_and_options_from_the_environment_work() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let mut holder = leasehold(&redis)
        .args(["run", "--ttl", "10s", "busy", "--", "sh", "-c"])
        .arg(format!("touch {}; sleep 4", started.display()))
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(15), || started.exists()));
    // -n: no wait, even with a wait in the environment; -E: the busy code.
    let out = leasehold(&redis)
        .env("LEASEHOLD_WAIT", "20s")
        .args(["run", "-n", "-E", "9", "busy", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(9), "{}", text(&out.stderr));
    // -w and the busy code from the environment.
    let out = leasehold(&redis)
        .env("LEASEHOLD_BUSY_EXIT_CODE", "8")
        .args(["run", "-w", "200ms", "busy", "--", "true"])
        .output()
        .unwrap();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(8), "{err}");
    assert!(err.contains("after waiting 200ms"), "{err}");
    // LEASEHOLD_WAIT alone makes a waiter that gets the lease once the holder is done.
    let out = leasehold(&redis)
        .env("LEASEHOLD_WAIT", "20s")
        .env("LEASEHOLD_TTL", "2s")
        .args(["run", "busy", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(holder.wait().unwrap().success());
}
