//! Renewing many leases at once: renew_many.lua renews a batch of up to
//! [`RENEW_BATCH`](super::scripts::RENEW_BATCH) locks in one script call (one slot's, on a Redis
//! Cluster), and the batches of up to [`CHUNK`](super::CHUNK) leases go out in one pipeline. A
//! process holding 100,000 leases costs Redis two commands per renewal (`GET`, `PEXPIRE`) and one
//! script call per batch, not one script call per lease.
//!
//! Promise: each lease of a batch is told what renewing it alone would have told it (renewed, not
//! ours any more, or the error it would get alone); a lease the batch cannot judge is renewed alone
//! afterwards; the server's time in each pipeline's first reply teaches the store's clock rate, as
//! a renewal one by one does.
//!
//! Limit: a batch is one script, so Redis runs nothing else for its length (about 100 µs); a lease
//! that a batch cannot renew as it should (a permit, a key holding another type, a batch the server
//! refused whole) is renewed alone with renew.lua or sem_renew.lua, as before batching. On a Redis
//! Cluster a batch holds the leases of one slot, and each name is a slot of its own: the few hundred
//! leases of one renewal call rarely share one, so there renewal stays about one call per lease.

use std::collections::HashMap;

use tokio::time::Instant;

use super::errors::redis_error;
use super::node::key_slot;
use super::scripts::{self, RENEW_BATCH};
use super::{RedisStore, CHUNK};
use crate::error::{Phase, Result};
use crate::lease::store::contract::Held;

