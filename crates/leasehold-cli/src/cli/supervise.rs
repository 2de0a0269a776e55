//! `run` and `elect`: the lease's settings and how the command runs under it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::headings::{JOB, LEASE, MONITORING};
use super::store::StoreArgs;
use crate::duration;
use crate::listen::{self, ListenAddr};

/// How a command runs under a lease, for `run` and `elect` alike.
#[derive(Debug, Clone, Args)]
pub(crate) struct SuperviseArgs {
    /// Lease length on the server, renewed every third of it
    ///
    /// A holder (or leader) that stops renewing (crash, pause) keeps others out for at most this
    /// long. Between 10ms and 24h.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, default_value = "30s",
          env = "LEASEHOLD_TTL", help_heading = LEASE)]
    pub(crate) ttl: Duration,
    /// Time between SIGTERM and SIGKILL when the command must stop
    ///
    /// Default: a third of --ttl, at most 10s. It applies to the command's process group and
    /// everything below it: when the lease is lost, when leasehold dies, and to what the command
    /// left running when it exits.
    ///
    /// When renewals fail, SIGTERM goes out --grace before the instant the store may hand the name
    /// on (less a margin: the drift allowance and 100ms), and SIGKILL at that instant, so the
    /// command is gone before anyone else can hold the name. It must fit inside the lease:
    /// grace + margin under the TTL less one renewal period and 100ms (about two thirds of
    /// --ttl), else exit 2.
    #[arg(long = "grace", value_name = "DURATION", value_parser = duration::parse,
          env = "LEASEHOLD_GRACE", help_heading = LEASE)]
    pub(crate) grace_given: Option<Duration>,
    /// The grace in force: `--grace`, or the default that fits the lease (set by `prepare`).
    #[arg(skip)]
    pub(crate) grace: Duration,
    /// Test knob: the old stop rule, SIGTERM once the deadline passed
    ///
    /// For tests and demonstrations: SIGTERM only once the lease's deadline passed, SIGKILL
    /// --grace later, which lets the command overlap the next holder.
    #[arg(long, hide = true)]
    pub(crate) stop_at_deadline: bool,
    /// What to do when the lease becomes suspect (at risk)
    ///
    /// Suspect: at risk before its deadline (renewals failing, or the store's clock running faster
    /// than ours beyond the drift allowance). `warn` (the default) says so once on stderr and lets
    /// the command run on; `stop` stops the command as a lost lease does (SIGTERM, SIGKILL after
    /// --grace) and exits 76.
    #[arg(long, value_name = "ACTION", value_enum, default_value_t = OnSuspect::Warn,
          env = "LEASEHOLD_ON_SUSPECT", help_heading = LEASE)]
    pub(crate) on_suspect: OnSuspect,
    /// Exit code when the lease is busy and no wait is left (flock's -E)
    ///
    /// For `elect`: when the leadership is not had within --wait. Move it out of the way of the
    /// command's own codes, or make it 0 for a job that may be skipped quietly.
    #[arg(short = 'E', long, value_name = "CODE", default_value_t = crate::exit::BUSY,
          value_parser = clap::value_parser!(i32).range(0..=255),
          env = "LEASEHOLD_BUSY_EXIT_CODE", help_heading = LEASE)]
    pub(crate) busy_exit_code: i32,
    /// Serve Prometheus metrics, e.g. 127.0.0.1:9464 or :9464
    ///
    /// The metrics: acquire waits and holds (histograms), acquisitions, renewals, releases, lost
    /// and suspect leases, elections. The same listener as --health: one address serves
    /// `/metrics`, `/healthz` and `/leader` (giving both options two different addresses is exit
    /// 2). `:PORT` listens on every interface; a host name is resolved.
    #[arg(long, value_name = "ADDR", value_parser = listen::parse,
          env = "LEASEHOLD_METRICS_ADDR", help_heading = MONITORING)]
    pub(crate) metrics_addr: Option<ListenAddr>,
    /// Serve `/healthz`, `/leader` and `/metrics` over HTTP on this address
    ///
    /// For Kubernetes probes, load balancers and Prometheus. `/healthz`: 503 while the lease held
    /// is suspect or lost, else 200 (a standby not holding is healthy). `/leader`: who leads the
    /// name, as `leasehold leader --json` prints it with `"self"`; 200 when this process leads,
    /// 503 when it does not (for routing to the leader alone, not a readiness probe). Any other
    /// path is 404.
    #[arg(long, value_name = "ADDR", value_parser = listen::parse,
          env = "LEASEHOLD_HEALTH", help_heading = MONITORING)]
    pub(crate) health: Option<ListenAddr>,
    /// Write the metrics to this file for node_exporter's textfile collector
    ///
    /// For runs too short to be scraped (a cron job): written when the lease is taken, every 10s
    /// while the command runs, and as `leasehold` exits, each time whole (a file beside it,
    /// renamed over it). Name it `*.prom` in the collector's directory. A path that cannot be
    /// written is exit 2 before the lease is taken.
    #[arg(long, value_name = "PATH", env = "LEASEHOLD_METRICS_FILE", help_heading = MONITORING)]
    pub(crate) metrics_file: Option<PathBuf>,
}

