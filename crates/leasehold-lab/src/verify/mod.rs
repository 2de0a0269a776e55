//! Fault-injection verification: which strategy keeps data correct under which fault, counted from the recorded history.

/// Command-line arguments of `leasehold verify`.
#[derive(Debug, Clone, clap::Args)]
pub struct VerifyArgs {}

/// Arguments of the hidden worker process that the fault-injection verifier spawns (`leasehold __verify-worker`).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {}

/// Runs `leasehold verify`; returns the process exit code.
pub async fn run(args: VerifyArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("leasehold verify is not built yet")
}

/// Runs one worker process of the fault-injection verifier; returns the process exit code.
pub async fn run_worker(args: WorkerArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("the verify worker is not built yet")
}
