//! The etcd store: a lease is an etcd lease, kept alive by the client's watchdog, with one key per
//! contender in a queue ordered by create revision (etcd's own mutex recipe); the fence is the
//! etcd revision at which the holder became the owner.
//!
//! Promise: etcd's leader judges expiry by its lease clock, and every write (taking, handing over,
//! releasing, expiring) is committed by a majority of members before anyone sees it, so killing a
//! member, the leader included, loses no lease and no fence: the lease lives on (a new leader
//! restarts every lease's TTL in full) and renewals continue through another member. The fence is
//! an etcd revision, which only ever grows across the whole cluster; ownership passes in queue order,
//! each owner confirmed by a transaction after the previous owner's key was gone, so each new holder's
//! fence is strictly greater than every earlier one's. Waiters do not poll: each watches the key just
//! ahead of it, and is woken when that key is deleted (released, revoked or expired), in FIFO order.
//!
//! Limit: etcd counts TTLs in whole seconds and has a minimum (one and a half election timeouts,
//! rounded up: 2 s with etcd's defaults), so etcd keeps a lease for the TTL asked rounded up to a
//! second, or its minimum if that is longer; the holder's own deadline still counts from the TTL
//! asked, which is the shorter, so the holder stops first. A holder paused past its deadline
//! still has two holders' worth of trouble: fence the resource. etcd releases from 3.4.25 and
//! 3.5.8 on stop a leader cut off from its peers from renewing leases; an older one may
//! acknowledge a renewal of a lease the new leader then expires (the deadline does not cover that).
//!
//! Layout: `keys` (the key layout), `connect` (URL, TLS, credentials, telling
//! "down" from "not etcd"), `keepalive` (the one keep-alive stream of a client), `request` (one
//! request to a member: bounded, counted, moved on to the next member), `queue` (the contenders'
//! queue: asking a turn, watching the key just ahead).

mod changes;
mod connect;
pub(crate) mod errors;
mod inspect;
mod keepalive;
mod keys;
mod members;
mod queue;
mod request;
mod retention;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use self::errors::{driver, from_etcd};
use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, LeaseGrantOptions, PutOptions, SortOrder, SortTarget,
    Txn, TxnOp, TxnOpResponse, TxnResponse,
};
use tokio::time::Instant;

use self::keepalive::KeepAlives;
use self::keys::EtcdKeys;
use self::members::Members;
use self::queue::{Asked, Queued};
use self::retention::RetentionLease;
use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::{
    Attempt, Changes, ForcedRelease, Grant, Held, LeaseInfo, Request, Store, StoreKind, StoreMeta,
    Turn,
};

/// Most names read in one transaction by `inspect` (two reads each; etcd allows 128 operations per
/// transaction by default).
const INSPECT_CHUNK: usize = 60;

/// Keys read per page by `list`.
const LIST_PAGE: i64 = 1_000;

/// Leases in an etcd cluster. Cheap to clone (clones share the connections).
#[derive(Clone)]
pub(crate) struct EtcdStore {
    /// The members, one channel each, and the one requests go to now.
    members: Arc<Members>,
    /// The one keep-alive stream of this client.
    keepalives: Arc<KeepAlives>,
    /// Keys are `<prefix>/{<name>}` and `<prefix>/{<name>}/<token>`.
    prefix: Arc<str>,
    /// Bound on one request's reply.
    response_timeout: Duration,
    /// Bound on opening a connection.
    connect_timeout: Duration,
    /// Its kind, the URL without its password, and the requests sent (a batch of keep-alives is
    /// one).
    meta: StoreMeta,
    /// Contenders of this client waiting in a queue, by token: what a later ask needs (their key's
    /// create revision) and what `abandon` must undo.
    queued: Arc<Mutex<HashMap<String, Queued>>>,
    /// The etcd lease the fence records this client writes are attached to (`retention.rs`).
    records: Arc<RetentionLease>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.meta.location())
            .field("prefix", &self.prefix)
            .field("round_trips", &self.meta.round_trips())
            .finish_non_exhaustive()
    }
}

/// The etcd lease id of a holder's token: its last 63 bits (never 0, which asks etcd to choose).
/// Deriving it means renew, release and abandon need nothing but the token, also after an answer
/// was lost: a retried or abandoned acquire finds the lease an earlier attempt may have granted.
fn lease_id(token: &str) -> i64 {
    let tail = token.get(token.len().saturating_sub(16)..).unwrap_or("");
    let bits = u64::from_str_radix(tail, 16).unwrap_or(0) & (i64::MAX as u64);
    i64::try_from(bits).unwrap_or(i64::MAX).max(1)
}

