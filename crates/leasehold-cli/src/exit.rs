//! Exit codes of `leasehold`, in one place so the README's table, the code and the tests agree.
//! Promise: each failure class has its own code (sysexits.h where one fits). Limit: the command's own
//! exit code passes through unchanged, so a command that itself exits 75 or 76 is indistinguishable
//! from leasehold saying "busy" or "lost"; use `--busy-exit-code` to move the busy code out of its way.

use leasehold::{Error, StoreFailure};

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
            "cannot reach {store} during {phase}: {source}; check --store / LEASEHOLD_STORE and that the server is up"
        ),
        Error::Store {
            phase,
            store,
            kind: StoreFailure::Failing,
            source,
        } if *phase == leasehold::Phase::Connect => format!(
            "cannot reach {store} during {phase}: {source}; check --store / LEASEHOLD_STORE and that the server is up"
        ),
        e @ Error::Timeout { .. } => format!(
            "{e}; check --store / LEASEHOLD_STORE and that the server is up and not overloaded"
        ),
        other => other.to_string(),
    }
}
