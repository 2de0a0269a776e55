//! The queue of contenders for one name, as etcd's mutex recipe keeps it: one key per contender under
//! the name, ordered by create revision; the first is the owner. This client's queued contenders,
//! asking their turn, and waiting for the key just ahead to go.
//!
//! Promise: contenders are served in the order etcd created their keys (no barging: a new contender
//! queues behind those already there); a contender asking its turn keeps its lease alive in the
//! same transaction, and when it is first that transaction also records the fence, so the fence is
//! the revision at which it was seen to own the name; a waiter watches only the key just ahead of
//! it and sees its deletion whether it came before or after the watch began.
//!
//! Limit: the queue lives in etcd; what this client keeps of it (`Queued`) is its own contenders'
//! places, swept when their callers vanished, and is never trusted for ownership: a contender owns
//! the name only when a transaction found it first.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, PutOptions, SortOrder, SortTarget, Txn, TxnOp, TxnOpResponse,
    TxnResponse, WatchFilterType, WatchOptions, WatchStream,
};
use tokio::time::Instant;

use super::errors::from_etcd;
use super::keys::EtcdKeys;
use super::{fence_at, kvs_of, revision_of, EtcdStore};
use crate::error::{Error, Phase, Result};
use crate::lease::store::contract::{Attempt, Grant, Request};

/// A contender of this client with a key in a queue.
#[derive(Debug, Clone)]
pub(super) struct Queued {
    /// Its key, `<prefix>/{<name>}/<token>`.
    key: String,
    /// Its etcd lease.
    lease: i64,
    /// Its key's create revision: its place in the queue.
    rev: i64,
    /// The TTL etcd gave its lease, in seconds: how often it must be kept alive while waiting.
    granted_ttl: i64,
    /// When it was last asked about; entries of callers that vanished are swept after a while.
    touched: Instant,
    /// The key just ahead of it and the revision it was seen at, when the last request learnt it:
    /// the next wait can watch it at once instead of asking again.
    ahead: Option<(Vec<u8>, i64)>,
}

/// Where a queued contender stands.
enum Check {
    /// First in the queue: the transaction that found it so recorded the fence, its revision.
    Owner { fence: i64 },
    /// Behind `ahead` (the key just before it), as of revision `rev`.
    Behind { ahead: Option<Vec<u8>>, rev: i64 },
    /// Its key is gone (its lease expired while it waited, or was revoked).
    Gone,
}

/// What asking a queued contender's turn ended with.
pub(super) enum Asked {
    Taken(Grant),
    Behind { ahead: Option<Vec<u8>>, rev: i64 },
    Gone,
}

impl EtcdStore {
    pub(super) fn queued(&self, token: &str) -> Option<Queued> {
        self.queued
            .lock()
            .expect("queue registry lock")
            .get(token)
            .cloned()
    }

    pub(super) fn forget_queued(&self, token: &str) {
        self.queued
            .lock()
            .expect("queue registry lock")
            .remove(token);
    }

    pub(super) fn remember_queued(&self, token: &str, q: Queued) {
        let mut map = self.queued.lock().expect("queue registry lock");
        if map.len() >= 256 {
            // Callers that vanished without abandoning (their task was dropped while retrying):
            // their keys expired long ago.
            let now = Instant::now();
            map.retain(|_, q| {
                now.saturating_duration_since(q.touched)
                    < Duration::from_secs(q.granted_ttl.unsigned_abs() * 10 + 60)
            });
        }
        map.insert(token.to_owned(), q);
    }

    /// Where the queued contender `q` stands; when it is first, the same transaction records the
    /// fence (the record's mod revision), so that the owner's fence is the revision at which it
    /// was seen to be first.
    async fn check_turn(
        &self,
        keys: &EtcdKeys,
        q: &Queued,
        token: &str,
        phase: Phase,
    ) -> Result<Check> {
        let ahead = GetOptions::new()
            .with_prefix()
            .with_max_create_revision(q.rev - 1)
            .with_sort(SortTarget::Create, SortOrder::Descend)
            .with_limit(1)
            .with_keys_only();
        let txn = Txn::new()
            .when([
                Compare::create_revision(q.key.clone(), CompareOp::Equal, q.rev),
                // Every key of the queue was created at or after ours: none is ahead.
                Compare::create_revision(keys.queue.clone(), CompareOp::Greater, q.rev - 1)
                    .with_prefix(),
            ])
            .and_then([self.put_record(keys, token, phase).await?])
            .or_else([
                TxnOp::get(q.key.clone(), Some(GetOptions::new().with_keys_only())),
                TxnOp::get(keys.queue.clone(), Some(ahead)),
            ]);
        let resp = self.txn(phase, txn).await?;
        let rev = revision_of(&resp, phase)?;
        if resp.succeeded() {
            return Ok(Check::Owner { fence: rev });
        }
        let ops = resp.op_responses();
        let ours = kvs_of(&ops, 0)
            .first()
            .is_some_and(|kv| kv.create_revision() == q.rev);
        if !ours {
            return Ok(Check::Gone);
        }
        Ok(Check::Behind {
            ahead: kvs_of(&ops, 1).first().map(|kv| kv.key().to_vec()),
            rev,
        })
    }