/// etcd's TTL for a lease of `ttl`: whole seconds, rounded up, at least 1 (etcd raises it further to
/// its minimum). Never shorter than `ttl`, so etcd never expires a lease before its holder's
/// deadline.
fn etcd_ttl(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis().div_ceil(1000))
        .unwrap_or(i64::MAX)
        .max(1)
}

/// The key after every key that starts with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn grpc_says(e: &etcd_client::Error, what: &str) -> bool {
    matches!(e, etcd_client::Error::GRpcStatus(s) if s.message().contains(what))
}

fn is_lease_not_found(e: &etcd_client::Error) -> bool {
    grpc_says(e, "requested lease not found")
}

/// A reply without what etcd always sends.
fn bad_reply_in(phase: Phase, what: &str) -> Error {
    from_etcd(
        phase,
        etcd_client::Error::Internal(format!("etcd sent a reply without {what}")),
    )
}

fn revision_of(resp: &TxnResponse, phase: Phase) -> Result<i64> {
    resp.header()
        .map(|h| h.revision())
        .ok_or_else(|| bad_reply_in(phase, "a header"))
}

/// The fence of an owner seen at etcd revision `revision`.
fn fence_at(revision: i64) -> Fence {
    Fence::new(u64::try_from(revision).unwrap_or(0))
}

/// etcd has no replicas to wait for: a request for a replica wait is refused.
fn refuse_replica_wait(req: &Request<'_>) -> Result<()> {
    if req.opts.replicas.is_some() {
        return Err(Error::invalid(
            "replica wait",
            "etcd commits every write on a majority of members before it answers, so there is \
             no replica to wait for; remove wait_for_replicas for an etcd store",
        ));
    }
    Ok(())
}

/// The key-values of the `i`-th read of a transaction.
fn kvs_of(ops: &[TxnOpResponse], i: usize) -> &[KeyValue] {
    match ops.get(i) {
        Some(TxnOpResponse::Get(g)) => g.kvs(),
        _ => &[],
    }
}

impl EtcdStore {
    fn keys(&self, name: &str) -> EtcdKeys {
        EtcdKeys::new(&self.prefix, name)
    }

