//! Replica acknowledgements after an acquire: `WAIT numreplicas timeout` on the connection that wrote
//! the lock, then the replica policy (fail closed: release and refuse; fail open: keep the lease).
//!
//! Promise: the acknowledgements counted are those of the lock write itself (`WAIT` on the
//! connection that wrote it, in one pipeline); below the number asked, fail closed releases the
//! lease and returns [`Error::NotReplicated`](crate::Error::NotReplicated), fail open keeps it, and
//! either is counted in the metrics and logged. The acquire runs in a task of its own, so a caller
//! cancelled mid-way leaves no lease behind.
//!
//! Limit: `WAIT` narrows the window in which a failover loses the lock write; it never closes it.
//! The release under fail closed is best effort: if it fails, the lock expires after its TTL.

use std::time::Duration;

use tokio::time::Instant;

use super::errors::redis_error;
use super::replies::{ask, given_up, granted_ttl, ms_reply, permits_in_use};
use super::scripts::{self, AcquireReply};
use super::RedisStore;
use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::{Attempt, Grant, Request, Store};
use crate::lease::store::OwnedRequest;
use crate::lease::{metrics, ReplicaPolicy};

impl RedisStore {
    /// acquire.lua and `WAIT numreplicas timeout` in one pipeline on a dedicated connection (WAIT
    /// counts the acknowledgements of its own connection's writes, and blocks it), then the replica
    /// policy. Runs in a task of its own, so that a caller cancelled mid-way cannot leave a lease it
    /// took behind: the task finishes and releases it.
    pub(super) async fn acquire_replicated(
        &self,
        req: &Request<'_>,
        replicas: (u32, Duration, ReplicaPolicy),
    ) -> Result<Attempt> {
        let (this, owned) = (self.clone(), OwnedRequest::of(req));
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let req = owned.get();
            let r = this.acquire_replicated_here(&req, replicas).await;
            if let Err(Ok(Attempt::Taken(_))) = tx.send(r) {
                // Nobody is waiting for it any more.
                let _ = this.abandon(&req).await;
            }
        });
        rx.await.unwrap_or_else(|_| {
            Err(Error::invalid(
                "acquire",
                "the acquiring task ended without an answer (runtime shutting down?)",
            ))
        })
    }

    async fn acquire_replicated_here(
        &self,
        req: &Request<'_>,
        (numreplicas, wait_timeout, policy): (u32, Duration, ReplicaPolicy),
    ) -> Result<Attempt> {
        let sent_at = Instant::now();
        let lock_key = self.lock_key(req.name);
        let inv = scripts::acquire_at(
            &lock_key,
            req.token,
            ask(req),
            Duration::ZERO,
            &self.tuning,
            self.server_time.estimate(),
        );
        let limit = wait_timeout + self.response_timeout * 2;
        let wait = wait_cmd(numreplicas, wait_timeout);
        let (con, _, replies) = self
            .on_dedicated(Phase::Acquire, &lock_key, limit, inv, wait)
            .await?;
        self.blocking.put(con);
        let mut replies = replies.into_iter();
        let reply = AcquireReply::from_value(replies.next().unwrap_or(Ok(redis::Value::Nil)))
            .map_err(redis_error(Phase::Acquire))?;
        if let Some(at) = reply.server_us() {
            self.server_time.learn(sent_at, Instant::now(), at);
        }
        let acked: i64 = replies
            .next()
            .unwrap_or(Ok(redis::Value::Int(0)))
            .and_then(|v| redis::from_redis_value(v).map_err(Into::into))
            .map_err(redis_error(Phase::Replicate))?;
        let grant = match reply {
            AcquireReply::Busy { pttl_ms, .. } => {
                return Ok(Attempt::Busy {
                    remaining: ms_reply(pttl_ms),
                })
            }
            AcquireReply::GivenUp => return Err(given_up()),
            AcquireReply::PermitsInUse { permits } => return Err(permits_in_use(req, permits)),
            AcquireReply::Taken { fence, ttl_ms, .. } => Grant {
                fence: Fence::new(fence),
                since: sent_at,
                ttl: granted_ttl(ttl_ms, req),
                wakes_next: false,
            },
        };
        self.replica_outcome(req, grant, acked, (numreplicas, policy))
            .await
    }

    /// Applies the replica policy to a lease taken with `acked` acknowledgements.
    pub(super) async fn replica_outcome(
        &self,
        req: &Request<'_>,
        grant: Grant,
        acked: i64,
        (numreplicas, policy): (u32, ReplicaPolicy),
    ) -> Result<Attempt> {
        if acked >= i64::from(numreplicas) {
            return Ok(Attempt::Taken(grant));
        }
        match policy {
            ReplicaPolicy::FailClosed => {
                shortfall(
                    req,
                    acked,
                    numreplicas,
                    "fail_closed",
                    "releasing (fail-closed)",
                );
                // Best effort: if this release fails, the lock expires after its TTL.
                let _ = self.abandon(req).await;
                Err(Error::NotReplicated {
                    name: req.name.to_owned(),
                    acked,
                    wanted: i64::from(numreplicas),
                })
            }
            ReplicaPolicy::FailOpen => {
                shortfall(
                    req,
                    acked,
                    numreplicas,
                    "fail_open",
                    "keeping the lease (fail-open)",
                );
                Ok(Attempt::Taken(grant))
            }
        }
    }
}

/// `WAIT numreplicas timeout`.
pub(super) fn wait_cmd(numreplicas: u32, timeout: Duration) -> redis::Cmd {
    let mut cmd = redis::cmd("WAIT");
    cmd.arg(numreplicas).arg(
        u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1),
    );
    cmd
}

/// Counts (`label`) and logs a lease whose write fewer replicas acknowledged than `wanted`, saying
/// what is `done` about it.
fn shortfall(req: &Request<'_>, acked: i64, wanted: u32, label: &'static str, done: &str) {
    metrics::replica_shortfall(label);
    tracing::warn!(
        lease = req.name,
        acked,
        wanted,
        "lock write not replicated; {done}"
    );
}
