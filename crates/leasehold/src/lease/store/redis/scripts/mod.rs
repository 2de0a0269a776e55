//! The lease's Lua scripts, one `.lua` file each, each behind one typed function. Scripts run as
//! `EVALSHA`, reloaded automatically when the server answers `NOSCRIPT` (after a restart or failover).
//!
//! Limit: a script is atomic on one Redis server; it says nothing about what replicas have seen.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script, ScriptInvocation, Value};

use super::keys::LeaseKeys;

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("acquire.lua")));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("release.lua")));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("renew.lua")));
static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("force_release.lua")));
/// Every script, for reloading a server's lost script cache.
static ALL: [&LazyLock<Script>; 4] = [&ACQUIRE, &RELEASE, &RENEW, &FORCE_RELEASE];

/// How long an unclaimed wake-up stays in the wake list. Long enough for a contender that was just
/// told "busy" to reach its `BLPOP`; a stale wake-up costs one extra acquire attempt, no more, and
/// acquire deletes it once the lock is taken.
pub(crate) const WAKE_LINGER: Duration = Duration::from_secs(30);

/// How long a release remembers the token it released, so that a client that retries the release
/// after a reconnect (the first one did reach the server) hears "released" again rather than "it was
/// not yours". Retries come within seconds.
pub(crate) const RELEASED_MEMORY: Duration = Duration::from_secs(10);

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
    /// Reads acquire.lua's reply.
    pub(crate) fn from_value(v: RedisResult<Value>) -> RedisResult<Self> {
        let reply: Vec<i64> = redis::from_redis_value(v?)?;
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

pub(crate) fn bad_reply(script: &'static str, what: &'static str) -> redis::RedisError {
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

// Each script's keys and arguments are written once, in the function that prepares its invocation;
// a single call (`invoke`) and a pipeline (`pipeline`) both send that invocation.

/// acquire.lua: take the lock with `token` for `ttl` if free; mint the fence. When busy and `wait`
/// is not zero (the caller will block on the wake list for up to `wait`), sets the waiting marker.
pub(crate) fn acquire(
    keys: &LeaseKeys,
    token: &str,
    ttl: Duration,
    wait: Duration,
) -> ScriptInvocation<'static> {
    let mut inv = ACQUIRE.prepare_invoke();
    inv.key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.wake)
        .key(&keys.waiting)
        .arg(token)
        .arg(ms(ttl))
        .arg(ms_or_zero(wait))
        .arg(ms(WAITING_SLACK));
    inv
}

/// release.lua: delete the lock if it holds `token`, then push one wake-up if the waiting marker is
/// set. Replies 1 when it was ours.
pub(crate) fn release(keys: &LeaseKeys, token: &str) -> ScriptInvocation<'static> {
    let mut inv = RELEASE.prepare_invoke();
    inv.key(&keys.lock)
        .key(&keys.wake)
        .key(&keys.waiting)
        .key(&keys.released)
        .arg(token)
        .arg(ms(WAKE_LINGER))
        .arg(ms(RELEASED_MEMORY));
    inv
}

/// renew.lua: reset the lock's TTL to `ttl` if it holds `token`. Replies 1 when it was ours.
pub(crate) fn renew(lock_key: &str, token: &str, ttl: Duration) -> ScriptInvocation<'static> {
    let mut inv = RENEW.prepare_invoke();
    inv.key(lock_key).arg(token).arg(ms(ttl));
    inv
}

/// force_release.lua: delete the lock whoever holds it, advance the fence, wake one waiter.
/// Replies `{evicted, fence}`.
pub(crate) fn force_release(keys: &LeaseKeys) -> ScriptInvocation<'static> {
    let mut inv = FORCE_RELEASE.prepare_invoke();
    inv.key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.wake)
        .key(&keys.waiting)
        .arg(ms(WAKE_LINGER));
    inv
}

/// Sends one prepared script call (EVALSHA, reloaded once on NOSCRIPT).
pub(crate) async fn invoke<C: ConnectionLike, T: redis::FromRedisValue>(
    con: &mut C,
    inv: &ScriptInvocation<'_>,
) -> RedisResult<T> {
    inv.invoke_async(con).await
}

