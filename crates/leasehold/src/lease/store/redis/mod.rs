//! The Redis store: a lease is a key holding the holder's token with a TTL (`SET NX PX`, like
//! redis-py's `Lock` and every other `SET NX PX` lock, so they exclude each other), renewed by
//! compare-and-expire, and released by compare-and-delete that hands the lock straight to the next
//! waiter of a FIFO queue kept beside it.
//!
//! Promise: one server (or primary) judges expiry by its own clock; the fence is
//! `max(stored + 1, server time in µs)`, so it keeps increasing even when the server lost the keys
//! (restart without persistence, failover to a replica that missed the write, the fence key's
//! retention passed) as long as the server's clock has not stepped back by more than that took.
//! Waiters queue in Redis in arrival order: a waiting acquire tries first (a free name costs what a
//! try costs), and when the name is busy joins the queue and blocks on a wake
//! list of its own (`BLPOP`, on a dedicated connection, never the shared one) in one round trip; the
//! release sets the lock to the first live waiter's token and pushes its fence to that list, so the
//! waiter holds the lease when its `BLPOP` returns. Nobody jumps a non-empty queue. A waiter refreshes
//! its place at least every half second; one that stops is skipped, and a lock handed to
//! a waiter that died meanwhile is free again after one second (the hand-over TTL).
//! Limit: a failover before the lock write reached the replica gives two holders; `WAIT` after
//! acquire ([`crate::ReplicaPolicy`]) narrows that window and never closes it. Locks
//! taken by other `SET NX PX` clients exclude and are excluded, but do not queue: they may take a free
//! lock before a waiter whose refresh has not come yet.
//!
//! Layout: `keys`, `errors`, `health`, `conn` (with `direct`), `node`, `acl`, `scripts` (the family's one set, which
//! every topology uses: `standalone`, `sentinel`, `cluster` (`topology` picks one from the URL) and
//! `redlock`, several independent masters); this store's own steps: `queue` (a waiting acquire's
//! round trip), `replicas` (`WAIT`), `renewal` (batches), `changes`, `inspect`, `options`.

pub mod acl;
mod changes;
mod cluster;
pub(super) mod conn;
mod connect;
mod contended;
mod direct;
pub(crate) mod errors;
pub(crate) mod health;
mod inspect;
pub mod keys;
pub(super) mod node;
mod options;
mod queue;
mod redlock;
mod renewal;
mod replicas;
mod replies;
mod scripts;
mod sentinel;
mod server_time;
mod standalone;
mod topology;

pub use options::RedisOptions;
pub(crate) use redlock::RedlockStore;

#[doc(hidden)]
pub use queue::stale_grant;
#[doc(hidden)]
pub use scripts::sources as script_sources;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use self::conn::{BlockingPool, Dedicated, Route, Shared};
use self::errors::{bounded, redis_error, within, Failure};
use self::keys::LeaseKeys;
use self::replies::{ask, given_up, granted_ttl, ms_reply, permits_in_use};
use self::scripts::{AcquireReply, Tuning};
use self::server_time::ServerTime;
use crate::error::{LostReason, Phase, Result};
use crate::fence::Fence;
use crate::lease::clock::{ClockRate, ClockWatch};
use crate::lease::metrics;
use crate::lease::store::contract::{
    Attempt, Changes, ForcedRelease, Grant, Held, LeaseInfo, Request, Store, StoreKind, StoreMeta,
    Turn,
};

/// Most scripts sent in one pipeline; a larger batch goes out as several pipelines in a row, so the
/// request and reply buffers stay small however many leases are held (every topology, Redlock's
/// masters too).
pub(crate) const CHUNK: usize = 1_000;

