//! Redlock: a lease over an odd number (three or more) of independent Redis masters, with a fence
//! that stays monotonic when the majorities of two holders differ.
//!
//! The algorithm as published: the acquire goes to every master at once with a short bound per
//! master, succeeds only with a majority and while time is left (validity = TTL − elapsed − drift,
//! drift 1 % of the TTL + 2 ms by default, [`LeaseOptions::drift`](crate::LeaseOptions::drift)); a
//! failed attempt is undone on every master it may have touched; renewal needs a majority; release
//! goes to every master. The fence: every master records `max(stored + 1, proposal, its clock in
//! µs)` in the same script that takes its lock; the grant's fence is the largest value among the
//! masters that granted, and it is handed out only once a majority recorded it while holding their
//! locks (at once when a majority already agrees, else after a second round trip that writes it
//! back, conditional on each lock). Any later majority intersects that one, so a later holder reads
//! at least that fence and mints a larger one. The argument, its assumptions and the measurements
//! are in `docs/redlock.md`.
//!
//! Promise: exclusion while a majority of masters keep their locks and clocks, which survives the
//! crash of a minority of masters; a fence strictly greater than any fence an earlier holder could
//! have acted on, across different majorities, delayed messages and (under the clock assumption of
//! the single-server store) a master that restarts empty. Limit: a holder paused past its validity,
//! a master whose clock jumps forward, or a master restarted empty while a holder needs it, gives two
//! holders, as on one server; only the fence, checked by the resource, keeps the data right.
//!
//! Layout: a topology of the Redis store, beside standalone, Sentinel and Cluster, sharing the family's
//! keys, errors, health looks, connections and Lua prelude (`super::{keys, errors, health, conn}`,
//! `super::scripts::redlock` with its `.lua` files in `scripts/redlock/`). Its own: `connect`
//! (opening, and checking masters), `node` (one master: identity, bounded requests), `rounds` (asking
//! every master at once), `quorum` (counting replies; no I/O), `acquire` (the quorum round and the
//! quorum fence), `force` (the forced release), `waits` (where a waiter blocks), `inspect`.

mod acquire;
mod connect;
mod force;
mod inspect;
mod node;
mod quorum;
mod rounds;
mod waits;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use self::node::Node;
use self::quorum::majority;
use super::errors::Failure;
use super::keys::RedlockKeys;
use super::scripts::redlock as scripts;
use crate::error::LostReason;
use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::metrics;
use crate::lease::store::contract::{
    Attempt, ForcedRelease, Grant, Held, LeaseInfo, Request, Store, StoreKind, StoreMeta, Turn,
};

/// How far ahead of the client's wall clock its fence proposal runs, so that it normally exceeds the
/// masters' clocks too and every master records the same value (the one-round-trip path).
const PROPOSAL_LEAD: Duration = Duration::from_secs(1);

/// Longest random pause after a split vote (every master answered, nobody has a majority): the
/// contenders' undos are already on their way, and waking on them together would split again.
const SPLIT_JITTER_MS: u64 = 10;

/// Which fence rule a store runs. The store always runs [`FenceRule::PROTOCOL`]; the tests also run
/// the two weaker rules on the same schedules to show each fault breaks them, i.e. that the tests can
/// see the bug the protocol prevents.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FenceRule {
    /// Floor each candidate at the client's clock (plus [`PROPOSAL_LEAD`]) and the master's clock.
    floor: bool,
    /// Grant only once a majority recorded the fence while holding their locks.
    confirm: bool,
}

impl FenceRule {
    /// The protocol of `docs/redlock.md`.
    pub(crate) const PROTOCOL: FenceRule = FenceRule {
        floor: true,
        confirm: true,
    };
    /// Unsafe when a master restarts empty: confirmed on a majority, but a bare counter.
    #[cfg(test)]
    pub(crate) const COUNTER: FenceRule = FenceRule {
        floor: false,
        confirm: true,
    };
    /// Unsafe when majorities differ: each master's own counter, the largest one granted, nothing
    /// confirmed.
    #[cfg(test)]
    pub(crate) const PER_MASTER: FenceRule = FenceRule {
        floor: false,
        confirm: false,
    };
}

