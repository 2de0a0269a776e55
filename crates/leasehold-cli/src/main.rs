//! `leasehold`: run a command under a lease, inspect and force-release leases, the live demo, the
//! fault-injection verifier and the benchmarks. A thin layer over the `leasehold` and `leasehold-lab`
//! crates.
//!
//! Layout: [`cli`] (clap definitions), [`run`] (`leasehold run`: acquire, supervise the command, stop
//! it on a lost lease), [`watcher`] (the command's parent process, which stops it when `run` dies),
//! [`inspect`] (`status`, `list`, `release --force`), [`migrate`] (leasehold's tables in a database),
//! [`duration`] (human durations), [`exit`] (exit codes).
#![forbid(unsafe_code)]

mod cli;
mod duration;
mod exit;
mod inspect;
mod migrate;
mod run;
mod watcher;

use clap::Parser;

use cli::{Cli, Command};

fn main() {
    let cli = Cli::parse();
    // The watcher is a small synchronous program: no runtime, no threads but its own.
    let command = match cli.command {
        Command::RunWatcher(a) => std::process::exit(watcher::main(a)),
        other => other,
    };
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    builder.enable_all();
    if let Some(every) = run::thread_churn() {
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
            Command::Status(a) => Ok(inspect::status(a).await),
            Command::List(a) => Ok(inspect::list(a).await),
            Command::Release(a) => Ok(inspect::release(a).await),
            Command::Migrate(a) => Ok(migrate::migrate(a).await),
            Command::Demo(a) => leasehold_lab::demo::run(a).await,
            Command::Verify(a) => leasehold_lab::verify::run(a).await,
            Command::Bench(a) => leasehold_lab::bench::run(a).await,
            Command::DemoWorker(a) => leasehold_lab::demo::run_worker(a).await,
            Command::VerifyWorker(a) => leasehold_lab::verify::run_worker(a).await,
            Command::BenchWorker(a) => leasehold_lab::bench::run_worker(a).await,
            Command::RunWatcher(_) => unreachable!("handled before the runtime starts"),
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