/// Leases in one Redis server or primary. Cheap to clone (clones share the connections).
#[derive(Clone)]
pub(crate) struct RedisStore {
    /// The multiplexed, reconnecting connection every non-blocking request goes through.
    shared: Shared,
    /// Dedicated connections for `BLPOP` (waiting) and `WAIT` (replica acknowledgements).
    blocking: Arc<BlockingPool>,
    /// Key prefix: keys are `{<prefix>:<name>}:lock` etc.
    prefix: Arc<str>,
    /// Bound on one request's reply; also the base of every call's overall bound.
    response_timeout: Duration,
    /// Bound on opening a connection.
    connect_timeout: Duration,
    /// The queue protocol's timings and the fence retention.
    tuning: Tuning,
    /// A Redis that may evict lease keys is accepted (`RedisOptions::allow_eviction`).
    allow_eviction: bool,
    /// What the last look at the data nodes found (policy, evicted keys), kept between looks.
    watch: Arc<health::Watch>,
    /// The server's clock rate against ours, from the server time in acquire and renewal replies:
    /// one server only (`redis://`), where every reply comes from one clock; `None` for Sentinel
    /// and Cluster, whose replies may come from several.
    clock: Option<Arc<ClockWatch>>,
    /// The server's clock as last read, so that an acquire or a release need not read it (`TIME`)
    /// for the fence's floor and a hand-over's time.
    server_time: Arc<ServerTime>,
    /// The pub/sub session that pushes changes to observers, and the names whose release is
    /// announced.
    feed: Arc<changes::Feed>,
    /// Names this client last found busy: a waiting acquire on one joins the queue at once.
    contended: Arc<contended::Contended>,
    /// Its kind, the URL without its password, and the requests sent (counted by `shared`,
    /// `blocking` and `feed` too).
    meta: StoreMeta,
}

/// Opens the Redis family's store for `urls`: one URL is one server, a Sentinel-watched primary or a
/// cluster (by its scheme); any other count is a Redlock over that many independent masters, which
/// refuses a count that is not odd and three or more before anything is sent.
pub(crate) async fn open(
    urls: &[crate::url::StoreUrl],
    settings: crate::lease::store::contract::Settings,
) -> Result<Arc<dyn Store>> {
    match urls {
        [one] => Ok(Arc::new(RedisStore::connect(one, settings).await?)),
        several => Ok(Arc::new(RedlockStore::connect(several, settings).await?)),
    }
}

