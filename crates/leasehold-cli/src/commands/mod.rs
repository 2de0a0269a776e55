//! One room per subcommand, each over the shared pieces below it: [`crate::cli`] (the clap
//! definitions), [`crate::store`] (connecting), [`crate::supervise`] (the command under a lease)
//! and [`crate::output`] (what is printed).
//!
//! Rooms: [`run`] (`leasehold run`), [`once`] (`run --once-per`), [`history`], [`elect`],
//! [`leader`], [`cron`] (the daemon and its subcommands), [`inspect`] (`status` and `list`),
//! [`force_release`] (`release --force`), `migrate` (with a database feature), [`man`] (`man` and
//! `completions`), `lab` (`demo`, `verify`, `bench`; with the `lab` feature). The hidden
//! `__run-watcher` is the supervision's own: [`crate::supervise::watcher`].

pub(crate) mod cron;
pub(crate) mod elect;
pub(crate) mod force_release;
pub(crate) mod history;
pub(crate) mod inspect;
#[cfg(feature = "lab")]
pub(crate) mod lab;
pub(crate) mod leader;
pub(crate) mod man;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
pub(crate) mod migrate;
pub(crate) mod once;
pub(crate) mod run;

use crate::cli::Command;

/// Runs a subcommand on the runtime; its exit code.
pub(crate) async fn dispatch(command: Command, verbose: bool) -> anyhow::Result<i32> {
    match command {
        Command::Run(a) => Ok(run::run(a).await),
        Command::Elect(a) => Ok(elect::elect(a).await),
        Command::Leader(a) => Ok(leader::leader(a).await),
        Command::History(a) => Ok(history::history(a).await),
        Command::Cron(a) => Ok(cron::main(a, verbose).await),
        Command::Status(a) => Ok(inspect::status(a).await),
        Command::List(a) => Ok(inspect::list(a).await),
        Command::Release(a) => Ok(force_release::release(a).await),
        #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
        Command::Migrate(a) => Ok(migrate::migrate(a).await),
        #[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
        Command::MigrateNotBuilt(_) => Ok(crate::features::command_not_built(
            "migrate",
            &["postgres", "mysql", "sqlite"],
        )),
        #[cfg(not(feature = "lab"))]
        Command::DemoNotBuilt(_) => Ok(crate::features::command_not_built("demo", &["lab"])),
        #[cfg(not(feature = "lab"))]
        Command::VerifyNotBuilt(_) => Ok(crate::features::command_not_built("verify", &["lab"])),
        #[cfg(not(feature = "lab"))]
        Command::BenchNotBuilt(_) => Ok(crate::features::command_not_built("bench", &["lab"])),
        #[cfg(feature = "lab")]
        lab @ (Command::Demo(_)
        | Command::Verify(_)
        | Command::Bench(_)
        | Command::DemoWorker(_)
        | Command::VerifyWorker(_)
        | Command::BenchWorker(_)) => lab::run(lab).await,
        Command::RunWatcher(_) | Command::Completions(_) | Command::Man => {
            unreachable!("handled before the runtime starts")
        }
    }
}
