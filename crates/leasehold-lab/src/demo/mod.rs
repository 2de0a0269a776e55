//! The live demo: every failure of a naive lock, and its fix, told live against real servers.
//!
//! Promise: every scene runs real commands against a real Redis (a private `redis-server` unless
//! `--redis` is given) and an embedded SQLite file, real worker processes are killed and paused with
//! real signals, and every verdict is computed from the data at the end of the scene; the demo exits 0
//! only when every scene showed what it claims. Limit: it shows that the failures happen, not how
//! often; for rates, run `leasehold verify`.
//!
//! Layout: [`stage`](self) (shared set-up, live timeline, worker processes), `naive` (scenes 1-3),
//! `fenced` (scene 4), `guards` (scene 5), `failover` (scene 6: a real Sentinel failover), `redlock`
//! (scene 7, on three masters of its own), `election` (scene 8: a leader cut off from Redis stops
//! before the hand-over, and its late write is refused), `resource` (the SQLite counter), `worker`
//! (the hidden `__demo-worker` process), `style` (colour or plain text).

use anyhow::Context as _;
use std::path::PathBuf;
use tokio::time::Instant;

mod election;
mod failover;
mod fenced;
mod guards;
mod naive;
mod redlock;
mod resource;
mod stage;
mod style;
mod worker;

use stage::Stage;
use style::Style;

/// Command-line arguments of `leasehold demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Use this Redis instead of starting a private redis-server
    ///
    /// The demo's keys live under a unique prefix and are deleted at the end.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// Run only this scene (1-8); repeat for several
    ///
    /// Scene 6 starts its own Sentinel set (a primary, a replica and three sentinels) and scene 7
    /// its own three Redis masters, also with `--redis`; scene 8 puts a proxy of its own between
    /// its leader and Redis.
    #[arg(long, value_name = "N", value_parser = scene_number)]
    pub scene: Vec<u8>,
    /// A PostgreSQL database for scene 4's check from outside Rust
    ///
    /// With it, scene 4 also writes its two holders' fences through `psql`, each in a transaction
    /// that calls the SQL function `leasehold_fence` first (as a shell job or a service in another
    /// language does), on a counter in a schema of its own (dropped at the end). Needs the `psql`
    /// program.
    #[arg(long, value_name = "URL")]
    pub database: Option<String>,
    /// The `leasehold` binary the worker processes run (default: this executable).
    #[arg(long, value_name = "PATH", hide = true)]
    pub worker_exe: Option<PathBuf>,
}

/// Arguments of the hidden worker process that the live demo spawns (`leasehold __demo-worker`).
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// Which holder to play: setnx, token, fenced, redlock or elect
    ///
    /// Which holder to play: `setnx` (scene 1), `token` (scene 3), `fenced` (scene 4), `redlock`
    /// (scene 7), `elect` (scene 8).
    #[arg(long)]
    pub role: String,
    /// Redis URL.
    #[arg(long)]
    pub redis: String,
    /// Lock key (scenes 1, 3) or lease name (scene 4).
    #[arg(long)]
    pub key: String,
    /// Lease key prefix (scene 4).
    #[arg(long)]
    pub key_prefix: Option<String>,
    /// The SQLite resource file (scenes 3, 4).
    #[arg(long)]
    pub db: Option<PathBuf>,
    /// Lease length in milliseconds.
    #[arg(long, default_value_t = 600)]
    pub ttl_ms: u64,
    /// Milliseconds of work between reading and writing.
    #[arg(long, default_value_t = 400)]
    pub work_ms: u64,
    /// A Redlock master (scene 7); repeated for each.
    #[arg(long)]
    pub master: Vec<String>,
}

/// What a scene showed, read from the data at its end.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// Whether the data shows what the scene claims.
    pub(crate) shown: bool,
    /// The figures behind the verdict.
    pub(crate) verdict: String,
    /// What to take away.
    pub(crate) lesson: &'static str,
    /// Redis commands the scene sent.
    pub(crate) redis_commands: usize,
}

const SCENES: [(u8, &str); 8] = [
    (1, "SETNX with no TTL: a crashed holder locks the resource forever"),
    (2, "TTL + bare DEL: a slow holder deletes the next holder's lock, and there are two holders"),
    (3, "Token + compare-and-delete: the release is safe, but a paused holder still writes stale data"),
    (4, "Fencing at the resource: the same pause, and the stale write is refused"),
    (5, "No lock at all: the database refuses duplicates, overselling and illegal transitions"),
    (6, "A real Sentinel failover loses a lease: two holders, and the fence refuses the stale one"),
    (7, "Redlock on three masters: it survives a crashed master, not a paused holder; the fence refuses the stale one"),
    (8, "An election cut off from Redis: the leader's work is gone before the standby leads, and its late write is refused"),
];