/// Leases on several independent Redis masters. Cheap to clone.
#[derive(Clone)]
pub(crate) struct RedlockStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The masters, in the order their URLs were given.
    nodes: Vec<Node>,
    /// Masters that may evict lease keys are accepted (checked when each is first reached, and at
    /// every look).
    allow_eviction: bool,
    /// What the looks found: a master that started evicting without the opt-in refuses new
    /// acquisitions, evicted keys count in the metric and name a lost lease's reason.
    watch: super::health::Watch,
    /// Masters in run-id order (unreached ones last), so that clients listing the URLs in different
    /// orders choose the same master to block on.
    wake_order: Vec<usize>,
    /// Where each waiting acquire (by token) blocks next, chosen from its last busy answer:
    /// `Some(master)`, or `None` for a short sleep after a split vote.
    waits: std::sync::Mutex<HashMap<String, (Option<usize>, Instant)>>,
    /// Key prefix: keys are `{<prefix>:<name>}:lock` etc., the same on every master.
    prefix: Arc<str>,
    /// Bound on one master's reply.
    response_timeout: Duration,
    /// How long a fence key outlives its last write.
    retention: Duration,
    /// Its kind, every master's URL without its password, and the requests sent to all masters
    /// together (one per master per step), counted by the masters' connections.
    meta: StoreMeta,
    /// The fence rule (always the protocol outside tests).
    rule: FenceRule,
}

impl std::fmt::Debug for RedlockStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockStore")
            .field("masters", &self.inner.nodes)
            .field("prefix", &self.inner.prefix)
            .finish_non_exhaustive()
    }
}

impl RedlockStore {
    fn keys(&self, name: &str) -> RedlockKeys {
        RedlockKeys::for_checked(&self.inner.prefix, name)
    }

    fn fence_keys(&self, rule: FenceRule) -> scripts::FenceKeys {
        scripts::FenceKeys {
            floor: rule.floor,
            retention: self.inner.retention,
        }
    }

    fn n(&self) -> usize {
        self.inner.nodes.len()
    }

    fn quorum(&self) -> usize {
        majority(self.n())
    }
}

impl StoreKind {
    /// Redlock over an odd number (three or more) of independent Redis masters.
    pub const REDLOCK: StoreKind = StoreKind::new("redlock");
}

#[async_trait]
impl Store for RedlockStore {
    fn meta(&self) -> &StoreMeta {
        &self.inner.meta
    }

    fn look_every(&self) -> Option<Duration> {
        Some(super::LOOK_EVERY)
    }

    /// Every checked master's memory policy and evicted keys, asked at once (`INFO`): a master
    /// whose policy became evicting without the opt-in refuses new acquisitions until it is fixed,
    /// as on one Redis server; keys the masters evicted count in the metric.
    async fn look(&self) {
        let limit = self.inner.response_timeout;
        let looks = self.inner.nodes.iter().map(|node| async move {
            let facts = node.look(limit).await?;
            Some((node.location.to_string(), facts))
        });
        let looked: Vec<_> = futures::future::join_all(looks)
            .await
            .into_iter()
            .flatten()
            .collect();
        if looked.is_empty() {
            return;
        }
        let evicted = self.inner.watch.observe(&looked, self.inner.allow_eviction);
        if evicted > 0 {
            metrics::evicted_keys(evicted);
        }
    }

    /// Evicted when a look since `since` saw a master's evicted keys grow (one is taken now).
    async fn lost_reason(&self, since: Instant) -> LostReason {
        if !self.inner.watch.evicting() {
            return LostReason::NotOurs;
        }
        self.look().await;
        if self.inner.watch.evicted_since(since) {
            LostReason::Evicted
        } else {
            LostReason::NotOurs
        }
    }

