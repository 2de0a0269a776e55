//! Reading the etcd store without touching it: `status` (inspect) and `list`.
//!
//! Promise: nothing is written and no lease is kept alive; `status` reports for each name its
//! holder (the contender first by create revision), the last fence issued (the fence record's mod
//! revision, kept after the holder left, up to the retention) and the holder's remaining TTL;
//! `list` pages through every key under the prefix and inspects each valid name its pattern
//! matches.
//!
//! Limit: a read is a snapshot: each batch of names is read at one revision and their TTLs just
//! after it (whole seconds, rounded down), later batches and `list`'s pages at later revisions; a
//! holder may change right after it.

use std::collections::BTreeSet;

use etcd_client::{GetOptions, SortOrder, SortTarget, Txn, TxnOp};

use super::{keys, kvs_of, prefix_end, EtcdStore, INSPECT_CHUNK, LIST_PAGE};
use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::LeaseInfo;

impl EtcdStore {
    pub(super) async fn inspect_names(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(INSPECT_CHUNK) {
            let mut ops = Vec::with_capacity(chunk.len() * 2);
            for name in chunk {
                let k = self.keys(name);
                let first = GetOptions::new()
                    .with_prefix()
                    .with_sort(SortTarget::Create, SortOrder::Ascend)
                    .with_limit(1)
                    .with_keys_only();
                ops.push(TxnOp::get(
                    k.record,
                    Some(GetOptions::new().with_keys_only()),
                ));
                ops.push(TxnOp::get(k.queue, Some(first)));
            }
            let resp = self.txn(Phase::Inspect, Txn::new().and_then(ops)).await?;
            let replies = resp.op_responses();
            let mut owners = Vec::new();
            for (i, name) in chunk.iter().enumerate() {
                let record = kvs_of(&replies, 2 * i).first();
                let owner = kvs_of(&replies, 2 * i + 1).first();
                owners.push(owner.map(|kv| kv.lease()).unwrap_or(0));
                out.push(LeaseInfo {
                    name: (*name).to_owned(),
                    key: self.keys(name).queue,
                    held: owner.is_some(),
                    ttl_ms: None,
                    fence: record
                        .and_then(|kv| u64::try_from(kv.mod_revision()).ok())
                        .map(Fence::new),
                    ..LeaseInfo::free(name, String::new())
                });
            }
            let first = out.len() - chunk.len();
            let ttls = futures::future::join_all(owners.iter().map(|&lease| async move {
                if lease == 0 {
                    return Ok(None);
                }
                let r = self
                    .call(Phase::Inspect, |mut c| async move {
                        c.lease_time_to_live(lease, None).await
                    })
                    .await?;
                // Whole seconds, rounded down by etcd; -1 once expired.
                Ok::<_, Error>(u64::try_from(r.ttl()).ok().map(|s| s * 1000))
            }))
            .await;
            for (info, ttl) in out[first..].iter_mut().zip(ttls) {
                info.ttl_ms = ttl?;
            }
        }
        Ok(out)
    }

    /// Reads the keys under the prefix in pages (keys only), then inspects the names that match.
    pub(super) async fn list_names(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        let start = keys::names_start(&self.prefix);
        let end = prefix_end(start.as_bytes());
        let glob = crate::lease::Glob::new(pattern);
        let mut names = BTreeSet::new();
        let mut from = start.as_bytes().to_vec();
        loop {
            let page = GetOptions::new()
                .with_range(end.clone())
                .with_keys_only()
                .with_limit(LIST_PAGE);
            let resp = self.get(Phase::Inspect, from.clone(), page).await?;
            for kv in resp.kvs() {
                let Ok(key) = kv.key_str() else { continue };
                if let Some(name) = keys::name_of(&start, key) {
                    if crate::lease::names::validate_name(name).is_ok() && glob.matches(name) {
                        names.insert(name.to_owned());
                    }
                }
            }
            match resp.kvs().last() {
                Some(last) if resp.more() => {
                    from = last.key().to_vec();
                    from.push(0);
                }
                _ => break,
            }
        }
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        self.inspect_names(&names).await
    }
}
