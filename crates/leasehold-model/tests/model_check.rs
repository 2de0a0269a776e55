//! The protocol model checked exhaustively for small bounds (`leasehold_model::checker`): every
//! property holds in every reachable state, and the checker does reach the states that matter (a
//! hand-over). The bounds and the time each check took are printed (docs/verification.md).

use std::time::Instant;

use leasehold_model::checker::{Bounds, LeaseModel};
use leasehold_model::scripts::Mutation;
use stateright::{Checker, Model};

fn check(label: &str, bounds: Bounds) {
    let started = Instant::now();
    let checker = LeaseModel::new(bounds, Mutation::None)
        .checker()
        .threads(2)
        .spawn_bfs()
        .join();
    eprintln!(
        "{label}: {} states ({} unique) in {:.1?}, bounds {bounds:?}",
        checker.state_count(),
        checker.unique_state_count(),
        started.elapsed()
    );
    checker.assert_properties();
}

fn bounds(f: impl FnOnce(&mut Bounds)) -> Bounds {
    let mut b = Bounds {
        clients: 3,
        attempts: 1,
        ticks: 5,
        permits: 1,
        restart: false,
        failover: false,
        pause_and_crash: false,
        lost_reply: false,
        force: false,
        renewals: 1,
    };
    f(&mut b);
    b
}

#[test]
fn the_lock_keeps_every_property() {
    check("lock, 3 clients, no faults", bounds(|_| {}));
}

#[test]
fn the_lock_keeps_every_property_across_a_restart_and_a_failover() {
    check(
        "lock, 3 clients, a restart and a failover",
        bounds(|b| {
            b.ticks = 3;
            b.renewals = 0;
            b.restart = true;
            b.failover = true;
        }),
    );
}

#[test]
fn the_lock_keeps_every_property_across_a_pause_and_a_crash() {
    check(
        "lock, 3 clients, a pause and a crash",
        bounds(|b| {
            b.ticks = 4;
            b.renewals = 0;
            b.pause_and_crash = true;
        }),
    );
}

#[test]
fn the_lock_keeps_every_property_across_a_lost_reply() {
    check(
        "lock, 3 clients, a lost reply",
        bounds(|b| {
            b.ticks = 3;
            b.renewals = 0;
            b.lost_reply = true;
        }),
    );
}

#[test]
fn the_lock_keeps_every_property_across_a_forced_release() {
    check(
        "lock, 3 clients, a forced release",
        bounds(|b| {
            b.ticks = 3;
            b.renewals = 0;
            b.force = true;
        }),
    );
}

#[test]
fn the_semaphore_keeps_every_property() {
    check(
        "semaphore of 2 permits, 3 clients, a restart",
        bounds(|b| {
            b.permits = 2;
            b.ticks = 4;
            b.renewals = 0;
            b.restart = true;
        }),
    );
}

#[test]
fn a_waiter_is_granted_within_the_bound() {
    let b = bounds(|b| {
        b.clients = 2;
        b.renewals = 0;
        b.ticks = 7;
    });
    let bound = LeaseModel::new(b, Mutation::None).wait_bound();
    assert!(
        bound < b.ticks,
        "the bound ({bound}) must be reachable within {} ticks",
        b.ticks
    );
    check("lock, 2 clients, 7 ticks", b);
}