    /// The fence's key and the wake list's, on every master.
    fn extra_keys(&self, name: &str) -> Vec<(&'static str, String)> {
        let keys = self.keys(name);
        vec![("fence", keys.fence), ("wake", keys.wake)]
    }

    fn key_of(&self, name: &str) -> String {
        self.keys(name).lock
    }

    /// One round trip to every master at once when a majority already records the same fence (the
    /// usual case), two when the fence must be written back.
    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt> {
        if let Some(refused) = self.inner.watch.refusal() {
            return Err(refused);
        }
        let n = self.n();
        let quorum = self.quorum();
        let keys = self.keys(req.name);
        let ttl = req.opts.ttl;
        let since = Instant::now();
        // Past this instant a grant is worthless: the holder's own deadline would already be gone.
        let valid_until = since + ttl.saturating_sub(req.opts.drift);
        let limit = self
            .inner
            .response_timeout
            .min(ttl.saturating_sub(req.opts.drift))
            .max(Duration::from_millis(1));
        let wake = self.wake_node();
        let (tally, mut first_failure, leftover) = self.take_everywhere(req, &keys, limit).await;

        if !tally.won() {
            return self.lost(req, &keys, &tally, leftover, first_failure).await;
        }

        let choice = tally.fence();
        let granted = tally.granted();
        let left = valid_until.saturating_duration_since(Instant::now());
        let confirmed = self
            .confirmed(
                &keys,
                req.token,
                &choice,
                &granted,
                limit.min(left).max(Duration::from_millis(1)),
                &mut first_failure,
            )
            .await;
        let elapsed = since.elapsed();
        if confirmed < quorum || Instant::now() >= valid_until {
            // Undo everywhere the attempt may hold a lock, after the requests still out landed.
            leftover.finish().await;
            self.undo(&keys, req.token, tally.maybe_held()).await;
            if confirmed < quorum {
                return Err(Error::NoQuorum {
                    phase: Phase::Acquire,
                    answered: confirmed,
                    needed: quorum,
                    nodes: n,
                    source: first_failure.map(|f| Box::new(f.to_error(Phase::Acquire))),
                });
            }
            tracing::debug!(
                lease = req.name,
                elapsed_ms = elapsed.as_millis() as u64,
                "redlock majority reached too late for the validity; undone"
            );
            return Err(Error::Timeout {
                phase: Phase::Acquire,
                after: elapsed,
            });
        }
        // The masters that had not answered yet take the lock too, in the background: a hold on more
        // than a bare majority survives the loss of one more master.
        leftover.finish_in_background();
        Ok(Attempt::Taken(Grant {
            fence: Fence::new(choice.fence),
            since,
            ttl,
            wakes_next: wake
                .is_some_and(|w| granted.iter().any(|&(i, _, waiting)| i == w && waiting)),
        }))
    }

    /// `BLPOP` of the name's wake list for at most `block`, on the master the last busy answer
    /// pointed to (one the holder holds, with this waiter's marker), else on the first master up in
    /// run-id order. After a split vote, when no master is up to block on, or when the `BLPOP`
    /// fails: a plain sleep of `block` (the holder's remaining validity plus jitter) instead of
    /// asking the masters again.
    async fn wait_turn(&self, req: &Request<'_>, block: Duration) -> Result<Turn> {
        let start = Instant::now();
        let on = match self.take_wait(req.token) {
            Some(on) => on,
            None => self.wake_node(),
        };
        if let Some(w) = on {
            let wake = self.keys(req.name).wake;
            match self.inner.nodes[w]
                .block_on(&wake, block, self.inner.response_timeout)
                .await
            {
                Ok(woken) => {
                    tracing::trace!(woken, "redlock wake list");
                    return Ok(Turn::AskAgain);
                }
                Err(f) => {
                    tracing::debug!(error = %f.to_error(Phase::Wait), "blocking on a redlock master failed; sleeping instead");
                }
            }
        }
        tokio::time::sleep(block.saturating_sub(start.elapsed())).await;
        Ok(Turn::AskAgain)
    }

