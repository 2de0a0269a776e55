//! `leasehold bench`'s table: the report printed scenario by scenario.
//!
//! Limit: the table rounds; `--json` has every figure as measured.

use super::BenchReport;

fn yes_no(b: bool) -> &'static str {
    if b {
        "met"
    } else {
        "MISSED"
    }
}

/// Prints the whole report as a table.
pub(super) fn print_table(r: &BenchReport) {
    machine(r);
    s1(r);
    s2(r);
    s3(r);
    s4(r);
    notes(r);
    s5(r);
    s6(r);
    s6_observers(r);
    s7(r);
}

/// S7: many leases on one Redis and on a cluster, and the cluster's scaling.
fn s7(r: &BenchReport) {
    let Some(s7) = &r.s7 else { return };
    println!(
        "\nS7 ten times the names: one process holding N leases, TTL {} ms",
        s7.ttl_ms
    );
    println!(
        "  {:<14} {:>7} {:>8} {:>5} {:>8} {:>10} {:>9} {:>9} {:>8} {:>7} {:>7}",
        "topology",
        "leases",
        "held s",
        "lost",
        "B/lease",
        "renewals/s",
        "cmd/renew",
        "evalsha/r",
        "cmds/s",
        "cli CPU",
        "srv CPU"
    );
    for row in &s7.rows {
        println!(
            "  {:<14} {:>7} {:>8.1} {:>5} {:>8.0} {:>10.0} {:>9.3} {:>9.3} {:>8.0} {:>7.3} {:>7.3}",
            row.topology,
            row.leases,
            row.held_s,
            row.lost,
            row.bytes_per_lease,
            row.renewals_per_s,
            row.commands_per_renewal,
            row.scripts_per_renewal,
            row.renewal_commands_per_s,
            row.client_cpu_share,
            row.redis_cpu_share
        );
    }
    if let Some(sc) = &s7.cluster_scaling {
        println!(
            "  cluster, {} processes x {} names, uncontended try+release: one master {:.0} cycles/s, three masters {:.0} cycles/s, ratio {:.3}",
            sc.processes,
            sc.names_per_process,
            sc.one_master_cycles_per_s,
            sc.three_masters_cycles_per_s,
            sc.ratio
        );
    }
    println!(
        "  target (0 lost, <= 1 KiB per lease): {}",
        yes_no(s7.target_met)
    );
}

/// The machine line.
fn machine(r: &BenchReport) {
    let m = &r.machine;
    println!(
        "machine: {} CPUs, {}, redis {}, load {:.2}{}",
        m.nproc,
        m.cpu_model,
        m.redis_version,
        m.loadavg_1m,
        if r.quick { " (--quick)" } else { "" }
    );
}

