//! `leasehold demo`, `verify` and `bench` (and their hidden worker processes): pass-throughs to the
//! `leasehold-lab` crate, which says what each promises. Only in a build with the `lab` feature.

use leasehold_lab::{bench, demo, verify};

use crate::cli::Command;

/// Runs a lab command.
pub(crate) async fn run(command: Command) -> anyhow::Result<i32> {
    match command {
        Command::Demo(a) => demo::run(a).await,
        Command::Verify(a) => verify::run(a).await,
        Command::Bench(a) => bench::run(a).await,
        Command::DemoWorker(a) => demo::run_worker(a).await,
        Command::VerifyWorker(a) => verify::run_worker(a).await,
        Command::BenchWorker(a) => bench::run_worker(a).await,
        _ => unreachable!("dispatched here only for a lab command"),
    }
}
