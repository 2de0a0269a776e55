//! What every scene shares: the Redis it talks to, a private key namespace, the SQLite resource's
//! directory, the worker executable, and the live timeline it prints.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context as _;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

use super::style::Style;

/// The shared set-up of one demo run.
#[derive(Debug)]
pub(crate) struct Stage {
    /// Redis URL (the private server's, or `--redis`).
    pub(crate) redis_url: String,
    /// One multiplexed connection for the parent's own commands.
    pub(crate) con: redis::aio::MultiplexedConnection,
    /// On a shared Redis (`--redis`), every key of this run starts with it, so the demo never touches
    /// anyone else's keys and can delete its own at the end; `None` on the private server, where the
    /// keys read like the seeds' (`lock:order:42`).
    pub(crate) ns: Option<String>,
    /// A PostgreSQL URL for scene 4's writes from `psql` (`--database`).
    pub(crate) database: Option<String>,
    /// Where the SQLite resource files live (deleted at the end).
    pub(crate) dir: PathBuf,
    /// The `leasehold` binary the worker processes run.
    pub(crate) worker_exe: PathBuf,
    pub(crate) style: Style,
}

/// Who did something, as shown in the timeline.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Actor {
    /// The worker process that gets crashed or paused.
    A,
    /// The next holder, run by the demo itself.
    B,
    /// A third client.
    C,
    /// The demo looking at data without taking part.
    Observer,
}

impl Actor {
    fn label(self) -> &'static str {
        match self {
            Actor::A => "A",
            Actor::B => "B",
            Actor::C => "C",
            Actor::Observer => "·",
        }
    }
}

/// A scene's live timeline: every line carries the milliseconds since the scene started.
#[derive(Debug)]
pub(crate) struct Timeline {
    start: Instant,
    style: Style,
    /// Redis commands sent, for the scene's summary.
    pub(crate) redis_commands: usize,
}

impl Timeline {
    pub(crate) fn new(style: Style) -> Self {
        Timeline {
            start: Instant::now(),
            style,
            redis_commands: 0,
        }
    }

    /// A second timeline on the same clock, for a task of the scene's own (its Redis commands are
    /// not counted in this one's).
    pub(crate) fn twin(&self) -> Timeline {
        Timeline {
            start: self.start,
            style: self.style,
            redis_commands: 0,
        }
    }

    fn stamp(&self) -> String {
        format!("{:>6} ms", self.start.elapsed().as_millis())
    }

    /// A narrative line.
    pub(crate) fn say(&self, who: Actor, what: &str) {
        println!(
            "  {}  {}  {what}",
            self.style.dim(&self.stamp()),
            self.style.bold(who.label())
        );
    }

    /// A Redis command and its reply.
    pub(crate) fn redis(&mut self, who: Actor, cmd: &str, reply: &str) {
        self.redis_commands += 1;
        println!(
            "  {}  {}  {} {} {}",
            self.style.dim(&self.stamp()),
            self.style.bold(who.label()),
            self.style.cyan(&format!("redis> {cmd}")),
            self.style.dim("→"),
            reply
        );
    }

    /// A statement against the SQLite resource and its outcome.
    pub(crate) fn sql(&self, who: Actor, stmt: &str, outcome: &str) {
        println!(
            "  {}  {}  {} {} {}",
            self.style.dim(&self.stamp()),
            self.style.bold(who.label()),
            self.style.yellow(&format!("sql> {stmt}")),
            self.style.dim("→"),
            outcome
        );
    }

    /// Relays one line of a worker's report (see [`super::worker`] for the format).
    pub(crate) fn relay(&mut self, who: Actor, line: &str) -> Option<WorkerEvent> {
        let (tag, rest) = line.split_once(' ').unwrap_or((line, ""));
        match tag {
            "CMD" => {
                let (cmd, reply) = rest.split_once('\t').unwrap_or((rest, ""));
                self.redis(who, cmd, reply);
                None
            }
            "SQL" => {
                let (stmt, outcome) = rest.split_once('\t').unwrap_or((rest, ""));
                self.sql(who, stmt, outcome);
                None
            }
            "SAY" => {
                self.say(who, rest);
                None
            }
            "EVENT" => Some(WorkerEvent(rest.to_owned())),
            _ => {
                self.say(who, line);
                None
            }
        }
    }
}

