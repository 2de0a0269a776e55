//! What the command-line tests share: the real binary with a clean environment for its own
//! variables, polling with a bound, and waiting for a child with one.
#![allow(dead_code)] // each test binary uses its own part

pub(crate) mod http;
pub(crate) mod tmux;

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use leasehold_testkit::RedisServer;

/// The `leasehold` binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// `leasehold` talking to `redis`, with none of its own environment variables inherited and stdin
/// closed; stdout and stderr are the caller's to set.
pub(crate) fn leasehold(redis: &RedisServer) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_STORE")
        .env_remove("LEASEHOLD_KEY_PREFIX")
        .env_remove("LEASEHOLD_RETENTION")
        .env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env("LEASEHOLD_REDIS_URL", redis.url())
        .stdin(Stdio::null());
    c
}

/// Polls until `cond` holds, for up to `within`; whether it did.
pub(crate) fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    while !cond() {
        if Instant::now() > until {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Waits for `child` to exit, for up to `within`; kills it and panics past that.
pub(crate) fn wait_with_timeout(child: &mut Child, within: Duration) -> ExitStatus {
    let until = Instant::now() + within;
    loop {
        if let Some(st) = child.try_wait().unwrap() {
            return st;
        }
        if Instant::now() > until {
            let _ = child.kill();
            panic!("leasehold did not exit within {within:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