/// S1: leasehold and the baseline lock, uncontended.
fn s1(r: &BenchReport) {
    if let Some(s1) = &r.s1 {
        println!("\nS1 uncontended acquire+release, one client");
        println!(
            "  leasehold  {:>9.0} cycles/s  p50 {:>7.1} us  p99 {:>7.1} us  ({:.2} round trips/cycle)",
            s1.leasehold_cycles_per_s,
            s1.leasehold_p50_us,
            s1.leasehold_p99_us,
            s1.leasehold_round_trips_per_cycle
        );
        println!(
            "  baseline   {:>9.0} cycles/s  p50 {:>7.1} us  p99 {:>7.1} us",
            s1.baseline_cycles_per_s, s1.baseline_p50_us, s1.baseline_p99_us
        );
        println!(
            "  per cycle, leasehold vs baseline: redis commands {:.1} vs {:.1}, redis CPU {:.1} vs {:.1} us, client CPU {:.1} vs {:.1} us",
            s1.leasehold_commands_per_cycle,
            s1.baseline_commands_per_cycle,
            s1.leasehold_redis_cpu_us_per_cycle,
            s1.baseline_redis_cpu_us_per_cycle,
            s1.leasehold_client_cpu_us_per_cycle,
            s1.baseline_client_cpu_us_per_cycle
        );
        println!(
            "  ratio {:.3} (target >= 0.95: {}); redis CPU {:.2}x, client CPU {:.2}x per cycle",
            s1.ratio,
            yes_no(s1.target_0_95_met),
            s1.redis_cpu_ratio,
            s1.client_cpu_ratio
        );
        println!(
            "  redis's own time per cycle (INFO commandstats), leasehold vs baseline: scripts {:.1} vs {:.1} us, other commands {:.1} vs {:.1} us",
            s1.leasehold_redis_script_us_per_cycle,
            s1.baseline_redis_script_us_per_cycle,
            s1.leasehold_redis_command_us_per_cycle,
            s1.baseline_redis_command_us_per_cycle
        );
        let w = &s1.wait;
        println!("  waiting acquire (leasehold acquire with a wait; the baseline's SET NX PX retried every 1 ms):");
        for (who, side) in [("leasehold", &w.leasehold), ("baseline ", &w.baseline)] {
            println!(
                "  {who}  {:>9.0} cycles/s  p50 {:>7.1} us  p99 {:>7.1} us  {:.2} round trips, {:.1} commands, redis CPU {:.1} us, client CPU {:.1} us per cycle",
                side.cycles_per_s,
                side.p50_us,
                side.p99_us,
                side.round_trips_per_cycle,
                side.commands_per_cycle,
                side.redis_cpu_us_per_cycle,
                side.client_cpu_us_per_cycle
            );
            println!(
                "             redis's own time: scripts {:.1} us, other commands {:.1} us per cycle",
                side.redis_script_us_per_cycle, side.redis_command_us_per_cycle
            );
        }
        let t = &s1.targets_met;
        println!(
            "  wait ratio {:.3}, redis CPU {:.2}x, client CPU {:.2}x per cycle",
            w.ratio, w.redis_cpu_ratio, w.client_cpu_ratio
        );
        println!(
            "  targets_met: {} (wait >= 1.0x: {}; redis CPU <= 1.3x try/wait: {}/{}; client CPU <= 1.15x try/wait: {}/{})",
            yes_no(t.all),
            yes_no(t.wait_ratio_at_least_1_0),
            yes_no(t.try_redis_cpu_at_most_1_3),
            yes_no(t.wait_redis_cpu_at_most_1_3),
            yes_no(t.try_client_cpu_at_most_1_15),
            yes_no(t.wait_client_cpu_at_most_1_15)
        );
    }
}

/// S2: one row per configuration, with its targets; leasehold's rows also against the floor of the
/// mechanism, whose own rows follow them.
fn s2(r: &BenchReport) {
    if r.s2.is_empty() {
        return;
    }
    println!("\nS2 contended, 1 ms holds");
    println!(
        "  {:<13} {:<9} {:>4} {:>8} {:>8} {:>6} {:>8} {:>6} {:>9} {:>9} {:>9} {:>6} {:>6} {:>7} {:>4}",
        "lock",
        "mode",
        "n",
        "acq/s",
        "ideal",
        "/ideal",
        "floor",
        "/floor",
        "hand p50",
        "hand p99",
        "cross p99",
        "cross%",
        "rt/acq",
        "cmd/acq",
        "ovl"
    );
    for row in &r.s2 {
        s2_row(row);
    }
}

