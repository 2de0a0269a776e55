//! Asking every master at once: one request per master, the replies counted as they come, and the
//! requests still out when the outcome is known left to finish on their own.
//!
//! Promise: every master is asked at once and each reply is handed over as it arrives, so an
//! outcome is known as soon as the replies so far decide it, not when the slowest master answers;
//! the requests still out are handed back, to finish in the background or to be waited for before
//! an undo, so that nothing sent lands unaccounted for.
//!
//! Limit: a request still out is bounded by its own timeout only; its effect lands after the answer.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};

use super::quorum::{Verdict, Votes};
use super::scripts;
use super::{Inner, RedlockStore};
use crate::error::{Error, Phase, Result};
use crate::lease::store::contract::Held;
use crate::lease::store::redis::errors::Failure;
use crate::lease::store::redis::keys::RedlockKeys;
use crate::lease::store::redis::CHUNK;

/// One request per master, boxed so that masters can be asked at once; each owns what it needs, so
/// that the ones still out when the answer is known can finish in the background.
type Pending<T> = FuturesUnordered<
    Pin<Box<dyn Future<Output = (usize, std::result::Result<T, Failure>)> + Send + 'static>>,
>;

/// The requests of a [`RedlockStore::fan_out`] still out when the caller stopped listening.
pub(super) struct Leftover<T>(Pending<T>);

impl<T: Send + 'static> Leftover<T> {
    /// Lets them finish on their own (each has its own bound).
    pub(super) fn finish_in_background(self) {
        let mut pending = self.0;
        if !pending.is_empty() {
            tokio::spawn(async move { while pending.next().await.is_some() {} });
        }
    }

    /// Waits for them, ignoring their replies (each has its own bound).
    pub(super) async fn finish(self) {
        let mut pending = self.0;
        while pending.next().await.is_some() {}
    }
}

impl RedlockStore {
    /// Asks the masters in `targets` at once and hands each reply to `take` as it comes, until
    /// `take` says the rest cannot change the outcome. Each request carries its own bound. The
    /// requests still out are returned: the caller lets them finish in the background (their effect
    /// is wanted: a lock, a renewal or a release on one more master) or waits for them before an
    /// undo, so that nothing it sent is left to land unaccounted for.
    pub(super) async fn fan_out<T, F, Fut>(
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

    /// [`fan_out`](Self::fan_out) of one script call, the same on every master in `targets`, its
    /// reply read by `read`.
    pub(super) async fn fan_out_script<T: Send + 'static>(
        &self,
        targets: impl IntoIterator<Item = usize>,
        inv: redis::ScriptInvocation<'static>,
        limit: std::time::Duration,
        read: fn(redis::Value) -> redis::RedisResult<T>,
        take: impl FnMut(usize, std::result::Result<T, Failure>) -> bool,
    ) -> Leftover<T> {
        let inv = Arc::new(inv);
        self.fan_out(
            targets,
            |i, inner| {
                let inv = inv.clone();
                async move { inner.nodes[i].script(&inv, limit, read).await }
            },
            take,
        )
        .await
    }

    /// Runs `make` for every item on every master (pipelined per master) and folds the 0/1 replies
    /// into a verdict per item, returning as soon as every item has one; the masters that had not
    /// answered by then finish in the background.
    pub(super) async fn vote(
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
