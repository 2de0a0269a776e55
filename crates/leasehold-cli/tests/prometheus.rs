//! `/metrics` and `--metrics-file`, parsed with a Prometheus text-format parser: one listener for
//! `/metrics`, `/healthz` and `/leader` (404 elsewhere), histograms with buckets (not summaries),
//! `# HELP` and `# TYPE` on every family, counters at 0 before anything happened, the textfile
//! written whole for a run too short to scrape.

use std::collections::BTreeSet;
use std::process::Stdio;
use std::time::Duration;

use leasehold_testkit::RedisServer;
use prometheus_parse::{Scrape, Value};

mod cli_support;
use cli_support::{eventually, http, leasehold, wait_with_timeout};

fn parse(text: &str) -> Scrape {
    Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("Prometheus's text format")
}

/// The families whose samples appear in `text` (a histogram's `_bucket`, `_sum` and `_count`
/// under its own name), and those with a `# HELP` and a `# TYPE` line.
fn families(text: &str) -> (BTreeSet<String>, BTreeSet<String>, BTreeSet<String>) {
    let (mut sampled, mut helped, mut typed) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    for line in text.lines() {
        let mut words = line.split_whitespace();
        match (words.next(), words.next(), words.next()) {
            (Some("#"), Some("HELP"), Some(name)) => {
                helped.insert(name.to_owned());
            }
            (Some("#"), Some("TYPE"), Some(name)) => {
                typed.insert(name.to_owned());
            }
            (Some(sample), _, _) if !sample.starts_with('#') => {
                let name = sample.split('{').next().unwrap();
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| name.strip_suffix(s).filter(|f| typed.contains(*f)))
                    .unwrap_or(name);
                sampled.insert(family.to_owned());
            }
            _ => {}
        }
    }
    (sampled, helped, typed)
}

fn counter(scrape: &Scrape, metric: &str, label: (&str, &str)) -> Option<f64> {
    counter_with(scrape, metric, &[label])
}

/// The counter `metric` whose labels include `labels`.
fn counter_with(scrape: &Scrape, metric: &str, labels: &[(&str, &str)]) -> Option<f64> {
    scrape.samples.iter().find_map(|s| match &s.value {
        Value::Counter(v)
            if s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)) =>
        {
            Some(*v)
        }
        _ => None,
    })
}

fn histogram_count(scrape: &Scrape, metric: &str) -> Option<(usize, f64)> {
    scrape.samples.iter().find_map(|s| match &s.value {
        Value::Histogram(buckets) if s.metric == metric => Some((
            buckets.len(),
            buckets.iter().map(|b| b.count).fold(0.0, f64::max),
        )),
        _ => None,
    })
}

#[test]
fn one_listener_serves_metrics_health_and_leader_and_the_metrics_parse() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let addr = http::free_addr();
    let port = addr.rsplit(':').next().unwrap();
    // `:PORT`: every interface, as Go programs write it.
    let mut run = leasehold(&redis)
        .args([
            "run",
            "--health",
            &format!(":{port}"),
            "--ttl",
            "600ms",
            "m",
        ])
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}; sleep 3", started.display()))
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(eventually(Duration::from_secs(15), || started.exists()));
    let mut body = String::new();
    assert!(
        eventually(Duration::from_secs(10), || {
            let (status, text) = http::get(&addr, "/metrics");
            body = text;
            status == 200
                && body.contains("leasehold_renewals_total{outcome=\"renewed\"} ")
                && !body.contains("leasehold_renewals_total{outcome=\"renewed\"} 0\n")
        }),
        "a renewal shows on /metrics: {body}"
    );
    let (sampled, helped, typed) = families(&body);
    let undocumented: Vec<_> = sampled
        .iter()
        .filter(|f| !helped.contains(*f) || !typed.contains(*f))
        .collect();
    assert!(
        undocumented.is_empty(),
        "no HELP or TYPE: {undocumented:?}\n{body}"
    );
    assert!(
        !body.contains(" summary"),
        "summaries cannot be summed: {body}"
    );
    let scrape = parse(&body);
    let (buckets, acquired) = histogram_count(&scrape, "leasehold_acquire_wait_seconds")
        .expect("the acquire wait is a histogram");
    assert!(buckets >= 18, "the wait's buckets: {buckets}\n{body}");
    assert_eq!(acquired, 1.0, "{body}");
    assert_eq!(
        counter(
            &scrape,
            "leasehold_acquisitions_total",
            ("outcome", "acquired")
        ),
        Some(1.0)
    );
    // Counters are there before anything happened to them.
    for (metric, label) in [
        ("leasehold_lost_total", ("reason", "deadline_passed")),
        ("leasehold_acquisitions_total", ("outcome", "busy")),
        ("leasehold_suspect_total", ("reason", "renewal_failing")),
        ("leasehold_elections_total", ("outcome", "elected")),
    ] {
        assert_eq!(
            counter(&scrape, metric, label),
            Some(0.0),
            "{metric} {label:?}: {body}"
        );
    }
    // The same listener: health and leader beside it, 404 elsewhere.
    assert_eq!(http::get(&addr, "/healthz").0, 200);
    assert_eq!(http::get(&addr, "/leader").0, 200);
    let (status, text) = http::get(&addr, "/nope");
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("/metrics"), "{text}");
    let status = wait_with_timeout(&mut run, Duration::from_secs(20));
    assert_eq!(status.code(), Some(0));
}

#[test]
fn a_short_run_writes_the_textfile_collectors_format_whole() {
    let redis = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("job.prom");
    // A host name for the listener too.
    let port = http::free_addr().rsplit(':').next().unwrap().to_owned();
    let out = leasehold(&redis)
        .args(["run", "--metrics-file"])
        .arg(&file)
        .args([
            "--metrics-addr",
            &format!("localhost:{port}"),
            "short",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let text = std::fs::read_to_string(&file).expect("the metrics file is written");
    let scrape = parse(&text);
    let (_, holds) = histogram_count(&scrape, "leasehold_hold_seconds").expect("a histogram");
    assert_eq!(
        holds, 1.0,
        "the run's hold, counted before the exit: {text}"
    );
    assert_eq!(
        counter_with(
            &scrape,
            "leasehold_releases_total",
            &[("outcome", "released"), ("mode", "explicit")]
        ),
        Some(1.0),
        "{text}"
    );
    let (sampled, helped, _) = families(&text);
    assert!(sampled.is_subset(&helped), "{text}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        left,
        vec![std::ffi::OsString::from("job.prom")],
        "no temporary file left"
    );
}

#[test]
fn listen_addresses_and_metrics_files_that_cannot_work_are_exit_2_naming_them() {
    let redis = RedisServer::start().unwrap();
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = taken.local_addr().unwrap().to_string();
    for (args, says) in [
        (vec!["--metrics-addr", ":99999"], "99999"),
        (vec!["--health", "9464"], "no port"),
        (vec!["--health", "no such host:1"], "no such host"),
        (vec!["--health", &taken], "--health"),
        (
            vec!["--health", ":1", "--metrics-addr", ":2"],
            "one listener",
        ),
        (
            vec!["--metrics-file", "/nonexistent/dir/x.prom"],
            "--metrics-file",
        ),
    ] {
        let out = leasehold(&redis)
            .arg("run")
            .args(&args)
            .args(["x", "--", "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
}
