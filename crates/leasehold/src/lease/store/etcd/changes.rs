//! Changes pushed to observers ([`Store::changes`](crate::lease::store::contract::Store::changes)): an etcd
//! watch on every key of the name (its fence record, its contenders, its note), from the moment
//! etcd confirms it on. etcd pushes what nobody else announces too: a holder's key deleted when its
//! lease expires.
//!
//! Promise: `changes` returns a stream only once etcd confirmed the watch (else `None`, and the
//! observer reads on its timer); from then on every change etcd reports under the name, other than
//! a contender's key being put, bumps the notices, including a holder's key deleted by expiry or
//! revocation. Dropping the stream ends the watch.
//!
//! Limit: a contender joining the queue (a new key) is no change of who leads and is not passed on;
//! a holder taking a free name rewrites the fence record, which is. A watch that etcd ends (a
//! member lost, a compaction) ends the notices: the observer reads and subscribes again.

use etcd_client::{EventType, WatchOptions};
use tokio::sync::watch;

use super::keys::EtcdKeys;
use super::EtcdStore;
use crate::lease::store::contract::Changes;

impl EtcdStore {
    /// A watch on `name`'s keys, confirmed by etcd before this returns; `None` when it cannot be
    /// set up. Dropping the [`Changes`] ends the task and with it the watch.
    pub(super) async fn watch_changes(&self, name: &str) -> Option<Changes> {
        let keys = EtcdKeys::new(&self.prefix, name);
        let options = WatchOptions::new().with_prefix();
        let mut stream = match self.watch(keys.record.into_bytes(), options).await {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(error = %e, "no etcd watch; observers read on their timer");
                return None;
            }
        };
        match tokio::time::timeout(self.limit(), stream.message()).await {
            Ok(Ok(Some(created))) if !created.canceled() => {}
            _ => return None,
        }
        let (tx, rx) = watch::channel(0u64);
        let queue = keys.queue.into_bytes();
        tokio::spawn(async move {
            loop {
                let msg = tokio::select! {
                    () = tx.closed() => return,
                    msg = stream.message() => msg,
                };
                let Ok(Some(resp)) = msg else { return };
                if resp.canceled() {
                    return;
                }
                let joined = |e: &etcd_client::Event| {
                    e.event_type() == EventType::Put
                        && e.kv().is_some_and(|kv| kv.key().starts_with(&queue))
                };
                if resp.events().iter().any(|e| !joined(e)) {
                    tx.send_modify(|n| *n = n.wrapping_add(1));
                }
            }
        });
        Some(Changes::new(rx, ()))
    }
}
