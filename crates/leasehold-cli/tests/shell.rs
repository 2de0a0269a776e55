//! The command in a shell: completion scripts and the manual page from clap's own generators, help
//! that fits a terminal, and log lines on stderr under `-v`, `-q` and `RUST_LOG`.

mod cli_support;

use std::process::{Command, Output, Stdio};

use cli_support::{leasehold, BIN};
use leasehold_testkit::RedisServer;

/// `leasehold ARGS` with no store and none of its own environment, run to completion.
fn bare(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_STORE")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("leasehold runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn completions_name_the_public_subcommands_and_leave_the_internal_ones_out() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = bare(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        for sub in ["run", "elect", "status", "migrate", "completions"] {
            assert!(script.contains(sub), "{shell} completes `{sub}`");
        }
        // (`__bench-worker` is named in the help of bench's public `--worker-exe`.)
        for internal in ["__run-watcher", "__demo-worker", "__verify-worker"] {
            assert!(
                !script.contains(internal),
                "{shell}: the internal `{internal}` is not offered"
            );
        }
    }
}

#[test]
fn an_unknown_shell_is_a_usage_error_that_lists_the_known_ones() {
    let out = bare(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("tcsh") && err.contains("bash"), "{err}");
    assert!(out.stdout.is_empty(), "nothing half-written to stdout");
}

#[test]
fn the_manual_page_is_roff_naming_the_subcommands() {
    let out = bare(&["man"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let page = text(&out.stdout);
    assert!(
        page.starts_with(".ie") || page.starts_with(".TH"),
        "roff: {}",
        &page[..40]
    );
    assert!(page.contains(".TH leasehold"), "titled leasehold");
    for sub in ["run", "elect", "history", "release"] {
        assert!(page.contains(sub), "the page names `{sub}`");
    }
}

#[test]
fn short_help_gives_each_option_one_line_and_long_help_says_more() {
    for args in [
        &["-h"][..],
        &["run", "-h"],
        &["elect", "-h"],
        &["status", "-h"],
    ] {
        let short = bare(args);
        assert!(short.status.success(), "{args:?}");
        let short = text(&short.stdout);
        // In `-h` an option's line starts with its flag; its description never runs on to a next
        // line, which would start with spaces and no flag.
        let mut in_options = false;
        for line in short.lines() {
            if !line.is_empty() && !line.starts_with(' ') {
                // A section's header, or text after the sections (the example).
                in_options = line == "Options:";
                continue;
            }
            if in_options && !line.is_empty() {
                assert!(
                    line.trim_start().starts_with('-'),
                    "{args:?}: an option's help runs past one line: {line:?}\n{short}"
                );
            }
        }
        let long_args: Vec<&str> = args[..args.len() - 1]
            .iter()
            .copied()
            .chain(["--help"])
            .collect();
        let long = text(&bare(&long_args).stdout);
        assert!(
            long.len() > short.len(),
            "{long_args:?} says more than {args:?}"
        );
    }
}

#[test]
fn log_lines_follow_verbose_quiet_and_rust_log_and_never_show_a_password() {
    let redis = RedisServer::builder()
        .password("s3cret-pw")
        .start()
        .expect("redis-server starts");
    let run = |extra: &[&str], rust_log: Option<&str>| {
        let mut c = leasehold(&redis);
        c.args(extra).args(["status", "shell-log"]);
        if let Some(filter) = rust_log {
            c.env("RUST_LOG", filter);
        }
        let out = c.output().expect("leasehold runs");
        assert!(out.status.success(), "a free lease: {}", text(&out.stderr));
        text(&out.stderr)
    };
    let connected = "redis lease store connected";
    assert!(
        !run(&[], None).contains(connected),
        "warnings only by default"
    );
    assert!(!run(&["-v"], None).contains(connected), "-v is info");
    let debug = run(&["-vv"], None);
    assert!(debug.contains(connected), "-vv is debug: {debug}");
    assert!(
        !debug.contains("s3cret-pw"),
        "the log redacts the URL: {debug}"
    );
    assert!(
        run(&[], Some("leasehold=debug")).contains(connected),
        "RUST_LOG is read"
    );
    assert!(
        run(&["-q"], Some("")).is_empty(),
        "-q prints nothing on success"
    );
}
