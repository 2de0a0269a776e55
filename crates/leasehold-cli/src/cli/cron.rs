//! `cron`: the daemon's options and its subcommands (check, next, trigger, pause, resume).

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::store::StoreArgs;
use crate::listen::ListenAddr;

/// `leasehold cron`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct CronArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Serve `/healthz` and `/metrics` on this address, e.g. 127.0.0.1:9465
    ///
    /// `/healthz` is 200 while running, 503 before the jobs are loaded and once draining;
    /// `/metrics` is Prometheus text (runs by outcome, durations, last success, next run time, per
    /// job in the label `leasehold_job`). `:PORT` listens on every interface; a host name is
    /// resolved.
    #[arg(long, value_name = "ADDR", env = "LEASEHOLD_HEALTH", value_parser = crate::listen::parse,
          help_heading = "Monitoring")]
    pub(crate) health: Option<ListenAddr>,
    /// Who this replica is in the records (default: host, pid, random id).
    #[arg(long, value_name = "HOLDER")]
    pub(crate) holder: Option<String>,
    /// The jobs file (TOML: one [job.NAME] table per job)
    ///
    /// Each with `schedule` (a cron expression) or `every` (an interval), `command` (an argv
    /// array) or `shell`, and options; `[defaults]` for all. See docs/scheduled-jobs.md.
    #[arg(value_name = "JOBS_FILE")]
    pub(crate) file: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Option<CronCommand>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum CronCommand {
    /// Check a jobs file: exit 0, or 2 naming the line and field that is wrong.
    Check {
        /// The jobs file.
        file: PathBuf,
    },
    /// Print each job's next instants, in its zone and in UTC.
    Next {
        /// Instants per job.
        #[arg(long, default_value_t = 3)]
        count: usize,
        /// The jobs file.
        file: PathBuf,
    },
    /// Run a job once now, outside its schedule, recorded as a trigger.
    Trigger {
        #[command(flatten)]
        store: StoreArgs,
        /// The jobs file.
        file: PathBuf,
        /// The job.
        job: String,
    },
    /// Pause a job on every replica (kept in the store).
    Pause {
        #[command(flatten)]
        store: StoreArgs,
        /// The job.
        job: String,
    },
    /// Resume a paused job on every replica.
    Resume {
        #[command(flatten)]
        store: StoreArgs,
        /// The job.
        job: String,
    },
}
