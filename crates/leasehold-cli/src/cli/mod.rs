//! The command line: clap definitions only, no behaviour. Promise: every argument is checked for form
//! here (durations, numbers, addresses) and for meaning by the library before anything touches Redis.

mod cron;
mod headings;
mod read;
mod store;
mod supervise;
#[cfg(test)]
mod tests;

use std::ffi::OsString;

use clap::{ArgAction, Args, Parser, Subcommand};

pub(crate) use cron::{CronArgs, CronCommand};
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub(crate) use read::MigrateArgs;
pub(crate) use read::{HistoryArgs, LeaderArgs, ListArgs, ReleaseArgs, StatusArgs};
pub(crate) use store::StoreArgs;
pub(crate) use supervise::{ElectArgs, OnSuspect, RunArgs, SuperviseArgs};

/// Leases with fencing tokens, and proof of what they promise
///
/// Run a command under a lease, lead an election, run scheduled jobs once across replicas, inspect
/// and force-release leases; the live demo, verify and bench. On Redis, PostgreSQL, MariaDB/MySQL
/// and etcd. Every option of `run` and `elect` that applies to all uses of a name can also come
/// from a LEASEHOLD_* environment variable (shown as [env: ...]); a flag wins over the variable.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, max_term_width = 100)]
pub(crate) struct Cli {
    /// More on stderr: -v info, -vv debug, -vvv trace
    ///
    /// With -v `run` also says when it acquires and releases. Log lines go to stderr through
    /// `tracing`; RUST_LOG (e.g. `RUST_LOG=leasehold=debug`), when set, replaces what -v and -q
    /// choose.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub(crate) verbose: u8,
    /// Less on stderr: errors only.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub(crate) quiet: bool,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command while holding a lease; stop it if the lease is lost.
    ///
    /// If `run` itself dies (kill -9, OOM killer), the command's parent, a watcher process, stops
    /// it. Waiters queue in the store and are woken by the holder's release.
    #[command(
        after_help = "Example: leasehold run -w 30s --ttl 1m nightly-import -- ./import.sh --full"
    )]
    Run(RunArgs),
    /// Campaign to lead NAME; run a command while leader
    ///
    /// Waits (in the store's queue, woken by the leader's release, never polling) until it leads,
    /// advertises --value, then runs the command under the same supervision as `run`, with the
    /// term in LEASEHOLD_TERM: stopped when the leadership is lost, stopped by the watcher if
    /// `elect` dies. When the command ends the leadership is resigned at once: the next candidate
    /// leads within a round trip, not a TTL. With --again it then campaigns again (a standby
    /// replica), until a signal stops it.
    ///
    /// The term is a fencing token: present LEASEHOLD_TERM (the same as LEASEHOLD_FENCE) to fenced
    /// writes so that a deposed leader's writes are refused. Exit 74 here: the leadership could
    /// not be resigned; 75: not leader within --wait.
    #[command(
        after_help = "Example: leasehold elect --again --value \"$(hostname):8080\" scheduler -- ./scheduler"
    )]
    Elect(ElectArgs),
    /// Show who leads an election: term, value, holder, since when
    ///
    /// Exit 0 when someone leads, 3 when nobody does.
    Leader(LeaderArgs),
    /// Show what ran in each slot of a `run --once-per` job
    ///
    /// Each slot's outcome, holder, fence, start, duration, exit code and attempts. Records are
    /// kept as long as the store keeps the slot's name (at least two periods).
    History(HistoryArgs),
    /// Run scheduled jobs on every replica, each slot once: cron in a TOML file
    ///
    /// Every replica runs the same file over the same store: each job's slot runs on exactly one
    /// replica, as `run` runs a command, its outcome in `history JOB`. Slots are reckoned on the
    /// store's clock. Subcommands: check, next, trigger, pause, resume. A jobs file that is wrong
    /// is exit 2 naming the line and the field; the daemon retries a store it cannot reach (its
    /// subcommands exit 69).
    #[command(
        after_help = "Example: leasehold cron --store redis://coordination:6379 /etc/leasehold/jobs.toml"
    )]
    Cron(CronArgs),
    /// Show whether a lease is held, for how long, and its fence
    ///
    /// Also who holds it and since when, its waiters, and where the store keeps it.
    Status(StatusArgs),
    /// List leases whose name matches a glob pattern (default: all).
    List(ListArgs),
    /// UNSAFE: take a lease away from its holder, advance its fence
    ///
    /// The evicted holder is NOT asked: its renewal fails, its `leasehold run` stops its command
    /// (exit 76), and fenced resources refuse its later writes. Anything it does outside fenced
    /// resources before it notices can overlap with the next holder. Use it to unstick a lease whose
    /// holder you know is dead or must stop now.
    Release(ReleaseArgs),
    /// Create or upgrade leasehold's tables in a database
    ///
    /// In a PostgreSQL, MariaDB/MySQL or SQLite database: the lease table a postgres:// or
    /// mysql:// store needs, and the tables of fenced writes, idempotency keys and the inbox. Run
    /// it once before the first `leasehold run --store postgres://…` (the store does not change
    /// the schema by itself). Idempotent and safe to run from several places at once. A URL
    /// naming no such database is exit 2.
    #[command(after_help = "Example: leasehold migrate --store postgres://app@db.internal/app")]
    #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
    Migrate(MigrateArgs),
    /// Print a shell completion script to stdout (bash, zsh, fish, elvish, powershell)
    #[command(
        after_help = "Example: leasehold completions bash > ~/.local/share/bash-completion/completions/leasehold"
    )]
    Completions(CompletionsArgs),
    /// Print the manual page (roff) to stdout: every subcommand and option
    #[command(after_help = "Example: leasehold man > ~/.local/share/man/man1/leasehold.1")]
    Man,
    /// Tell the story live: each naive lock failing, and its fix.
    #[cfg(feature = "lab")]
    Demo(leasehold_lab::demo::DemoArgs),
    /// Inject faults and count which strategy keeps data correct.
    #[cfg(feature = "lab")]
    Verify(leasehold_lab::verify::VerifyArgs),
    /// Measure leasehold against the protocol's limit.
    #[cfg(feature = "lab")]
    Bench(leasehold_lab::bench::BenchArgs),
    /// Internal: a worker process of `leasehold demo`
    #[cfg(feature = "lab")]
    #[command(name = "__demo-worker", hide = true)]
    DemoWorker(leasehold_lab::demo::WorkerArgs),
    /// Internal: a worker process of `leasehold verify`
    #[cfg(feature = "lab")]
    #[command(name = "__verify-worker", hide = true)]
    VerifyWorker(leasehold_lab::verify::WorkerArgs),
    /// Internal: a worker process of `leasehold bench`
    #[cfg(feature = "lab")]
    #[command(name = "__bench-worker", hide = true)]
    BenchWorker(leasehold_lab::bench::WorkerArgs),
    /// Not in this build: `demo` needs the `lab` feature
    #[cfg(not(feature = "lab"))]
    #[command(name = "demo", hide = true, disable_help_flag = true)]
    DemoNotBuilt(NotBuilt),
    /// Not in this build: `verify` needs the `lab` feature
    #[cfg(not(feature = "lab"))]
    #[command(name = "verify", hide = true, disable_help_flag = true)]
    VerifyNotBuilt(NotBuilt),
    /// Not in this build: `bench` needs the `lab` feature
    #[cfg(not(feature = "lab"))]
    #[command(name = "bench", hide = true, disable_help_flag = true)]
    BenchNotBuilt(NotBuilt),
    /// Not in this build: `migrate` needs a database feature
    #[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
    #[command(name = "migrate", hide = true, disable_help_flag = true)]
    MigrateNotBuilt(NotBuilt),
    /// Internal: the watcher process that is the parent of `run`'s command
    #[command(name = "__run-watcher", hide = true)]
    RunWatcher(WatcherArgs),
}