    /// Grants the etcd lease of `token`; returns the instant before the grant was sent (etcd starts
    /// the TTL after it) and the TTL etcd set, in seconds.
    async fn grant(&self, token: &str, ttl: Duration) -> Result<(Instant, i64)> {
        let id = lease_id(token);
        let mut retried = false;
        loop {
            let since = Instant::now();
            let options = LeaseGrantOptions::new().with_id(id);
            match self
                .call(Phase::Acquire, |mut c| {
                    let options = options.clone();
                    async move { c.lease_grant(etcd_ttl(ttl), Some(options)).await }
                })
                .await
            {
                Ok(granted) => return Ok((since, granted.ttl())),
                Err(e)
                    if !retried
                        && driver(&e).is_some_and(|s| grpc_says(s, "lease already exists")) =>
                {
                    // An earlier attempt of this acquire granted it and its answer was lost: start
                    // afresh, so that the TTL counts from this attempt.
                    retried = true;
                    self.revoke(id, Phase::Acquire).await?;
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Revokes lease `id`, which deletes the key attached to it: `true` when etcd had it.
    async fn revoke(&self, id: i64, phase: Phase) -> Result<bool> {
        match self
            .call(phase, |mut c| async move { c.lease_revoke(id).await })
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if driver(&e).is_some_and(is_lease_not_found) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Revokes a lease that holds nothing, from a task of its own (nobody waits for the answer; if
    /// it fails, etcd expires the lease after its TTL).
    fn revoke_in_background(&self, id: i64) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.revoke(id, Phase::Acquire).await {
                tracing::debug!(error = %e, "revoking an unused etcd lease failed; it expires after its TTL");
            }
        });
    }

    /// The acquire's one transaction: `mine` takes the name if no key is queued under it (and the
    /// fence record names its token); otherwise, when the caller will wait, it queues at the back.
    /// A transaction that failed may have been applied: revoking the lease deletes a key it put.
    async fn take_or_queue(
        &self,
        keys: &EtcdKeys,
        token: &str,
        mine: &str,
        enqueue: bool,
    ) -> Result<TxnResponse> {
        let lease = lease_id(token);
        let take = Txn::new()
            .when([Compare::create_revision(keys.queue.clone(), CompareOp::Equal, 0).with_prefix()])
            .and_then([
                TxnOp::put(mine, "", Some(PutOptions::new().with_lease(lease))),
                self.put_record(keys, token, Phase::Acquire).await?,
            ]);
        let take = if enqueue {
            take.or_else(queue::queue_at_back(keys, mine, lease))
        } else {
            take
        };
        match self.txn(Phase::Acquire, take).await {
            Ok(resp) => Ok(resp),
            Err(e) => {
                if let Err(again) = self.revoke(lease, Phase::Acquire).await {
                    tracing::debug!(error = %again, "revoking after a failed acquire failed; the lease expires after its TTL");
                }
                Err(e)
            }
        }
    }

    /// The owner of `keys` (the contender with the lowest create revision) and the revision read at.
    async fn owner(&self, keys: &EtcdKeys, phase: Phase) -> Result<(Option<KeyValue>, i64)> {
        let first = GetOptions::new()
            .with_prefix()
            .with_sort(SortTarget::Create, SortOrder::Ascend)
            .with_limit(1)
            .with_keys_only();
        let mut resp = self
            .get(phase, keys.queue.clone().into_bytes(), first)
            .await?;
        let rev = resp.header().map(|h| h.revision()).unwrap_or(0);
        Ok((resp.take_kvs().into_iter().next(), rev))
    }
}

impl StoreKind {
    /// An etcd cluster (`etcd://`, `etcds://`).
    pub const ETCD: StoreKind = StoreKind::new("etcd");
}

#[async_trait]
impl Store for EtcdStore {
    fn meta(&self) -> &StoreMeta {
        &self.meta
    }

    fn queues_waiters(&self) -> bool {
        true
    }

    fn key_of(&self, name: &str) -> String {
        self.keys(name).queue
    }

    /// Two round trips for a new contender (grant the etcd lease; one transaction that takes the
    /// name if nobody is queued, else queues the caller when it will wait); one (with a keep-alive
    /// alongside) for a queued contender asking again.
    /// A watch on the name's keys (`changes.rs`).
    async fn changes(&self, name: &str) -> Result<Option<Changes>> {
        Ok(self.watch_changes(name).await)
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt> {
        refuse_replica_wait(req)?;
        let keys = self.keys(req.name);
        if let Some(attempt) = self.ask_again_if_queued(&keys, req).await? {
            return Ok(attempt);
        }
        let (since, granted_ttl) = self.grant(req.token, req.opts.ttl).await?;
        let lease = lease_id(req.token);
        let mine = keys.contender(req.token);
        let enqueue = !req.wait.is_zero();
        let resp = self.take_or_queue(&keys, req.token, &mine, enqueue).await?;
        let rev = revision_of(&resp, Phase::Acquire)?;
        if resp.succeeded() {
            return Ok(Attempt::Taken(Grant {
                fence: fence_at(rev),
                since,
                ttl: req.opts.ttl,
                wakes_next: false,
            }));
        }
        if !enqueue {
            // Busy, and nothing was put: the lease holds nothing.
            self.revoke_in_background(lease);
            return Ok(Attempt::Busy { remaining: None });
        }
        let place = queue::place_from(&resp, mine, lease, rev, granted_ttl);
        self.remember_queued(req.token, place);
        Ok(Attempt::Busy { remaining: None })
    }

    /// Watches the key just ahead in the queue for its deletion (no polling), looks again, and so on
    /// until this contender is first (then it is the holder) or `block` passes; keeps the
    /// contender's lease alive all the while.
    async fn wait_turn(&self, req: &Request<'_>, block: Duration) -> Result<Turn> {
        let Some(q) = self.queued(req.token) else {
            return Ok(Turn::AskAgain);
        };
        // Right after queueing or asking, the key ahead is known: watch it without asking again.
        let mut known = self.take_known_ahead(req.token);
        let keys = self.keys(req.name);
        let end = Instant::now() + block;
        loop {
            let (ahead, rev) = match known.take().map(|(key, rev)| (Some(key), rev)) {
                Some(known) => known,
                None => match self.ask_turn(&keys, &q, req, Phase::Wait).await? {
                    Asked::Taken(grant) => return Ok(Turn::Taken(grant)),
                    Asked::Gone => return Ok(Turn::AskAgain),
                    Asked::Behind { ahead, rev } => (ahead, rev),
                },
            };
            if Instant::now() >= end {
                return Ok(Turn::AskAgain);
            }
            let moved = match ahead {
                Some(ahead) => self.watch_deletion(ahead, rev, &q, end).await?,
                // Not first, yet nothing ahead: the queue changed between the two reads of one
                // transaction, which etcd rules out; look again after a breath rather than spin.
                None => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    true
                }
            };
            if !moved {
                return Ok(Turn::AskAgain);
            }
        }
    }

    /// Revokes the contender's lease: its key goes, the contender behind it is woken, and if it
    /// had just become the holder, the next one takes over.
    async fn abandon(&self, req: &Request<'_>) -> Result<()> {
        self.forget_queued(req.token);
        self.revoke(lease_id(req.token), Phase::Release)
            .await
            .map(drop)
    }

    /// One keep-alive per lease on the shared stream, one round trip for the batch.
    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let ids: Vec<i64> = held.iter().map(|h| lease_id(h.token)).collect();
        let alive = self.keep_alive(&ids, Phase::Renew).await?;
        Ok(alive.into_iter().map(Ok).collect())
    }

    /// Revokes each holder's lease (which deletes its key and wakes the contender behind it), all
    /// at once.
    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let results = futures::future::join_all(
            held.iter()
                .map(|h| self.revoke(lease_id(h.token), Phase::Release)),
        )
        .await;
        if !results.is_empty() && results.iter().all(|r| r.is_err()) {
            if let Some(Err(e)) = results.into_iter().next() {
                return Err(e);
            }
            return Ok(Vec::new());
        }
        Ok(results)
    }

    /// Revokes the owner's lease (its key goes with it, the next contender takes over, and the
    /// evicted holder's next renewal hears "not found"), then advances the fence record unless a new
    /// holder already wrote it. Any later holder's fence is a later revision, so above the evicted
    /// holder's.
    async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        let keys = self.keys(name);
        let (owner, read_at) = self.owner(&keys, Phase::Release).await?;
        let mut evicted = false;
        let mut after = read_at;
        if let Some(kv) = owner {
            if kv.lease() != 0 {
                let lease = kv.lease();
                match self
                    .call(Phase::Release, |mut c| async move {
                        c.lease_revoke(lease).await
                    })
                    .await
                {
                    Ok(r) => {
                        evicted = true;
                        after = r.header().map(|h| h.revision()).unwrap_or(read_at);
                    }
                    Err(e) if driver(&e).is_some_and(is_lease_not_found) => {}
                    Err(e) => return Err(e),
                }
            } else {
                // A key without a lease was not put by leasehold; delete it all the same.
                let txn = Txn::new()
                    .when([Compare::create_revision(
                        kv.key().to_vec(),
                        CompareOp::Equal,
                        kv.create_revision(),
                    )])
                    .and_then([TxnOp::delete(kv.key().to_vec(), None)]);
                let resp = self.txn(Phase::Release, txn).await?;
                evicted = resp.succeeded();
                after = revision_of(&resp, Phase::Release)?;
            }
        }
        let advance = Txn::new()
            .when([Compare::mod_revision(
                keys.record.clone(),
                CompareOp::Less,
                after + 1,
            )])
            .and_then([self.put_record(&keys, "forced", Phase::Release).await?]);
        let resp = self.txn(Phase::Release, advance).await?;
        let fence = if resp.succeeded() {
            revision_of(&resp, Phase::Release)?
        } else {
            after
        };
        Ok(ForcedRelease {
            evicted,
            fence: fence_at(fence),
        })
    }

