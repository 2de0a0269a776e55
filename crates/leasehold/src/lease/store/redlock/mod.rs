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
//! Layout: `node` (one master: connections, identity, bounded requests), `quorum` (counting replies;
//! no I/O), `scripts` (one `.lua` file per script, each behind one function that prepares its call).

mod connect;
mod errors;
mod inspect;
mod keys;
mod node;
mod quorum;
mod scripts;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use self::connect::check_identity;
use self::errors::Failure;
use self::keys::RedlockKeys;
use self::node::Node;
use self::quorum::{majority, AcquireTally, AcquireVote, FenceChoice, Verdict, Votes};
use self::scripts::NodeAcquire;
use super::{Attempt, ForcedRelease, Grant, Held, LeaseInfo, Request, Store, StoreKind, Turn};
use crate::error::LostReason;
use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::metrics;

/// Most scripts sent to one master in one pipeline.
const CHUNK: usize = 1_000;

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
    watch: crate::lease::store::redis::health::Watch,
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
    /// Every master's URL without its password.
    location: String,
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

/// One request per master, boxed so that masters can be asked at once; each owns what it needs, so
/// that the ones still out when the answer is known can finish in the background.
type Pending<T> = FuturesUnordered<
    Pin<Box<dyn Future<Output = (usize, std::result::Result<T, Failure>)> + Send + 'static>>,
>;

