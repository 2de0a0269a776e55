//! The jobs file of `leasehold cron`: TOML, one `[job.NAME]` table per job and an optional
//! `[defaults]` table. Promise: a file either reads into jobs the library accepts, or is refused
//! with the file, the line and the field that is wrong, and what to write instead; nothing starts.
//! Limit: it checks form and meaning, not whether the command exists (that is known when it runs:
//! exit 127 in its record).
//!
//! TOML because it is a format people already know (Cargo, systemd-adjacent tools), it has real
//! types (a command is an array of strings, not a shell line to split), the parser reports the line
//! and key of every error, and a duplicate job name is a duplicate key, refused by the format itself.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use leasehold::schedule::scheduler::{CatchUp, Job, Overlap, Policy};
use leasehold::schedule::When;
use leasehold::LeaseOptions;
use serde::Deserialize;
use toml::Spanned;

/// The options a job may set, and `[defaults]` for all.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Entry {
    schedule: Option<Spanned<String>>,
    every: Option<Spanned<String>>,
    offset: Option<Spanned<String>>,
    zone: Option<Spanned<String>>,
    command: Option<Spanned<Vec<String>>>,
    shell: Option<Spanned<String>>,
    ttl: Option<Spanned<String>>,
    grace: Option<Spanned<String>>,
    starting_deadline: Option<Spanned<String>>,
    catch_up: Option<Spanned<String>>,
    catch_up_limit: Option<Spanned<u32>>,
    overlap: Option<Spanned<String>>,
    max_attempts: Option<Spanned<u32>>,
    backoff: Option<Spanned<String>>,
    jitter: Option<Spanned<String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Doc {
    #[serde(default)]
    defaults: Option<Entry>,
    #[serde(default)]
    job: BTreeMap<String, Spanned<Entry>>,
}

/// A job as the daemon runs it: the library's job and its command.
#[derive(Debug, Clone)]
pub(crate) struct CronJob {
    pub(crate) job: Job,
    pub(crate) command: Vec<OsString>,
    pub(crate) ttl: Duration,
    pub(crate) grace: Duration,
}

/// A refusal: where and what.
#[derive(Debug)]
pub(crate) struct FileError(pub(crate) String);

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

struct Ctx<'a> {
    path: &'a str,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, at: std::ops::Range<usize>, job: &str, field: &str, what: String) -> FileError {
        FileError(format!(
            "{}:{}: job `{job}`, field `{field}`: {what}",
            self.path,
            line_of(self.text, at.start)
        ))
    }

    fn duration(
        &self,
        v: &Option<Spanned<String>>,
        job: &str,
        field: &str,
    ) -> Result<Option<Duration>, FileError> {
        match v {
            None => Ok(None),
            Some(s) => crate::duration::parse(s.get_ref())
                .map(Some)
                .map_err(|e| self.err(s.span(), job, field, e)),
        }
    }
}

/// Reads and checks the jobs file at `path`.
pub(crate) fn load(path: &Path) -> Result<Vec<CronJob>, FileError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        FileError(format!(
            "{}: cannot read the jobs file: {e}",
            path.display()
        ))
    })?;
    parse(&path.display().to_string(), &text)
}

/// Reads and checks the jobs file `text` (named `path` in errors).
pub(crate) fn parse(path: &str, text: &str) -> Result<Vec<CronJob>, FileError> {
    let doc: Doc = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| line_of(text, s.start)).unwrap_or(0);
        FileError(format!(
            "{path}:{line}: not a jobs file: {}; write TOML: one [job.NAME] table per job with schedule = \"0 2 * * *\" (or every = \"10m\") and command = [\"prog\", \"arg\"]",
            e.message()
        ))
    })?;
    if doc.job.is_empty() {
        return Err(FileError(format!(
            "{path}: no job; add a table such as [job.nightly] with schedule and command"
        )));
    }
    let cx = Ctx { path, text };
    let defaults = doc.defaults.unwrap_or_default();
    for (field, set) in [
        ("schedule", defaults.schedule.as_ref().map(|s| s.span())),
        ("every", defaults.every.as_ref().map(|s| s.span())),
        ("command", defaults.command.as_ref().map(|s| s.span())),
        ("shell", defaults.shell.as_ref().map(|s| s.span())),
    ] {
        if let Some(at) = set {
            return Err(cx.err(
                at,
                "[defaults]",
                field,
                "belongs to a job, not to [defaults]".into(),
            ));
        }
    }
    let mut out = Vec::new();
    for (name, entry) in &doc.job {
        out.push(one(&cx, name, entry, &defaults)?);
    }
    Ok(out)
}

