//! `leasehold bench --quick --json` end to end: a private redis-server, worker processes, PostgreSQL and
//! SQLite. Checks that every figure is there and sane and that no two holders ever overlapped; it does
//! not assert performance targets (those are measured, and reported in docs/benchmarks.md).

use std::process::Command;

use serde_json::Value;

fn number(v: &Value, path: &str) -> f64 {
    let mut cur = v;
    for part in path.split('.') {
        cur = &cur[part];
    }
    cur.as_f64()
        .unwrap_or_else(|| panic!("`{path}` is not a number: {cur}"))
}

#[test]
fn quick_json_has_every_figure_and_no_overlapping_holds() {
    let out = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["bench", "--quick", "--json"])
        .output()
        .expect("run leasehold bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "bench failed ({}):\n{stderr}\n{stdout}",
        out.status
    );
    let r: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not one JSON object ({e}):\n{stdout}"));
    assert_eq!(r["failures"].as_object().map(|m| m.len()), Some(0), "{r}");

    // S1: both locks ran, and the ratio is their quotient.
    let lh = number(&r, "s1.leasehold_cycles_per_s");
    let base = number(&r, "s1.baseline_cycles_per_s");
    let ratio = number(&r, "s1.ratio");
    assert!(lh > 0.0 && base > 0.0, "{}", r["s1"]);
    assert!(
        (ratio - lh / base).abs() < 0.01,
        "ratio {ratio} is not {lh} / {base}"
    );
    assert!(number(&r, "s1.leasehold_p50_us") <= number(&r, "s1.leasehold_p99_us"));
    assert!(number(&r, "s1.baseline_p50_us") <= number(&r, "s1.baseline_p99_us"));
    // Redis's own time by commandstats: leasehold runs every command inside its two scripts, so
    // their time includes the commands'; the minimal lock sends its `SET NX PX` on its own.
    for (script, other) in [
        (
            "s1.leasehold_redis_script_us_per_cycle",
            "s1.leasehold_redis_command_us_per_cycle",
        ),
        (
            "s1.wait.leasehold.redis_script_us_per_cycle",
            "s1.wait.leasehold.redis_command_us_per_cycle",
        ),
    ] {
        let (s, o) = (number(&r, script), number(&r, other));
        assert!(s > 0.0 && o > 0.0, "{script}, {other}: {}", r["s1"]);
        assert!(s >= o, "{script} {s} us < {other} {o} us");
    }
    assert!(number(&r, "s1.baseline_redis_script_us_per_cycle") > 0.0);
    assert!(number(&r, "s1.baseline_redis_command_us_per_cycle") > 0.0);

    // S2: 16 and 128 contenders, as tasks and as processes.
    let rows = r["s2"].as_array().expect("s2 is an array");
    let mut seen: Vec<(u64, String)> = rows
        .iter()
        .filter(|row| row["lock"] == "leasehold")
        .map(|row| {
            (
                row["contenders"].as_u64().unwrap(),
                row["mode"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        vec![
            (16, "processes".to_owned()),
            (16, "tasks".to_owned()),
            (128, "processes".to_owned()),
            (128, "tasks".to_owned())
        ]
    );
    for row in rows {
        let acq = row["acquisitions"].as_u64().unwrap();
        assert!(acq > 0, "no acquisitions: {row}");
        assert!(number(row, "acquisitions_per_s") > 0.0, "{row}");
        assert!(
            number(row, "handoff_p50_us") <= number(row, "handoff_p99_us"),
            "{row}"
        );
        assert!(number(row, "cross_handoff_p99_us") >= 0.0, "{row}");
        let share = number(row, "cross_share");
        assert!((0.0..=1.0).contains(&share), "{row}");
        // An acquisition and its release are at least two requests and two Redis commands.
        assert!(number(row, "round_trips_per_acquisition") >= 2.0, "{row}");
        assert!(number(row, "commands_per_acquisition") >= 2.0, "{row}");
        assert_eq!(
            row["overlaps"].as_u64(),
            Some(0),
            "two holders at once: {row}"
        );
        assert_eq!(row["fence_regressions"].as_u64(), Some(0), "{row}");
        assert_eq!(row["errors"].as_u64(), Some(0), "{row}");
        // Fairness figures: shares around the mean, a longest wait and its bound.
        let (lo, hi) = (number(row, "share_min"), number(row, "share_max"));
        assert!((0.0..=1.0).contains(&lo) && 1.0 <= hi, "{row}");
        assert!(number(row, "max_wait_us") > 0.0, "{row}");
        assert!(number(row, "max_wait_bound_us") > 0.0, "{row}");
        // Where the time goes: the contenders used CPU, the server's is read from /proc.
        assert!(number(row, "client_cpu_us_per_acquisition") > 0.0, "{row}");
        assert!(number(row, "redis_cpu_us_per_acquisition") >= 0.0, "{row}");
        assert!(row["windows"].as_u64().is_some_and(|w| w >= 1), "{row}");
    }

    // S2's floor of the mechanism ran in every configuration of leasehold's, and leasehold's row
    // carries the floor's figures and the ratio to it.
    for row in rows.iter().filter(|row| row["lock"] == "leasehold") {
        let floor = rows
            .iter()
            .find(|f| {
                f["lock"] == "fifo-floor"
                    && f["mode"] == row["mode"]
                    && f["contenders"] == row["contenders"]
            })
            .unwrap_or_else(|| panic!("no floor row for {row}"));
        let (lh, fl) = (
            number(row, "acquisitions_per_s"),
            number(floor, "acquisitions_per_s"),
        );
        assert_eq!(number(row, "floor_acquisitions_per_s"), fl, "{row}");
        let ratio = number(row, "throughput_vs_floor");
        assert!(
            (ratio - lh / fl).abs() < 0.01,
            "ratio {ratio} is not {lh} / {fl}"
        );
        assert_eq!(
            number(row, "floor_handoff_p99_us"),
            number(floor, "handoff_p99_us")
        );
        assert_eq!(
            number(row, "floor_client_cpu_us_per_acquisition"),
            number(floor, "client_cpu_us_per_acquisition")
        );
        // Measured in the same windows, taken in turn.
        assert_eq!(row["windows"], floor["windows"], "{row}");
        assert!(
            row["targets_met"]["throughput_at_least_0_95_floor"].is_boolean(),
            "{row}"
        );
    }

    // S3: 10,000 leases held; memory per lease measured.
    assert_eq!(r["s3"]["leases"].as_u64(), Some(10_000));
    let bytes = number(&r, "s3.bytes_per_lease");
    assert!(bytes.is_finite() && bytes >= 0.0, "{}", r["s3"]);
    assert!(
        number(&r, "s3.renewal_commands_per_s") > 0.0,
        "renewal never ran: {}",
        r["s3"]
    );

    // S6: the election's hand-over against the lease's, on Redis in the quick run; every new
    // leader's term above the last.
    let s6 = &r["elections"][0];
    assert_eq!(s6["store"], "redis", "{r}");
    assert_eq!(s6["terms_increased"], true, "{s6}");
    assert!(
        number(s6, "election_p50_ms") > 0.0 && number(s6, "lease_p50_ms") > 0.0,
        "{s6}"
    );
    // The takeover after kill -9 of a leader process: it waits for the dead leader's lease to run
    // out, so it takes a good part of the TTL and never less than nothing.
    assert_eq!(number(s6, "kill_rounds"), 3.0, "{s6}");
    let (kill_p50, kill_max) = (number(s6, "kill_p50_ms"), number(s6, "kill_max_ms"));
    let ttl = number(s6, "kill_ttl_ms");
    assert!(
        kill_p50 > ttl / 4.0 && kill_max >= kill_p50 && number(s6, "round_trip_ms") > 0.0,
        "{s6}"
    );

    // S6 observers: 100 observers of one election on Redis, pushed and polled; every change seen,
    // every pushed observer subscribed, Redis commands counted.
    let rows = r["observers"].as_array().expect("observer rows");
    assert_eq!(rows.len(), 2, "pushed and polled: {r}");
    for row in rows {
        assert_eq!(row["store"], "redis", "{row}");
        assert_eq!(number(row, "missed"), 0.0, "{row}");
        assert!(number(row, "delay_p50_ms") > 0.0, "{row}");
        assert!(
            number(row, "commands_per_change_per_observer") > 0.0,
            "{row}"
        );
        let subscribed = number(row, "subscribed");
        match row["mode"].as_str() {
            Some("pushed") => assert_eq!(subscribed, 100.0, "{row}"),
            _ => assert_eq!(subscribed, 0.0, "{row}"),
        }
    }

    // S4: SQLite always; PostgreSQL unless unreachable, and then with a note saying so.
    assert!(number(&r, "s4.sqlite_ratio") > 0.0, "{}", r["s4"]);
    match r["s4"]["postgres_ratio"].as_f64() {
        Some(v) => assert!(v > 0.0, "{}", r["s4"]),
        None => assert!(
            r["notes"].to_string().contains("PostgreSQL"),
            "PostgreSQL skipped without a note: {r}"
        ),
    }
}
