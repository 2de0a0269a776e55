//! Exit codes of `leasehold`, in one place: the constants the code returns and [`TABLE`], which
//! `--help` and the manual page print (so the two never disagree with each other or the code).
//! Promise: each failure class has its own code (sysexits.h where one fits). Limit: the command's own
//! exit code passes through unchanged, so a command that itself exits 75 or 76 is indistinguishable
//! from leasehold saying "busy" or "lost"; use `--busy-exit-code` to move the busy code out of its way.

use leasehold::{Error, Report, StoreFailure};

/// Bad usage or configuration: unknown flag, bad duration, empty name, TTL out of range, permits
/// other than the name is in use with.
pub(crate) const USAGE: i32 = 2;
/// `leasehold leader`: nobody leads the election.
pub(crate) const NO_LEADER: i32 = 3;
/// The store unreachable or failing (EX_UNAVAILABLE).
pub(crate) const UNAVAILABLE: i32 = 69;
/// The store refused our credentials or a permission (EX_NOPERM).
pub(crate) const NOPERM: i32 = 77;
/// The store is configured in a way leasehold refuses to run on (EX_CONFIG): a replica, an evicting
/// policy, a key of the wrong type under leasehold's names.
pub(crate) const CONFIG: i32 = 78;
/// leasehold itself failed in a way that is a bug or an OS failure (EX_SOFTWARE).
pub(crate) const SOFTWARE: i32 = 70;
/// The lease is busy and no wait is left (EX_TEMPFAIL); changeable with `--busy-exit-code`.
pub(crate) const BUSY: i32 = 75;
/// The command succeeded but the lease could not be released (the store refused or did not answer
/// the release); it stays held until its TTL lapses, which the message says (EX_IOERR).
pub(crate) const NOT_RELEASED: i32 = 74;
/// The lease was lost while the command ran, or became suspect under `--on-suspect stop`; the
/// command was stopped (EX_PROTOCOL).
pub(crate) const LOST: i32 = 76;
/// The command exists but could not be executed (as shells report it).
pub(crate) const CANNOT_EXECUTE: i32 = 126;
/// The command was not found (as shells report it).
pub(crate) const NOT_FOUND: i32 = 127;

/// One exit status as `--help` and the manual page describe it.
#[derive(Debug)]
pub(crate) struct Status {
    /// The code, or what stands for it (`the command's`).
    pub(crate) code: &'static str,
    /// The subcommands that exit with it; empty: every one that talks to a store.
    pub(crate) commands: &'static [&'static str],
    /// What it means, and what to do.
    pub(crate) meaning: &'static str,
}

/// The subcommands that run a command under a lease.
const SUPERVISING: &[&str] = &["run", "elect"];

/// Every exit status of `leasehold`, in the order a reader looks for them.
pub(crate) const TABLE: &[Status] = &[
    Status {
        code: "the command's",
        commands: SUPERVISING,
        meaning: "it ran and exited with it (128+N if it died by signal N)",
    },
    Status {
        code: "0",
        commands: &[],
        meaning: "done (for `cron`: stopped by SIGTERM or SIGINT after draining)",
    },
    Status {
        code: "2",
        commands: &[],
        meaning:
            "bad usage or configuration: an unknown flag, a bad duration, address or environment \
                  variable, an empty name, a TTL out of range, a store URL this build or the \
                  library cannot open, --grace that does not fit the lease, --permits other than \
                  the name is in use with, a jobs file that does not read",
    },
    Status {
        code: "3",
        commands: &["leader"],
        meaning: "nobody leads the election",
    },
    Status {
        code: "69",
        commands: &[],
        meaning: "the store did not answer (unreachable, timed out, loading, mid-failover; \
                  Redlock: fewer than a majority of the masters): retry later",
    },
    Status {
        code: "70",
        commands: &[],
        meaning: "leasehold itself failed, e.g. its watcher process was killed (the command was \
                  stopped), or the store answered an error leasehold does not know",
    },
    Status {
        code: "74",
        commands: SUPERVISING,
        meaning: "the command exited 0 but the lease could not be released; it stays held until \
                  its TTL lapses, which the message says",
    },
    Status {
        code: "75",
        commands: SUPERVISING,
        meaning: "busy and no wait left (not leader within --wait, for `elect`); change it with \
                  --busy-exit-code (-E)",
    },
    Status {
        code: "76",
        commands: SUPERVISING,
        meaning: "the lease was lost while the command ran, or became suspect under --on-suspect \
                  stop; the command was stopped",
    },
    Status {
        code: "77",
        commands: &[],
        meaning: "the store refused our credentials, or the Redis user may not run a command or \
                  touch a key; the message names what to grant",
    },
    Status {
        code: "78",
        commands: &[],
        meaning: "the store is configured in a way that breaks the lease: a replica, an evicting \
                  memory policy, a key under leasehold's names that leasehold did not write",
    },
    Status {
        code: "126/127",
        commands: SUPERVISING,
        meaning: "the command could not be executed / was not found",
    },
];

/// The statuses `command` can exit with, as `--help` shows them after its options.
pub(crate) fn section(command: &str) -> String {
    let mut out = String::from("Exit status:\n");
    for s in TABLE
        .iter()
        .filter(|s| s.commands.is_empty() || s.commands.contains(&command))
    {
        out.push_str(&format!("  {:<14}{}\n", s.code, s.meaning));
    }
    out
}

/// The exit code for a library error that ends the command before the child ran.
pub(crate) fn for_error(e: &Error, busy_code: i32) -> i32 {
    match e {
        Error::Invalid { .. } | Error::PermitsInUse { .. } => USAGE,
        Error::Unauthorized { .. } | Error::Denied { .. } => NOPERM,
        Error::Misconfigured { .. } => CONFIG,
        Error::Busy { .. } | Error::WaitTimeout { .. } => busy_code,
        Error::LeaseLost { .. } => LOST,
        e if e.is_unavailable() => UNAVAILABLE,
        _ => SOFTWARE,
    }
}

/// What a library error means to an operator, as one line.
pub(crate) fn describe(e: &Error) -> String {
    match e {
        Error::Store {
            phase,
            store,
            kind: StoreFailure::Unreachable,
            source,
        } => format!(
            "cannot reach {store} during {phase}: {}; check --store / LEASEHOLD_STORE and that the server is up",
            Report::new(&**source)
        ),
        Error::Store {
            phase,
            store,
            kind: StoreFailure::Failing,
            source,
        } if *phase == leasehold::Phase::Connect => format!(
            "cannot reach {store} during {phase}: {}; check --store / LEASEHOLD_STORE and that the server is up",
            Report::new(&**source)
        ),
        e @ Error::Timeout { .. } => format!(
            "{e}; check --store / LEASEHOLD_STORE and that the server is up and not overloaded"
        ),
        // Display shows the error's own message; its causes (a driver's error, a database's
        // answer) are its `source()` chain, printed once each.
        other => other.report().to_string(),
    }
}