impl SuperviseArgs {
    /// The one listen address `--health` and `--metrics-addr` name, or why they disagree.
    pub(crate) fn listen(&self) -> Result<Option<&ListenAddr>, String> {
        match (&self.health, &self.metrics_addr) {
            (Some(h), Some(m)) if h != m => Err(format!(
                "--health {h} and --metrics-addr {m} name two addresses, but one listener serves \
                 /healthz, /leader and /metrics; give one of them (or the same address to both)"
            )),
            (Some(a), _) | (None, Some(a)) => Ok(Some(a)),
            (None, None) => Ok(None),
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// How long to wait for a busy lease (flock's -w); 0, the default, tries once
    ///
    /// The wait is woken by the holder's release, not by polling: waiters queue in the store and
    /// the release hands the lease to the next.
    #[arg(short = 'w', long, value_name = "DURATION", value_parser = duration::parse,
          default_value = "0", env = "LEASEHOLD_WAIT", help_heading = LEASE)]
    pub(crate) wait: Duration,
    /// Do not wait: try once (flock's -n; wins over --wait and LEASEHOLD_WAIT)
    #[arg(short = 'n', long, help_heading = LEASE)]
    pub(crate) no_wait: bool,
    #[command(flatten)]
    pub(crate) supervise: SuperviseArgs,
    /// Who holds it, shown by `status` and `list` (default: host:pid)
    ///
    /// Written beside the lease once acquired and shown with the time since it holds; at most 128
    /// bytes, no control characters, nothing secret. Not written for a semaphore's permits.
    #[arg(long, value_name = "LABEL", env = "LEASEHOLD_HOLDER", help_heading = LEASE)]
    pub(crate) holder: Option<String>,
    /// Hard cap on how long the command may hold the lease (default: none)
    ///
    /// When reached, the lease counts as lost and the command is stopped (exit 76).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, help_heading = LEASE)]
    pub(crate) max_hold: Option<Duration>,
    /// Keep the lease at least this long after the command started
    ///
    /// Even if the command ends sooner (ShedLock's lockAtLeastFor; --once-per does not need it).
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, help_heading = LEASE)]
    pub(crate) min_hold: Option<Duration>,
    /// Holders the name admits at once: 1 is a lock, more a semaphore
    ///
    /// This run holds one of the permits. Everyone using a name must give the same number while
    /// it is in use.
    #[arg(long, value_name = "N", default_value_t = 1, help_heading = LEASE)]
    pub(crate) permits: u32,
    /// Run at most once per slot of PERIOD (`1h`, `1d`)
    ///
    /// For a scheduled job fired on every replica. "Now" maps to the slot whose start is nearest,
    /// so replicas whose clocks are apart by up to half the period claim the same slot. The first
    /// runs the command under the slot's lease (NAME@SLOT) with LEASEHOLD_SLOT in its environment;
    /// the slot is recorded done only when it exits 0. Others exit --busy-exit-code while it runs,
    /// --done-exit-code once it is done. A failed or lost run leaves the slot open for a later
    /// replica or retry, up to --max-attempts; then the last attempt's code. `leasehold history
    /// NAME` shows every slot.
    #[arg(long, value_name = "PERIOD", value_parser = duration::parse,
          conflicts_with_all = ["wait", "permits"], help_heading = JOB)]
    pub(crate) once_per: Option<Duration>,
    /// Shift the slots of --once-per
    ///
    /// `--once-per 1d --offset 2h` is daily at 02:00 UTC.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "once_per",
          help_heading = JOB)]
    pub(crate) offset: Option<Duration>,
    /// Latest start of a late firing after its slot's start (default: the period)
    ///
    /// A firing more than half a period late (a timer catching up after a reboot) runs its own
    /// slot, never the next one early, if still within this of its start; past it, the slot is
    /// recorded missed and nothing runs.
    #[arg(long, value_name = "DURATION", value_parser = duration::parse, requires = "once_per",
          help_heading = JOB)]
    pub(crate) starting_deadline: Option<Duration>,
    /// Attempts of one slot before it is given up.
    #[arg(long, value_name = "N", default_value_t = 3, help_heading = JOB)]
    pub(crate) max_attempts: u32,
    /// Exit code when the slot was already done.
    #[arg(long, value_name = "CODE", default_value_t = 0,
          value_parser = clap::value_parser!(i32).range(0..=255), help_heading = JOB)]
    pub(crate) done_exit_code: i32,
    /// Say on stderr when the lease is acquired and released (the global -v).
    #[arg(skip)]
    pub(crate) verbose: bool,
    /// Lease name (no braces or control characters, at most 256 bytes).
    pub(crate) name: String,
    /// The command and its arguments, after `--`
    ///
    /// It gets LEASEHOLD_NAME and LEASEHOLD_FENCE in its environment and, unless stdin is a
    /// terminal, runs in its own process group. Its parent is a watcher process that stops it if
    /// `run` dies.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