/// One S2 configuration: its figures, its fairness, its targets.
fn s2_row(row: &super::s2::S2Row) {
    let or_dash = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "-".to_owned(),
    };
    println!(
        "  {:<13} {:<9} {:>4} {:>8.0} {:>8.0} {:>6.2} {:>8} {:>6} {:>7.0}us {:>7.0}us {:>7.0}us {:>5.0}% {:>6.2} {:>7.2} {:>4}",
        row.lock.arg(),
        format!("{:?}", row.mode).to_lowercase(),
        row.contenders,
        row.acquisitions_per_s,
        row.ideal_acquisitions_per_s,
        row.throughput_vs_ideal,
        or_dash(row.floor.floor_acquisitions_per_s, 0),
        or_dash(row.floor.throughput_vs_floor, 2),
        row.handoff_p50_us,
        row.handoff_p99_us,
        row.cross_handoff_p99_us,
        row.cross_share * 100.0,
        row.round_trips_per_acquisition,
        row.commands_per_acquisition,
        row.overlaps
    );
    let by_floor = match (
        row.floor.max_wait_floor_bound_us,
        row.floor.floor_max_wait_us,
    ) {
        (Some(bound), Some(floor)) => format!(
            ", {:.1} ms by the floor's hand-off; the floor's longest {:.1} ms",
            bound / 1e3,
            floor / 1e3
        ),
        _ => String::new(),
    };
    let cpu_floor = match (
        row.floor.floor_client_cpu_us_per_acquisition,
        row.floor.floor_redis_cpu_us_per_acquisition,
    ) {
        (Some(client), Some(redis)) => format!(" (the floor's {client:.0} / {redis:.0} us)"),
        _ => String::new(),
    };
    println!(
        "      CPU per acquisition: clients {:.0} us, redis-server {:.0} us{cpu_floor}",
        row.client_cpu_us_per_acquisition, row.redis_cpu_us_per_acquisition
    );
    println!(
        "      {:.2} commands per acquisition in the steady state; shares {:.2}-{:.2} of the mean; at most {} served first while one waited; longest wait {:.1} ms (bound {:.1} ms{by_floor})",
        row.steady_commands_per_acquisition,
        row.share_min,
        row.share_max,
        row.max_overtakes,
        row.max_wait_us / 1e3,
        row.max_wait_bound_us / 1e3
    );
    let t = &row.targets_met;
    let floor = match t.throughput_at_least_0_95_floor {
        Some(met) => format!(">= 0.95 x floor: {}; ", yes_no(met)),
        None => String::new(),
    };
    let wait_by_floor = match t.max_wait_within_floor_bound {
        Some(met) => format!(" (by the floor's: {})", yes_no(met)),
        None => String::new(),
    };
    println!(
        "      {floor}>= 0.95 x ideal: {}; round trips <= 3: {}; cross p99 <= 1 ms: {}; shares +-10%: {}; FIFO order: {}; longest wait: {}{wait_by_floor}; no overlaps: {}",
        yes_no(t.throughput_at_least_0_95_ideal),
        yes_no(t.round_trips_at_most_3),
        yes_no(t.cross_handoff_p99_at_most_1ms),
        yes_no(t.shares_within_10_percent),
        yes_no(t.overtakes_within_fifo),
        yes_no(t.max_wait_within_bound),
        yes_no(t.no_overlaps)
    );
}

/// S3: many leases held with renewal on.
fn s3(r: &BenchReport) {
    if let Some(s3) = &r.s3 {
        println!("\nS3 {} leases held with renewal on", s3.leases);
        println!(
            "  {:.0} renewal commands/s, {:.0} round trips/s, client CPU {:.1}% of a core, redis CPU {:.1}%",
            s3.renewal_commands_per_s,
            s3.renewal_round_trips_per_s,
            s3.client_cpu_share * 100.0,
            s3.redis_cpu_share * 100.0
        );
        println!(
            "  {:.0} bytes resident per lease after renewals ({:.0} right after acquiring; target <= 1024: {}), {} lost",
            s3.bytes_per_lease,
            s3.bytes_per_lease_at_acquire,
            yes_no(s3.target_met),
            s3.lost
        );
    }
}

/// S4: fenced vs unfenced transactions.
fn s4(r: &BenchReport) {
    if let Some(s4) = &r.s4 {
        println!("\nS4 fenced vs unfenced transaction");
        for (label, side) in [("postgres", &s4.postgres), ("sqlite", &s4.sqlite)] {
            if let Some(side) = side {
                println!(
                    "  {label:<8} unfenced {:>7.0} tx/s, fenced {:>7.0} tx/s, ratio {:.3}",
                    side.unfenced_tx_per_s, side.fenced_tx_per_s, side.ratio
                );
            }
        }
        if let Some(met) = s4.target_met {
            println!("  PostgreSQL target >= 0.75: {}", yes_no(met));
        }
    }
}

/// The notes and the failed scenarios.
fn notes(r: &BenchReport) {
    for note in &r.notes {
        println!("\nnote: {note}");
    }
    for (scenario, why) in &r.failures {
        println!("\nFAILED {scenario}: {why}");
    }
}