/// A cue a worker sends the demo (`EVENT <word> [value]`), e.g. `acquired`, `read 0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WorkerEvent(pub(crate) String);

/// A running worker process and its report stream.
#[derive(Debug)]
pub(crate) struct Worker {
    pub(crate) child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    pub(crate) pid: Pid,
}

impl Worker {
    /// Waits for the worker's next cue, relaying its other lines to the timeline. `None` when the
    /// worker closed its output (exited) first.
    pub(crate) async fn next_event(
        &mut self,
        tl: &mut Timeline,
        within: Duration,
    ) -> anyhow::Result<Option<WorkerEvent>> {
        let deadline = Instant::now() + within;
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .context("the worker process did not report in time")??;
            match line {
                None => return Ok(None),
                Some(l) => {
                    if let Some(ev) = tl.relay(Actor::A, &l) {
                        return Ok(Some(ev));
                    }
                }
            }
        }
    }

    /// Waits for a cue starting with `word`; returns its value part.
    pub(crate) async fn expect(
        &mut self,
        tl: &mut Timeline,
        word: &str,
        within: Duration,
    ) -> anyhow::Result<String> {
        match self.next_event(tl, within).await? {
            Some(WorkerEvent(ev)) => {
                let (w, v) = ev.split_once(' ').unwrap_or((ev.as_str(), ""));
                anyhow::ensure!(w == word, "worker said `{ev}`, expected `{word}`");
                Ok(v.to_owned())
            }
            None => anyhow::bail!("worker exited before saying `{word}`"),
        }
    }

    /// Relays the rest of the worker's output and waits for it to exit.
    pub(crate) async fn finish(
        &mut self,
        tl: &mut Timeline,
        within: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        // Remaining cues (`released`, `wrote`) are for the demo only; the timeline already shows
        // the commands behind them.
        while self.next_event(tl, within).await?.is_some() {}
        Ok(tokio::time::timeout(within, self.child.wait())
            .await
            .context("the worker process did not exit in time")??)
    }

    pub(crate) fn signal(&self, sig: Signal) -> anyhow::Result<()> {
        kill(self.pid, sig).with_context(|| format!("cannot send {sig} to the worker"))
    }
}

impl Stage {
    /// Scene `scene`'s lock key, in this run's namespace.
    pub(crate) fn key(&self, scene: u8) -> String {
        match &self.ns {
            None => format!("lock:order:4{scene}"),
            Some(ns) => format!("{ns}:lock:order:4{scene}"),
        }
    }

    /// The key prefix of scene 4's leasehold lease.
    pub(crate) fn lease_prefix(&self) -> String {
        self.ns.clone().unwrap_or_else(|| "leasehold".to_owned())
    }

    /// A fresh SQLite file for one scene.
    pub(crate) fn db_path(&self, scene: u8) -> PathBuf {
        self.dir.join(format!("scene{scene}.sqlite"))
    }

    /// Starts `leasehold __demo-worker --role ROLE ...` with its report on a pipe.
    pub(crate) fn spawn_worker(
        &self,
        role: &str,
        args: &[(&str, String)],
    ) -> anyhow::Result<Worker> {
        self.spawn_worker_at(&self.redis_url, role, args)
    }

    /// [`spawn_worker`](Self::spawn_worker) reaching Redis at `redis_url` (through a proxy).
    pub(crate) fn spawn_worker_at(
        &self,
        redis_url: &str,
        role: &str,
        args: &[(&str, String)],
    ) -> anyhow::Result<Worker> {
        let mut cmd = Command::new(&self.worker_exe);
        cmd.arg("__demo-worker")
            .args(["--role", role])
            .args(["--redis", redis_url]);
        for (flag, value) in args {
            cmd.arg(format!("--{flag}")).arg(value);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
        let mut child = cmd.spawn().with_context(|| {
            format!(
                "cannot start the worker process {}",
                self.worker_exe.display()
            )
        })?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let pid = Pid::from_raw(child.id().expect("just spawned") as i32);
        Ok(Worker {
            child,
            lines: BufReader::new(stdout).lines(),
            pid,
        })
    }
}

/// `path` as a SQLite URL that creates the file.
pub(crate) fn sqlite_url(path: &Path) -> String {
    format!("sqlite://{}?mode=rwc", path.display())
}
