//! The floor of the mechanism: a FIFO hand-off lock with the hand-off and nothing else. Waiters queue
//! in a Redis list and block on `BLPOP` of a wake list of their own; the release hands the lock to the
//! first of them. One round trip to acquire, one to release, 8 Redis commands per hand-off.
//!
//! Limit: no TTL, no fence, no liveness, no compare. A waiter that stops waiting (its `BLPOP` timed
//! out, its process died) keeps its place and is handed a lock it never takes, which then stays held.
//! It is what leasehold's contended hand-over is measured against, not a lock to use.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use anyhow::Context as _;
use rand::RngExt as _;

use super::measure::mono_ns;

static ACQUIRE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("floor_acquire.lua")));
static RELEASE: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("floor_release.lua")));

/// Opens the floor's waiters; they share one request counter.
#[derive(Clone)]
pub(crate) struct FifoFloor {
    client: redis::Client,
    round_trips: Arc<AtomicU64>,
}

/// One contender of the floor lock: a connection of its own (its `BLPOP` blocks that connection, as
/// leasehold's waiter blocks a dedicated one) and a token of its own, which names its wake list.
#[derive(Clone)]
pub(crate) struct FloorWaiter {
    con: redis::aio::MultiplexedConnection,
    token: String,
    round_trips: Arc<AtomicU64>,
}

impl std::fmt::Debug for FloorWaiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FloorWaiter")
            .field("token", &self.token)
            .finish_non_exhaustive()
    }
}

/// The keys of the floor lock `name`: its lock, its queue and the prefix of its wake lists.
fn keys(name: &str) -> (String, String, String) {
    (
        format!("bench-floor:{name}:lock"),
        format!("bench-floor:{name}:queue"),
        format!("bench-floor:{name}:wake:"),
    )
}

impl FifoFloor {
    pub(crate) fn new(url: &str) -> anyhow::Result<Self> {
        Ok(FifoFloor {
            client: redis::Client::open(url).with_context(|| format!("redis url {url}"))?,
            round_trips: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A new waiter, connected and with both scripts loaded, so that connecting stays outside the
    /// measured window and every request is one `EVALSHA`.
    pub(crate) async fn waiter(&self) -> anyhow::Result<FloorWaiter> {
        // No response timeout: a `BLPOP` waits as long as its own timeout says. 128 processes
        // connect at once on a loaded machine, hence the generous connect bound.
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(Duration::from_secs(10)))
            .set_response_timeout(None);
        let mut con = self
            .client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .context("connecting a floor waiter to the benchmark's redis-server")?;
        for script in [&*ACQUIRE, &*RELEASE] {
            script
                .prepare_invoke()
                .load_async(&mut con)
                .await
                .context("loading the floor's scripts")?;
        }
        Ok(FloorWaiter {
            con,
            token: format!("{:032x}", rand::rng().random::<u128>()),
            round_trips: self.round_trips.clone(),
        })
    }
}

impl FloorWaiter {
    /// Requests sent by every waiter of the same [`FifoFloor`].
    pub(crate) fn round_trips(&self) -> u64 {
        self.round_trips.load(Ordering::Relaxed)
    }

    /// One round trip: the acquire script and a `BLPOP` of our wake list until `deadline_ns` (on
    /// [`mono_ns`]), pipelined. `true` when we hold the lock; `false` when the wait ended first, and
    /// then our token is still queued: this waiter must not ask again.
    pub(crate) async fn acquire(&self, name: &str, deadline_ns: u64) -> anyhow::Result<bool> {
        let (lock, queue, wake_prefix) = keys(name);
        let wake = format!("{wake_prefix}{}", self.token);
        let left = Duration::from_nanos(deadline_ns.saturating_sub(mono_ns()));
        let mut pipe = redis::pipe();
        pipe.cmd("EVALSHA")
            .arg(ACQUIRE.get_hash())
            .arg(3)
            .arg(&lock)
            .arg(&queue)
            .arg(&wake)
            .arg(&self.token)
            .cmd("BLPOP")
            .arg(&wake)
            // Never "0", which blocks forever.
            .arg(format!("{:.3}", left.as_secs_f64().max(0.001)));
        let mut con = self.con.clone();
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let (_taken, popped): (i64, Option<(String, String)>) = pipe
            .query_async(&mut con)
            .await
            .context("floor acquire + BLPOP")?;
        Ok(popped.is_some())
    }

    /// One round trip: the release script, which hands the lock to the first queued waiter or frees
    /// it.
    pub(crate) async fn release(&self, name: &str) -> anyhow::Result<()> {
        let (lock, queue, wake_prefix) = keys(name);
        let mut con = self.con.clone();
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let _handed: i64 = RELEASE
            .key(&lock)
            .key(&queue)
            .arg(&wake_prefix)
            .invoke_async(&mut con)
            .await
            .context("floor release")?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn queued(con: &mut redis::aio::MultiplexedConnection, name: &str) -> usize {
        redis::cmd("LLEN")
            .arg(keys(name).1)
            .query_async(con)
            .await
            .unwrap()
    }

    /// Waits until `n` tokens are queued, so that the next waiter arrives after them.
    async fn until_queued(con: &mut redis::aio::MultiplexedConnection, name: &str, n: usize) {
        while queued(con, name).await < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_lock_goes_to_waiters_in_arrival_order_and_is_freed_after_the_last() {
        let server = tokio::task::spawn_blocking(leasehold_testkit::RedisServer::start)
            .await
            .unwrap()
            .unwrap();
        let floor = FifoFloor::new(&server.url()).unwrap();
        let mut probe = floor
            .client
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let (a, b, c) = (
            floor.waiter().await.unwrap(),
            floor.waiter().await.unwrap(),
            floor.waiter().await.unwrap(),
        );
        let end = mono_ns() + 10_000_000_000;
        assert!(a.acquire("t", end).await.unwrap(), "free: taken at once");
        let wait = |w: &FloorWaiter| {
            let w = w.clone();
            tokio::spawn(async move { w.acquire("t", end).await.unwrap() })
        };
        let b_turn = wait(&b);
        until_queued(&mut probe, "t", 1).await;
        let c_turn = wait(&c);
        until_queued(&mut probe, "t", 2).await;

        a.release("t").await.unwrap();
        assert!(
            b_turn.await.unwrap(),
            "the first to queue is handed the lock"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!c_turn.is_finished(), "the second still waits");
        b.release("t").await.unwrap();
        assert!(c_turn.await.unwrap());
        c.release("t").await.unwrap();

        let lock: Option<String> = redis::cmd("GET")
            .arg(keys("t").0)
            .query_async(&mut probe)
            .await
            .unwrap();
        assert_eq!(lock, None, "freed once nobody waits");
        // Two round trips per acquisition: the pipelined acquire and the release.
        assert_eq!(a.round_trips(), 6);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_that_reaches_its_deadline_says_so() {
        let server = tokio::task::spawn_blocking(leasehold_testkit::RedisServer::start)
            .await
            .unwrap()
            .unwrap();
        let floor = FifoFloor::new(&server.url()).unwrap();
        let (a, b) = (floor.waiter().await.unwrap(), floor.waiter().await.unwrap());
        assert!(a.acquire("t", mono_ns() + 1_000_000_000).await.unwrap());
        let started = mono_ns();
        assert!(!b.acquire("t", started + 100_000_000).await.unwrap());
        assert!(
            mono_ns() - started >= 90_000_000,
            "it blocked until about its deadline"
        );
    }
}
