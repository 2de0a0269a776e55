//! Bad input to `leasehold bench` and its worker is refused with a message naming the problem, before
//! any server is started.

use std::process::{Command, Output};

fn leasehold(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(args)
        .output()
        .expect("run leasehold")
}

#[test]
fn garbage_arguments_are_refused_with_the_reason() {
    let cases: &[(&[&str], &str)] = &[
        (&["bench", "--seconds", "-1"], "--seconds"),
        (&["bench", "--seconds", "nan"], "--seconds"),
        (&["bench", "--leases", "0"], "--leases"),
        (&["bench", "--only", "s9"], "s9"),
        (&["__bench-worker", "s2"], "--redis-url"),
        (
            &[
                "__bench-worker",
                "s2",
                "--redis-url",
                "not a url",
                "--ttl-ms",
                "1",
            ],
            "ttl",
        ),
    ];
    for (args, needle) in cases {
        let out = leasehold(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr.contains(needle),
            "{args:?}: the error does not name {needle:?}:\n{stderr}"
        );
        assert!(!stderr.contains("panicked"), "{args:?} panicked:\n{stderr}");
    }
}

#[test]
fn a_worker_without_a_reachable_redis_fails_cleanly() {
    for lock in ["baseline-poll", "fifo-floor"] {
        let out = leasehold(&[
            "__bench-worker",
            "s2",
            "--lock",
            lock,
            "--redis-url",
            "redis://127.0.0.1:1/",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{lock}");
        assert!(stderr.contains("connecting"), "{lock}: {stderr}");
        assert!(!stderr.contains("panicked"), "{lock}: {stderr}");
    }
}
