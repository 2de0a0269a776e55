//! What the `leasehold cron` tests share: the stores they run over (a private redis-server or etcd,
//! the shared PostgreSQL and MariaDB under a prefix of their own), daemons killed on drop, the
//! command each run executes (it appends `JOB SLOT ATTEMPT WHO REAL_MS` to a file) and the reading
//! of those lines and of `leasehold history`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use leasehold_testkit::{EtcdCluster, RedisServer};

use super::BIN;

/// A store the daemons share, kept up for the test.
pub(crate) struct Store {
    /// The `LEASEHOLD_STORE` URLs.
    pub(crate) urls: Vec<String>,
    /// What it is, for messages.
    pub(crate) kind: &'static str,
    _redis: Option<RedisServer>,
    _etcd: Option<EtcdCluster>,
}

impl Store {
    /// A private redis-server.
    pub(crate) fn redis() -> Store {
        let redis = RedisServer::start().expect("redis-server");
        Store {
            urls: vec![redis.url()],
            kind: "redis",
            _redis: Some(redis),
            _etcd: None,
        }
    }

    /// A private redis-server whose wall clock libfaketime moves (`RedisServer::jump_clock`).
    pub(crate) fn redis_with_fake_clock() -> (Store, RedisServer) {
        let redis = RedisServer::builder()
            .fake_clock()
            .start()
            .expect("redis-server under libfaketime (apt-get install -y faketime)");
        let store = Store {
            urls: vec![redis.url()],
            kind: "redis (fake clock)",
            _redis: None,
            _etcd: None,
        };
        (store, redis)
    }

    /// The shared PostgreSQL (`LEASEHOLD_TEST_DATABASE_URL`), its tables migrated.
    pub(crate) fn postgres() -> Store {
        Self::migrated(leasehold_testkit::postgres_url(), "postgres")
    }

    /// The shared MariaDB (`LEASEHOLD_TEST_MYSQL_URL`), its tables migrated.
    pub(crate) fn mariadb() -> Store {
        let url = std::env::var("LEASEHOLD_TEST_MYSQL_URL")
            .unwrap_or_else(|_| "mysql://leasehold:leasehold@127.0.0.1:3306/test".into());
        Self::migrated(url, "mariadb")
    }

    /// A private one-member etcd cluster.
    pub(crate) fn etcd() -> Store {
        let etcd = EtcdCluster::start_single().expect("etcd (etcd-server)");
        Store {
            urls: vec![etcd.url()],
            kind: "etcd",
            _redis: None,
            _etcd: Some(etcd),
        }
    }

    fn migrated(url: String, kind: &'static str) -> Store {
        let m = leasehold(std::slice::from_ref(&url), "unused")
            .args(["migrate", "--store", &url])
            .output()
            .unwrap();
        assert_eq!(m.status.code(), Some(0), "{m:?}");
        Store {
            urls: vec![url],
            kind,
            _redis: None,
            _etcd: None,
        }
    }
}

/// A `leasehold` command with a clean environment, against `store`, under `prefix`.
pub(crate) fn leasehold(store: &[String], prefix: &str) -> Command {
    let mut c = Command::new(BIN);
    c.env_remove("LEASEHOLD_REDIS_URL")
        .env_remove("LEASEHOLD_RETENTION")
        .env_remove("RUST_LOG")
        .env("LEASEHOLD_STORE", store.join(" "))
        .env("LEASEHOLD_KEY_PREFIX", prefix)
        .stdin(Stdio::null());
    c
}

/// A daemon, killed on drop.
pub(crate) struct Daemon {
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
}

impl Daemon {
    /// `leasehold cron JOBS` as holder `who` (also `$WHO` in its runs), its clock `skew_s` seconds
    /// off (libfaketime) unless 0, its stderr in `daemon-WHO.log` beside the jobs file.
    pub(crate) fn start(
        store: &[String],
        prefix: &str,
        jobs: &Path,
        who: &str,
        skew_s: i64,
    ) -> Daemon {
        let log = jobs.with_file_name(format!("daemon-{who}.log"));
        let mut c = leasehold(store, prefix);
        if skew_s != 0 {
            let lib = leasehold_testkit::libfaketime_path().expect(
                "needs libfaketime (apt-get install -y faketime, or set LEASEHOLD_LIBFAKETIME)",
            );
            c.env("LD_PRELOAD", lib)
                .env("FAKETIME", format!("{skew_s:+}"))
                .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
                .env("FAKETIME_DONT_RESET", "1");
        }
        c.env("WHO", who)
            .args(["cron", "--holder", who])
            .arg(jobs)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        Daemon {
            child: c.spawn().unwrap(),
            log,
        }
    }

    pub(crate) fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Sends `signal`.
    pub(crate) fn signal(&self, signal: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), signal);
    }

    /// SIGTERM, and the exit code within `within`.
    pub(crate) fn stop(&mut self, within: Duration) -> Option<i32> {
        self.signal(nix::sys::signal::Signal::SIGTERM);
        super::wait_with_timeout(&mut self.child, within).code()
    }

    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One line per run: `JOB SLOT ATTEMPT WHO REAL_MS` (the real time: the command runs without
/// libfaketime).
#[derive(Debug, Clone)]
pub(crate) struct RunLine {
    pub(crate) job: String,
    pub(crate) slot: u64,
    pub(crate) attempt: u32,
    pub(crate) who: String,
    pub(crate) real_ms: u64,
}

/// A job's `shell` line: append the run's line to `out`, then `tail`.
pub(crate) fn record_cmd(out: &Path, tail: &str) -> String {
    format!(
        "shell = \"echo $LEASEHOLD_JOB $LEASEHOLD_SLOT $LEASEHOLD_ATTEMPT $WHO $(env -u LD_PRELOAD date +%s%3N) >> {}; {tail}\"",
        out.display()
    )
}

/// The runs on record in `out`, in the order they started.
pub(crate) fn runs(out: &Path) -> Vec<RunLine> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(RunLine {
                job: f.first()?.to_string(),
                slot: f.get(1)?.parse().ok()?,
                attempt: f.get(2)?.parse().ok()?,
                who: f.get(3)?.to_string(),
                real_ms: f.get(4)?.parse().ok()?,
            })
        })
        .collect()
}

/// A key prefix of the test's own.
pub(crate) fn prefix() -> String {
    format!("cron{:08x}", rand::random::<u32>())
}

/// `leasehold history --json JOB`, newest first.
pub(crate) fn history(store: &[String], prefix: &str, job: &str) -> Vec<serde_json::Value> {
    let out = leasehold(store, prefix)
        .args(["history", "--json", "--limit", "100", job])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// The records of `job` with `outcome`.
pub(crate) fn outcomes(store: &[String], prefix: &str, job: &str, outcome: &str) -> usize {
    history(store, prefix, job)
        .iter()
        .filter(|r| r["outcome"] == outcome)
        .count()
}
