//! Renewing many leases at once: renew_many.lua renews a batch of up to
//! [`RENEW_BATCH`](super::scripts::RENEW_BATCH) locks in one script call (one slot's, on a Redis
//! Cluster), and the batches of up to [`CHUNK`](super::CHUNK) leases go out in one pipeline. A
//! process holding 100,000 leases costs Redis two commands per renewal (`GET`, `PEXPIRE`) and one
//! script call per batch, not one script call per lease.
//!
//! Limit: a batch is one script, so Redis runs nothing else for its length (about 100 µs); a lease
//! that a batch cannot renew as it should (a permit, a key holding another type, a batch the server
//! refused whole) is renewed alone with renew.lua or sem_renew.lua, as before batching.

use std::collections::HashMap;

use tokio::time::Instant;

use super::errors::redis_error;
use super::node::key_slot;
use super::scripts::{self, RENEW_BATCH};
use super::{RedisStore, CHUNK};
use crate::error::{Phase, Result};
use crate::lease::store::Held;

impl RedisStore {
    /// renew_many.lua for the locks of `held` in batches (per slot on a cluster), pipelined; every
    /// lease a batch leaves (a permit, a batch of one, a key of another type, a refused batch) is
    /// renewed alone afterwards. The server's time in the first reply of each pipeline teaches the
    /// store's clock rate, as in a renewal one by one.
    pub(super) async fn renew_batched(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let keys: Vec<String> = held.iter().map(|h| self.lock_key(h.name)).collect();
        let mut out: Vec<Option<Result<bool>>> = held.iter().map(|_| None).collect();
        let mut alone = Vec::new();
        let mut by_slot: HashMap<u16, Vec<usize>> = HashMap::new();
        for (i, h) in held.iter().enumerate() {
            if h.opts.permits > 1 {
                alone.push(i);
            } else {
                let slot = if self.tuning.cluster {
                    key_slot(keys[i].as_bytes())
                } else {
                    0
                };
                by_slot.entry(slot).or_default().push(i);
            }
        }
        let mut batches: Vec<&[usize]> = Vec::new();
        for ix in by_slot.values() {
            for batch in ix.chunks(RENEW_BATCH) {
                match batch {
                    [one] => alone.push(*one),
                    _ => batches.push(batch),
                }
            }
        }
        let mut start = 0;
        while start < batches.len() {
            // Batches up to about CHUNK leases in one pipeline.
            let (mut end, mut leases) = (start, 0);
            while end < batches.len() && (end == start || leases + batches[end].len() <= CHUNK) {
                leases += batches[end].len();
                end += 1;
            }
            let pipe = &batches[start..end];
            start = end;
            let calls: Vec<_> = pipe
                .iter()
                .enumerate()
                .map(|(b, ix)| {
                    let batch: Vec<_> = ix
                        .iter()
                        .map(|&i| (keys[i].as_str(), held[i].token, held[i].opts.ttl))
                        .collect();
                    scripts::renew_many(&batch, b == 0)
                })
                .collect();
            let mut con = self.shared.clone();
            let sent = Instant::now();
            let replies = self
                .on_shared(Phase::Renew, scripts::pipeline(&mut con, calls, None))
                .await?;
            let received = Instant::now();
            let mut latest = None;
            for (ix, reply) in pipe.iter().zip(replies) {
                match scripts::renewed_many(reply, ix.len()) {
                    Ok((flags, at)) => {
                        latest = at.max(latest);
                        for (&i, flag) in ix.iter().zip(flags) {
                            match flag {
                                Some(ours) => out[i] = Some(Ok(ours)),
                                None => alone.push(i),
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, leases = ix.len(), "a renewal batch failed; renewing its leases alone");
                        alone.extend_from_slice(ix);
                    }
                }
            }
            if let Some(at) = latest {
                self.learn_time(sent, received, at);
            }
        }
        if !alone.is_empty() {
            alone.sort_unstable();
            let rest: Vec<Held<'_>> = alone.iter().map(|&i| held[i]).collect();
            let renewed = self.renew_each(&rest).await?;
            for (&i, r) in alone.iter().zip(renewed) {
                out[i] = Some(r);
            }
        }
        Ok(out
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(redis_error(Phase::Renew)(scripts::bad_reply(
                        "renew_many",
                        "no reply for a lease",
                    )))
                })
            })
            .collect())
    }

    /// renew.lua (sem_renew.lua for a permit) for each lease, pipelined.
    pub(super) async fn renew_each(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        self.flags(Phase::Renew, held, |i, h| {
            scripts::renew(
                &self.lock_key(h.name),
                h.token,
                h.opts.ttl,
                h.opts.permits,
                i == 0,
            )
        })
        .await
    }
}
