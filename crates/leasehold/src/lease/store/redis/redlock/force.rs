//! Redlock's forced release: the lock deleted on every master that answers, and the fence advanced
//! there and written back until a majority records it.
//!
//! Promise: a forced release deletes the lock on every master that answers, whoever holds it, and
//! succeeds only when a majority answered and a majority records the fence it reports (the highest
//! any answering master proposed, written back to those behind it), so no later grant's fence falls
//! below it; otherwise it is [`Error::NoQuorum`](crate::Error::NoQuorum), and the deletes that
//! landed stay.
//!
//! Limit: a master that does not answer keeps its lock until its TTL.

use std::time::Duration;

use super::acquire::proposal;
use super::scripts;
use super::RedlockStore;
use crate::lease::store::redis::errors::Failure;
use crate::lease::store::redis::keys::RedlockKeys;

impl RedlockStore {
    /// force_release.lua on every master at once: each master's answer (evicted, fence candidate),
    /// `None` where it failed, and the first failure.
    pub(super) async fn force_everywhere(
        &self,
        keys: &RedlockKeys,
        limit: Duration,
    ) -> (Vec<Option<(bool, u64)>>, Option<Failure>) {
        let (n, rule) = (self.n(), self.inner.rule);
        let proposal = proposal(rule);
        let mut answers: Vec<Option<(bool, u64)>> = vec![None; n];
        let mut first_failure = None;
        let inv = scripts::force_release(keys, proposal, self.fence_keys(rule));
        self.fan_out_script(0..n, inv, limit, scripts::forced, |i, r| {
            match r {
                Ok(a) => answers[i] = Some(a),
                Err(f) => {
                    first_failure.get_or_insert(f);
                }
            }
            false
        })
        .await;
        (answers, first_failure)
    }

    /// raise.lua on the masters `behind` the forced release's fence: how many now record it. A
    /// failure is kept in `first_failure` when none is yet.
    pub(super) async fn raise_behind(
        &self,
        keys: &RedlockKeys,
        fence: u64,
        behind: Vec<usize>,
        limit: Duration,
        first_failure: &mut Option<Failure>,
    ) -> usize {
        let mut raised = 0;
        let inv = scripts::raise(keys, fence, self.inner.retention);
        self.fan_out_script(
            behind,
            inv,
            limit,
            |v| scripts::flag_reply(Ok(v)),
            |_, r| {
                match r {
                    Ok(true) => raised += 1,
                    Ok(false) => {}
                    Err(f) => {
                        first_failure.get_or_insert(f);
                    }
                }
                false
            },
        )
        .await;
        raised
    }
}
