//! `leasehold`: run a command under a lease, inspect and force-release leases, the live demo, the
//! fault-injection verifier and the benchmarks. A thin layer over the `leasehold` and `leasehold-lab`
//! crates.
//!
//! Layout: [`cli`] (clap definitions, and the command line with each subcommand's exit statuses),
//! [`setup`] (what `run` and `elect` do before connecting: options, signals, the listener),
//! [`command`] (the supervised command `run`, `run --once-per`, `elect` and `cron` share: the
//! watcher, stopping it on a lost lease, the release), [`run`] (`leasehold run`), [`elect`]
//! (`leasehold elect` and `leader`), [`once`] (`run --once-per` and `history`), [`cron`]
//! (`leasehold cron`), [`watcher`] (the command's parent process, which stops it when `run` dies),
//! [`health`] (`/healthz` and `/leader`), [`http`] (the one listener, `/metrics` beside them),
//! [`prom`] (the Prometheus recorder and `--metrics-file`), [`listen`] (listen addresses),
//! [`inspect`] (`status`, `list`, `release --force`), `migrate` (leasehold's tables in a database;
//! with a database feature), [`man`] (the manual page), [`features`] (the stores a build has),
//! [`envvars`] (options from `LEASEHOLD_*` variables), [`duration`] (human durations), [`exit`]
//! (exit codes, in one table).
#![forbid(unsafe_code)]

mod cli;
mod command;
mod cron;
mod duration;
mod elect;
mod envvars;
mod exit;
mod features;
mod health;
mod hooks;
mod http;
mod inspect;
mod listen;
mod man;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
mod migrate;
mod once;
mod prom;
mod run;
mod setup;
mod watcher;

use clap::FromArgMatches;

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

/// `completions` and `man`: generated from the clap definitions, printed to stdout.
fn print_generated(command: &Command) -> Option<i32> {
    let mut out = std::io::stdout().lock();
    let written = match command {
        Command::Completions(a) => {
            clap_complete::generate(a.shell, &mut man::public_command(), "leasehold", &mut out);
            Ok(())
        }
        Command::Man => man::render(&mut out),
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

/// The command line, parsed; a usage error is printed (naming the environment variable a wrong
/// value came from) and exits 2, `--help` and `--version` exit 0.
fn parse() -> Cli {
    let cmd = cli::command();
    let parsed = cmd
        .clone()
        .try_get_matches()
        .and_then(|m| Cli::from_arg_matches(&m));
    match parsed {
        Ok(cli) => cli,
        // --help, --version.
        Err(e) if !e.use_stderr() => e.exit(),
        Err(e) => {
            eprint!("{}", envvars::explain(&cmd, &e));
            std::process::exit(exit::USAGE);
        }
    }
}

/// Runs a subcommand on the runtime; its exit code.
async fn dispatch(command: Command, verbose: bool) -> anyhow::Result<i32> {
    match command {
        Command::Run(a) => Ok(run::run(a).await),
        Command::Elect(a) => Ok(elect::elect(a).await),
        Command::Leader(a) => Ok(elect::leader(a).await),
        Command::History(a) => Ok(once::history(a).await),
        Command::Cron(a) => Ok(cron::main(a, verbose).await),
        Command::Status(a) => Ok(inspect::status(a).await),
        Command::List(a) => Ok(inspect::list(a).await),
        Command::Release(a) => Ok(inspect::release(a).await),
        #[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
        Command::Migrate(a) => Ok(migrate::migrate(a).await),
        #[cfg(not(any(feature = "postgres", feature = "mysql", feature = "sqlite")))]
        Command::MigrateNotBuilt(_) => Ok(features::command_not_built(
            "migrate",
            &["postgres", "mysql", "sqlite"],
        )),
        #[cfg(not(feature = "lab"))]
        Command::DemoNotBuilt(_) => Ok(features::command_not_built("demo", &["lab"])),
        #[cfg(not(feature = "lab"))]
        Command::VerifyNotBuilt(_) => Ok(features::command_not_built("verify", &["lab"])),
        #[cfg(not(feature = "lab"))]
        Command::BenchNotBuilt(_) => Ok(features::command_not_built("bench", &["lab"])),
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
}

fn main() {
    let cli = parse();
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
    let result = runtime.block_on(dispatch(command, verbose));
    // `--metrics-file`: the last word, with the release counted.
    prom::write_file();
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
