//! Benchmarks: the figures users compare locks on, each measured against a baseline in the same run.

/// Command-line arguments of `leasehold bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {}

/// Arguments of the hidden worker process that the benchmarks spawns (`leasehold __bench-worker`).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {}

/// Runs `leasehold bench`; returns the process exit code.
pub async fn run(args: BenchArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("leasehold bench is not built yet")
}

/// Runs one worker process of the benchmarks; returns the process exit code.
pub async fn run_worker(args: WorkerArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("the bench worker is not built yet")
}
