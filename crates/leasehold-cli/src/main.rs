//! `leasehold`: run a command under a lease, inspect and force-release leases, the live demo, the
//! fault-injection verifier and the benchmarks. A thin layer over the `leasehold` and `leasehold-lab`
//! crates.
#![forbid(unsafe_code)]

use clap::{Parser, Subcommand};

/// Leases on Redis with fencing tokens, and proof of what they can and cannot promise.
#[derive(Debug, Parser)]
#[command(name = "leasehold", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Tell the story live: each naive lock failing, and its fix.
    Demo(leasehold_lab::demo::DemoArgs),
    /// Inject faults and count which strategy keeps data correct.
    Verify(leasehold_lab::verify::VerifyArgs),
    /// Measure leasehold against the protocol's limit.
    Bench(leasehold_lab::bench::BenchArgs),
    #[command(name = "__demo-worker", hide = true)]
    DemoWorker(leasehold_lab::demo::WorkerArgs),
    #[command(name = "__verify-worker", hide = true)]
    VerifyWorker(leasehold_lab::verify::WorkerArgs),
    #[command(name = "__bench-worker", hide = true)]
    BenchWorker(leasehold_lab::bench::WorkerArgs),
}

fn main() {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("leasehold: cannot start the async runtime: {e}");
            std::process::exit(70);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Demo(a) => leasehold_lab::demo::run(a).await,
            Command::Verify(a) => leasehold_lab::verify::run(a).await,
            Command::Bench(a) => leasehold_lab::bench::run(a).await,
            Command::DemoWorker(a) => leasehold_lab::demo::run_worker(a).await,
            Command::VerifyWorker(a) => leasehold_lab::verify::run_worker(a).await,
            Command::BenchWorker(a) => leasehold_lab::bench::run_worker(a).await,
        }
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("leasehold: {e:#}");
            std::process::exit(1);
        }
    }
}
