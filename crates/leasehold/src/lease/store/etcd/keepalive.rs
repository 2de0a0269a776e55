//! One keep-alive stream per client for every etcd lease it keeps: the holders' leases (the
//! watchdog's batches) and the waiting contenders' leases.
//!
//! etcd has no unary keep-alive: `LeaseKeepAlive` is a bidirectional stream on which each request
//! names a lease and each answer gives its new TTL (0: not found, expired or revoked). The server
//! answers the requests of one stream one by one, in order, so a batch is sent in full and its
//! answers are read back in the same order.
//!
//! Promise: a batch costs one round trip on an open stream (one more to open it); a stream that failed
//! or whose batch was cancelled midway is never reused (its unread answers would be taken for the next
//! batch's), the next batch opens a new one, on the next member if that stream's member failed. Limit: batches queue behind
//! each other on the one stream; a member forwards each renewal to the leader in turn, so a very large
//! batch sent to a follower takes a round trip to the leader per lease.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use etcd_client::{LeaseKeepAliveStream, LeaseKeeper};
use tokio::sync::Mutex;

use super::members::Members;
use crate::lease::store::contract::StoreMeta;

/// The shared keep-alive stream.
pub(super) struct KeepAlives {
    /// Where streams are opened.
    members: Arc<Members>,
    /// The open stream, if any, and its member: taken out for the length of a batch and put back
    /// only when the batch read all its answers.
    stream: Mutex<Option<Open>>,
    /// The member of the stream opened last: the one to leave when a batch on it times out (the
    /// batch, cancelled, took the stream with it).
    last_member: AtomicUsize,
    /// The store's request count.
    meta: StoreMeta,
}

/// An open stream: the sender half (its lease id settable), the answers, and the member it is on.
type Open = (LeaseKeeper, LeaseKeepAliveStream, usize);

impl std::fmt::Debug for KeepAlives {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepAlives").finish_non_exhaustive()
    }
}

/// The answer etcd-client gives when the lease a stream opens with does not exist.
fn is_not_found_on_open(e: &etcd_client::Error) -> bool {
    matches!(e, etcd_client::Error::LeaseKeepAliveError(m) if m.contains("not found"))
}

impl KeepAlives {
    pub(super) fn new(members: Arc<Members>, meta: StoreMeta) -> Self {
        KeepAlives {
            members,
            stream: Mutex::new(None),
            last_member: AtomicUsize::new(0),
            meta,
        }
    }

    /// Renews each lease id: per id `true` when etcd reset its TTL, `false` when etcd no longer has
    /// it. An error says the batch did not get through (the stream failed); no answer is then
    /// known for any id of the batch. The caller bounds it in time; cancelling it is safe.
    pub(super) async fn renew(&self, ids: &[i64]) -> Result<Vec<bool>, etcd_client::Error> {
        let mut out = vec![false; ids.len()];
        if ids.is_empty() {
            return Ok(out);
        }
        let mut slot = self.stream.lock().await;
        let mut next = 0;
        let (mut keeper, mut answers, member) = match slot.take() {
            Some(open) => open,
            None => loop {
                // etcd-client opens a stream with one lease's keep-alive and reads its answer; a
                // lease that is gone fails the opening, and the next id opens it instead.
                let Some(&id) = ids.get(next) else {
                    return Ok(out);
                };
                self.meta.count(1);
                let member = self.members.current();
                self.last_member.store(member, Ordering::Relaxed);
                let opened = match self.members.client(member).await {
                    Ok(client) => client.lease_client().keep_alive(id).await,
                    Err(e) => Err(e),
                };
                match opened {
                    Ok((keeper, answers)) => {
                        out[next] = true;
                        next += 1;
                        break (keeper, answers, member);
                    }
                    Err(e) if is_not_found_on_open(&e) => next += 1,
                    Err(e) => {
                        self.members.skip(member);
                        return Err(e);
                    }
                }
            },
        };
        let rest = &ids[next..];
        if !rest.is_empty() {
            self.meta.count(1);
            let send = async {
                for &id in rest {
                    keeper.id = id;
                    keeper.keep_alive().await?;
                }
                Ok::<_, etcd_client::Error>(())
            };
            let receive = async {
                for (i, &id) in rest.iter().enumerate() {
                    match answers.message().await? {
                        Some(a) if a.id() == id => out[next + i] = a.ttl() > 0,
                        Some(a) => {
                            return Err(etcd_client::Error::LeaseKeepAliveError(format!(
                                "keep-alive answer for lease {:x} where {id:x} was expected",
                                a.id()
                            )))
                        }
                        None => {
                            return Err(etcd_client::Error::LeaseKeepAliveError(
                                "the keep-alive stream ended".to_owned(),
                            ))
                        }
                    }
                }
                Ok(())
            };
            if let Err(e) = futures::future::try_join(send, receive).await {
                self.members.skip(member);
                return Err(e);
            }
        }
        *slot = Some((keeper, answers, member));
        Ok(out)
    }

    /// Drops the open stream after it timed out (its member may have stopped answering), and
    /// leaves that member for the next.
    pub(super) async fn reset(&self) {
        self.stream.lock().await.take();
        self.members.skip(self.last_member.load(Ordering::Relaxed));
    }
}
