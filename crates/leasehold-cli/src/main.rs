//! `leasehold`: run a command under a lease, inspect and force-release leases, the live demo, the
//! fault-injection verifier and the benchmarks. A thin layer over the `leasehold` and `leasehold-lab`
//! crates.
//!
//! Layout, from the top down: [`commands`] (one room per subcommand, and the dispatch), over
//! [`supervise`] (the command under a lease that `run`, `run --once-per`, `elect` and `cron`
//! share: signals, the watcher process, the stop before hand-over, the release, hooks), [`store`]
//! (connecting, a library error's exit code) and [`output`] (the one JSON printer); [`cli`] (clap
//! definitions, and the command line with each subcommand's exit statuses); [`health`] (`/healthz`
//! and `/leader`), [`http`] (the one listener, `/metrics` beside them), [`prom`] (the Prometheus
//! recorder and `--metrics-file`), [`listen`] (listen addresses), [`features`] (the stores a build
//! has), [`envvars`] (options from `LEASEHOLD_*` variables), [`duration`] (human durations),
//! [`exit`] (exit codes, in one table).
#![forbid(unsafe_code)]

mod cli;
mod commands;
mod duration;
mod envvars;
mod exit;
mod features;
mod health;
mod http;
mod listen;
mod output;
mod prom;
mod store;
mod supervise;

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

fn main() {
    let cli = parse();
    if let Some(code) = commands::man::print_generated(&cli.command) {
        std::process::exit(code);
    }
    init_tracing(cli.verbose, cli.quiet);
    let verbose = cli.verbose > 0;
    // The watcher is a small synchronous program: no runtime, no threads but its own.
    let command = match cli.command {
        Command::RunWatcher(a) => std::process::exit(supervise::watcher::main(a)),
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
    if let Some(every) = supervise::thread_churn() {
        builder.thread_keep_alive(every / 2);
    }
    let runtime = match builder.build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: cannot start the async runtime: {e}");
            std::process::exit(exit::SOFTWARE);
        }
    };
    let result = runtime.block_on(commands::dispatch(command, verbose));
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
