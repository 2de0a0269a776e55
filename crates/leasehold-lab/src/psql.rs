//! Writes from outside Rust: a `psql` process per transaction calling the SQL function
//! `leasehold_fence(resource, fence)` that `leasehold migrate` installs, as a shell job or a service
//! in another language does. The verifier's `--fenced-writer psql` and the demo's scene 4 write
//! through it.
//!
//! Limit: PostgreSQL only, and one process per transaction (a few milliseconds each): it shows that
//! the check holds from outside Rust, not how fast such a writer is.

use std::process::Stdio;

use anyhow::Context as _;
use tokio::io::AsyncWriteExt as _;

/// `s` as an SQL string literal.
pub(crate) fn quoted(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// Whether the `psql` program runs here; the error says how to install it and names `option`, the
/// option that asked for it.
pub(crate) fn check_available(option: &str) -> anyhow::Result<()> {
    let found = std::process::Command::new("psql")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    anyhow::ensure!(
        found,
        "{option}: the psql program was not found on PATH; install it (apt-get install -y postgresql-client) or leave the option out"
    );
    Ok(())
}

/// Runs `psql` against one database, optionally with a schema as its search path.
#[derive(Debug, Clone)]
pub(crate) struct Psql {
    url: String,
    /// Set as the search path (`PGOPTIONS`): where `leasehold_fence` and `leasehold_fences` are.
    schema: Option<String>,
}

impl Psql {
    /// `psql` on the database at `url` (a `postgres://` URL libpq reads), in `schema` if given.
    pub(crate) fn new(url: &str, schema: Option<&str>) -> Self {
        Self {
            url: url.to_owned(),
            schema: schema.map(str::to_owned),
        }
    }

    /// The script that [`Psql::fenced`] sends: `BEGIN; SELECT leasehold_fence(resource, fence);`,
    /// `statements`, `COMMIT`.
    pub(crate) fn fenced_script(resource: &str, fence: i64, statements: &[String]) -> String {
        let mut script = format!(
            "BEGIN;\nSELECT leasehold_fence({}, {fence});\n",
            quoted(resource)
        );
        for statement in statements {
            script.push_str(statement);
            script.push_str(";\n");
        }
        script.push_str("COMMIT;\n");
        script
    }

    /// Runs [`Psql::fenced_script`] in one `psql` process: `Ok(())` when it committed,
    /// `Err(message)` when `leasehold_fence` refused the fence (SQLSTATE LHF01: the transaction
    /// rolled back, nothing of it written; the message is psql's error line). Any other failure is
    /// the outer error, with psql's message.
    pub(crate) async fn fenced(
        &self,
        resource: &str,
        fence: i64,
        statements: &[String],
    ) -> anyhow::Result<Result<(), String>> {
        let script = Self::fenced_script(resource, fence, statements);
        match self.run(&script).await? {
            Ok(_) => Ok(Ok(())),
            Err(stderr) if stderr.contains("LHF01") => Ok(Err(stderr
                .lines()
                .find(|l| l.contains("LHF01"))
                .unwrap_or(&stderr)
                .trim()
                .to_owned())),
            Err(stderr) => anyhow::bail!("psql failed: {}", stderr.trim()),
        }
    }

    /// Runs `script` (stopping at the first error, errors with their SQLSTATE): its output, or
    /// `Err(stderr)` when a statement failed. `Err` outside when psql could not run at all.
    pub(crate) async fn run(&self, script: &str) -> anyhow::Result<Result<String, String>> {
        let mut cmd = tokio::process::Command::new("psql");
        cmd.args([
            "-X",
            "-q",
            "-t",
            "-A",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            &self.url,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
        if let Some(schema) = &self.schema {
            cmd.env("PGOPTIONS", format!("-c search_path={schema}"));
        }
        let mut child = cmd
            .spawn()
            .context("cannot run psql (apt-get install -y postgresql-client)")?;
        let mut stdin = child.stdin.take().context("psql stdin")?;
        // Verbose errors carry their SQLSTATE (`ERROR:  LHF01: …`).
        stdin
            .write_all(format!("\\set VERBOSITY verbose\n{script}").as_bytes())
            .await?;
        drop(stdin);
        let out = child.wait_with_output().await.context("psql")?;
        if out.status.success() {
            Ok(Ok(String::from_utf8_lossy(&out.stdout).into_owned()))
        } else {
            Ok(Err(String::from_utf8_lossy(&out.stderr).into_owned()))
        }
    }
}
