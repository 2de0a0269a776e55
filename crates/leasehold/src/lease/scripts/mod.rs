//! The lease's Lua scripts, one `.lua` file each, each behind one typed function. Scripts run as
//! `EVALSHA`, reloaded automatically when the server answers `NOSCRIPT` (after a restart or failover).
//!
//! Limit: a script is atomic on one Redis server; it says nothing about what replicas have seen.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script, Value};

use crate::lease::LeaseKeys;

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew.lua")));
static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("force_release.lua")));

/// How long an unclaimed wake-up stays in the wake list. Long enough for a contender that was just
/// told "busy" to reach its `BLPOP`; a stale wake-up costs one extra acquire attempt, no more, and
/// acquire deletes it once the lock is taken.
pub(crate) const WAKE_LINGER: Duration = Duration::from_secs(30);

/// Added to the waiting marker's lifetime beyond the longest block it announces, to cover the time
/// between the "busy" reply and the contender's `BLPOP` reaching the server. A marker that outlives
/// its waiters costs one needless wake-up push per release, no more.
pub(crate) const WAITING_SLACK: Duration = Duration::from_secs(5);

/// What acquire.lua answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Taken, with the new fence; `waiting`: the waiting marker is alive and covers this hold, so
    /// its release will push a wake-up.
    Taken { fence: u64, waiting: bool },
    /// Busy; `pttl_ms` is the holder's remaining TTL (negative: held without expiry).
    Busy { pttl_ms: i64 },
}

impl AcquireReply {
    fn from_reply(reply: &[i64]) -> RedisResult<Self> {
        match *reply {
            [1, n, waiting] => Ok(AcquireReply::Taken {
                fence: u64::try_from(n).map_err(|_| bad_reply("acquire", "negative fence"))?,
                waiting: waiting == 1,
            }),
            [0, n] => Ok(AcquireReply::Busy { pttl_ms: n }),
            _ => Err(bad_reply("acquire", "not {1, fence, waiting} or {0, pttl}")),
        }
    }
}

fn bad_reply(script: &'static str, what: &'static str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected reply from a leasehold script",
        format!("{script}: {what}"),
    ))
}

fn ms(d: Duration) -> u64 {
    ms_or_zero(d).max(1)
}

fn ms_or_zero(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// acquire.lua: take the lock with `token` for `ttl` if free; mint the fence. When busy and `wait`
/// is not zero (the caller will block on the wake list for up to `wait`), sets the waiting marker.
pub(crate) async fn acquire<C: ConnectionLike>(
    con: &mut C,
    keys: &LeaseKeys,
    token: &str,
    ttl: Duration,
    wait: Duration,
) -> RedisResult<AcquireReply> {
    let reply: Vec<i64> = ACQUIRE
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.wake)
        .key(&keys.waiting)
        .arg(token)
        .arg(ms(ttl))
        .arg(ms_or_zero(wait))
        .arg(ms(WAITING_SLACK))
        .invoke_async(con)
        .await?;
    AcquireReply::from_reply(&reply)
}

/// acquire.lua followed by `WAIT numreplicas timeout` in one pipeline on `con` (WAIT counts the
/// acknowledgements of *this connection's* writes, so both must share it). Returns the reply and the
/// number of replicas that acknowledged.
pub(crate) async fn acquire_and_wait<C: ConnectionLike>(
    con: &mut C,
    keys: &LeaseKeys,
    token: &str,
    ttl: Duration,
    wait: Duration,
    numreplicas: u32,
    timeout: Duration,
) -> RedisResult<(AcquireReply, i64)> {
    let mut pipe = redis::pipe();
    pipe.cmd("EVALSHA")
        .arg(ACQUIRE.get_hash())
        .arg(4)
        .arg(&keys.lock)
        .arg(&keys.fence)
        .arg(&keys.wake)
        .arg(&keys.waiting)
        .arg(token)
        .arg(ms(ttl))
        .arg(ms_or_zero(wait))
        .arg(ms(WAITING_SLACK))
        .cmd("WAIT")
        .arg(numreplicas)
        .arg(ms(timeout));
    let reply: RedisResult<(Vec<i64>, i64)> = pipe.query_async(con).await;
    let (pair, acked) = match reply {
        Err(e) if is_noscript(&e) => {
            ACQUIRE.load_async(con).await?;
            pipe.query_async(con).await?
        }
        other => other?,
    };
    Ok((AcquireReply::from_reply(&pair)?, acked))
}

