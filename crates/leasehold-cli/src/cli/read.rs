//! The commands that read or change what the store keeps: `leader`, `history`, `migrate`,
//! `status`, `list`, `release`.

use clap::Args;

use super::store::StoreArgs;

#[derive(Debug, Args)]
pub(crate) struct LeaderArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print one JSON object, or `null` when nobody leads
    ///
    /// Its fields: name, term, value, holder, since_unix_ms, ttl_ms.
    #[arg(long)]
    pub(crate) json: bool,
    /// Keep printing a line per change of leader or value
    ///
    /// One line (or JSON object) each time, until interrupted. Told of each change by the store
    /// where it pushes them (Redis, PostgreSQL, etcd; read every 2 s besides, in case a notice is
    /// lost), read every 250 ms on MariaDB/MySQL and Redlock.
    #[arg(long)]
    pub(crate) watch: bool,
    /// Election name.
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct HistoryArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print a JSON array of records
    ///
    /// Each record's fields: job, slot, outcome, attempts, holder, fence, started_unix_ms,
    /// duration_ms, exit_code.
    #[arg(long)]
    pub(crate) json: bool,
    /// Print the last success time and counts for Prometheus
    ///
    /// In Prometheus's text format, for node_exporter's textfile collector; the job's name is in
    /// the label `leasehold_job`.
    #[arg(long, conflicts_with = "json")]
    pub(crate) prometheus: bool,
    /// Most slots shown, newest first
    ///
    /// `--prometheus` counts every slot on record.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub(crate) limit: usize,
    /// The job's name (as given to `run --once-per`).
    pub(crate) name: String,
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "sqlite"))]
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
}

#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print one JSON object
    ///
    /// Its fields: name, key, held, ttl_ms, fence, permits, free, holders, waiting, fence_key,
    /// queue_key.
    #[arg(long)]
    pub(crate) json: bool,
    /// Lease name.
    pub(crate) name: String,
}

#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Print a JSON array, each object as `status --json` prints it
    #[arg(long)]
    pub(crate) json: bool,
    /// Glob over lease names (`*`, `?`, `[abc]`).
    #[arg(default_value = "*")]
    pub(crate) pattern: String,
}

#[derive(Debug, Args)]
pub(crate) struct ReleaseArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// Required: confirms you mean to evict the holder
    ///
    /// Whoever holds the lease; unsafe for that holder.
    #[arg(long, required = true)]
    pub(crate) force: bool,
    /// Evict only the holder with this token
    ///
    /// As `status` lists them; without it, every holder.
    #[arg(long, value_name = "TOKEN")]
    pub(crate) token: Option<String>,
    /// Print one JSON object: name, evicted, fence.
    #[arg(long)]
    pub(crate) json: bool,
    /// Lease name.
    pub(crate) name: String,
}