/// S5: every store, as ratios to Redis.
fn s5(r: &BenchReport) {
    if !r.stores.is_empty() {
        println!("\nS5 every store (ratios to redis in the same run)");
        println!(
            "  {:<9} {:>9} {:>8} {:>8} {:>6} {:>6} {:>8} {:>6} {:>6} {:>4} {:>9} {:>8} {:>4}",
            "store",
            "S1 cyc/s",
            "p50",
            "p99",
            "rt/cyc",
            "ratio",
            "S2 acq/s",
            "rt/acq",
            "ratio",
            "ovl",
            "S3 B/lease",
            "rt/s",
            "lost"
        );
        for row in &r.stores {
            println!(
                "  {:<9} {:>9.0} {:>6.0}us {:>6.0}us {:>6.2} {:>6.2} {:>8.0} {:>6.2} {:>6.2} {:>4} {:>9.0} {:>8.1} {:>4}",
                row.store,
                row.s1_cycles_per_s,
                row.s1_p50_us,
                row.s1_p99_us,
                row.s1_round_trips_per_cycle,
                row.s1_ratio_to_redis,
                row.s2_acquisitions_per_s,
                row.s2_round_trips_per_acquisition,
                row.s2_ratio_to_redis,
                row.s2_overlaps,
                row.s3_bytes_per_lease,
                row.s3_renewal_round_trips_per_s,
                row.s3_lost
            );
        }
    }
}

/// S6: 100 observers of one election, pushed against polled, every store.
fn s6_observers(r: &BenchReport) {
    if r.observers.is_empty() {
        return;
    }
    println!("\nS6 observers: delay from a change (its send) to each observer's report, ms; cost per change per observer; pushed vs polled (the baseline) in the same run");
    println!(
        "  {:<9} {:<6} {:>5} {:>5} {:>9} {:>9} {:>9} {:>6} {:>9} {:>9} {:>9}",
        "store",
        "mode",
        "obs",
        "subs",
        "p50",
        "p99",
        "max",
        "missed",
        "requests",
        "commands",
        "p50/poll"
    );
    for row in &r.observers {
        let baseline = r
            .observers
            .iter()
            .find(|b| b.store == row.store && b.mode == "polled")
            .map_or(0.0, |b| b.delay_p50_ms);
        println!(
            "  {:<9} {:<6} {:>5} {:>5} {:>9.2} {:>9.2} {:>9.2} {:>6} {:>9.2} {:>9} {:>9.3}",
            row.store,
            row.mode,
            row.observers,
            row.subscribed,
            row.delay_p50_ms,
            row.delay_p99_ms,
            row.delay_max_ms,
            row.missed,
            row.requests_per_change_per_observer,
            row.commands_per_change_per_observer
                .map_or("-".to_owned(), |c| format!("{c:.2}")),
            if baseline > 0.0 {
                row.delay_p50_ms / baseline
            } else {
                0.0
            }
        );
    }
}

/// S6: election hand-over against lease hand-over, every store.
fn s6(r: &BenchReport) {
    if !r.elections.is_empty() {
        println!("\nS6 election hand-over (resign to the standby leading) vs lease hand-over (release to the waiter holding), ms");
        println!(
            "  {:<9} {:>6} {:>9} {:>9} {:>9} {:>9} {:>6} {:>6}",
            "store", "rounds", "lease p50", "p99", "elect p50", "p99", "ratio", "terms"
        );
        for row in &r.elections {
            println!(
                "  {:<9} {:>6} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>6.2} {:>6}",
                row.store,
                row.rounds,
                row.lease_p50_ms,
                row.lease_p99_ms,
                row.election_p50_ms,
                row.election_p99_ms,
                row.ratio,
                if row.terms_increased { "up" } else { "BROKEN" }
            );
        }
        println!("\nS6 takeover: after resign (at most 2 round trips: the ratio above, in lease hand-overs; here also in protocol round trips) and after kill -9 of the leader (at most TTL + one round trip), ms");
        println!(
            "  {:<9} {:>10} {:>12} {:>6} {:>6} {:>9} {:>9} {:>9} {:>8}",
            "store",
            "round trip",
            "resign/trip",
            "ttl",
            "kills",
            "kill p50",
            "max",
            "over ttl",
            "bound"
        );
        for row in &r.elections {
            println!(
                "  {:<9} {:>10.2} {:>12.2} {:>6} {:>6} {:>9.1} {:>9.1} {:>9.1} {:>8}",
                row.store,
                row.round_trip_ms,
                row.resign_round_trips,
                row.kill_ttl_ms,
                row.kill_rounds,
                row.kill_p50_ms,
                row.kill_max_ms,
                row.kill_over_ttl_ms,
                if row.kill_within_ttl_and_round_trip && row.ratio <= 2.0 {
                    "held"
                } else {
                    "MISSED"
                }
            );
        }
    }
}