/// `--scene N`: one of the scenes this build has.
fn scene_number(s: &str) -> Result<u8, String> {
    let known = || {
        SCENES
            .iter()
            .map(|(n, _)| n.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    s.trim()
        .parse::<u8>()
        .ok()
        .filter(|n| SCENES.iter().any(|(k, _)| k == n))
        .ok_or_else(|| format!("`{s}` is not a scene; give one of {}", known()))
}

/// Runs `leasehold demo`; returns the process exit code (0 only when every scene showed its claim).
pub async fn run(args: DemoArgs) -> anyhow::Result<i32> {
    if let Some(url) = &args.database {
        anyhow::ensure!(
            url.starts_with("postgres://") || url.starts_with("postgresql://"),
            "--database {url:?}: scene 4 checks fences from psql on PostgreSQL only; give a postgres://user@host/db URL or leave the option out"
        );
        crate::psql::check_available("--database")?;
    }
    let style = Style::detect();
    let started = Instant::now();
    // First, before anything that can take a moment (starting a redis-server), say what this is.
    println!(
        "{}",
        style.bold("leasehold demo: what a Redis lock can and cannot promise")
    );
    let (_server, redis_url) = match &args.redis {
        Some(url) => (None, url.clone()),
        None => {
            if !leasehold_testkit::redis_server_available() {
                eprintln!(
                    "leasehold demo: redis-server is not installed. Install it (apt-get install redis-server), \
                     set REDIS_SERVER_BIN to its path, or pass --redis URL to use a running Redis."
                );
                return Ok(69);
            }
            let server = leasehold_testkit::RedisServer::start()
                .context("cannot start a private redis-server")?;
            let url = server.url();
            (Some(server), url)
        }
    };
    let con = redis::Client::open(redis_url.as_str())
        .with_context(|| format!("bad Redis URL {redis_url}"))?
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("cannot reach Redis at {redis_url}"))?;
    let dir = tempfile::Builder::new()
        .prefix("leasehold-demo-")
        .tempdir()?;
    let worker_exe = match args.worker_exe.clone() {
        Some(p) => p,
        None => std::env::current_exe().context("cannot find this executable to start workers")?,
    };
    let mut st = Stage {
        redis_url: redis_url.clone(),
        database: args.database.clone(),
        con,
        ns: args
            .redis
            .as_ref()
            .map(|_| format!("leasehold-demo-{:08x}", rand::random::<u32>())),
        dir: dir.path().to_owned(),
        worker_exe,
        style,
    };

    println!(
        "{}",
        style.dim(&format!(
            "Redis {} ({}), SQLite resource in {}. A = a worker process we crash or pause, B/C = the next holders, · = the demo looking.",
            redis_url,
            if args.redis.is_some() { "given" } else { "private redis-server" },
            dir.path().display()
        ))
    );
    let chosen: Vec<u8> = if args.scene.is_empty() {
        SCENES.iter().map(|(n, _)| *n).collect()
    } else {
        args.scene.clone()
    };
    let mut results = Vec::new();
    for n in chosen {
        results.push((n, play(&mut st, n).await));
    }
    cleanup(&mut st).await;
    let ok = results.iter().filter(|(_, s)| *s).count();
    println!();
    let line = format!(
        "{ok}/{} scenes showed what they claim, in {:.1} s.",
        results.len(),
        started.elapsed().as_secs_f64()
    );
    if ok == results.len() {
        println!("{}", style.green(&line));
        println!("Use the lease for efficiency; for correctness, fence at the resource or let the database enforce the rule.");
        Ok(0)
    } else {
        println!("{}", style.red(&line));
        Ok(1)
    }
}

/// Plays scene `n` and prints its verdict; whether it showed its claim.
async fn play(st: &mut Stage, n: u8) -> bool {
    let style = st.style;
    let title = SCENES
        .iter()
        .find(|(k, _)| *k == n)
        .map(|(_, t)| *t)
        .unwrap_or_default();
    println!();
    println!(
        "{}",
        style.bold(&format!("Scene {n}/{}. {title}", SCENES.len()))
    );
    let outcome = match n {
        1 => naive::setnx_without_ttl(st).await,
        2 => naive::ttl_and_bare_del(st).await,
        3 => naive::token_lock_paused_holder(st).await,
        4 => fenced::fenced_paused_holder(st).await,
        5 => guards::database_guards(st).await,
        6 => failover::sentinel_failover_loses_a_lease(st).await,
        7 => redlock::redlock_scene(st).await,
        _ => election::deposed_leader(st).await,
    };
    match outcome {
        Ok(o) => {
            let mark = if o.shown {
                style.green("✔ shown")
            } else {
                style.red("✘ NOT shown")
            };
            println!("  Verdict {n}: {mark}: {}", o.verdict);
            println!(
                "  {} {}  {}",
                style.dim("Lesson:"),
                o.lesson,
                style.dim(&format!("({} Redis commands shown)", o.redis_commands))
            );
            o.shown
        }
        Err(e) => {
            println!(
                "  Verdict {n}: {}: the scene could not run: {e:#}",
                style.red("✘ NOT shown")
            );
            false
        }
    }
}

/// Deletes this run's keys (they matter only on a shared Redis). Uses SCAN, never KEYS.
async fn cleanup(st: &mut Stage) {
    let Some(ns) = &st.ns else {
        return; // the private server goes away with its keys
    };
    let pattern = format!("*{ns}*");
    let mut cursor: u64 = 0;
    loop {
        let page: redis::RedisResult<(u64, Vec<String>)> = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(&pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut st.con)
            .await;
        let Ok((next, keys)) = page else { return };
        if !keys.is_empty() {
            let _: redis::RedisResult<i64> =
                redis::cmd("DEL").arg(&keys).query_async(&mut st.con).await;
        }
        if next == 0 {
            return;
        }
        cursor = next;
    }
}

/// Runs one worker process of the live demo; returns the process exit code.
pub async fn run_worker(args: WorkerArgs) -> anyhow::Result<i32> {
    match args.role.as_str() {
        "setnx" => worker::setnx_holder(args).await,
        "token" => worker::token_holder(args).await,
        "fenced" => fenced::worker(args).await,
        "redlock" => redlock::worker(args).await,
        "elect" => election::worker(args).await,
        other => anyhow::bail!("unknown demo worker role `{other}`"),
    }
}