    /// Asks whether queued contender `q` is first, keeping its lease alive in the same breath: the
    /// lease is then the holder's with a TTL started no earlier than this call.
    pub(super) async fn ask_turn(
        &self,
        keys: &EtcdKeys,
        q: &Queued,
        req: &Request<'_>,
        phase: Phase,
    ) -> Result<Asked> {
        let since = Instant::now();
        let ids = [q.lease];
        let (check, alive) = tokio::join!(
            self.check_turn(keys, q, req.token, phase),
            self.keep_alive(&ids, phase)
        );
        let alive = alive?.first().copied().unwrap_or(false);
        match check? {
            Check::Gone => {
                self.forget_queued(req.token);
                if alive {
                    // Its key was deleted under it (by hand): let the lease go too.
                    self.revoke(q.lease, phase).await?;
                }
                Ok(Asked::Gone)
            }
            _ if !alive => {
                self.forget_queued(req.token);
                Ok(Asked::Gone)
            }
            Check::Owner { fence } => {
                self.forget_queued(req.token);
                Ok(Asked::Taken(Grant {
                    fence: fence_at(fence),
                    since,
                    ttl: req.opts.ttl,
                    wakes_next: false,
                }))
            }
            Check::Behind { ahead, rev } => {
                if let Some(entry) = self
                    .queued
                    .lock()
                    .expect("queue registry lock")
                    .get_mut(req.token)
                {
                    entry.touched = Instant::now();
                    entry.ahead = ahead.clone().map(|key| (key, rev));
                }
                Ok(Asked::Behind { ahead, rev })
            }
        }
    }

    /// A contender of this client already queued asks for its turn instead of queueing again.
    /// `None`: it has no place any more (its lease expired while it was away) and queues again, at
    /// the back.
    pub(super) async fn ask_again_if_queued(
        &self,
        keys: &EtcdKeys,
        req: &Request<'_>,
    ) -> Result<Option<Attempt>> {
        let Some(q) = self.queued(req.token) else {
            return Ok(None);
        };
        match self.ask_turn(keys, &q, req, Phase::Acquire).await? {
            Asked::Taken(grant) => Ok(Some(Attempt::Taken(grant))),
            Asked::Behind { .. } => Ok(Some(Attempt::Busy { remaining: None })),
            Asked::Gone => Ok(None),
        }
    }

    /// The key just ahead of the contender of `token`, when its last request learnt it: taken, so
    /// that a wait watches it once without asking again.
    pub(super) fn take_known_ahead(&self, token: &str) -> Option<(Vec<u8>, i64)> {
        self.queued
            .lock()
            .expect("queue registry lock")
            .get_mut(token)
            .and_then(|entry| entry.ahead.take())
    }

    /// Waits until `ahead` (seen at revision `rev`) is deleted, or `end` passes, keeping `q`'s lease
    /// alive meanwhile. `Ok(true)`: deleted (or the watch was cut short: look again); `Ok(false)`:
    /// `end` passed or `q`'s lease is gone.
    pub(super) async fn watch_deletion(
        &self,
        ahead: Vec<u8>,
        rev: i64,
        q: &Queued,
        end: Instant,
    ) -> Result<bool> {
        match self.watch_from_now(ahead, rev).await? {
            Some(stream) => self.await_deletion(stream, q, end).await,
            None => Ok(true),
        }
    }

