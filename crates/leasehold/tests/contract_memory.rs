//! A store written outside leasehold, with nothing but the public contract: leases kept in this
//! process's memory. It runs the same contract suite as the built-in stores and passes, which is what
//! a store of your own must do too (`cargo test -p leasehold --test contract_memory`).
//!
//! Promise of this toy: exclusion, expiry and a fence that only rises, within one process. Limit: it
//! keeps nothing across a restart and nobody outside this process sees it; a real store keeps its
//! leases where every contender can reach them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leasehold::lease::store::contract_suite::Harness;
use leasehold::lease::store::{
    async_trait, Attempt, ForcedRelease, Grant, Held, HolderInfo, LeaseInfo, Request, Settings,
    Store, StoreKind, StoreMeta, Turn,
};
use leasehold::{Fence, LeaseClient, Result};
use tokio::sync::Notify;
use tokio::time::Instant;

/// What the store keeps of one name.
#[derive(Debug, Default)]
struct Entry {
    /// The holder's token and the instant its lease runs out.
    holder: Option<(String, Instant)>,
    /// The last fence issued; the next holder gets one more.
    fence: u64,
    /// The note a holder wrote beside it (an election's leader record).
    note: Option<Vec<u8>>,
}

impl Entry {
    /// The holder, if its lease has not run out at `now`.
    fn live(&self, now: Instant) -> Option<(&str, Instant)> {
        self.holder
            .as_ref()
            .filter(|(_, until)| *until > now)
            .map(|(t, until)| (t.as_str(), *until))
    }
}

/// The memory every client of one store shares, as every process shares a server.
#[derive(Debug, Default)]
struct Shared {
    /// `prefix:name` → what is kept of it.
    names: Mutex<HashMap<String, Entry>>,
    /// Woken on every release, so that waiters ask again at once.
    freed: Notify,
}

/// Leases in memory.
#[derive(Debug)]
struct MemoryStore {
    shared: Arc<Shared>,
    prefix: String,
    /// Its kind, where it is, and the requests it answered.
    meta: StoreMeta,
}

impl MemoryStore {
    const KIND: StoreKind = StoreKind::new("memory");

    fn with<T>(&self, name: &str, f: impl FnOnce(&mut Entry, Instant) -> T) -> T {
        self.meta.count(1);
        let mut names = self.shared.names.lock().unwrap_or_else(|e| e.into_inner());
        f(names.entry(self.key_of(name)).or_default(), Instant::now())
    }

    fn info(&self, name: &str, e: &Entry, now: Instant) -> LeaseInfo {
        let mut info = LeaseInfo::free(name, self.key_of(name));
        info.fence = (e.fence > 0).then(|| Fence::new(e.fence));
        if let Some((token, until)) = e.live(now) {
            let ttl_ms = Some(u64::try_from((until - now).as_millis()).unwrap_or(u64::MAX));
            info.held = true;
            info.ttl_ms = ttl_ms;
            info.holders
                .push(HolderInfo::new(token.to_owned(), ttl_ms, None));
        }
        info
    }
}

#[async_trait]
impl Store for MemoryStore {
    fn meta(&self) -> &StoreMeta {
        &self.meta
    }

    fn key_of(&self, name: &str) -> String {
        format!("{}:{name}", self.prefix)
    }

    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt> {
        let ttl = req.opts.ttl();
        Ok(self.with(req.name, |e, now| match e.live(now) {
            Some((token, until)) if token != req.token => Attempt::Busy {
                remaining: Some(until - now),
            },
            // A retry of an acquire that already took it: the same lease.
            Some(_) => Attempt::Taken(Grant::new(Fence::new(e.fence), now, ttl, false)),
            None => {
                e.fence += 1;
                e.holder = Some((req.token.to_owned(), now + ttl));
                Attempt::Taken(Grant::new(Fence::new(e.fence), now, ttl, false))
            }
        }))
    }

    async fn wait_turn(&self, _req: &Request<'_>, block: Duration) -> Result<Turn> {
        let _ = tokio::time::timeout(block, self.shared.freed.notified()).await;
        Ok(Turn::AskAgain)
    }

    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        Ok(held
            .iter()
            .map(|h| {
                Ok(self.with(h.name, |e, now| match e.live(now) {
                    Some((token, _)) if token == h.token => {
                        e.holder = Some((h.token.to_owned(), now + h.opts.ttl()));
                        true
                    }
                    _ => false,
                }))
            })
            .collect())
    }

    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let out = held
            .iter()
            .map(|h| {
                Ok(self.with(h.name, |e, now| match e.live(now) {
                    Some((token, _)) if token == h.token => {
                        e.holder = None;
                        true
                    }
                    _ => false,
                }))
            })
            .collect();
        self.shared.freed.notify_waiters();
        Ok(out)
    }

    async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        let forced = self.with(name, |e, now| {
            let evicted = e.live(now).is_some();
            e.holder = None;
            e.fence += 1;
            ForcedRelease::new(evicted, Fence::new(e.fence))
        });
        self.shared.freed.notify_waiters();
        Ok(forced)
    }

    async fn write_note(&self, held: &Held<'_>, note: &[u8]) -> Result<bool> {
        Ok(self.with(held.name, |e, now| match e.live(now) {
            Some((token, _)) if token == held.token => {
                e.note = Some(note.to_vec());
                true
            }
            _ => false,
        }))
    }

    async fn read_note(&self, name: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.with(name, |e, _| e.note.clone()))
    }

    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        Ok(names
            .iter()
            .map(|n| self.with(n, |e, now| self.info(n, e, now)))
            .collect())
    }

    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        self.meta.count(1);
        let names = self.shared.names.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let mine = format!("{}:", self.prefix);
        // The glob every store matches `list` patterns with.
        let glob = leasehold::lease::Glob::new(pattern);
        Ok(names
            .iter()
            .filter_map(|(key, e)| Some((key.strip_prefix(&mine)?, e)))
            .filter(|(name, e)| e.fence > 0 && glob.matches(name))
            .map(|(name, e)| self.info(name, e, now))
            .collect())
    }
}

/// One memory store per test; every client of the test shares it.
#[derive(Default)]
struct MemoryHarness {
    shared: Arc<Shared>,
}

#[async_trait]
impl Harness for MemoryHarness {
    async fn client(&self) -> LeaseClient {
        let shared = self.shared.clone();
        LeaseClient::builder("memory://")
            .key_prefix("contract")
            .connect_with(|_url, settings: Settings| async move {
                Ok(MemoryStore {
                    shared,
                    prefix: settings.prefix,
                    meta: StoreMeta::new(MemoryStore::KIND, "memory://"),
                })
            })
            .await
            .expect("a memory store opens")
    }
}

leasehold::contract_suite!(async { MemoryHarness::default() });