/// The arguments of a command this build leaves out: anything, so that the message says which
/// feature brings the command whatever was given.
#[derive(Debug, Args)]
pub(crate) struct NotBuilt {
    /// Ignored.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    _rest: Vec<OsString>,
}

/// Which shell a completion script is for.
#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub(crate) shell: clap_complete::Shell,
}

/// The command line as `leasehold` parses it: the derived definitions, each command that talks to
/// a store with its exit statuses after its options (from [`crate::exit::TABLE`]).
pub(crate) fn command() -> clap::Command {
    use clap::CommandFactory;
    let mut cmd = Cli::command();
    let names: Vec<String> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && !matches!(s.get_name(), "completions" | "man"))
        .map(|s| s.get_name().to_owned())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(&name, |sub| {
            let exits = crate::exit::section(&name);
            let after = match sub.get_after_help() {
                Some(example) => format!("{exits}\n{example}"),
                None => exits,
            };
            sub.after_long_help(after)
        });
    }
    cmd
}

/// The hidden subcommand's arguments, written by `run`'s side of the watcher
/// (`supervise::watcher::Watcher::start`) and by nobody else.
#[derive(Debug, clap::Args)]
pub(crate) struct WatcherArgs {
    /// Abstract Unix socket name `run` listens on.
    #[arg(long)]
    pub(crate) socket: String,
    /// Grace between SIGTERM and SIGKILL when `run` dies.
    #[arg(long)]
    pub(crate) grace_ms: u64,
    /// Start the command in this existing process group
    ///
    /// Start the command in this existing process group (`run`'s, on a terminal) instead of its own.
    #[arg(long)]
    pub(crate) join_group: Option<i32>,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub(crate) command: Vec<OsString>,
}
