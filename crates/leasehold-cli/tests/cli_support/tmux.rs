//! A real terminal for the tests: a tmux server of its own, a shell in its one pane, keys typed,
//! the screen read back (with its escape codes when asked).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// A tmux server of its own (its own socket), killed on drop.
pub(crate) struct Tmux {
    socket: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmux {
    pub(crate) fn start(env: &[(&str, String)]) -> Tmux {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("tmux.sock");
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&socket).args([
            "-f",
            "/dev/null",
            "new-session",
            "-d",
            "-x",
            "160",
            "-y",
            "40",
        ]);
        for (k, v) in env {
            c.arg("-e").arg(format!("{k}={v}"));
        }
        c.args(["sh"]);
        let status = c.status().expect(
            "tmux is required for the terminal tests (apt-get install -y tmux, or ./dev setup)",
        );
        assert!(status.success(), "tmux new-session failed");
        Tmux { socket, _dir: dir }
    }

    pub(crate) fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.arg("-S").arg(&self.socket);
        c
    }

    pub(crate) fn send(&self, keys: &[&str]) {
        assert!(self
            .tmux()
            .arg("send-keys")
            .args(keys)
            .status()
            .unwrap()
            .success());
    }

    pub(crate) fn type_line(&self, line: &str) {
        self.send(&["-l", line]);
        self.send(&["Enter"]);
    }

    /// The pane's text with its colour escape codes (`capture-pane -e`).
    pub(crate) fn screen_with_escapes(&self) -> String {
        let o = self
            .tmux()
            .args(["capture-pane", "-p", "-J", "-e"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub(crate) fn screen(&self) -> String {
        let o = self
            .tmux()
            .args(["capture-pane", "-p", "-J"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    pub(crate) fn wait_for(&self, what: &str) -> String {
        let until = Instant::now() + Duration::from_secs(30);
        loop {
            let screen = self.screen();
            if screen.contains(what) {
                return screen;
            }
            if Instant::now() > until {
                let ps = Command::new("ps")
                    .args(["-eo", "pid,ppid,pgid,tpgid,stat,wchan:20,args"])
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
                    .unwrap_or_default();
                let ours: Vec<&str> = ps
                    .lines()
                    .filter(|l| l.contains("leasehold") || l.contains(" sh") || l.contains("sleep"))
                    .collect();
                panic!(
                    "{what:?} did not appear on the terminal:\n{screen}\nprocesses:\n{}",
                    ours.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The pid of the shell in the pane.
    pub(crate) fn shell_pid(&self) -> i32 {
        let o = self
            .tmux()
            .args(["display-message", "-p", "#{pane_pid}"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).trim().parse().unwrap()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").status();
    }
}