fn pick<T: Clone>(own: &Option<T>, default: &Option<T>) -> Option<T> {
    own.clone().or_else(|| default.clone())
}

fn one(
    cx: &Ctx<'_>,
    name: &str,
    spanned: &Spanned<Entry>,
    d: &Entry,
) -> Result<CronJob, FileError> {
    let e = spanned.get_ref();
    let whole = spanned.span();
    let when = when_of(cx, name, e, d, &whole)?;
    let command = command_of(cx, name, e, &whole)?;
    let ttl = cx
        .duration(&pick(&e.ttl, &d.ttl), name, "ttl")?
        .unwrap_or(Duration::from_secs(30));
    let grace_given = cx.duration(&pick(&e.grace, &d.grace), name, "grace")?;
    let lease = LeaseOptions::with_ttl(ttl).map_err(|err| {
        let at = pick(&e.ttl, &d.ttl).map_or(whole.clone(), |t| t.span());
        cx.err(at, name, "ttl", err.to_string())
    })?;
    // The run is stopped before the store may hand the slot's lease on: the grace must fit.
    let grace = grace_given.unwrap_or_else(|| lease.default_shutdown());
    lease.check_shutdown(grace).map_err(|err| {
        let at = pick(&e.grace, &d.grace).map_or(whole.clone(), |t| t.span());
        cx.err(at, name, "grace", err.to_string())
    })?;
    let mut p = Policy::default();
    p.lease = lease;
    p.grace = grace;
    let attempts = policy_options(cx, name, e, d, &mut p)?;
    let job = Job::new(name, when)
        .map_err(|err| cx.err(whole.clone(), name, "name", err.to_string()))?
        .with_policy(p)
        .map_err(|err| {
            let (at, field) = if err.to_string().contains("max-attempts") {
                (
                    attempts.as_ref().map_or(whole.clone(), |a| a.span()),
                    "max-attempts",
                )
            } else {
                (whole.clone(), "starting-deadline")
            };
            cx.err(at, name, field, err.to_string())
        })?;
    Ok(CronJob {
        job,
        command,
        ttl,
        grace,
    })
}