/// release.lua: delete the lock if it holds `token`, then push one wake-up if the waiting marker is
/// set. `true` when it was ours.
pub(crate) async fn release<C: ConnectionLike>(
    con: &mut C,
    keys: &LeaseKeys,
    token: &str,
) -> RedisResult<bool> {
    let n: i64 = RELEASE
        .key(&keys.lock)
        .key(&keys.wake)
        .key(&keys.waiting)
        .arg(token)
        .arg(ms(WAKE_LINGER))
        .invoke_async(con)
        .await?;
    Ok(n == 1)
}

/// renew.lua: reset the lock's TTL to `ttl` if it holds `token`. `true` when it was ours.
pub(crate) async fn renew<C: ConnectionLike>(
    con: &mut C,
    lock_key: &str,
    token: &str,
    ttl: Duration,
) -> RedisResult<bool> {
    let n: i64 = RENEW
        .key(lock_key)
        .arg(token)
        .arg(ms(ttl))
        .invoke_async(con)
        .await?;
    Ok(n == 1)
}

/// force_release.lua: delete the lock whoever holds it, advance the fence, wake one waiter.
/// Returns `(evicted, fence)`.
pub(crate) async fn force_release<C: ConnectionLike>(
    con: &mut C,
    keys: &LeaseKeys,
) -> RedisResult<(bool, u64)> {
    let (evicted, fence): (i64, i64) = FORCE_RELEASE
        .key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.wake)
        .key(&keys.waiting)
        .arg(ms(WAKE_LINGER))
        .invoke_async(con)
        .await?;
    let fence = u64::try_from(fence).map_err(|_| bad_reply("force_release", "negative fence"))?;
    Ok((evicted == 1, fence))
}

/// One renewal in a batch: the lock key, our token, the TTL to set.
#[derive(Debug, Clone)]
pub(crate) struct RenewItem<'a> {
    pub(crate) lock_key: String,
    pub(crate) token: &'a str,
    pub(crate) ttl: Duration,
}

/// renew.lua for many leases in one pipeline (one round trip; two more only when the script had to
/// be reloaded). Per item: `Ok(true)` renewed, `Ok(false)` not ours, `Err` the server refused it.
pub(crate) async fn renew_many<C: ConnectionLike>(
    con: &mut C,
    items: &[RenewItem<'_>],
) -> RedisResult<Vec<RedisResult<bool>>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for item in items {
        pipe.cmd("EVALSHA")
            .arg(RENEW.get_hash())
            .arg(1)
            .arg(&item.lock_key)
            .arg(item.token)
            .arg(ms(item.ttl));
    }
    let mut values: Vec<Value> = pipe.query_async(con).await?;
    if values.iter().any(value_is_noscript) {
        RENEW.load_async(con).await?;
        values = pipe.query_async(con).await?;
    }
    Ok(values.into_iter().map(flag).collect())
}

/// One background release in a batch: lock and wake keys, our token.
#[derive(Debug, Clone)]
pub(crate) struct ReleaseItem {
    pub(crate) keys: LeaseKeys,
    pub(crate) token: String,
}

/// release.lua for many leases in one pipeline. Per item as [`renew_many`].
pub(crate) async fn release_many<C: ConnectionLike>(
    con: &mut C,
    items: &[ReleaseItem],
) -> RedisResult<Vec<RedisResult<bool>>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for item in items {
        pipe.cmd("EVALSHA")
            .arg(RELEASE.get_hash())
            .arg(3)
            .arg(&item.keys.lock)
            .arg(&item.keys.wake)
            .arg(&item.keys.waiting)
            .arg(&item.token)
            .arg(ms(WAKE_LINGER));
    }
    let mut values: Vec<Value> = pipe.query_async(con).await?;
    if values.iter().any(value_is_noscript) {
        RELEASE.load_async(con).await?;
        values = pipe.query_async(con).await?;
    }
    Ok(values.into_iter().map(flag).collect())
}

fn flag(v: Value) -> RedisResult<bool> {
    match v {
        Value::ServerError(e) => Err(e.into()),
        other => redis::from_redis_value::<i64>(other)
            .map(|n| n == 1)
            .map_err(Into::into),
    }
}

