//! The live demo: every failure of a naive lock, and its fix, told live against real servers.

/// Command-line arguments of `leasehold demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {}

/// Arguments of the hidden worker process that the live demo spawns (`leasehold __demo-worker`).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {}

/// Runs `leasehold demo`; returns the process exit code.
pub async fn run(args: DemoArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("leasehold demo is not built yet")
}

/// Runs one worker process of the live demo; returns the process exit code.
pub async fn run_worker(args: WorkerArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("the demo worker is not built yet")
}