/// Sends prepared script calls, then `tail` (a command that must follow them on the same connection,
/// such as `WAIT`), in one pipeline: one round trip. If the server lost its script cache (a restart
/// or failover), loads the scripts and sends the pipeline again, which is safe because every script
/// here has the same effect run once or twice. Per item: the reply, or the server's error for it.
pub(crate) async fn pipeline<C: ConnectionLike>(
    con: &mut C,
    invs: &[ScriptInvocation<'_>],
    tail: Option<&redis::Cmd>,
) -> RedisResult<Vec<RedisResult<Value>>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for inv in invs {
        pipe.invoke_script(inv);
    }
    if let Some(cmd) = tail {
        pipe.add_command(cmd.clone());
    }
    let mut values: Vec<Value> = pipe.query_async(con).await?;
    if values.iter().any(value_is_noscript) {
        for script in ALL {
            script.load_async(con).await?;
        }
        values = pipe.query_async(con).await?;
    }
    Ok(values
        .into_iter()
        .map(|v| match v {
            Value::ServerError(e) => Err(e.into()),
            other => Ok(other),
        })
        .collect())
}

/// Reads a 0/1 reply (renew, release).
pub(crate) fn flag(v: RedisResult<Value>) -> RedisResult<bool> {
    redis::from_redis_value::<i64>(v?)
        .map(|n| n == 1)
        .map_err(Into::into)
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

    // The scripts as single calls, the way the store sends them.
    async fn acquire<C: ConnectionLike>(
        con: &mut C,
        k: &LeaseKeys,
        token: &str,
        ttl: Duration,
        wait: Duration,
    ) -> RedisResult<AcquireReply> {
        AcquireReply::from_value(Ok(invoke(con, &super::acquire(k, token, ttl, wait)).await?))
    }

    async fn release<C: ConnectionLike>(
        con: &mut C,
        k: &LeaseKeys,
        token: &str,
    ) -> RedisResult<bool> {
        flag(Ok(invoke(con, &super::release(k, token)).await?))
    }

    async fn force_release<C: ConnectionLike>(
        con: &mut C,
        k: &LeaseKeys,
    ) -> RedisResult<(bool, i64)> {
        let (evicted, fence): (i64, i64) = invoke(con, &super::force_release(k)).await?;
        Ok((evicted == 1, fence))
    }

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

    #[tokio::test]
    async fn every_script_run_twice_has_the_effect_of_running_once() {
        // A client that retries after a reconnect sends the same call again; the first one may have
        // run. Each script, really run twice against the server:
        let (_srv, mut con, k) = setup().await;
        let first = acquire(&mut con, &k, "a", 30 * SEC, SEC).await.unwrap();
        let again = acquire(&mut con, &k, "a", 30 * SEC, SEC).await.unwrap();
        assert!(matches!(first, AcquireReply::Taken { .. }), "{first:?}");
        assert_eq!(
            first, again,
            "a retried acquire gets the same lease and fence"
        );
        let mut renewed = Vec::new();
        for _ in 0..2 {
            renewed.push(
                flag(Ok(invoke(&mut con, &renew(&k.lock, "a", 30 * SEC))
                    .await
                    .unwrap()))
                .unwrap(),
            );
        }
        assert_eq!(renewed, [true, true]);
        assert!(release(&mut con, &k, "a").await.unwrap());
        assert!(
            release(&mut con, &k, "a").await.unwrap(),
            "a retried release says released"
        );
        // The next holder is untouched by a late retry of the previous holder's release, and its
        // fence is above the first holder's.
        let b = acquire(&mut con, &k, "b", 30 * SEC, SEC).await.unwrap();
        assert!(release(&mut con, &k, "a").await.unwrap());
        assert!(
            exists(&mut con, &k.lock).await,
            "b's lock must survive a's retried release"
        );
        match (first, b) {
            (AcquireReply::Taken { fence: f1, .. }, AcquireReply::Taken { fence: f2, .. }) => {
                assert!(f2 > f1)
            }
            other => panic!("{other:?}"),
        }
        // Someone who never held it is told "not yours", before and after a release.
        assert!(!release(&mut con, &k, "c").await.unwrap());
        let (e1, f1) = force_release(&mut con, &k).await.unwrap();
        let (e2, f2) = force_release(&mut con, &k).await.unwrap();
        assert!(
            e1 && !e2 && f2 > f1,
            "forced twice: evicts once, the fence only moves up"
        );
    }
}
