//! What `leasehold` writes on stderr, as cron, systemd and Kubernetes capture it: one line per
//! event (the holder's events are said once, in the command's words, not again as a log line) and
//! no colour codes unless stderr is a terminal; on a terminal, colour unless `NO_COLOR` is set.

use std::process::Stdio;
use std::time::Duration;

use leasehold_testkit::RedisServer;

mod cli_support;
use cli_support::tmux::Tmux;
use cli_support::{eventually, leasehold, wait_with_timeout};

/// A Redis whose memory policy may evict keys: `run --allow-eviction` on it logs a warning (a
/// library log line, not one of the command's own).
fn evicting_redis() -> RedisServer {
    RedisServer::builder()
        .arg("--maxmemory")
        .arg("100mb")
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start()
        .unwrap()
}

#[test]
fn through_a_pipe_each_event_is_one_plain_line() {
    let redis = evicting_redis();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let mut run = leasehold(&redis)
        .args([
            "run",
            "--allow-eviction",
            "--ttl",
            "5s",
            "piped",
            "--",
            "sh",
            "-c",
        ])
        .arg(format!(
            "touch {}; trap 'exit 0' TERM; while :; do sleep 0.05; done",
            started.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(15), || started.exists()));
    let o = leasehold(&redis)
        .args(["release", "--allow-eviction", "--force", "piped"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{o:?}");
    let st = wait_with_timeout(&mut run, Duration::from_secs(20));
    assert_eq!(st.code(), Some(76));
    let mut err = String::new();
    std::io::Read::read_to_string(run.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(!err.contains('\x1b'), "colour codes in a pipe: {err:?}");
    let about_loss: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("lost") && l.contains("piped"))
        .collect();
    assert_eq!(about_loss.len(), 1, "the loss said once: {err}");
    assert!(
        err.lines().filter(|l| l.contains("may evict")).count() == 1,
        "the library's own warning still shows, once: {err}"
    );
}

#[test]
fn on_a_terminal_colour_unless_no_color() {
    let redis = evicting_redis();
    for (no_color, coloured) in [(false, true), (true, false)] {
        let mut env = vec![("LEASEHOLD_REDIS_URL", redis.url())];
        if no_color {
            env.push(("NO_COLOR", "1".to_owned()));
        }
        let tmux = Tmux::start(&env);
        // The shell in the pane inherits the test's environment; NO_COLOR is set only as asked.
        if !no_color {
            tmux.type_line("unset NO_COLOR");
        }
        tmux.type_line(&format!(
            "{} run --allow-eviction term-{no_color} -- true; echo rc=$?",
            cli_support::BIN
        ));
        let plain = tmux.wait_for("rc=0");
        assert!(plain.contains("may evict"), "{plain}");
        let screen = tmux.screen_with_escapes();
        assert_eq!(
            screen.contains('\x1b'),
            coloured,
            "NO_COLOR={no_color}: {screen:?}"
        );
    }
}
