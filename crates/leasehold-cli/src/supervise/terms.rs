//! The terms of one supervision: what a command asks of it ([`Supervised`], built by each command
//! from its own arguments) and how the command ended ([`Ended`]).

use std::ffi::OsString;
use std::time::Duration;

use crate::cli::{OnSuspect, SuperviseArgs};

/// What a command asks of the supervision, built by each command from its own arguments.
#[derive(Debug, Clone)]
pub(crate) struct Supervised<'a> {
    /// The lease's name (a `cron` job's name): the command's `LEASEHOLD_NAME`, and what messages say.
    pub(crate) name: &'a str,
    /// The command and its arguments.
    pub(crate) command: &'a [OsString],
    /// The lease's TTL: the longest the store may keep it after the last renewal it accepted.
    pub(crate) ttl: Duration,
    /// The grace in force, between SIGTERM and SIGKILL.
    pub(crate) grace: Duration,
    /// The old stop rule (`--stop-at-deadline`): SIGTERM once the deadline passed.
    pub(crate) stop_at_deadline: bool,
    /// What a suspect lease does to the command.
    pub(crate) on_suspect: OnSuspect,
    /// Keep the lease at least this long after the command started (`run --min-hold`).
    pub(crate) min_hold: Option<Duration>,
    /// Say on stderr when the lease is released.
    pub(crate) verbose: bool,
}

impl<'a> Supervised<'a> {
    /// `name` and `command` supervised as `s` says (its grace as [`super::setup::prepare`] set it), with no
    /// `--min-hold`.
    pub(crate) fn new(
        name: &'a str,
        command: &'a [OsString],
        s: &SuperviseArgs,
        verbose: bool,
    ) -> Self {
        Supervised {
            name,
            command,
            ttl: s.ttl,
            grace: s.grace,
            stop_at_deadline: s.stop_at_deadline,
            on_suspect: s.on_suspect,
            min_hold: None,
            verbose,
        }
    }
}

/// How the supervised command ended.
pub(crate) enum Ended {
    /// It could not be started or watched; the exit code to give.
    Failed(i32),
    /// The lease was lost (or became suspect under `--on-suspect stop`) and the command was stopped.
    Lost,
    /// It exited with this code (`None`: the watcher could not say).
    Exited(Option<i32>),
}