impl RunArgs {
    /// The wait in force: none under `-n`.
    pub(crate) fn wait(&self) -> Duration {
        if self.no_wait {
            Duration::ZERO
        } else {
            self.wait
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct ElectArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// What the leader advertises, e.g. its address
    ///
    /// An address, an id: shown by `leasehold leader`; at most 512 bytes. Default: the holder
    /// identity.
    #[arg(long, value_name = "VALUE")]
    pub(crate) value: Option<String>,
    /// Who this candidate is, shown by `leasehold leader`
    ///
    /// At most 128 bytes, nothing secret. Default: host name, process id and a random id.
    #[arg(long, value_name = "HOLDER", env = "LEASEHOLD_HOLDER", help_heading = LEASE)]
    pub(crate) holder: Option<String>,
    /// Campaign again after the command ends: a standby replica
    ///
    /// Whether the command was stopped or exited. Without it, `elect` exits with the command's
    /// code.
    #[arg(long)]
    pub(crate) again: bool,
    /// How long each campaign waits to lead (default: as long as it takes)
    #[arg(short = 'w', long, value_name = "DURATION", value_parser = duration::parse,
          env = "LEASEHOLD_WAIT", help_heading = LEASE)]
    pub(crate) wait: Option<Duration>,
    /// Do not wait: lead now or exit --busy-exit-code (wins over --wait)
    #[arg(short = 'n', long, help_heading = LEASE)]
    pub(crate) no_wait: bool,
    /// Program run when this candidate starts leading (e.g. to label its pod)
    ///
    /// A path, or a name on PATH; no arguments, no shell. Run each time this candidate starts
    /// leading, before the command starts, with LEASEHOLD_EVENT=lead, LEASEHOLD_NAME,
    /// LEASEHOLD_TERM and LEASEHOLD_VALUE in its environment: e.g. a script that labels the pod
    /// `role=leader` so that a Kubernetes Service selects the leader alone. It gets 10s; a
    /// failure is said on stderr and the leadership goes on. Checked before campaigning: a
    /// program that is missing or not executable is exit 2.
    #[arg(long, value_name = "PROGRAM")]
    pub(crate) on_lead: Option<PathBuf>,
    /// Program run when this candidate stops leading
    ///
    /// As --on-lead, with LEASEHOLD_EVENT=lose, run once the command is gone and the leadership is
    /// resigned or lost (not when `elect` itself is killed with SIGKILL: the next leader's
    /// --on-lead should take the label from every other pod first).
    #[arg(long, value_name = "PROGRAM")]
    pub(crate) on_lose: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) supervise: SuperviseArgs,
    /// Say on stderr when this candidate leads and resigns (the global -v).
    #[arg(skip)]
    pub(crate) verbose: bool,
    /// Election name (a lease name: no braces or control characters, at most 256 bytes).
    pub(crate) name: String,
    /// The command and its arguments, after `--`
    ///
    /// It gets LEASEHOLD_NAME, LEASEHOLD_TERM and LEASEHOLD_FENCE (the same number) in its
    /// environment.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

impl ElectArgs {
    /// How long each campaign waits: none under `-n`, else `--wait`, else as long as it takes.
    pub(crate) fn wait(&self) -> Duration {
        match (self.no_wait, self.wait) {
            (true, _) => Duration::ZERO,
            (false, wait) => wait.unwrap_or(Duration::MAX),
        }
    }
}

/// `run --on-suspect`: what a suspect lease does to the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum OnSuspect {
    /// Say so once on stderr; the command runs on.
    Warn,
    /// Stop the command as a lost lease does; exit 76.
    Stop,
}
