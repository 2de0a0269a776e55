//! The baseline: the minimal correct Redis lock, written directly on the `redis` crate. `SET key token
//! NX PX ttl` to acquire and a compare-and-delete script to release: two round trips per cycle, the
//! protocol's limit. No renewal, no fence, no waking of waiters: it is the floor leasehold is measured
//! against, not a lock to use.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use anyhow::Context as _;
use rand::RngExt as _;

static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("baseline_release.lua")));

/// A connection that takes and releases baseline locks; clones share the connection and the request
/// counter.
#[derive(Clone)]
pub(crate) struct BaselineLock {
    con: redis::aio::MultiplexedConnection,
    ttl: Duration,
    /// Requests sent, so that S2 can report round trips per acquisition for the baseline as well.
    round_trips: Arc<AtomicU64>,
}

impl std::fmt::Debug for BaselineLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BaselineLock")
            .field("ttl", &self.ttl)
            .finish_non_exhaustive()
    }
}

/// A held baseline lock: the key and the token it was set with.
#[derive(Debug)]
pub(crate) struct BaselineHeld {
    key: String,
    token: String,
}

impl BaselineLock {
    pub(crate) async fn connect(url: &str, ttl: Duration) -> anyhow::Result<Self> {
        let client = redis::Client::open(url).with_context(|| format!("redis url {url}"))?;
        let mut con = client
            .get_multiplexed_async_connection()
            .await
            .with_context(|| format!("connecting the baseline lock to {url}"))?;
        // Load the release script once, so that every release is one EVALSHA.
        RELEASE
            .prepare_invoke()
            .load_async(&mut con)
            .await
            .context("loading the baseline's release script")?;
        Ok(BaselineLock {
            con,
            ttl,
            round_trips: Arc::new(AtomicU64::new(0)),
        })
    }

    pub(crate) fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// One `SET NX PX`: the lock, or `None` when someone holds it.
    pub(crate) async fn try_acquire(&self, key: &str) -> anyhow::Result<Option<BaselineHeld>> {
        let token = format!("{:032x}", rand::rng().random::<u128>());
        let mut con = self.con.clone();
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let set: Option<String> = redis::cmd("SET")
            .arg(key)
            .arg(&token)
            .arg("NX")
            .arg("PX")
            .arg(u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX))
            .query_async(&mut con)
            .await
            .context("baseline SET NX PX")?;
        Ok(set.map(|_| BaselineHeld {
            key: key.to_owned(),
            token,
        }))
    }

    /// Polls with a jittered pause of 0.5–1.5 ms between tries until `deadline_ns` (on
    /// [`super::measure::mono_ns`]). This is what a lock without wake-ups has to do.
    pub(crate) async fn acquire_polling(
        &self,
        key: &str,
        deadline_ns: u64,
    ) -> anyhow::Result<Option<BaselineHeld>> {
        loop {
            if let Some(held) = self.try_acquire(key).await? {
                return Ok(Some(held));
            }
            if super::measure::mono_ns() >= deadline_ns {
                return Ok(None);
            }
            let pause = rand::rng().random_range(500..1500);
            tokio::time::sleep(Duration::from_micros(pause)).await;
        }
    }

    /// The minimal lock's waiting acquire: `SET NX PX`, retried every 1 ms until it succeeds or
    /// `deadline` passes. On a free name it is one `SET`, like its try.
    pub(crate) async fn acquire_retrying(
        &self,
        key: &str,
        deadline: std::time::Instant,
    ) -> anyhow::Result<Option<BaselineHeld>> {
        loop {
            if let Some(held) = self.try_acquire(key).await? {
                return Ok(Some(held));
            }
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    /// One EVALSHA of the compare-and-delete script; `false` when the lock was no longer ours.
    pub(crate) async fn release(&self, held: BaselineHeld) -> anyhow::Result<bool> {
        let mut con = self.con.clone();
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let deleted: i64 = RELEASE
            .key(&held.key)
            .arg(&held.token)
            .invoke_async(&mut con)
            .await
            .context("baseline compare-and-delete")?;
        Ok(deleted == 1)
    }
}
