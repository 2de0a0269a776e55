//! Redlock's acquire round: the lock asked of every master at once, the fence chosen and confirmed on
//! a majority, and an attempt that did not win undone everywhere it may hold a lock.
//!
//! Promise: an acquire wins only when a majority of the masters granted it and recorded the fence
//! it returns (confirmed while each still holds the lock); an attempt that did not win waits for
//! its requests still out to land and then releases its token everywhere it may hold the lock, and
//! tells the caller busy (with how long, or a short random pause after a split vote) or
//! [`Error::NoQuorum`](crate::Error::NoQuorum) when too few masters answered.
//!
//! Limit: an undo that fails on a master leaves that master's lock to expire by its TTL.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::quorum::{AcquireTally, AcquireVote, FenceChoice};
use super::rounds::Leftover;
use super::scripts::{self, NodeAcquire};
use super::{FenceRule, RedlockStore, PROPOSAL_LEAD, SPLIT_JITTER_MS};
use crate::error::{Error, Phase, Result};
use crate::lease::metrics;
use crate::lease::store::contract::{Attempt, Request};
use crate::lease::store::redis::errors::Failure;
use crate::lease::store::redis::keys::RedlockKeys;

/// The client's fence proposal: its wall clock in µs plus [`PROPOSAL_LEAD`].
pub(super) fn proposal(rule: FenceRule) -> u64 {
    if !rule.floor {
        return 0;
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        + PROPOSAL_LEAD;
    u64::try_from(now.as_micros()).unwrap_or(0)
}

impl RedlockStore {
    /// acquire.lua on every master at once, the answers counted until the vote is decided. Returns
    /// the tally, the first master's failure, and the requests still out.
    pub(super) async fn take_everywhere(
        &self,
        req: &Request<'_>,
        keys: &RedlockKeys,
        limit: Duration,
    ) -> (AcquireTally, Option<Failure>, Leftover<NodeAcquire>) {
        let (n, rule, ttl) = (self.n(), self.inner.rule, req.opts.ttl);
        let proposal = proposal(rule);
        let mut tally = AcquireTally::new(n);
        let mut first_failure: Option<Failure> = None;
        let leftover = self
            .fan_out(
                0..n,
                |i, inner| {
                    // Every master that answers busy keeps a waiting marker, so that whichever of
                    // them the waiter blocks on, the holder's release there wakes it.
                    let inv = scripts::acquire(
                        keys,
                        req.token,
                        ttl,
                        req.wait,
                        proposal,
                        self.fence_keys(rule),
                    );
                    async move {
                        inner.nodes[i]
                            .script(&inv, limit, NodeAcquire::from_value)
                            .await
                    }
                },
                |i, r| {
                    let vote = match r {
                        Ok(NodeAcquire::Taken { fence, waiting }) => {
                            AcquireVote::Taken { fence, waiting }
                        }
                        Ok(NodeAcquire::Busy { pttl_ms, holder }) => {
                            AcquireVote::Busy { pttl_ms, holder }
                        }
                        Err(f) => {
                            first_failure.get_or_insert(f);
                            AcquireVote::Failed
                        }
                    };
                    tally.record(i, vote);
                    tally.decided()
                },
            )
            .await;
        (tally, first_failure, leftover)
    }

    /// The end of an acquire that did not win a majority: the requests still out land, the attempt
    /// is undone where it may hold a lock, and the caller hears busy (with how long, or a short
    /// random pause after a split vote), or [`Error::NoQuorum`] when too few masters answered.
    pub(super) async fn lost(
        &self,
        req: &Request<'_>,
        keys: &RedlockKeys,
        tally: &AcquireTally,
        leftover: Leftover<NodeAcquire>,
        first_failure: Option<Failure>,
    ) -> Result<Attempt> {
        let (n, quorum) = (self.n(), self.quorum());
        // The requests still out may yet take a lock: let them land, then undo after them.
        leftover.finish().await;
        self.undo(keys, req.token, tally.maybe_held()).await;
        if tally.answered() < quorum {
            return Err(Error::NoQuorum {
                phase: Phase::Acquire,
                answered: tally.answered(),
                needed: quorum,
                nodes: n,
                source: first_failure.map(|f| Box::new(f.to_error(Phase::Acquire))),
            });
        }
        let split = tally.split();
        if !req.wait.is_zero() {
            let on = if split {
                None
            } else {
                tally.block_master(&self.inner.wake_order)
            };
            self.note_wait(req.token, on);
        }
        let remaining = if split {
            // The other contenders undo their attempts now: retry after a short random pause
            // rather than all at once when their undos wake everyone.
            Some(Duration::from_millis(rand::random_range(
                1..=SPLIT_JITTER_MS,
            )))
        } else {
            tally.busy_for()
        };
        Ok(Attempt::Busy { remaining })
    }

    /// How many masters record the chosen fence while holding our lock: a majority at once when
    /// they agreed (or the rule needs no confirmation), else after confirm.lua on those that hold
    /// it, within `limit`. A confirm's failure is kept in `first_failure` when none is yet.
    pub(super) async fn confirmed(
        &self,
        keys: &RedlockKeys,
        token: &str,
        choice: &FenceChoice,
        granted: &[(usize, u64, bool)],
        limit: Duration,
        first_failure: &mut Option<Failure>,
    ) -> usize {
        let (quorum, rule) = (self.quorum(), self.inner.rule);
        if !rule.confirm || choice.agreeing >= quorum {
            if rule.confirm {
                metrics::redlock_confirm("agreed");
            }
            return quorum;
        }
        let (confirmed, failure) = self
            .confirm(keys, token, choice.fence, granted, choice.agreeing, limit)
            .await;
        if let Some(f) = failure {
            first_failure.get_or_insert(f);
        }
        confirmed
    }

    /// Phase two of an acquire: records `fence` on the granted masters that recorded less, each only
    /// while it still holds our lock. Returns how many granted masters now hold the fence.
    pub(super) async fn confirm(
        &self,
        keys: &RedlockKeys,
        token: &str,
        fence: u64,
        granted: &[(usize, u64, bool)],
        agreeing: usize,
        limit: Duration,
    ) -> (usize, Option<Failure>) {
        let quorum = self.quorum();
        let behind: Vec<usize> = granted
            .iter()
            .filter(|&&(_, f, _)| f < fence)
            .map(|&(i, _, _)| i)
            .collect();
        let mut confirmed = agreeing;
        let mut unanswered = behind.len();
        let mut failure = None;
        let inv = scripts::confirm(keys, token, fence, self.inner.retention);
        self.fan_out_script(
            behind,
            inv,
            limit,
            |v| scripts::flag_reply(Ok(v)),
            |_, r| {
                unanswered -= 1;
                match r {
                    Ok(true) => confirmed += 1,
                    Ok(false) => {}
                    Err(f) => {
                        failure.get_or_insert(f);
                    }
                }
                confirmed >= quorum || confirmed + unanswered < quorum
            },
        )
        .await
        .finish_in_background();
        metrics::redlock_confirm(if confirmed >= quorum {
            "confirmed"
        } else {
            "failed"
        });
        (confirmed, failure)
    }

    /// Releases `token` on the masters in `targets` (the undo of an attempt) and waits for the
    /// answers (each bounded by the response time); a master that fails keeps the lock until its TTL.
    pub(super) async fn undo(&self, keys: &RedlockKeys, token: &str, targets: Vec<usize>) {
        if targets.is_empty() {
            return;
        }
        let limit = self.inner.response_timeout;
        let inv = Arc::new(scripts::release(keys, token));
        self.fan_out(
            targets,
            |i, inner| {
                let inv = inv.clone();
                async move { inner.nodes[i].scripts(std::slice::from_ref(&*inv), limit).await }
            },
            |i, r| {
                if let Err(f) = r {
                    tracing::debug!(url = %self.inner.nodes[i].location, error = %f.to_error(Phase::Release), "undo on a redlock master failed; its lock expires by its TTL");
                }
                false
            },
        )
        .await;
    }
}
