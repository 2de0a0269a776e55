//! A waiting acquire's round trip: the acquire script and a `BLPOP` of the waiter's own wake list in
//! one pipeline on a dedicated connection, and what the pair answered (taken, handed over while
//! blocked, busy, or a grant left from an earlier step).
//!
//! Promise: one round trip either takes the lease, queues (or refreshes the waiter's place) and
//! blocks until a release hands the lease over, or ends busy when the block ends; a grant popped
//! after a busy step is taken only when it can be this step's (one left from an earlier step for a
//! lock deleted since is thrown away as stale, never on a wait's first step); a reply that does not
//! parse leaves the connection in doubt and it is dropped. A handed-over lease's `since` is never
//! later than the moment the grant was in hand.
//!
//! Limit: a grant's `since` is no later than the hand-over only while both clocks run at the same
//! rate (the drift allowance covers rates) and the server's clock does not step forward meanwhile.

use std::time::Duration;

use tokio::time::Instant;

use super::errors::{redis_error, within};
use super::replicas::wait_cmd;
use super::replies::{ask, given_up, granted_ttl, ms_reply, permits_in_use};
use super::scripts::{self, AcquireReply, HandOver};
use super::{keys, RedisStore};
use crate::error::{Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::{Attempt, Grant, Request};

/// The `since` of a lease handed over while its waiter blocked: a local instant no later than the
/// hand-over. The waiter's acquire ran at server time `queued_us`, after the pipeline left at `sent`;
/// the hand-over ran at server time `handed_us`, after that. Counting the server's interval from
/// `sent` therefore lands no later than the hand-over, as long as the two clocks run at the same rate
/// (the drift allowance covers rates) and the server's clock did not step forward in between (a step
/// forward of J makes it J late; Redis's own expiry is J early after such a step anyway). It is never
/// later than `received`, when the grant was already in hand.
fn handed_since(sent: Instant, received: Instant, queued_us: i64, handed_us: i64) -> Instant {
    let between = Duration::from_micros(u64::try_from(handed_us - queued_us).unwrap_or(0));
    sent + between.min(received.saturating_duration_since(sent))
}

/// Whether a grant popped after a busy step was made before that step ran: a grant for an earlier
/// step (so never on a wait's first step, whose token is new) whose lock was deleted before its
/// first TTL ran out (the grant lives as long as that TTL, so
/// it cannot outlive the lock any other way). The hand-over's time is no later than the hand-over,
/// the step's no earlier than the step (each the server's clock or a bound of it), so a grant made
/// for this step is never taken for stale; one made less than the bounds' width after it may be,
/// and then the next step finds the lock its own.
pub(super) fn grant_is_stale(grant: &HandOver, queued_us: i64) -> bool {
    grant.at_us < queued_us
}

/// What one acquire-or-wait round trip came to, its connection still fit for the next one.
enum WaitStep {
    /// The lease is ours (taken by the script or handed over while we blocked); a replica wait may
    /// follow on the same connection.
    Granted(Grant),
    /// The step's outcome as it is: busy, or refused.
    Done(Result<Attempt>),
}

/// Reads acquire.lua's reply and what the `BLPOP` after it popped (`None`: the block ended). An
/// error here (a grant that does not parse) leaves the connection in doubt: the caller drops it.
fn wait_outcome(
    req: &Request<'_>,
    reply: AcquireReply,
    popped: Option<(String, String)>,
    sent: Instant,
    received: Instant,
) -> Result<WaitStep> {
    Ok(match reply {
        AcquireReply::Taken { fence, ttl_ms, .. } => WaitStep::Granted(Grant {
            fence: Fence::new(fence),
            since: sent,
            ttl: granted_ttl(ttl_ms, req),
            wakes_next: false,
        }),
        AcquireReply::Busy {
            pttl_ms,
            server_us: queued_us,
            ..
        } => {
            let Some((_, grant)) = popped else {
                // The holder's TTL was read before the block: what is left of it now.
                let blocked = received.saturating_duration_since(sent);
                return Ok(WaitStep::Done(Ok(Attempt::Busy {
                    remaining: ms_reply(pttl_ms).map(|r| r.saturating_sub(blocked)),
                })));
            };
            let h = HandOver::parse(&grant).map_err(redis_error(Phase::Wait))?;
            if req.step > 0 && grant_is_stale(&h, queued_us) {
                // Made for an earlier step, for a lock that is gone since (deleted by someone
                // else): not a lease. The next step asks again.
                return Ok(WaitStep::Done(Ok(Attempt::Busy { remaining: None })));
            }
            tracing::trace!(lease = req.name, fence = h.fence, "handed over");
            WaitStep::Granted(Grant {
                fence: Fence::new(h.fence),
                since: handed_since(sent, received, queued_us, h.at_us),
                ttl: granted_ttl(h.ttl_ms, req),
                wakes_next: false,
            })
        }
        AcquireReply::GivenUp => WaitStep::Done(Err(given_up())),
        AcquireReply::PermitsInUse { permits } => WaitStep::Done(Err(permits_in_use(req, permits))),
    })
}

/// The store's verdict on `grant` (the text a wait step's `BLPOP` popped off the wake list) after
/// that step's script answered busy at server µs `queued_us`, on queue step `step` (0: the first
/// for its token): `Some(true)` when [`wait_outcome`] throws it away as stale, `Some(false)` when it
/// takes it, `None` when the text is not a grant. For the protocol model's tests, which compare it
/// with the model's rule on every grant they pop. Not an API: hidden, and may change.
#[doc(hidden)]
pub fn stale_grant(grant: &str, step: u32, queued_us: i64) -> Option<bool> {
    let opts = crate::lease::LeaseOptions::with_ttl(Duration::from_secs(30)).ok()?;
    let req = Request {
        name: "model",
        token: "model",
        opts: &opts,
        wait: Duration::from_secs(1),
        step,
    };
    let busy = AcquireReply::Busy {
        pttl_ms: 1,
        server_us: queued_us,
        exact: true,
    };
    let now = Instant::now();
    match wait_outcome(
        &req,
        busy,
        Some((String::new(), grant.to_owned())),
        now,
        now,
    )
    .ok()?
    {
        WaitStep::Granted(_) => Some(false),
        WaitStep::Done(Ok(Attempt::Busy { .. })) => Some(true),
        WaitStep::Done(_) => None,
    }
}

impl RedisStore {
    /// One round trip on a dedicated connection: acquire.lua (take it, or join the queue / refresh
    /// our place) and a `BLPOP` of our own wake list for at most `block` (and at most the refresh
    /// period), pipelined. Taken by the script: the `BLPOP` pops the grant the script left and returns
    /// at once. Queued: it returns when a release hands us the lock (we hold it; nothing more to send)
    /// or when the block ends (busy: the next call refreshes our place). With a replica wait, `WAIT`
    /// follows on the same connection once the lease is ours.
    pub(super) async fn queue_step(&self, req: &Request<'_>, block: Duration) -> Result<Attempt> {
        if let Some(refused) = self.watch.refusal() {
            return Err(refused);
        }
        let block = block
            .min(self.tuning.wait_refresh)
            .max(Duration::from_millis(1));
        let lock_key = self.lock_key(req.name);
        let inv = scripts::acquire_at(
            &lock_key,
            req.token,
            ask(req),
            block,
            &self.tuning,
            self.server_time.estimate(),
        );
        let mut blpop = redis::cmd("BLPOP");
        blpop
            .arg(keys::wake_key(&self.prefix, req.name, req.token))
            // Never "0", which blocks forever.
            .arg(format!("{:.3}", block.as_secs_f64().max(0.001)));
        let limit = block + self.response_timeout * 2;
        let (mut con, sent, replies) = self
            .on_dedicated(Phase::Acquire, &lock_key, limit, inv, blpop)
            .await?;
        let received = Instant::now();
        let mut replies = replies.into_iter();
        let reply = AcquireReply::from_value(replies.next().unwrap_or(Ok(redis::Value::Nil)))
            .map_err(redis_error(Phase::Acquire));
        let reply = match reply {
            Ok(r) => r,
            Err(e) => {
                self.blocking.put(con);
                return Err(self.explain(req.name, e).await);
            }
        };
        let popped: Option<(String, String)> = replies
            .next()
            .unwrap_or(Ok(redis::Value::Nil))
            .and_then(|v| redis::from_redis_value(v).map_err(Into::into))
            .map_err(redis_error(Phase::Wait))?;
        if let AcquireReply::Taken { .. } = reply {
            // Taken free by the script, not handed over: the next wait on this name tries first.
            self.contended.mark(req.name, false);
        }
        if let (AcquireReply::Taken { .. }, Some(at)) = (reply, reply.server_us()) {
            // Taken: the BLPOP after it returned at once, so the round trip is a fair sample.
            self.learn_time(sent, received, at);
        }
        let grant = match wait_outcome(req, reply, popped, sent, received)? {
            WaitStep::Granted(grant) => grant,
            WaitStep::Done(outcome) => {
                self.blocking.put(con);
                return outcome;
            }
        };
        let Some((numreplicas, wait_timeout, policy)) = req.opts.replicas else {
            self.blocking.put(con);
            return Ok(Attempt::Taken(grant));
        };
        // The lock write was the releaser's (a hand-over) or ours; `WAIT` on this connection covers
        // both, since the `BLPOP` that took our grant is itself a write that came after it.
        let acked: i64 = within(
            Phase::Replicate,
            wait_timeout + self.response_timeout * 2,
            wait_cmd(numreplicas, wait_timeout).query_async(&mut con),
        )
        .await
        .inspect_err(|_| self.blocking.clear())?;
        self.blocking.put(con);
        self.replica_outcome(req, grant, acked, (numreplicas, policy))
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handed_lease_counts_from_no_later_than_the_hand_over() {
        let sent = Instant::now();
        let ms = Duration::from_millis;
        let received = sent + ms(300);
        // Handed over 200 ms (server time) after the acquire ran: 200 ms after the send at the latest.
        assert_eq!(
            handed_since(sent, received, 1_000_000, 1_200_000),
            sent + ms(200)
        );
        // A server clock that stepped back between the two, or garbage: never before the send.
        assert_eq!(handed_since(sent, received, 1_200_000, 1_000_000), sent);
        // Never after the grant was in hand.
        assert_eq!(handed_since(sent, received, 0, 9_000_000), received);
    }

    /// A grant whose time reads earlier than the step that popped it: refused from the second
    /// step on (it may be left from an earlier step, for a lock deleted since), taken on the first
    /// (the token is new, so nothing earlier can have left it; the times differ only by the width
    /// of the clock estimates, which would otherwise cost a waiter handed the lease soon after its
    /// first step one more round trip).
    #[test]
    fn an_early_looking_grant_is_stale_only_after_the_first_step() {
        let opts = crate::lease::LeaseOptions::with_ttl(Duration::from_secs(5)).unwrap();
        let busy = AcquireReply::Busy {
            pttl_ms: 900,
            server_us: 2_000_000,
            exact: false,
        };
        let grant = Some(("wake".to_owned(), "7,1999000,5000".to_owned()));
        let sent = Instant::now();
        let received = sent + Duration::from_millis(2);
        for step in [0, 1, 5] {
            let req = Request {
                name: "n",
                token: "t",
                opts: &opts,
                wait: Duration::from_secs(1),
                step,
            };
            let out = wait_outcome(&req, busy, grant.clone(), sent, received).unwrap();
            match (step, out) {
                (0, WaitStep::Granted(g)) => assert_eq!(g.fence, Fence::new(7)),
                (1.., WaitStep::Done(Ok(Attempt::Busy { remaining: None }))) => {}
                (step, _) => panic!("step {step}: wrong outcome"),
            }
        }
        // A grant made after the step is taken on any step.
        let later = Some(("wake".to_owned(), "8,2001000,5000".to_owned()));
        let req = Request {
            name: "n",
            token: "t",
            opts: &opts,
            wait: Duration::from_secs(1),
            step: 3,
        };
        assert!(matches!(
            wait_outcome(&req, busy, later, sent, received).unwrap(),
            WaitStep::Granted(_)
        ));
    }
}
