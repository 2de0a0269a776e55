//! The conversation between `run` and its watcher, one text line per message, and the test knobs
//! both sides know.

use std::time::Duration;

use nix::sys::signal::Signal;

/// Test knob: `LEASEHOLD_RUN_THREAD_CHURN=100ms` makes `run` retire idle runtime threads after half
/// that and start a blocking task every period, so threads come and go all the time; a test uses it
/// to show that nothing about the command's supervision is tied to the thread that started it. The
/// watcher keeps it out of the command's environment.
pub(crate) const THREAD_CHURN_KNOB: &str = "LEASEHOLD_RUN_THREAD_CHURN";

/// Test knob: the watcher arms a parent-death signal on itself, the design this module rejects, so
/// that a test can show the thread churn it runs under would stop a healthy command.
pub(crate) const PDEATHSIG_KNOB: &str = "LEASEHOLD_TEST_WATCHER_PDEATHSIG";

/// What the watcher tells `run`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Report {
    /// The command runs with this pid.
    Started(u32),
    /// The command could not be started; `code` is 127 (not found) or 126 (not executable).
    Failed { code: i32, message: String },
    /// The command exited with this code (128 + N when killed by signal N).
    Exited(i32),
    /// The command had exited but left this many processes behind; they are being stopped.
    Leftovers(usize),
    /// Something outlived the grace period and gets SIGKILL.
    Killing,
    /// Nothing of the command is left; the watcher exits.
    Stopped,
}

impl Report {
    pub(super) fn line(&self) -> String {
        match self {
            Report::Started(pid) => format!("started {pid}"),
            Report::Failed { code, message } => {
                format!("failed {code} {}", message.replace('\n', " "))
            }
            Report::Exited(code) => format!("exited {code}"),
            Report::Leftovers(n) => format!("leftovers {n}"),
            Report::Killing => "killing".to_owned(),
            Report::Stopped => "stopped".to_owned(),
        }
    }

    pub(super) fn parse(line: &str) -> Option<Report> {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        Some(match word {
            "started" => Report::Started(rest.parse().ok()?),
            "failed" => {
                let (code, message) = rest.split_once(' ').unwrap_or((rest, ""));
                Report::Failed {
                    code: code.parse().ok()?,
                    message: message.to_owned(),
                }
            }
            "exited" => Report::Exited(rest.parse().ok()?),
            "leftovers" => Report::Leftovers(rest.parse().ok()?),
            "killing" => Report::Killing,
            "stopped" => Report::Stopped,
            _ => return None,
        })
    }
}

/// What `run` tells the watcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Order {
    /// Pass this signal on to the command (its group, or the command alone on a terminal).
    Signal(Signal),
    /// Stop everything of the command: SIGTERM now, SIGKILL after the grace; answer `stopped`.
    Stop(Duration),
}

impl Order {
    pub(super) fn line(self) -> String {
        match self {
            Order::Signal(sig) => format!("signal {}", sig as i32),
            Order::Stop(grace) => format!("stop {}", grace.as_millis()),
        }
    }

    pub(super) fn parse(line: &str) -> Option<Order> {
        let (word, rest) = line.split_once(' ')?;
        match word {
            "signal" => Signal::try_from(rest.parse::<i32>().ok()?)
                .ok()
                .map(Order::Signal),
            "stop" => Some(Order::Stop(Duration::from_millis(rest.parse().ok()?))),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_and_orders_survive_their_line_form() {
        for r in [
            Report::Started(42),
            Report::Failed {
                code: 127,
                message: "No such file or directory (os error 2)".into(),
            },
            Report::Exited(143),
            Report::Leftovers(3),
            Report::Killing,
            Report::Stopped,
        ] {
            assert_eq!(Report::parse(&r.line()), Some(r.clone()), "{r:?}");
        }
        for o in [
            Order::Signal(Signal::SIGHUP),
            Order::Stop(Duration::from_millis(1500)),
        ] {
            assert_eq!(Order::parse(&o.line()), Some(o), "{o:?}");
        }
        assert_eq!(Report::parse("started x"), None);
        assert_eq!(Order::parse("signal 999"), None);
    }
}