/// When a job runs: `schedule` (a cron expression, in `zone`) or `every` (an interval, with
/// `offset`).
fn when_of(
    cx: &Ctx<'_>,
    name: &str,
    e: &Entry,
    d: &Entry,
    whole: &std::ops::Range<usize>,
) -> Result<When, FileError> {
    let zone = pick(&e.zone, &d.zone);
    let zone_name = zone
        .as_ref()
        .map_or("UTC".to_owned(), |z| z.get_ref().clone());
    match (&e.schedule, &e.every) {
        (Some(_), Some(every)) => Err(cx.err(
            every.span(),
            name,
            "every",
            "give `schedule` or `every`, not both".into(),
        )),
        (None, None) => Err(cx.err(
            whole.clone(),
            name,
            "schedule",
            "missing: give schedule = \"0 2 * * *\" or every = \"10m\"".into(),
        )),
        (Some(expr), None) => {
            if let Some(off) = &e.offset {
                return Err(cx.err(
                    off.span(),
                    name,
                    "offset",
                    "goes with `every`; a cron expression has its own minutes".into(),
                ));
            }
            When::cron(expr.get_ref(), &zone_name).map_err(|err| {
                let (at, field) = match (&zone, err.to_string().contains("time zone")) {
                    (Some(z), true) => (z.span(), "zone"),
                    _ => (expr.span(), "schedule"),
                };
                cx.err(at, name, field, err.to_string())
            })
        }
        (None, Some(every)) => {
            let text = every.get_ref().trim();
            let text = text.strip_prefix("every ").unwrap_or(text);
            let period =
                crate::duration::parse(text).map_err(|m| cx.err(every.span(), name, "every", m))?;
            let offset = cx.duration(&e.offset, name, "offset")?.unwrap_or_default();
            if let Some(z) = &zone {
                leasehold::schedule::when::zone(z.get_ref())
                    .map_err(|err| cx.err(z.span(), name, "zone", err.to_string()))?;
            }
            When::every(period, offset).map_err(|err| {
                let (at, field) = if err.to_string().contains("offset") {
                    (
                        e.offset.as_ref().map_or(every.span(), |o| o.span()),
                        "offset",
                    )
                } else {
                    (every.span(), "every")
                };
                cx.err(at, name, field, err.to_string())
            })
        }
    }
}

/// What a job runs: `command` (an argv array) or `shell` (through `sh -c`).
fn command_of(
    cx: &Ctx<'_>,
    name: &str,
    e: &Entry,
    whole: &std::ops::Range<usize>,
) -> Result<Vec<OsString>, FileError> {
    let command = match (&e.command, &e.shell) {
        (Some(_), Some(sh)) => {
            return Err(cx.err(sh.span(), name, "shell", "give `command` or `shell`, not both".into()))
        }
        (None, None) => {
            return Err(cx.err(whole.clone(), name, "command", "missing: give command = [\"prog\", \"arg\"] (or shell = \"a | b\" to run through sh -c)".into()))
        }
        (Some(c), None) => {
            if c.get_ref().is_empty() || c.get_ref()[0].trim().is_empty() {
                return Err(cx.err(c.span(), name, "command", "is empty; give the program and its arguments, e.g. [\"/app/report.sh\", \"--full\"]".into()));
            }
            c.get_ref().iter().map(OsString::from).collect()
        }
        (None, Some(sh)) => {
            if sh.get_ref().trim().is_empty() {
                return Err(cx.err(sh.span(), name, "shell", "is empty; give a shell command line".into()));
            }
            vec!["sh".into(), "-c".into(), sh.get_ref().into()]
        }
    };
    Ok(command)
}