fn is_noscript(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

fn value_is_noscript(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

#[cfg(test)]
mod tests {
    //! The waiting marker, against a real redis-server: a release pushes a wake-up only when a
    //! contender was told "busy", and never misses one that was.

    use super::*;
    use leasehold_testkit::RedisServer;

    const SEC: Duration = Duration::from_secs(1);

    async fn setup() -> (RedisServer, redis::aio::MultiplexedConnection, LeaseKeys) {
        let srv = RedisServer::start().expect("start a private redis-server");
        let con = redis::Client::open(srv.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        (srv, con, LeaseKeys::new("t", "marker").unwrap())
    }

    async fn exists(con: &mut redis::aio::MultiplexedConnection, key: &str) -> bool {
        redis::cmd("EXISTS")
            .arg(key)
            .query_async::<i64>(con)
            .await
            .unwrap()
            == 1
    }

    async fn pttl(con: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query_async(con).await.unwrap()
    }

    #[tokio::test]
    async fn an_uncontended_release_pushes_nothing() {
        let (_srv, mut con, k) = setup().await;
        let r = acquire(&mut con, &k, "a", 30 * SEC, 10 * SEC)
            .await
            .unwrap();
        assert!(
            matches!(r, AcquireReply::Taken { waiting: false, .. }),
            "{r:?}"
        );
        // A try (wait zero) told "busy" announces no waiter either.
        let busy = acquire(&mut con, &k, "b", 30 * SEC, Duration::ZERO)
            .await
            .unwrap();
        assert!(matches!(busy, AcquireReply::Busy { .. }), "{busy:?}");
        assert!(!exists(&mut con, &k.waiting).await);
        assert!(release(&mut con, &k, "a").await.unwrap());
        assert!(
            !exists(&mut con, &k.wake).await,
            "a wake-up nobody waits for"
        );
        assert!(!exists(&mut con, &k.lock).await);
    }

    #[tokio::test]
    async fn a_release_between_busy_and_blpop_still_wakes_the_contender() {
        let (_srv, mut con, k) = setup().await;
        acquire(&mut con, &k, "a", 30 * SEC, SEC).await.unwrap();
        // B is told busy; before it blocks, A releases.
        let busy = acquire(&mut con, &k, "b", 30 * SEC, 5 * SEC).await.unwrap();
        assert!(matches!(busy, AcquireReply::Busy { .. }), "{busy:?}");
        assert!(
            pttl(&mut con, &k.waiting).await > 5_000,
            "marker covers B's block"
        );
        assert!(release(&mut con, &k, "a").await.unwrap());
        // B's BLPOP finds the wake-up at once.
        let popped: Option<(String, String)> = redis::cmd("BLPOP")
            .arg(&k.wake)
            .arg("0.2")
            .query_async(&mut con)
            .await
            .unwrap();
        assert!(popped.is_some(), "the wake-up was lost");
        // B takes it; the marker is still there and now covers B's hold, so B's release wakes the
        // next contender too.
        let taken = acquire(&mut con, &k, "b", 30 * SEC, 5 * SEC).await.unwrap();
        assert!(
            matches!(taken, AcquireReply::Taken { waiting: true, .. }),
            "{taken:?}"
        );
        assert!(pttl(&mut con, &k.waiting).await > 30_000);
        assert!(release(&mut con, &k, "b").await.unwrap());
        assert!(exists(&mut con, &k.wake).await);
    }

    #[tokio::test]
    async fn a_shorter_wait_never_shortens_the_marker() {
        let (_srv, mut con, k) = setup().await;
        acquire(&mut con, &k, "a", 60 * SEC, SEC).await.unwrap();
        acquire(&mut con, &k, "b", 60 * SEC, 40 * SEC)
            .await
            .unwrap();
        let long = pttl(&mut con, &k.waiting).await;
        acquire(&mut con, &k, "c", 60 * SEC, SEC).await.unwrap();
        assert!(pttl(&mut con, &k.waiting).await > long - 1_000);
        let (evicted, _) = force_release(&mut con, &k).await.unwrap();
        assert!(evicted);
        assert!(
            exists(&mut con, &k.wake).await,
            "force-release wakes a marked waiter"
        );
    }
}
