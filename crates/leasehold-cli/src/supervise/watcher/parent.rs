//! `run`'s side of the watcher: starts it (this binary again, in its own process group) on an
//! abstract socket only our child may use, reads its reports and sends it orders.

use std::ffi::OsString;
use std::io::{self, ErrorKind};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::SocketAddr;
use std::time::Duration;

use super::protocol::{Order, Report};

/// How long `run` waits for a freshly started watcher to connect.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What `run` asks the watcher to start.
#[derive(Debug)]
pub(crate) struct Spec<'a> {
    pub(crate) command: &'a [OsString],
    pub(crate) env: Vec<(&'static str, String)>,
    pub(crate) grace: Duration,
    /// On a terminal: keep the command in `run`'s process group.
    pub(crate) terminal: bool,
}

/// `run`'s handle on its watcher.
#[derive(Debug)]
pub(crate) struct Watcher {
    process: tokio::process::Child,
    reports: tokio::io::Lines<tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>>,
    orders: tokio::net::unix::OwnedWriteHalf,
}

impl Watcher {
    /// Starts the watcher, which starts the command; returns once the watcher is connected. The
    /// first report is [`Report::Started`] or [`Report::Failed`].
    pub(crate) async fn start(spec: Spec<'_>) -> io::Result<Watcher> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let name = format!("leasehold-run/{}/{nanos:08x}", std::process::id());
        let listener =
            std::os::unix::net::UnixListener::bind_addr(&SocketAddr::from_abstract_name(&name)?)?;
        listener.set_nonblocking(true)?;
        let listener = tokio::net::UnixListener::from_std(listener)?;

        // /proc/self/exe is this very binary even if the file was replaced since `run` started.
        let mut cmd = tokio::process::Command::new("/proc/self/exe");
        cmd.arg0("leasehold")
            .arg("__run-watcher")
            .arg("--socket")
            .arg(&name)
            .arg("--grace-ms")
            .arg(spec.grace.as_millis().to_string());
        if spec.terminal {
            cmd.arg("--join-group")
                .arg(nix::unistd::getpgrp().as_raw().to_string());
        }
        cmd.arg("--").args(spec.command);
        for (k, v) in &spec.env {
            cmd.env(k, v);
        }
        // Its own process group: signals aimed at the command's group (or at the terminal's
        // foreground group) do not reach it.
        cmd.process_group(0);
        // Spawning blocks until the child has executed; keep it off the async threads. (The thread
        // it runs on is retired later, which is exactly what a parent-death signal would not survive.)
        let mut process = tokio::task::spawn_blocking(move || cmd.spawn())
            .await
            .map_err(io::Error::other)??;
        let pid = process.id().map(|p| p as i32);
        let deadline = tokio::time::sleep(CONNECT_TIMEOUT);
        tokio::pin!(deadline);
        let stream = loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, _) = accepted?;
                    // Anyone on the machine can connect to an abstract socket; only our child counts.
                    if stream.peer_cred().ok().and_then(|c| c.pid()) == pid && pid.is_some() {
                        break stream;
                    }
                }
                status = process.wait() => {
                    return Err(io::Error::other(format!("it exited before connecting ({})", status?)));
                }
                _ = &mut deadline => {
                    let _ = process.start_kill();
                    return Err(io::Error::new(ErrorKind::TimedOut, format!("it did not connect within {CONNECT_TIMEOUT:?}")));
                }
            }
        };
        let (read, write) = stream.into_split();
        use tokio::io::AsyncBufReadExt;
        Ok(Watcher {
            process,
            reports: tokio::io::BufReader::new(read).lines(),
            orders: write,
        })
    }

    /// The watcher's pid.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.process.id()
    }

    /// The next report; `None` once the watcher is gone. Cancel safe.
    pub(crate) async fn next(&mut self) -> Option<Report> {
        loop {
            match self.reports.next_line().await {
                Ok(Some(line)) => {
                    if let Some(report) = Report::parse(&line) {
                        return Some(report);
                    }
                }
                Ok(None) | Err(_) => return None,
            }
        }
    }

    /// Sends an order; a watcher that is gone shows up as `None` from [`Watcher::next`].
    pub(crate) async fn send(&mut self, order: Order) {
        use tokio::io::AsyncWriteExt;
        let line = order.line() + "\n";
        let _ = self.orders.write_all(line.as_bytes()).await;
    }

    /// Waits (briefly) for the watcher process to exit, so that it is not left as a zombie.
    pub(crate) async fn reap(mut self) {
        let _ = tokio::time::timeout(Duration::from_secs(2), self.process.wait()).await;
    }
}
