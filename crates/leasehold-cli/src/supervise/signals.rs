//! The signals a supervised command is told of: SIGINT, SIGTERM, SIGHUP and SIGQUIT, installed
//! before anything else; and what a signal that arrives before the command started does (the
//! process exits 128 + N, after its withdrawal from the store's queue reached the store).

use std::time::Duration;

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

/// The signals `run` passes on to the command's process group: SIGINT, SIGTERM, SIGHUP, SIGQUIT.
/// Installed before anything else so that a Ctrl-C during the wait for the lease aborts the wait
/// cleanly instead of killing us mid-acquire.
pub(crate) struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
    /// The last signal received, if any.
    last: Option<Signal>,
    /// Whether [`recv`](Self::recv) hands signals on; `false` for a `cron` run, whose daemon keeps
    /// SIGHUP (reload) and SIGTERM (drain) for itself.
    forward: bool,
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Self> {
        Ok(Signals {
            int: signal(SignalKind::interrupt())?,
            term: signal(SignalKind::terminate())?,
            hup: signal(SignalKind::hangup())?,
            quit: signal(SignalKind::quit())?,
            last: None,
            forward: true,
        })
    }

    /// Handlers whose [`recv`](Self::recv) never returns: the command is told nothing (a `cron`
    /// daemon's run; the daemon handles its own signals).
    pub(crate) fn silent() -> std::io::Result<Self> {
        let mut s = Self::install()?;
        s.forward = false;
        Ok(s)
    }

    /// The next signal received. Cancel safe.
    pub(crate) async fn recv(&mut self) -> Signal {
        if !self.forward {
            return std::future::pending().await;
        }
        let sig = tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        };
        self.last = Some(sig);
        sig
    }

    /// The last signal received so far, if any.
    pub(crate) fn last(&self) -> Option<Signal> {
        self.last
    }
}

/// Exit code when a signal arrives before the command was started: nothing to forward it to.
pub(crate) fn aborted(sig: Signal, held: &str) -> i32 {
    eprintln!("leasehold: interrupted by {sig} before the command started; {held}");
    128 + sig as i32
}

/// How long a process interrupted while waiting gives its withdrawal (and any lease taken
/// meanwhile) to reach the store before it exits.
pub(crate) const SETTLE: Duration = Duration::from_secs(2);

/// As [`aborted`], after the client's background clean-ups (the withdrawal from the store's queue
/// of the acquire the signal cancelled) reached the store, within [`SETTLE`].
pub(crate) async fn aborted_settled(
    client: &leasehold::LeaseClient,
    sig: Signal,
    held: &str,
) -> i32 {
    client.settle(SETTLE).await;
    aborted(sig, held)
}
