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

mod keys;
mod node;
mod quorum;
mod scripts;

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::time::Instant;

use self::keys::RedlockKeys;
use self::node::{Failure, Node};
use self::quorum::{majority, AcquireTally, AcquireVote, Verdict, Votes};
use self::scripts::NodeAcquire;
use super::{
    Attempt, ForcedRelease, Grant, Held, LeaseInfo, Request, Settings, Store, StoreKind, Turn,
};
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

fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

impl RedlockStore {
    /// Opens a Redlock over `urls`: an odd number, three or more, each any URL the single-server
    /// store takes. Every master is asked what it is (`INFO server`, `ROLE`) at once; a replica or
    /// a server two URLs name is [`Error::Invalid`]; fewer than a majority answering is
    /// [`Error::NoQuorum`]. A minority that does not answer is checked when it first does.
    pub(crate) async fn connect(urls: &[String], settings: Settings) -> Result<Self> {
        Self::connect_with_rule(urls, settings, FenceRule::PROTOCOL).await
    }

    pub(crate) async fn connect_with_rule(
        urls: &[String],
        settings: Settings,
        rule: FenceRule,
    ) -> Result<Self> {
        let shown: Vec<String> = urls.iter().map(|u| crate::url::redact(u)).collect();
        if urls.len() < 3 || urls.len() % 2 == 0 {
            return Err(Error::invalid(
                "redlock masters",
                format!(
                    "{} given ({}); Redlock needs an odd number of independent Redis masters, at least 3 (give --redis URL three or five times)",
                    urls.len(),
                    shown.join(", ")
                ),
            ));
        }
        for (i, a) in urls.iter().enumerate() {
            if urls[..i].contains(a) {
                return Err(Error::invalid(
                    "redlock masters",
                    format!(
                        "`{}` is given twice; Redlock needs {} different masters",
                        shown[i],
                        urls.len()
                    ),
                ));
            }
        }
        let nodes = urls
            .iter()
            .map(|u| Node::new(u, &settings))
            .collect::<Result<Vec<_>>>()?;
        let limit = settings.connect_timeout * 2 + settings.response_timeout;
        let ids = futures::future::join_all(nodes.iter().map(|n| n.identify(limit))).await;
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut first_failure = None;
        for (i, id) in ids.iter().enumerate() {
            match id {
                Ok(id) => {
                    check_identity(&nodes, i, id, &seen)?;
                    seen.insert(id.run_id.clone(), i);
                }
                Err(f) => {
                    tracing::warn!(url = %nodes[i].location, error = %f.to_error(Phase::Connect), "redlock master not reachable; it will be checked when it answers");
                    first_failure.get_or_insert_with(|| f.to_error(Phase::Connect));
                }
            }
        }
        let quorum = majority(nodes.len());
        if seen.len() < quorum {
            return Err(Error::NoQuorum {
                phase: Phase::Connect,
                answered: seen.len(),
                needed: quorum,
                nodes: nodes.len(),
                source: first_failure.map(Box::new),
            });
        }
        for (i, id) in ids.into_iter().enumerate() {
            if let Ok(id) = id {
                nodes[i].accept(id.run_id);
            }
        }
        let mut wake_order: Vec<usize> = (0..nodes.len()).collect();
        wake_order.sort_by_key(|&i| {
            (
                nodes[i].run_id().is_none(),
                nodes[i].run_id().unwrap_or_default(),
                nodes[i].location.to_string(),
            )
        });
        let location = format!("redlock {}", shown.join(" "));
        tracing::debug!(masters = %location, prefix = %settings.prefix, "redlock lease store connected");
        Ok(RedlockStore {
            inner: Arc::new(Inner {
                nodes,
                wake_order,
                waits: std::sync::Mutex::new(HashMap::new()),
                prefix: settings.prefix.into(),
                response_timeout: settings.response_timeout,
                retention: settings.retention,
                location,
                rule,
            }),
        })
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
        match node.identify(self.inner.response_timeout * 2).await {
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
                match check_identity(&self.inner.nodes, i, &id, &seen) {
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

    /// Reads every master's `PTTL` and fence for `names`; needs a majority to answer.
    async fn inspect_keys(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        let n = self.n();
        let quorum = self.quorum();
        let limit = self.inner.response_timeout;
        let keys: Arc<Vec<RedlockKeys>> =
            Arc::new(names.iter().map(|name| self.keys(name)).collect());
        let mut per_node: Vec<Option<Vec<KeyState>>> = vec![None; n];
        let mut first_failure = None;
        self.fan_out(
            0..n,
            |i, inner| {
                let keys = keys.clone();
                async move {
                    let mut out = Vec::with_capacity(keys.len());
                    for chunk in keys.chunks(500) {
                        let mut pipe = redis::pipe();
                        for k in chunk {
                            pipe.cmd("PTTL").arg(&k.lock).cmd("GET").arg(&k.fence);
                        }
                        let values: Vec<(i64, Option<String>)> =
                            inner.nodes[i].query_pipe(&pipe, limit).await?;
                        out.extend(
                            values
                                .into_iter()
                                .map(|(pttl, fence)| (pttl, fence.and_then(|f| f.parse().ok()))),
                        );
                    }
                    Ok(out)
                }
            },
            |i, r| {
                match r {
                    Ok(v) => per_node[i] = Some(v),
                    Err(f) => {
                        first_failure.get_or_insert(f);
                    }
                }
                false
            },
        )
        .await;
        let answered: Vec<&Vec<KeyState>> = per_node.iter().flatten().collect();
        if answered.len() < quorum {
            return Err(Error::NoQuorum {
                phase: Phase::Inspect,
                answered: answered.len(),
                needed: quorum,
                nodes: n,
                source: first_failure.map(|f| Box::new(f.to_error(Phase::Inspect))),
            });
        }
        Ok(names
            .iter()
            .zip(keys.iter())
            .enumerate()
            .map(|(j, (name, k))| {
                let mut pttls: Vec<i64> = answered
                    .iter()
                    .map(|v| v[j].0)
                    .filter(|&p| p != -2)
                    .collect();
                pttls.sort_unstable_by(|a, b| b.cmp(a));
                let held = pttls.len() >= quorum;
                LeaseInfo {
                    name: (*name).to_owned(),
                    key: k.lock.clone(),
                    held,
                    ttl_ms: if held {
                        u64::try_from(pttls[quorum - 1]).ok()
                    } else {
                        None
                    },
                    fence: answered.iter().filter_map(|v| v[j].1).max().map(Fence::new),
                    ..LeaseInfo::free(name, String::new())
                }
            })
            .collect())
    }
}

/// One master's view of one name: the lock's `PTTL` and the recorded fence.
type KeyState = (i64, Option<u64>);

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

/// Refuses master `i` when `id` says it is not a master, or is a server another URL names (`seen`:
/// run id → index of the masters already checked).
fn check_identity(
    nodes: &[Node],
    i: usize,
    id: &node::Identity,
    seen: &HashMap<String, usize>,
) -> Result<()> {
    let here = &nodes[i].location;
    if id.role != "master" {
        return Err(Error::invalid(
            "redlock masters",
            format!(
                "`{here}` is not a master (ROLE says `{}`); Redlock needs independent masters: give each master's URL, never a replica's or a sentinel's",
                if id.role.is_empty() { "nothing" } else { &id.role }
            ),
        ));
    }
    if id.run_id.is_empty() {
        return Err(Error::invalid(
            "redlock masters",
            format!("`{here}` did not say its run_id in INFO server; is it Redis?"),
        ));
    }
    if let Some(&j) = seen.get(&id.run_id) {
        return Err(Error::invalid(
            "redlock masters",
            format!(
                "`{}` and `{here}` are the same Redis server (run_id {}…); Redlock needs independent masters, one URL each",
                nodes[j].location,
                &id.run_id[..id.run_id.len().min(8)]
            ),
        ));
    }
    Ok(())
}

#[async_trait]
impl Store for RedlockStore {
    fn kind(&self) -> StoreKind {
        StoreKind::Redlock
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
        let n = self.n();
        let quorum = self.quorum();
        let keys = self.keys(req.name);
        let rule = self.inner.rule;
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
                        &keys,
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

        if !tally.won() {
            // The requests still out may yet take a lock: let them land, then undo after them.
            leftover.finish().await;
            self.undo(&keys, req.token, tally.maybe_held()).await;
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
            return Ok(Attempt::Busy { remaining });
        }

        let choice = tally.fence();
        let granted = tally.granted();
        let confirmed = if !rule.confirm || choice.agreeing >= quorum {
            if rule.confirm {
                metrics::redlock_confirm("agreed");
            }
            quorum
        } else {
            let left = valid_until.saturating_duration_since(Instant::now());
            let (confirmed, failure) = self
                .confirm(
                    &keys,
                    req.token,
                    choice.fence,
                    &granted,
                    choice.agreeing,
                    limit.min(left).max(Duration::from_millis(1)),
                )
                .await;
            if let Some(f) = failure {
                first_failure.get_or_insert(f);
            }
            confirmed
        };
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
        let rule = self.inner.rule;
        let limit = self.inner.response_timeout;
        let proposal = proposal(rule);
        let mut answers: Vec<Option<(bool, u64)>> = vec![None; n];
        let mut first_failure = None;
        let inv = Arc::new(scripts::force_release(
            &keys,
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
            let inv = Arc::new(scripts::raise(&keys, fence, self.inner.retention));
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
                        Ok(true) => recorded += 1,
                        Ok(false) => {}
                        Err(f) => {
                            first_failure.get_or_insert(f);
                        }
                    }
                    false
                },
            )
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

    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        self.inspect_keys(names).await
    }

    /// `SCAN` on every master that answers (a majority must), the union of the names, then
    /// [`Store::inspect`].
    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        let n = self.n();
        let quorum = self.quorum();
        let limit = self.inner.response_timeout;
        let tag_start = format!("{{{}:", self.inner.prefix);
        let matcher = format!("{}{pattern}}}:*", glob_escape(&tag_start));
        let (tag_start, matcher): (Arc<str>, Arc<str>) = (tag_start.into(), matcher.into());
        let mut names = BTreeSet::new();
        let mut answered = 0;
        let mut first_failure = None;
        self.fan_out(
            0..n,
            |i, inner| {
                let (tag_start, matcher) = (tag_start.clone(), matcher.clone());
                async move {
                    let node = &inner.nodes[i];
                    let mut found = Vec::new();
                    let mut cursor: u64 = 0;
                    loop {
                        let mut cmd = redis::cmd("SCAN");
                        cmd.arg(cursor)
                            .arg("MATCH")
                            .arg(&*matcher)
                            .arg("COUNT")
                            .arg(1000);
                        let (next, keys): (u64, Vec<String>) = node.query(&cmd, limit).await?;
                        for key in keys {
                            let Some(rest) = key.strip_prefix(&*tag_start) else {
                                continue;
                            };
                            let name = rest
                                .strip_suffix("}:lock")
                                .or_else(|| rest.strip_suffix("}:rl-fence"));
                            if let Some(name) =
                                name.filter(|n| crate::lease::names::validate_name(n).is_ok())
                            {
                                found.push(name.to_owned());
                            }
                        }
                        cursor = next;
                        if cursor == 0 {
                            return Ok(found);
                        }
                    }
                }
            },
            |_, r: std::result::Result<Vec<String>, Failure>| {
                match r {
                    Ok(found) => {
                        answered += 1;
                        names.extend(found);
                    }
                    Err(f) => {
                        first_failure.get_or_insert(f);
                    }
                }
                false
            },
        )
        .await;
        if answered < quorum {
            return Err(Error::NoQuorum {
                phase: Phase::Inspect,
                answered,
                needed: quorum,
                nodes: n,
                source: first_failure.map(|f| Box::new(f.to_error(Phase::Inspect))),
            });
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.inspect_keys(&names).await
    }
}

#[cfg(test)]
mod tests;
