//! `elect --on-lead PROGRAM` and `--on-lose PROGRAM`: a program run when this candidate starts or
//! stops leading, so that something outside (a Kubernetes label a Service selects, a load
//! balancer's pool) follows the leadership.
//!
//! Promise: the program is found (a path, or a name on `PATH`) and checked to be an executable file
//! before the campaign starts (else exit 2); it runs with `LEASEHOLD_EVENT` (`lead` or `lose`),
//! `LEASEHOLD_NAME`, `LEASEHOLD_TERM` and `LEASEHOLD_VALUE`, its output on our stderr; `lead` runs
//! before the leader's command starts, `lose` after it is gone. Limit: a hook is routing, not
//! safety: it runs after the fact (the store may already have handed the name on when `lose`
//! runs), it is not run when `elect` is SIGKILLed, and one that fails or outlives its 10 s is said
//! on stderr and otherwise ignored. Writes stay fenced by LEASEHOLD_TERM.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::exit;

/// How long a hook may run before it is killed.
const HOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// A checked hook program.
#[derive(Debug, Clone)]
pub(crate) struct Hook {
    program: PathBuf,
    flag: &'static str,
}

/// The program `given` resolves to: itself when it names a path, else the first executable of
/// that name on `PATH`.
fn resolve(given: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if given.components().count() > 1 || given.is_absolute() {
        return executable(given).then(|| given.to_owned());
    }
    std::env::var_os("PATH")
        .map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .map(|dir| dir.join(given))
        .find(|p| executable(p))
}

impl Hook {
    /// Checks `--FLAG PROGRAM`; exit 2 naming what is wrong.
    pub(crate) fn check(flag: &'static str, given: Option<&Path>) -> Result<Option<Hook>, i32> {
        let Some(given) = given else {
            return Ok(None);
        };
        match resolve(given) {
            Some(program) => Ok(Some(Hook { program, flag })),
            None => {
                eprintln!(
                    "leasehold: {flag} {}: not an executable file (nor one on PATH); give the path of a program (chmod +x for a script; no arguments, write a script for those)",
                    given.display()
                );
                Err(exit::USAGE)
            }
        }
    }

    /// Runs the hook for `event` and waits for it (at most [`HOOK_TIMEOUT`]); a failure is said
    /// on stderr.
    pub(crate) async fn run(&self, event: &str, name: &str, term: u64, value: &str) {
        let mut cmd = tokio::process::Command::new(&self.program);
        cmd.env("LEASEHOLD_EVENT", event)
            .env("LEASEHOLD_NAME", name)
            .env("LEASEHOLD_TERM", term.to_string())
            .env("LEASEHOLD_VALUE", value)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::inherit())
            .kill_on_drop(true);
        let shown = self.program.display();
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                eprintln!("leasehold: {} {shown}: cannot start it: {e}", self.flag);
                return;
            }
        };
        match tokio::time::timeout(HOOK_TIMEOUT, child.wait()).await {
            Ok(Ok(st)) if st.success() => {}
            Ok(Ok(st)) => eprintln!("leasehold: {} {shown} ({event}) failed: {st}", self.flag),
            Ok(Err(e)) => eprintln!("leasehold: {} {shown} ({event}): {e}", self.flag),
            Err(_) => {
                let _ = child.kill().await;
                eprintln!(
                    "leasehold: {} {shown} ({event}) did not finish within {}; killed",
                    self.flag,
                    crate::duration::show(HOOK_TIMEOUT)
                );
            }
        }
    }
}