impl RedisStore {
    /// renew_many.lua for the locks of `held` in batches (per slot on a cluster) and renew.lua or
    /// sem_renew.lua for a lease alone (a permit, the only one of its slot), in pipelines of about
    /// [`CHUNK`] leases; a lease a batch could not renew as it should (a key of another type, a batch
    /// refused whole) is renewed alone afterwards. The server's time in the first reply of each
    /// pipeline teaches the store's clock rate, as in a renewal one by one.
    pub(super) async fn renew_batched(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let keys: Vec<String> = held.iter().map(|h| self.lock_key(h.name)).collect();
        let mut out: Vec<Option<Result<bool>>> = held.iter().map(|_| None).collect();
        let (mut by_slot, mut permits) = (HashMap::<u16, Vec<usize>>::new(), Vec::new());
        for (i, h) in held.iter().enumerate() {
            if h.opts.permits > 1 {
                permits.push(i);
            } else if self.tuning.cluster {
                by_slot
                    .entry(key_slot(keys[i].as_bytes()))
                    .or_default()
                    .push(i);
            } else {
                by_slot.entry(0).or_default().push(i);
            }
        }
        // A group of one goes as renew.lua (sem_renew.lua for a permit), a larger one as a batch.
        let mut groups: Vec<&[usize]> = permits.chunks(1).collect();
        for ix in by_slot.values() {
            groups.extend(ix.chunks(RENEW_BATCH));
        }
        let mut again = Vec::new();
        let mut start = 0;
        while start < groups.len() {
            // Groups up to about CHUNK leases in one pipeline.
            let (mut end, mut leases) = (start, 0);
            while end < groups.len() && (end == start || leases + groups[end].len() <= CHUNK) {
                leases += groups[end].len();
                end += 1;
            }
            let pipe = &groups[start..end];
            start = end;
            let calls = pipe.iter().enumerate().map(|(g, ix)| match ix {
                [i] => {
                    let h = &held[*i];
                    scripts::renew(&keys[*i], h.token, h.opts.ttl, h.opts.permits, g == 0)
                }
                _ => {
                    let batch: Vec<_> = ix
                        .iter()
                        .map(|&i| (keys[i].as_str(), held[i].token, held[i].opts.ttl))
                        .collect();
                    scripts::renew_many(&batch, g == 0)
                }
            });
            let mut con = self.shared.clone();
            let sent = Instant::now();
            let replies = self
                .on_shared(Phase::Renew, scripts::pipeline(&mut con, calls, None))
                .await?;
            let received = Instant::now();
            let mut latest = None;
            for (ix, reply) in pipe.iter().zip(replies) {
                if let [i] = ix {
                    out[*i] = Some(match scripts::renewed(reply) {
                        Ok((ours, at)) => {
                            latest = at.max(latest);
                            Ok(ours)
                        }
                        Err(e) => Err(redis_error(Phase::Renew)(e)),
                    });
                    continue;
                }
                match scripts::renewed_many(reply, ix.len()) {
                    Ok((flags, at)) => {
                        latest = at.max(latest);
                        for (&i, flag) in ix.iter().zip(flags) {
                            match flag {
                                Some(ours) => out[i] = Some(Ok(ours)),
                                None => again.push(i),
                            }
                        }
                    }
                    Err(e) => {
                        tracing::debug!(error = %e, leases = ix.len(), "a renewal batch failed; renewing its leases alone");
                        again.extend_from_slice(ix);
                    }
                }
            }
            if let Some(at) = latest {
                self.learn_time(sent, received, at);
            }
        }
        if !again.is_empty() {
            again.sort_unstable();
            let rest: Vec<Held<'_>> = again.iter().map(|&i| held[i]).collect();
            let renewed = self.renew_each(&rest).await?;
            for (&i, r) in again.iter().zip(renewed) {
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

#[cfg(test)]
pub(crate) mod tests {
    use std::time::Duration;

    use leasehold_testkit::RedisServer;

    use super::super::RedisStore;
    use crate::lease::store::contract::{Attempt, Held, Request, Settings, Store};
    use crate::lease::LeaseOptions;

    /// Takes each name with its token, without waiting (each must be free); the leases held.
    pub(crate) async fn take_all<'a>(
        store: &RedisStore,
        names: &'a [String],
        tokens: &'a [String],
        opts: &'a LeaseOptions,
    ) -> Vec<Held<'a>> {
        for (name, token) in names.iter().zip(tokens) {
            let req = Request {
                name,
                token,
                opts,
                wait: Duration::ZERO,
                step: 0,
            };
            assert!(matches!(
                store.acquire(&req).await.unwrap(),
                Attempt::Taken(_)
            ));
        }
        names
            .iter()
            .zip(tokens)
            .map(|(name, token)| Held { name, token, opts })
            .collect()
    }

    const SEC: Duration = Duration::from_secs(1);

    /// 250 leases of one server renewed in one pipeline of three batches, each lease told whether it
    /// was ours: one taken by someone else meanwhile is not, and one whose key holds another type
    /// gets the error it gets renewed alone. Redis runs two commands a renewal, not three.
    #[tokio::test]
    async fn many_leases_renew_in_batches_each_told_as_alone() {
        let srv = RedisServer::start().unwrap();
        let settings = Settings {
            prefix: "t".into(),
            response_timeout: SEC,
            connect_timeout: SEC,
            ..Settings::default()
        };
        let store =
            RedisStore::connect(&crate::url::StoreUrl::parse(&srv.url()).unwrap(), settings)
                .await
                .unwrap();
        let opts = LeaseOptions::with_ttl(30 * SEC).unwrap();
        let names: Vec<String> = (0..250).map(|i| format!("r{i}")).collect();
        let tokens: Vec<String> = (0..250).map(|i| format!("{i:032x}")).collect();
        let held = take_all(&store, &names, &tokens, &opts).await;
        let mut con = srv.connection().unwrap();
        let _: () = redis::cmd("SET")
            .arg(store.lock_key(&names[7]))
            .arg("someone-else")
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("DEL")
            .arg(store.lock_key(&names[9]))
            .query(&mut con)
            .unwrap();
        let _: () = redis::cmd("RPUSH")
            .arg(store.lock_key(&names[9]))
            .arg("x")
            .query(&mut con)
            .unwrap();
        let alone = store.renew_each(&held[9..10]).await.unwrap();
        let Err(alone) = &alone[0] else {
            panic!("{alone:?}")
        };
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query(&mut con)
            .unwrap();
        let before = store.round_trips();
        let renewed = store.renew(&held).await.unwrap();
        // One pipeline of three batches, and the one of another type again alone.
        assert_eq!(store.round_trips() - before, 2);
        for (i, r) in renewed.iter().enumerate() {
            match (i, r) {
                (7, Ok(false)) => {}
                (9, Err(e)) => assert_eq!(e.to_string(), alone.to_string()),
                (7 | 9, other) => panic!("{i}: {other:?}"),
                (_, Ok(true)) => {}
                (_, other) => panic!("{i}: {other:?}"),
            }
        }
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut con)
            .unwrap();
        let calls = |name: &str| -> u64 {
            info.lines()
                .find_map(|l| l.strip_prefix(&format!("cmdstat_{name}:calls=")))
                .and_then(|l| l.split(',').next()?.parse().ok())
                .unwrap_or(0)
        };
        // Three batches and the one alone; a GET for each lease, a PEXPIRE for each of ours.
        assert_eq!(calls("evalsha"), 4, "{info}");
        assert_eq!(calls("pexpire"), 248, "{info}");
    }
}