/// The client's fence proposal: its wall clock in µs plus [`PROPOSAL_LEAD`].
fn proposal(rule: FenceRule) -> u64 {
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
    /// force_release.lua on every master at once: each master's answer (evicted, fence candidate),
    /// `None` where it failed, and the first failure.
    async fn force_everywhere(
        &self,
        keys: &RedlockKeys,
        limit: Duration,
    ) -> (Vec<Option<(bool, u64)>>, Option<Failure>) {
        let (n, rule) = (self.n(), self.inner.rule);
        let proposal = proposal(rule);
        let mut answers: Vec<Option<(bool, u64)>> = vec![None; n];
        let mut first_failure = None;
        let inv = Arc::new(scripts::force_release(
            keys,
            proposal,
            self.fence_keys(rule),
        ));
        self.fan_out(
            0..n,
            |i, inner| {
                let inv = inv.clone();
                async move {
                    let mut r = inner.nodes[i]
                        .scripts(std::slice::from_ref(&*inv), limit)
                        .await?;
                    r.pop()
                        .unwrap_or(Ok(redis::Value::Nil))
                        .and_then(scripts::forced)
                        .map_err(Failure::Redis)
                }
            },
            |i, r| {
                match r {
                    Ok(a) => answers[i] = Some(a),
                    Err(f) => {
                        first_failure.get_or_insert(f);
                    }
                }
                false
            },
        )
        .await;
        (answers, first_failure)
    }

    /// raise.lua on the masters `behind` the forced release's fence: how many now record it. A
    /// failure is kept in `first_failure` when none is yet.
    async fn raise_behind(
        &self,
        keys: &RedlockKeys,
        fence: u64,
        behind: Vec<usize>,
        limit: Duration,
        first_failure: &mut Option<Failure>,
    ) -> usize {
        let mut raised = 0;
        let inv = Arc::new(scripts::raise(keys, fence, self.inner.retention));
        self.fan_out(
            behind,
            |i, inner| {
                let inv = inv.clone();
                async move {
                    let mut r = inner.nodes[i]
                        .scripts(std::slice::from_ref(&*inv), limit)
                        .await?;
                    scripts::flag_reply(r.pop().unwrap_or(Ok(redis::Value::Nil)))
                        .map_err(Failure::Redis)
                }
            },
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

    /// acquire.lua on every master at once, the answers counted until the vote is decided. Returns
    /// the tally, the first master's failure, and the requests still out.
    async fn take_everywhere(
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
                        let mut r = inner.nodes[i]
                            .scripts(std::slice::from_ref(&inv), limit)
                            .await?;
                        r.pop()
                            .unwrap_or(Ok(redis::Value::Nil))
                            .and_then(NodeAcquire::from_value)
                            .map_err(Failure::Redis)
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
    async fn lost(
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
    async fn confirmed(
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

    /// Notes where the waiter with `token` blocks next. Entries are taken by the next wait; the
    /// ones a caller left behind (it gave up without waiting) are swept once there are many.
    fn note_wait(&self, token: &str, on: Option<usize>) {
        let mut waits = self.inner.waits.lock().expect("waits lock");
        if waits.len() >= 1024 {
            waits.retain(|_, (_, at)| at.elapsed() < Duration::from_secs(60));
        }
        waits.insert(token.to_owned(), (on, Instant::now()));
    }

    /// Where the waiter with `token` was told to block, if its last attempt said.
    fn take_wait(&self, token: &str) -> Option<Option<usize>> {
        self.inner
            .waits
            .lock()
            .expect("waits lock")
            .remove(token)
            .map(|(on, _)| on)
    }

    /// The master a waiter with no busy answer to go by blocks on (the next holder of this client
    /// after a grant whose release will wake it): the first in run-id order that is up.
    fn wake_node(&self) -> Option<usize> {
        self.inner
            .wake_order
            .iter()
            .copied()
            .find(|&i| self.inner.nodes[i].is_up())
    }

    /// Starts a background check of every master still pending (rate-limited per master).
    fn check_pending(&self) {
        for (i, node) in self.inner.nodes.iter().enumerate() {
            if node.is_pending() && node.claim_check() {
                let this = self.clone();
                tokio::spawn(async move { this.check_later(i).await });
            }
        }
    }

    /// Checks master `i`, which did not answer when the store opened: a master that is a known
    /// server under another URL, or a replica, is refused for good (logged as an error).
    async fn check_later(&self, i: usize) {
        let node = &self.inner.nodes[i];
        match node
            .identify(self.inner.response_timeout * 2, &self.inner.prefix)
            .await
        {
            Err(_) => node.check_failed(),
            Ok(id) => {
                let seen: HashMap<String, usize> = self
                    .inner
                    .nodes
                    .iter()
                    .enumerate()
                    .filter_map(|(j, n)| n.run_id().map(|r| (r, j)))
                    .filter(|&(_, j)| j != i)
                    .collect();
                match check_identity(
                    &self.inner.nodes,
                    i,
                    &id,
                    &seen,
                    self.inner.allow_eviction,
                    &self.inner.prefix,
                ) {
                    Ok(()) => {
                        tracing::info!(url = %node.location, "redlock master reachable and checked; it counts from now on");
                        node.accept(id.run_id);
                    }
                    Err(e) => {
                        tracing::error!(url = %node.location, error = %e, "redlock master refused; it never counts");
                        node.refuse(e.to_string());
                    }
                }
            }
        }
    }

    /// Asks the masters in `targets` at once and hands each reply to `take` as it comes, until
    /// `take` says the rest cannot change the outcome. Each request carries its own bound. The
    /// requests still out are returned: the caller lets them finish in the background (their effect
    /// is wanted: a lock, a renewal or a release on one more master) or waits for them before an
    /// undo, so that nothing it sent is left to land unaccounted for.
    async fn fan_out<T, F, Fut>(
        &self,
        targets: impl IntoIterator<Item = usize>,
        call: F,
        mut take: impl FnMut(usize, std::result::Result<T, Failure>) -> bool,
    ) -> Leftover<T>
    where
        T: Send + 'static,
        F: Fn(usize, Arc<Inner>) -> Fut,
        Fut: Future<Output = std::result::Result<T, Failure>> + Send + 'static,
    {
        self.check_pending();
        let mut pending: Pending<T> = FuturesUnordered::new();
        for i in targets {
            let fut = call(i, self.inner.clone());
            pending.push(Box::pin(async move { (i, fut.await) }));
        }
        while let Some((i, r)) = pending.next().await {
            if take(i, r) {
                break;
            }
        }
        Leftover(pending)
    }

    /// Releases `token` on the masters in `targets` (the undo of an attempt) and waits for the
    /// answers (each bounded by the response time); a master that fails keeps the lock until its TTL.
    async fn undo(&self, keys: &RedlockKeys, token: &str, targets: Vec<usize>) {
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

    /// Phase two of an acquire: records `fence` on the granted masters that recorded less, each only
    /// while it still holds our lock. Returns how many granted masters now hold the fence.
    async fn confirm(
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
        let inv = Arc::new(scripts::confirm(keys, token, fence, self.inner.retention));
        self.fan_out(
            behind,
            |i, inner| {
                let inv = inv.clone();
                async move {
                    let mut r = inner.nodes[i]
                        .scripts(std::slice::from_ref(&*inv), limit)
                        .await?;
                    scripts::flag_reply(r.pop().unwrap_or(Ok(redis::Value::Nil)))
                        .map_err(Failure::Redis)
                }
            },
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

    /// Runs `make` for every item on every master (pipelined per master) and folds the 0/1 replies
    /// into a verdict per item, returning as soon as every item has one; the masters that had not
    /// answered by then finish in the background.
    async fn vote(
        &self,
        phase: Phase,
        held: &[Held<'_>],
        make: impl Fn(&RedlockKeys, &Held<'_>) -> redis::ScriptInvocation<'static>,
    ) -> Vec<Result<bool>> {
        let n = self.n();
        let limit = self.inner.response_timeout;
        let invs: Arc<Vec<redis::ScriptInvocation<'static>>> =
            Arc::new(held.iter().map(|h| make(&self.keys(h.name), h)).collect());
        let mut votes = vec![Votes::default(); held.len()];
        let mut first_failure: Option<Failure> = None;
        self.fan_out(
            0..n,
            |i, inner| {
                let invs = invs.clone();
                async move {
                    let mut out = Vec::with_capacity(invs.len());
                    for chunk in invs.chunks(CHUNK) {
                        out.extend(inner.nodes[i].scripts(chunk, limit).await?);
                    }
                    Ok(out)
                }
            },
            |_, r| {
                match r {
                    Ok(replies) => {
                        for (v, reply) in votes.iter_mut().zip(replies) {
                            match scripts::flag_reply(reply) {
                                Ok(true) => v.yes += 1,
                                Ok(false) => v.no += 1,
                                Err(e) => {
                                    v.failed += 1;
                                    first_failure.get_or_insert(Failure::Redis(e));
                                }
                            }
                        }
                    }
                    Err(f) => {
                        for v in votes.iter_mut() {
                            v.failed += 1;
                        }
                        first_failure.get_or_insert(f);
                    }
                }
                votes.iter().all(|v| v.verdict(n).is_some())
            },
        )
        .await
        .finish_in_background();
        let quorum = self.quorum();
        votes
            .iter()
            .map(|v| match v.verdict(n) {
                Some(Verdict::Yes) => Ok(true),
                Some(Verdict::No) => Ok(false),
                Some(Verdict::Unknown) | None => Err(Error::NoQuorum {
                    phase,
                    answered: v.yes + v.no,
                    needed: quorum,
                    nodes: n,
                    source: first_failure.as_ref().map(|f| Box::new(f.to_error(phase))),
                }),
            })
            .collect()
    }
}

/// The requests of a [`RedlockStore::fan_out`] still out when the caller stopped listening.
struct Leftover<T>(Pending<T>);

impl<T: Send + 'static> Leftover<T> {
    /// Lets them finish on their own (each has its own bound).
    fn finish_in_background(self) {
        let mut pending = self.0;
        if !pending.is_empty() {
            tokio::spawn(async move { while pending.next().await.is_some() {} });
        }
    }

    /// Waits for them, ignoring their replies (each has its own bound).
    async fn finish(self) {
        let mut pending = self.0;
        while pending.next().await.is_some() {}
    }
}

impl StoreKind {
    /// Redlock over an odd number (three or more) of independent Redis masters.
    pub const REDLOCK: StoreKind = StoreKind::new("redlock");
}

#[async_trait]
impl Store for RedlockStore {
    fn kind(&self) -> StoreKind {
        StoreKind::REDLOCK
    }

    fn look_every(&self) -> Option<Duration> {
        Some(crate::lease::store::redis::LOOK_EVERY)
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

    fn location(&self) -> &str {
        &self.inner.location
    }

    /// Requests sent to all masters together (one request per master per step).
    fn round_trips(&self) -> u64 {
        self.inner.nodes.iter().map(Node::round_trips).sum()
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
        self.release(&[Held {
            name: req.name,
            token: req.token,
            opts: req.opts,
        }])
        .await?
        .pop()
        .unwrap_or(Ok(false))
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
