//! What the command-line tests share: the real binary with a clean environment for its own
//! variables, polling with a bound, waiting for a child with one, the wall clock; `cron` has the
//! `leasehold cron` tests' stores, daemons and run records.
#![allow(dead_code)] // each test binary uses its own part

pub(crate) mod cron;
pub(crate) mod http;
pub(crate) mod tmux;

use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use leasehold_testkit::RedisServer;

/// The `leasehold` binary under test.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_leasehold");

/// `leasehold` talking to `redis`, with none of its own environment variables inherited and stdin
/// closed; stdout and stderr are the caller's to set.
pub(crate) fn leasehold(redis: &RedisServer) -> Command {
    let mut c = Command::new(BIN);
    clean_env(&mut c);
    c.env_remove("RUST_LOG")
        .env("NO_COLOR", "1")
        .env("LEASEHOLD_REDIS_URL", redis.url())
        .stdin(Stdio::null());
    c
}

/// The variables `leasehold` reads options from, which a test must not inherit.
pub(crate) const OPTION_VARIABLES: &[&str] = &[
    "LEASEHOLD_REDIS_URL",
    "LEASEHOLD_STORE",
    "LEASEHOLD_KEY_PREFIX",
    "LEASEHOLD_RETENTION",
    "LEASEHOLD_ALLOW_EVICTION",
    "LEASEHOLD_MULTIPLEXED_ONLY",
    "LEASEHOLD_TTL",
    "LEASEHOLD_GRACE",
    "LEASEHOLD_WAIT",
    "LEASEHOLD_ON_SUSPECT",
    "LEASEHOLD_BUSY_EXIT_CODE",
    "LEASEHOLD_METRICS_ADDR",
    "LEASEHOLD_HEALTH",
    "LEASEHOLD_METRICS_FILE",
    "LEASEHOLD_HOLDER",
];

/// Removes [`OPTION_VARIABLES`] from `c`'s environment.
pub(crate) fn clean_env(c: &mut Command) -> &mut Command {
    for var in OPTION_VARIABLES {
        c.env_remove(var);
    }
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

/// This machine's wall clock, in milliseconds since the Unix epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// Sleeps until the wall clock reads `ms` (at once if it has).
pub(crate) fn sleep_until(ms: u64) {
    let now = now_ms();
    if ms > now {
        std::thread::sleep(Duration::from_millis(ms - now));
    }
}
