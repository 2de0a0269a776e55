//! It can fail: for each property, a deliberate change of the protocol (`scripts::Mutation`) makes
//! the checker find a state that breaks it, and print the path there. The protocol as shipped keeps
//! the same property within the same bounds (`model_check.rs` and the last test here).

use leasehold_model::checker::{Bounds, LeaseModel};
use leasehold_model::scripts::Mutation;
use stateright::{Checker, HasDiscoveries, Model};

fn small(faults: impl FnOnce(&mut Bounds)) -> Bounds {
    let mut b = Bounds {
        clients: 3,
        attempts: 1,
        ticks: 4,
        permits: 1,
        restart: false,
        failover: false,
        pause_and_crash: false,
        lost_reply: false,
        force: false,
        renewals: 1,
    };
    faults(&mut b);
    b
}

/// Two clients, a pause and a crash: enough ticks to pass the wait bound.
pub fn liveness_bounds() -> Bounds {
    small(|b| {
        b.clients = 2;
        b.renewals = 0;
        b.pause_and_crash = true;
        b.ticks = 7;
    })
}

/// Checks `bounds` with `mutation` until `property` breaks; returns the trace printed.
fn counterexample(mutation: Mutation, bounds: Bounds, property: &'static str) -> String {
    search(mutation, bounds, property, false)
}

/// As [`counterexample`], depth first (a deep counterexample in a large space).
fn search(mutation: Mutation, bounds: Bounds, property: &'static str, dfs: bool) -> String {
    let started = std::time::Instant::now();
    let model = LeaseModel::new(bounds, mutation);
    let builder = model
        .clone()
        .checker()
        .threads(2)
        .finish_when(HasDiscoveries::AnyOf([property].into()));
    let (found, states) = if dfs {
        let c = builder.spawn_dfs().join();
        (c.discovery(property), c.unique_state_count())
    } else {
        let c = builder.spawn_bfs().join();
        (c.discovery(property), c.unique_state_count())
    };
    let path = found.unwrap_or_else(|| {
        panic!("{mutation:?}: the checker found no state that breaks \"{property}\"")
    });
    let mut trace = format!(
        "{mutation:?} breaks \"{property}\" ({} states, {:.1?}):\n",
        states,
        started.elapsed()
    );
    for (state, action) in path.into_vec() {
        if let Some(a) = action {
            trace.push_str(&format!("  {a:?}\n"));
        } else {
            let lock = state.server.get(&model.names.lock());
            let record = state.server.get(&model.names.key("fence"));
            trace.push_str(&format!(
                "  => lock {lock:?}, record {record:?}, clients {:?}\n",
                state
                    .clients
                    .iter()
                    .map(|c| format!("{:?}", c.phase))
                    .collect::<Vec<_>>()
            ));
        }
    }
    eprintln!("{trace}");
    trace
}

/// Whether the protocol as shipped keeps `property` within `bounds` (the mutation's is the only
/// difference).
fn holds(bounds: Bounds, property: &'static str) {
    let checker = LeaseModel::new(bounds, Mutation::None)
        .checker()
        .threads(2)
        .spawn_bfs()
        .join();
    assert!(
        checker.discovery(property).is_none(),
        "the shipped protocol breaks \"{property}\" within {bounds:?}"
    );
}

#[test]
fn the_shipped_protocol_keeps_the_wait_bound_with_a_crash_or_pause() {
    holds(liveness_bounds(), WAIT);
}

const SERVER_VIEW: &str = "at most N live holders in the server's view";
const FENCE: &str = "the fence never goes backwards";
const FIFO: &str = "FIFO: a free lock goes to the first live waiter";
const EXPIRY: &str = "no key without an expiry";
const TWICE: &str = "a script run twice has the effect of running once";
const GRANT_KEPT: &str =
    "a grant the server still holds for its waiter is taken, never thrown away";
const WAIT: &str = "a waiter that keeps stepping is granted within the bound (no data lost)";

#[test]
fn a_renewal_without_the_token_check_gives_two_holders() {
    counterexample(
        Mutation::RenewWithoutTokenCheck,
        small(|b| b.force = true),
        SERVER_VIEW,
    );
}

#[test]
fn a_batched_renewal_without_the_token_check_gives_two_holders() {
    counterexample(
        Mutation::RenewManyWithoutTokenCheck,
        small(|b| b.force = true),
        SERVER_VIEW,
    );
}

#[test]
fn a_stale_grant_check_on_the_blocks_end_throws_a_fresh_grant_away() {
    counterexample(
        Mutation::StaleCheckAfterTheBlock,
        small(|b| b.renewals = 0),
        GRANT_KEPT,
    );
}

#[test]
fn a_fence_without_the_clock_goes_backwards_after_a_restart() {
    counterexample(
        Mutation::FenceWithoutClock,
        small(|b| {
            b.restart = true;
            b.clients = 2;
        }),
        FENCE,
    );
}

#[test]
fn a_fast_part_that_skips_the_queue_lets_a_newcomer_jump_it() {
    counterexample(
        Mutation::FastPartSkipsQueue,
        small(|b| b.pause_and_crash = true),
        FIFO,
    );
}

#[test]
fn a_hand_over_to_the_newest_breaks_fifo() {
    counterexample(Mutation::HandToNewest, small(|_| {}), FIFO);
}

#[test]
fn a_hand_over_without_a_ttl_leaves_a_key_without_expiry() {
    counterexample(Mutation::HandOverWithoutTtl, small(|_| {}), EXPIRY);
}

#[test]
fn a_step_that_skips_the_hand_over_starves_the_queue() {
    counterexample(Mutation::StepSkipsHandOver, liveness_bounds(), WAIT);
}

/// Deep (about 37 million states, over six minutes): not in CI. Run with `cargo test -p
/// leasehold-model --test mutations -- --ignored`.
#[test]
#[ignore]
fn a_hand_over_without_a_ttl_to_a_crashed_waiter_starves_the_queue() {
    let b = small(|b| {
        b.clients = 2;
        b.attempts = 2;
        b.renewals = 0;
        b.pause_and_crash = true;
        b.ticks = 12;
    });
    search(Mutation::HandOverWithoutTtl, b, WAIT, true);
}

#[test]
fn a_release_that_forgets_its_retry_is_not_idempotent() {
    counterexample(Mutation::ReleaseForgetsRetry, small(|_| {}), TWICE);
}