/// The policy's options beside the lease and the grace, in the order they are checked; the
/// `max-attempts` given, for the job's own check.
fn policy_options(
    cx: &Ctx<'_>,
    name: &str,
    e: &Entry,
    d: &Entry,
    p: &mut Policy,
) -> Result<Option<Spanned<u32>>, FileError> {
    p.starting_deadline = cx.duration(
        &pick(&e.starting_deadline, &d.starting_deadline),
        name,
        "starting-deadline",
    )?;
    if let Some(b) = cx.duration(&pick(&e.backoff, &d.backoff), name, "backoff")? {
        p.backoff = b;
    }
    if let Some(j) = cx.duration(&pick(&e.jitter, &d.jitter), name, "jitter")? {
        p.jitter = j;
    }
    if let Some(c) = pick(&e.catch_up, &d.catch_up) {
        p.catch_up = match c.get_ref().as_str() {
            "skip" => CatchUp::Skip,
            "latest" => CatchUp::Latest,
            "all" => CatchUp::All,
            other => {
                return Err(cx.err(
                    c.span(),
                    name,
                    "catch-up",
                    format!("`{other}` is not a policy; give skip, latest or all"),
                ))
            }
        };
    }
    if let Some(l) = pick(&e.catch_up_limit, &d.catch_up_limit) {
        p.catch_up_limit = *l.get_ref();
    }
    if let Some(o) = pick(&e.overlap, &d.overlap) {
        p.overlap = match o.get_ref().as_str() {
            "forbid" => Overlap::Forbid,
            "allow" => Overlap::Allow,
            "replace" => Overlap::Replace,
            other => {
                return Err(cx.err(
                    o.span(),
                    name,
                    "overlap",
                    format!("`{other}` is not a policy; give forbid, allow or replace"),
                ))
            }
        };
    }
    let attempts = pick(&e.max_attempts, &d.max_attempts);
    if let Some(a) = &attempts {
        p.max_attempts = *a.get_ref();
    }
    Ok(attempts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> String {
        parse("jobs.toml", text).unwrap_err().0
    }

    #[test]
    fn a_good_file_reads_into_jobs() {
        let jobs = parse(
            "jobs.toml",
            r#"
[defaults]
zone = "Europe/Berlin"
max-attempts = 2

[job.nightly-report]
schedule = "0 2 * * *"
command = ["/app/report.sh", "--full"]

[job.rollup]
every = "10m"
offset = "2m"
zone = "UTC"
shell = "echo hi | wc -c"
overlap = "allow"
catch-up = "latest"
"#,
        )
        .unwrap();
        assert_eq!(jobs.len(), 2);
        let n = jobs
            .iter()
            .find(|j| j.job.name() == "nightly-report")
            .unwrap();
        assert_eq!(n.job.when().describe(), "0 2 * * * in Europe/Berlin");
        assert_eq!(n.job.policy().max_attempts, 2);
        let r = jobs.iter().find(|j| j.job.name() == "rollup").unwrap();
        assert_eq!(r.command[0], "sh");
        assert_eq!(r.job.policy().overlap, Overlap::Allow);
    }

    #[test]
    fn bad_files_name_the_line_and_the_field() {
        let cases: &[(&str, &str)] = &[
            ("[job.a]\nschedule = \"61 * * * *\"\ncommand = [\"true\"]\n", "jobs.toml:2: job `a`, field `schedule`"),
            ("[job.a]\nschedule = \"0 * * * *\"\nzone = \"Mars/Base\"\ncommand = [\"true\"]\n", "jobs.toml:3: job `a`, field `zone`"),
            ("[job.a]\nschedule = \"0 * * * *\"\ncommand = [\"true\"]\n[job.a]\nschedule = \"0 * * * *\"\n", "jobs.toml:4: not a jobs file"),
            ("[job.a]\nschedule = \"0 * * * *\"\ncommand = []\n", "jobs.toml:3: job `a`, field `command`"),
            ("[job.a]\nevery = \"0\"\ncommand = [\"true\"]\n", "jobs.toml:2: job `a`, field `every`"),
            ("[job.a]\nevery = \"-5m\"\ncommand = [\"true\"]\n", "jobs.toml:2: job `a`, field `every`"),
            ("this is not toml\n", "jobs.toml:1: not a jobs file"),
            ("[job.a]\nschedule = \"0 * * * *\"\ncommand = [\"true\"]\nretries = 3\n", "not a jobs file"),
            ("[job.a]\ncommand = [\"true\"]\n", "field `schedule`: missing"),
            ("[job.a]\nevery = \"1m\"\ncommand = [\"true\"]\novelap = \"x\"\n", "jobs.toml:4: not a jobs file"),
            ("[job.a]\nevery = \"1m\"\ncommand = [\"true\"]\noverlap = \"x\"\n", "jobs.toml:4: job `a`, field `overlap`"),
            ("[job.a]\nevery = \"1m\"\ncommand = [\"true\"]\nmax-attempts = 0\n", "jobs.toml:4: job `a`, field `max-attempts`"),
            ("", "no job"),
        ];
        for (text, want) in cases {
            let got = refused(text);
            assert!(got.contains(want), "{text:?}: want {want:?} in {got:?}");
        }
    }
}
