//! `leasehold`: run a command under a lease, inspect and force-release leases, the live demo, the
//! fault-injection verifier and the benchmarks. A thin layer over the `leasehold` and `leasehold-lab`
//! crates.
//!
//! Layout: [`cli`] (clap definitions), [`run`] (`leasehold run`: acquire, supervise the command, stop
//! it on a lost lease), [`elect`] (`leasehold elect` and `leader`: the same supervision while
//! leading an election), [`once`] (`run --once-per` and `history`: scheduled jobs once per slot), [`cron`] (`leasehold cron`: the scheduler every replica runs), [`watcher`] (the command's parent process, which stops it when `run` dies),
//! [`health`] (`--health`: `/healthz` and `/leader` for probes),
//! [`inspect`] (`status`, `list`, `release --force`), [`migrate`] (leasehold's tables in a database),
//! [`duration`] (human durations), [`exit`] (exit codes).
#![forbid(unsafe_code)]

mod cli;
mod command;
mod cron;
mod duration;
mod elect;
mod exit;
mod health;
mod hooks;
mod inspect;
mod migrate;
mod once;
mod run;
mod watcher;

use clap::{CommandFactory, Parser};

use cli::{Cli, Command};

/// Log lines to stderr: RUST_LOG when set, else warnings (`-q`: errors; `-v`: info, `-vv`: debug,
/// `-vvv`: trace).
fn init_tracing(verbose: u8, quiet: bool) {
    let level = match (quiet, verbose) {
        (true, _) => "error",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        (false, _) => "trace",
    };
    // The holder's events (lost, suspect, force-released) are said by the command in its own
    // words, one line each; the library's log line for them shows only from -v on.
    let default = if verbose == 0 {
        format!("{level},{}=off", leasehold::lease::HOLDER_EVENTS)
    } else {
        level.to_owned()
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(colour_on_stderr())
        .with_target(true)
        .init();
}

/// Colour only for a person: stderr is a terminal and `NO_COLOR` is unset or empty
/// (<https://no-color.org>). Under cron, systemd, Kubernetes or a pipe, plain lines.
pub(crate) fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The command as a shell should offer it: without the internal subcommands (the watcher and the
/// lab's workers), which clap's completion generators would list although `-h` hides them.
fn public_command() -> clap::Command {
    let full = Cli::command();
    let public: Vec<clap::Command> = full
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let mut cmd = clap::Command::new("leasehold")
        .version(env!("CARGO_PKG_VERSION"))
        .args(full.get_arguments().cloned())
        .subcommands(public);
    if let Some(about) = full.get_about() {
        cmd = cmd.about(about.clone());
    }
    cmd
}

/// `completions` and `man`: generated from the clap definitions, printed to stdout.
fn print_generated(command: &Command) -> Option<i32> {
    let mut out = std::io::stdout().lock();
    let written = match command {
        Command::Completions(a) => {
            clap_complete::generate(a.shell, &mut public_command(), "leasehold", &mut out);
            Ok(())
        }
        Command::Man => clap_mangen::Man::new(Cli::command()).render(&mut out),
        _ => return None,
    };
    Some(match written {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("leasehold: cannot write to stdout: {e}");
            exit::SOFTWARE
        }
    })
}

fn main() {
    let cli = Cli::parse();
    if let Some(code) = print_generated(&cli.command) {
        std::process::exit(code);
    }
    init_tracing(cli.verbose, cli.quiet);
    let verbose = cli.verbose > 0;
    // The watcher is a small synchronous program: no runtime, no threads but its own.
    let command = match cli.command {
        Command::RunWatcher(a) => std::process::exit(watcher::main(a)),
        Command::Run(mut a) => {
            a.verbose = cli.verbose > 0;
            Command::Run(a)
        }
        Command::Elect(mut a) => {
            a.verbose = cli.verbose > 0;
            Command::Elect(a)
        }
        other => other,
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(every) = command::thread_churn() {
        builder.thread_keep_alive(every / 2);
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: cannot start the async runtime: {e}");
            std::process::exit(exit::SOFTWARE);
        }
    };
    let result: anyhow::Result<i32> = runtime.block_on(async move {
        match command {
            Command::Run(a) => Ok(run::run(a).await),
            Command::Elect(a) => Ok(elect::elect(a).await),
            Command::Leader(a) => Ok(elect::leader(a).await),
            Command::History(a) => Ok(once::history(a).await),
            Command::Cron(a) => Ok(cron::main(a, verbose).await),
            Command::Status(a) => Ok(inspect::status(a).await),
            Command::List(a) => Ok(inspect::list(a).await),
            Command::Release(a) => Ok(inspect::release(a).await),
            Command::Migrate(a) => Ok(migrate::migrate(a).await),
            #[cfg(feature = "lab")]
            Command::Demo(a) => leasehold_lab::demo::run(a).await,
            #[cfg(feature = "lab")]
            Command::Verify(a) => leasehold_lab::verify::run(a).await,
            #[cfg(feature = "lab")]
            Command::Bench(a) => leasehold_lab::bench::run(a).await,
            #[cfg(feature = "lab")]
            Command::DemoWorker(a) => leasehold_lab::demo::run_worker(a).await,
            #[cfg(feature = "lab")]
            Command::VerifyWorker(a) => leasehold_lab::verify::run_worker(a).await,
            #[cfg(feature = "lab")]
            Command::BenchWorker(a) => leasehold_lab::bench::run_worker(a).await,
            Command::RunWatcher(_) | Command::Completions(_) | Command::Man => {
                unreachable!("handled before the runtime starts")
            }
        }
    });
    // Do not wait for background tasks (a dropped lease's release is already sent or expires by TTL).
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("leasehold: {e:#}");
            std::process::exit(1);
        }
    }
}