/// How often the renewal task looks at the data nodes' role and memory policy.
pub(crate) const LOOK_EVERY: Duration = Duration::from_secs(5);

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.meta.location())
            .field("prefix", &self.prefix)
            .field("round_trips", &self.meta.round_trips())
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    fn keys(&self, name: &str) -> LeaseKeys {
        LeaseKeys::for_checked(&self.prefix, name)
    }

    fn lock_key(&self, name: &str) -> String {
        keys::lock_key(&self.prefix, name)
    }

    /// Overall bound of one request on the shared connection: the response timeout covers an
    /// established connection, this also covers a reconnect that hangs.
    fn limit(&self) -> Duration {
        self.response_timeout * 2 + self.connect_timeout * 2
    }

    /// `fut`, a request on the shared connection, within [`limit`](Self::limit). A standalone
    /// server's connection manager bounds every request itself (the response timeout; a reconnect
    /// by the connect timeout, tried twice), and so does a direct connection (the connect timeout to
    /// open one, the response timeout for the reply; one that cannot be opened hands the request to
    /// the manager), which runs out first with the default timeouts: there
    /// the request goes without a second timer, which cost ~7 % of the client's instructions per
    /// uncontended cycle. Sentinel and Cluster routes get the timer.
    async fn on_shared<T>(
        &self,
        phase: Phase,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        match self.shared.con {
            // Direct connections bound each request by the same response timeout.
            Route::Standalone(_) | Route::Direct(_) => fut.await.map_err(redis_error(phase)),
            _ => within(phase, self.limit(), fut).await,
        }
    }

    /// A reply that carried the server's clock, read between `sent` and `received`: the estimate
    /// the next scripts go by, and (one server only) a sample of the clock's rate.
    fn learn_time(&self, sent: Instant, received: Instant, server_us: i64) {
        self.server_time.learn(sent, received, server_us);
        if let Some(clock) = &self.clock {
            clock.sample(sent, received, server_us);
        }
    }

    /// A dedicated connection for a blocking command; a new one first loads every script (one round
    /// trip), so that a pipelined acquire + `BLPOP` on it is not answered `NOSCRIPT` after a server
    /// restart, which would leave the `BLPOP` blocking for nothing before the retry.
    async fn dedicated(&self, phase: Phase, key: &str) -> Result<Dedicated> {
        let mut con = self
            .blocking
            .get_for(key)
            .await
            .map_err(redis_error(phase))?;
        if con.is_fresh() {
            within(phase, self.response_timeout, scripts::load_all(&mut con)).await?;
        }
        Ok(con)
    }

    /// `call` and then `tail` (a blocking command) pipelined on a dedicated connection for `key`,
    /// bounded by `limit`: the connection (for the pool, or for a command after these), when they
    /// were sent, and a reply per command. A connection taken from the pool that turns out closed
    /// (the server's idle `timeout`, a restart) costs no failure: the others are dropped as
    /// suspect and the pipeline goes once more, at once, on a new connection (the script is safe
    /// to run twice). On any failure the pool is emptied.
    async fn on_dedicated(
        &self,
        phase: Phase,
        key: &str,
        limit: Duration,
        call: scripts::Call,
        tail: redis::Cmd,
    ) -> Result<(Dedicated, Instant, Vec<redis::RedisResult<redis::Value>>)> {
        let pipe = scripts::pipe_of([call], Some(tail));
        let mut con = self.dedicated(phase, key).await?;
        let mut sent = Instant::now();
        let send = async |con: &mut Dedicated| bounded(limit, scripts::send(con, &pipe)).await;
        let mut replies = send(&mut con).await;
        if !con.is_fresh()
            && matches!(&replies, Err(Failure::Redis(e)) if e.is_connection_dropped())
        {
            self.blocking.clear();
            con = self.dedicated(phase, key).await?;
            sent = Instant::now();
            replies = send(&mut con).await;
        }
        match replies {
            Ok(replies) => Ok((con, sent, replies)),
            Err(f) => {
                self.blocking.clear();
                Err(f.to_error(phase))
            }
        }
    }

    /// `INFO` on every data node, with each node's name.
    async fn look_at_nodes(&self, phase: Phase) -> Result<Vec<(String, health::NodeFacts)>> {
        let nodes = within(
            phase,
            self.limit(),
            self.shared.masters_named(self.meta.location()),
        )
        .await?;
        let mut out = Vec::with_capacity(nodes.len());
        for (name, mut con) in nodes {
            let facts = within(phase, self.limit(), health::facts(&mut con)).await?;
            out.push((name, facts));
        }
        Ok(out)
    }

    /// Sends one script per lease (`script` prepares it) in pipelines of at most [`CHUNK`], each
    /// prepared only when its pipeline goes out (a batch of 10,000 renewals never holds 10,000
    /// prepared calls at once); per lease whether it was ours (a 0/1 reply, or a renewal's or a
    /// hand-over's that also carries the server's time, which is learned).
    async fn flags(
        &self,
        phase: Phase,
        held: &[Held<'_>],
        script: impl Fn(usize, &Held<'_>) -> scripts::Call,
    ) -> Result<Vec<Result<bool>>> {
        let mut out = Vec::with_capacity(held.len());
        for chunk in held.chunks(CHUNK) {
            // `script` learns each call's place in its pipeline (a renewal reads the server's clock
            // in the first call only).
            let calls: Vec<_> = chunk
                .iter()
                .enumerate()
                .map(|(i, h)| script(i, h))
                .collect();
            let mut con = self.shared.clone();
            let sent = Instant::now();
            let replies = self
                .on_shared(phase, async {
                    // One lease (a release, mostly): a call, not a pipeline of one.
                    if let [one] = &calls[..] {
                        scripts::single(&mut con, one).await.map(|r| vec![r])
                    } else {
                        scripts::pipeline(&mut con, calls, None).await
                    }
                })
                .await?;
            let received = Instant::now();
            let mut latest = None;
            for v in replies {
                out.push(match scripts::renewed(v) {
                    Ok((ours, at)) => {
                        latest = at.max(latest);
                        Ok(ours)
                    }
                    Err(e) => Err(redis_error(phase)(e)),
                });
            }
            if let Some(at) = latest {
                self.learn_time(sent, received, at);
            }
        }
        Ok(out)
    }

    /// force_release.lua for every holder (`None`) or the one holding `holder`.
    async fn forced_release(&self, name: &str, holder: Option<&str>) -> Result<ForcedRelease> {
        let op = crate::lease::store::contract::new_token();
        let inv = scripts::force_release(&self.lock_key(name), &op, holder, &self.tuning);
        let mut con = self.shared.clone();
        let (evicted, fence): (i64, i64) = self
            .named(
                name,
                within(
                    Phase::Release,
                    self.limit(),
                    scripts::invoke(&mut con, &inv),
                )
                .await,
            )
            .await?;
        let fence = u64::try_from(fence).map_err(|_| {
            redis_error(Phase::Release)(scripts::bad_reply("force_release", "negative fence"))
        })?;
        Ok(ForcedRelease {
            evicted: evicted == 1,
            fence: Fence::new(fence),
        })
    }
}

impl StoreKind {
    /// Redis: one server (`redis://`, `rediss://`), a primary found through Sentinel
    /// (`redis-sentinel://`, `rediss-sentinel://`) or a Redis Cluster (`redis-cluster://`,
    /// `rediss-cluster://`). One kind for all three: the keys, scripts, fence rule and interop with
    /// other `SET NX PX` locks are the same; only where requests go differs. The topology shows in
    /// the store's [`location`](crate::LeaseClient::location) (its URL's scheme).
    pub const REDIS: StoreKind = StoreKind::new("redis");
}

#[async_trait]
impl Store for RedisStore {
    fn meta(&self) -> &StoreMeta {
        &self.meta
    }

    fn queues_waiters(&self) -> bool {
        true
    }

    /// The fence's and the queue's keys.
    fn extra_keys(&self, name: &str) -> Vec<(&'static str, String)> {
        let keys = self.keys(name);
        vec![("fence", keys.fence), ("queue", keys.queue)]
    }

    fn key_of(&self, name: &str) -> String {
        self.lock_key(name)
    }

    fn look_every(&self) -> Option<Duration> {
        Some(LOOK_EVERY)
    }

    /// `INFO` on every data node: a node that started evicting (without the opt-in) is logged as
    /// an error and refuses new acquisitions until it is fixed; evicted keys counted since the last
    /// look go to the metrics.
    async fn look(&self) {
        match self.look_at_nodes(Phase::Inspect).await {
            Ok(looked) => {
                let evicted = self.watch.observe(&looked, self.allow_eviction);
                if evicted > 0 {
                    metrics::evicted_keys(evicted);
                }
            }
            Err(e) => tracing::debug!(error = %e, "looking at the Redis data nodes failed"),
        }
    }

    /// Evicted: the key is gone and the nodes evicted keys since `since` (a look is taken now).
    async fn lost_reason(&self, since: Instant) -> LostReason {
        if !self.watch.evicting() {
            return LostReason::NotOurs;
        }
        self.look().await;
        if self.watch.evicted_since(since) {
            LostReason::Evicted
        } else {
            LostReason::NotOurs
        }
    }

    /// One round trip (the script; with a replica wait, `WAIT` rides in the same pipeline). Sent on
    /// the shared connection, so an abandon sent after it on the same connection reaches Redis after
    /// it. Never queues: a caller that waits goes through [`Store::acquire_or_wait`].
    async fn acquire(&self, req: &Request<'_>) -> Result<Attempt> {
        if let Some(refused) = self.watch.refusal() {
            return Err(refused);
        }
        if let Some(replicas) = req.opts.replicas {
            return self.acquire_replicated(req, replicas).await;
        }
        let sent_at = Instant::now();
        let inv = scripts::acquire_at(
            &self.lock_key(req.name),
            req.token,
            ask(req),
            Duration::ZERO,
            &self.tuning,
            self.server_time.estimate(),
        );
        let mut con = self.shared.clone();
        let reply = self
            .on_shared(Phase::Acquire, scripts::invoke(&mut con, &inv))
            .await;
        let received = Instant::now();
        let reply = AcquireReply::from_value(Ok(self.named(req.name, reply).await?))
            .map_err(redis_error(Phase::Acquire))?;
        if let Some(at) = reply.server_us() {
            self.learn_time(sent_at, received, at);
        }
        match reply {
            AcquireReply::Taken { fence, ttl_ms, .. } => Ok(Attempt::Taken(Grant {
                fence: Fence::new(fence),
                since: sent_at,
                ttl: granted_ttl(ttl_ms, req),
                wakes_next: false,
            })),
            AcquireReply::Busy { pttl_ms, .. } => Ok(Attempt::Busy {
                remaining: ms_reply(pttl_ms),
            }),
            AcquireReply::GivenUp => Err(given_up()),
            AcquireReply::PermitsInUse { permits } => Err(permits_in_use(req, permits)),
        }
    }

    /// The first step of a wait tries first, as [`Store::acquire`] does (one round trip on the shared
    /// connection, the try's commands): a free name costs a waiting acquire what it costs a try, and
    /// the try never jumps a non-empty queue (acquire.lua hands a free lock to the queue's head
    /// first). Busy, it joins the queue with [`RedisStore::queue_step`], one round trip more; every
    /// later step goes there at once. A name this client found busy last time (contended: its
    /// waiters are handed the lease) joins at once, until a step takes it free. With a replica wait
    /// the first step joins at once (the try's `WAIT` would block the shared connection's turn for
    /// nothing when the name is busy).
    async fn acquire_or_wait(&self, req: &Request<'_>, block: Duration) -> Result<Attempt> {
        if req.step == 0 && req.opts.replicas.is_none() && !self.contended.is(req.name) {
            if let taken @ Attempt::Taken(_) = self.acquire(req).await? {
                return Ok(taken);
            }
            // Busy: the try left nothing for this token (it neither queued nor was handed a grant),
            // so the queue step below is still the first that may find one.
            self.contended.mark(req.name, true);
        }
        self.queue_step(req, block).await
    }

    /// The same request as [`RedisStore::queue_step`]: for this store, waiting is joining the queue.
    async fn wait_turn(&self, req: &Request<'_>, block: Duration) -> Result<Turn> {
        Ok(match self.queue_step(req, block).await? {
            Attempt::Taken(grant) => Turn::Taken(grant),
            Attempt::Busy { .. } => Turn::AskAgain,
        })
    }

    /// abandon.lua on the shared connection: leave the queue, refuse this token from now on (an
    /// acquire still on its way on a dedicated connection then does nothing), release and hand on a
    /// lock taken or handed over meanwhile.
    async fn abandon(&self, req: &Request<'_>) -> Result<()> {
        let inv = scripts::abandon(&self.lock_key(req.name), req.token, &ask(req), &self.tuning);
        let mut con = self.shared.clone();
        let released: i64 = within(
            Phase::Release,
            self.limit(),
            scripts::invoke(&mut con, &inv),
        )
        .await?;
        tracing::debug!(lease = req.name, released, "abandoned");
        Ok(())
    }

    /// One lease: renew.lua (sem_renew.lua for a permit). Many: renew_many.lua in batches
    /// ([`renewal`]), pipelined. The server's time in the replies teaches the store's clock rate (one
    /// server only).
    async fn renew(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        if held.len() < 2 {
            return self.renew_each(held).await;
        }
        self.renew_batched(held).await
    }

    fn clock_rate(&self) -> Option<ClockRate> {
        self.clock.as_ref()?.rate()
    }

    /// release.lua for each lease, pipelined; then, for those whose note this store wrote (an
    /// election's leader resigning), a `PUBLISH` on their change channel.
    async fn release(&self, held: &[Held<'_>]) -> Result<Vec<Result<bool>>> {
        let released = self
            .flags(Phase::Release, held, |_, h| {
                scripts::release_at(
                    &self.lock_key(h.name),
                    h.token,
                    h.opts.permits,
                    &self.tuning,
                    self.server_time.estimate(),
                )
            })
            .await?;
        let announce: Vec<String> = self
            .feed
            .take_noted(
                held.iter()
                    .zip(&released)
                    .filter(|(_, r)| matches!(r, Ok(true)))
                    .map(|(h, _)| h.name),
            )
            .iter()
            .map(|name| changes::channel_of(&self.lock_key(name)))
            .collect();
        self.feed.publish(&self.shared, &announce).await;
        Ok(released)
    }

    async fn force_release(&self, name: &str) -> Result<ForcedRelease> {
        let forced = self.forced_release(name, None).await?;
        let channel = changes::channel_of(&self.lock_key(name));
        self.feed.publish(&self.shared, &[channel]).await;
        Ok(forced)
    }

    async fn force_release_holder(&self, name: &str, token: &str) -> Result<ForcedRelease> {
        let forced = self.forced_release(name, Some(token)).await?;
        let channel = changes::channel_of(&self.lock_key(name));
        self.feed.publish(&self.shared, &[channel]).await;
        Ok(forced)
    }

    /// A subscription on the store's pub/sub session (`changes.rs`).
    async fn changes(&self, name: &str) -> Result<Option<Changes>> {
        Ok(self
            .feed
            .changes(changes::channel_of(&self.lock_key(name)))
            .await)
    }

    /// note.lua: compare the lock's token, write the note key for the retention, publish on the
    /// name's change channel.
    async fn write_note(&self, held: &Held<'_>, note: &[u8]) -> Result<bool> {
        let inv = scripts::note(
            &self.lock_key(held.name),
            held.token,
            note,
            self.tuning.retention,
        );
        let mut con = self.shared.clone();
        let r = within(
            Phase::Note,
            self.limit(),
            scripts::invoke::<_, i64>(&mut con, &inv),
        )
        .await;
        let written = self.named(held.name, r).await? == 1;
        if written {
            self.feed.noted(held.name);
        }
        Ok(written)
    }

    async fn read_note(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let inv = scripts::read_note(&self.lock_key(name));
        let mut con = self.shared.clone();
        let r = within(
            Phase::Inspect,
            self.limit(),
            scripts::invoke(&mut con, &inv),
        )
        .await;
        self.named(name, r).await
    }

    /// `TIME` on the shared connection (for Sentinel and Cluster: the server that answers).
    async fn wall_clock_ms(&self) -> Result<Option<i64>> {
        let mut con = self.shared.clone();
        let (secs, micros): (i64, i64) = self
            .on_shared(Phase::Inspect, redis::cmd("TIME").query_async(&mut con))
            .await?;
        Ok(Some(secs * 1000 + micros / 1000))
    }

    async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        self.inspect_keys(names).await
    }

    /// `SCAN`, never `KEYS`, on every master of a cluster. A name appears once it has been acquired
    /// (while its fence key lasts) or while someone holds it (its lock key, or a semaphore's holders).
    async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        self.list_names(pattern).await
    }
}