    /// A watch for `ahead`'s deletion, from now on; `None` when it is gone already, or the watch
    /// was cut short (look again).
    ///
    /// The watch starts at the present, not at `rev + 1`: etcd serves a watch that starts in the past
    /// from a catch-up loop that runs every 100 ms, which would delay a hand-off by up to that much.
    /// So it watches first and then, if the store moved since `rev`, reads whether `ahead` is still
    /// there: a deletion before the watch began is seen by the read, one after it by the watch.
    async fn watch_from_now(&self, ahead: Vec<u8>, rev: i64) -> Result<Option<WatchStream>> {
        let options = WatchOptions::new().with_filters([WatchFilterType::NoPut]);
        let mut stream = self.watch(ahead.clone(), options).await?;
        let created = match tokio::time::timeout(self.limit(), stream.message()).await {
            Ok(Ok(Some(created))) => created,
            Ok(Ok(None)) => return Err(watch_ended()),
            Ok(Err(source)) => return Err(from_etcd(Phase::Wait, source)),
            Err(_) => {
                return Err(Error::Timeout {
                    phase: Phase::Wait,
                    after: self.limit(),
                })
            }
        };
        if created.canceled() || !created.events().is_empty() {
            return Ok(None);
        }
        if created.header().is_none_or(|h| h.revision() != rev) {
            let still = self
                .get(Phase::Wait, ahead, GetOptions::new().with_count_only())
                .await?;
            if still.count() == 0 {
                return Ok(None);
            }
        }
        Ok(Some(stream))
    }

    /// Waits on `stream` for the deletion it watches, or `end`, keeping `q`'s lease alive (three
    /// keep-alives per TTL etcd granted). As [`Self::watch_deletion`] answers.
    async fn await_deletion(
        &self,
        mut stream: WatchStream,
        q: &Queued,
        end: Instant,
    ) -> Result<bool> {
        let every =
            Duration::from_millis(u64::try_from(q.granted_ttl.max(1)).unwrap_or(1) * 1000 / 3);
        let mut next_keepalive = Instant::now() + every;
        loop {
            tokio::select! {
                msg = stream.message() => {
                    let msg = msg.map_err(|source| from_etcd(Phase::Wait, source))?;
                    let Some(resp) = msg else {
                        return Err(watch_ended());
                    };
                    if resp.canceled() || !resp.events().is_empty() {
                        return Ok(true);
                    }
                }
                _ = tokio::time::sleep_until(next_keepalive) => {
                    let alive = self.keep_alive(&[q.lease], Phase::Wait).await?;
                    if !alive.first().copied().unwrap_or(false) {
                        return Ok(false);
                    }
                    next_keepalive = Instant::now() + every;
                }
                _ = tokio::time::sleep_until(end) => return Ok(false),
            }
        }
    }
}

/// The operations of the acquire transaction's `else` for a caller that will wait: queue `mine` at
/// the back, and read the two newest keys: ours, and the one just ahead.
pub(super) fn queue_at_back(keys: &EtcdKeys, mine: &str, lease: i64) -> [TxnOp; 2] {
    let newest = GetOptions::new()
        .with_prefix()
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(2)
        .with_keys_only();
    [
        TxnOp::put(
            mine,
            "",
            Some(PutOptions::new().with_lease(lease).with_prev_key()),
        ),
        TxnOp::get(keys.queue.clone(), Some(newest)),
    ]
}

/// The place that transaction (`resp`, at revision `rev`) gave `mine`: the create revision of its
/// key (that of an earlier attempt when the key was there already), and the key just ahead.
pub(super) fn place_from(
    resp: &TxnResponse,
    mine: String,
    lease: i64,
    rev: i64,
    granted_ttl: i64,
) -> Queued {
    let replies = resp.op_responses();
    let existed = match replies.first() {
        Some(TxnOpResponse::Put(p)) => p.prev_key().map(|kv| kv.create_revision()),
        _ => None,
    };
    // Known only when our key is the one just created (the newest); a key put again by a
    // retried attempt keeps its place, and the wait then asks.
    let ahead = match kvs_of(&replies, 1) {
        [newest, before, ..] if existed.is_none() && newest.key() == mine.as_bytes() => {
            Some((before.key().to_vec(), rev))
        }
        _ => None,
    };
    Queued {
        key: mine,
        lease,
        rev: existed.unwrap_or(rev),
        granted_ttl,
        touched: Instant::now(),
        ahead,
    }
}

fn watch_ended() -> Error {
    from_etcd(
        Phase::Wait,
        etcd_client::Error::WatchError("etcd ended the watch".to_owned()),
    )
}