    /// One transaction: the note is written if the fence record names our token (we were the
    /// last to become the owner) and our contender key still exists (our etcd lease lives).
    async fn write_note(&self, held: &Held<'_>, note: &[u8]) -> Result<bool> {
        let keys = self.keys(held.name);
        let put = self
            .put_kept(keys.note.clone(), note.to_vec(), Phase::Note)
            .await?;
        let txn = Txn::new()
            .when([
                Compare::value(keys.record.clone(), CompareOp::Equal, held.token),
                Compare::version(keys.contender(held.token), CompareOp::Greater, 0),
            ])
            .and_then([put]);
        Ok(self.txn(Phase::Note, txn).await?.succeeded())
    }

    async fn read_note(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let keys = self.keys(name);
        let mut resp = self
            .get(Phase::Inspect, keys.note.into_bytes(), GetOptions::new())
            .await?;
        Ok(resp
            .take_kvs()
            .into_iter()
            .next()
            .map(|kv| kv.value().to_vec()))
    }

    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        self.inspect_names(names).await
    }

    /// Reads the keys under the prefix in pages (keys only), then inspects the names that match.
    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        self.list_names(pattern).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_ids_come_from_the_token_and_are_positive() {
        let a = lease_id("0123456789abcdef0123456789abcdef");
        assert_eq!(a, 0x0123456789abcdef_i64);
        assert_eq!(lease_id(&"f".repeat(32)), i64::MAX);
        assert_eq!(lease_id(&"0".repeat(32)), 1);
        assert_ne!(a, lease_id("0123456789abcdef0123456789abcdee"));
    }

    #[test]
    fn etcd_ttls_round_up_to_whole_seconds() {
        let ms = Duration::from_millis;
        assert_eq!(etcd_ttl(ms(10)), 1);
        assert_eq!(etcd_ttl(ms(1_000)), 1);
        assert_eq!(etcd_ttl(ms(1_001)), 2);
        assert_eq!(etcd_ttl(ms(30_000)), 30);
    }

    #[test]
    fn prefix_ends_bound_the_range() {
        assert_eq!(prefix_end(b"a/{"), b"a/|");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), [0]);
    }
}