    /// Releases anything the attempt took, and forgets where it was to block.
    async fn abandon(&self, req: &Request<'_>) -> Result<()> {
        self.take_wait(req.token);
        crate::lease::store::only(
            self.release(&[Held::new(req.name, req.token, req.opts)])
                .await,
        )
        .map(drop)
    }

    /// Renews on every master at once; the verdict per lease comes from the first majority that
    /// agrees, so a slow or stopped minority never delays it (a master that answers later extends
    /// its own lock, which only keeps others out longer).
    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        Ok(self
            .vote(Phase::Renew, held, |k, h| {
                scripts::renew(k, h.token, h.opts.ttl)
            })
            .await)
    }

    /// Releases on every master; the verdict per lease comes from the first majority that agrees,
    /// and the masters that had not answered by then finish in the background, so that none keeps
    /// the lock for its TTL.
    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        Ok(self
            .vote(Phase::Release, held, |k, h| scripts::release(k, h.token))
            .await)
    }

    /// Deletes the lock on every master that answers and advances the fence there; the fence is
    /// written back until a majority records it.
    async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        let n = self.n();
        let quorum = self.quorum();
        let keys = self.keys(name);
        let limit = self.inner.response_timeout;
        let (answers, mut first_failure) = self.force_everywhere(&keys, limit).await;
        let answered: Vec<(usize, bool, u64)> = answers
            .iter()
            .enumerate()
            .filter_map(|(i, a)| a.map(|(e, f)| (i, e, f)))
            .collect();
        let no_quorum = |answered: usize, first_failure: Option<Failure>| Error::NoQuorum {
            phase: Phase::Release,
            answered,
            needed: quorum,
            nodes: n,
            source: first_failure.map(|f| Box::new(f.to_error(Phase::Release))),
        };
        if answered.len() < quorum {
            return Err(no_quorum(answered.len(), first_failure));
        }
        let fence = answered.iter().map(|a| a.2).max().unwrap_or(0);
        let evicted = answered.iter().any(|a| a.1);
        let mut recorded = answered.iter().filter(|a| a.2 == fence).count();
        if recorded < quorum {
            let behind: Vec<usize> = answered
                .iter()
                .filter(|a| a.2 < fence)
                .map(|a| a.0)
                .collect();
            recorded += self
                .raise_behind(&keys, fence, behind, limit, &mut first_failure)
                .await;
            if recorded < quorum {
                return Err(no_quorum(recorded, first_failure));
            }
        }
        Ok(ForcedRelease {
            evicted,
            fence: Fence::new(fence),
        })
    }

    /// note.lua on every master at once; written when a majority held our token and wrote it (the
    /// masters that answer later write it too, where the lock is ours).
    async fn write_note(&self, held: &Held<'_>, note: &[u8]) -> Result<bool> {
        let retention = self.inner.retention;
        self.vote(Phase::Note, std::slice::from_ref(held), |k, h| {
            scripts::note(k, h.token, note, retention)
        })
        .await
        .pop()
        .unwrap_or(Ok(false))
    }

    /// read_note.lua on every master; the note a majority of the masters keep, else `None` (no
    /// note, or the masters disagree: the last writer reached only some of them). Needs a
    /// majority to answer.
    async fn read_note(&self, name: &str) -> Result<Option<Vec<u8>>> {
        self.read_notes(name).await
    }

    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        self.inspect_keys(names).await
    }

    /// `SCAN` on every master that answers (a majority must), the union of the names, then
    /// [`Store::inspect`].
    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        self.list_names(pattern).await
    }
}

#[cfg(test)]
mod tests;
