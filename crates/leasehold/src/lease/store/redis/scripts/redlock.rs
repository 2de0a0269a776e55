//! Redlock's Lua scripts, one `.lua` file each, each behind one function that prepares its call. Every
//! script runs on one master and touches only that master's keys of one name.
//!
//! Promise: every script has the effect of running once when run twice, so a pipeline that met
//! `NOSCRIPT` (a master restarted) is loaded and sent again whole; the scripts are loaded all or
//! none, so no master knows the acquire but not the release that undoes it; renew, release, confirm
//! and note act only while the lock holds the caller's token; a master's fence key only grows
//! (floored at its clock unless a test turns the floor off) and is kept for at least the retention.
//!
//! Limit: a script is atomic on its master only; agreement across masters is the client's counting
//! (`super::super::redlock::quorum`), never a script's.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script, ScriptInvocation, Value};

use super::super::keys::RedlockKeys;
use super::{ms, ms_or_zero, value_is_noscript};

/// Every script's source, loaded together (one `SCRIPT LOAD` pipeline) when a master is first
/// checked and whenever one answers `NOSCRIPT` (after a restart): all or none, never a master that
/// knows the acquire but not the release that undoes it.
/// The two that mint a fence (acquire, force_release) begin with the Redis scripts' `fence.lua`, the
/// server clock and the fence rule written once for both stores.
/// The notes are the single-server store's own scripts (one compare and one write or read of
/// `{<prefix>:<name>}:note`, the same key on a master either store uses).
const SOURCES: [&str; 8] = [
    concat!(
        include_str!("fence.lua"),
        include_str!("redlock/acquire.lua")
    ),
    include_str!("redlock/confirm.lua"),
    include_str!("redlock/renew.lua"),
    include_str!("redlock/release.lua"),
    concat!(
        include_str!("fence.lua"),
        include_str!("redlock/force_release.lua")
    ),
    include_str!("redlock/raise.lua"),
    include_str!("note.lua"),
    include_str!("read_note.lua"),
];

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCES[0]));
static CONFIRM: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCES[1]));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCES[2]));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCES[3]));
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCES[4]));
static RAISE: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCES[5]));
static NOTE: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCES[6]));
static READ_NOTE: LazyLock<Script> = LazyLock::new(|| Script::new(SOURCES[7]));

/// Adds `SCRIPT LOAD` of every script to `pipe`, each reply ignored.
pub(crate) fn load_all(pipe: &mut redis::Pipeline) {
    for src in SOURCES {
        pipe.cmd("SCRIPT").arg("LOAD").arg(src).ignore();
    }
}

/// How long an unclaimed wake-up stays in a wake list (as on a single server).
pub(crate) const WAKE_LINGER: Duration = Duration::from_secs(30);

/// How long a release remembers the token it released, so a retried release hears "released".
pub(crate) const RELEASED_MEMORY: Duration = Duration::from_secs(10);

/// Added to the waiting marker's lifetime beyond the longest block it announces.
pub(crate) const WAITING_SLACK: Duration = Duration::from_secs(5);

/// What acquire.lua answered on one master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NodeAcquire {
    /// Taken here; `fence` is what this master recorded (atomically with the lock); `waiting`: the
    /// waiting marker is alive here and covers this hold.
    Taken { fence: u64, waiting: bool },
    /// Held here by someone else for `pttl_ms` more (negative: no expiry); `holder`: the first 8 hex
    /// digits of the holder's token.
    Busy { pttl_ms: i64, holder: String },
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Int(n) => Some(n.to_string()),
        _ => None,
    }
}

fn fence_of(v: &Value, script: &'static str) -> RedisResult<u64> {
    int(v)
        .and_then(|n| u64::try_from(n).ok())
        .ok_or_else(|| bad_reply(script, "the fence is not a non-negative integer"))
}

impl NodeAcquire {
    /// Reads acquire.lua's reply.
    pub(crate) fn from_value(v: Value) -> RedisResult<Self> {
        let Value::Array(items) = v else {
            return Err(bad_reply("acquire", "not an array"));
        };
        match items.as_slice() {
            [flag, fence, waiting] if int(flag) == Some(1) => Ok(NodeAcquire::Taken {
                fence: fence_of(fence, "acquire")?,
                waiting: int(waiting) == Some(1),
            }),
            [flag, pttl, holder] if int(flag) == Some(0) => Ok(NodeAcquire::Busy {
                pttl_ms: int(pttl).ok_or_else(|| bad_reply("acquire", "pttl"))?,
                holder: text(holder).unwrap_or_default(),
            }),
            _ => Err(bad_reply(
                "acquire",
                "not {1, fence, waiting} or {0, pttl, holder}",
            )),
        }
    }
}

/// Reads force_release.lua's reply: `(evicted, fence candidate)`.
pub(crate) fn forced(v: Value) -> RedisResult<(bool, u64)> {
    let Value::Array(items) = v else {
        return Err(bad_reply("force_release", "not an array"));
    };
    match items.as_slice() {
        [evicted, fence] => Ok((int(evicted) == Some(1), fence_of(fence, "force_release")?)),
        _ => Err(bad_reply("force_release", "not {evicted, fence}")),
    }
}

pub(crate) fn bad_reply(script: &'static str, what: &'static str) -> redis::RedisError {
    super::unexpected(
        "unexpected reply from a leasehold redlock script",
        script,
        what,
    )
}

/// How a master writes its fence key: floored at its clock or not (the tests turn the floor off to
/// show why it is there), and kept for at least the retention (never shortened), so that a name no
/// longer used leaves nothing behind; the clock floor keeps fences increasing once the key is gone.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FenceKeys {
    pub(crate) floor: bool,
    pub(crate) retention: Duration,
}

fn flag(floor: bool) -> &'static str {
    if floor {
        "1"
    } else {
        "0"
    }
}

/// acquire.lua: take this master's lock with `token` for `ttl` if free and record
/// `max(stored + 1, proposal, server µs if floor)`; when busy and `wait` is not zero, set the waiting
/// marker.
pub(crate) fn acquire(
    keys: &RedlockKeys,
    token: &str,
    ttl: Duration,
    wait: Duration,
    proposal: u64,
    rule: FenceKeys,
) -> ScriptInvocation<'static> {
    let mut inv = ACQUIRE.prepare_invoke();
    minting_keys(&mut inv, keys)
        .arg(token)
        .arg(ms(ttl))
        .arg(ms_or_zero(wait))
        .arg(ms(WAITING_SLACK));
    minting_args(&mut inv, proposal, rule);
    inv
}

/// The keys of the two scripts that mint a fence (acquire, force_release), in their order.
fn minting_keys<'a, 'b>(
    inv: &'b mut ScriptInvocation<'a>,
    keys: &RedlockKeys,
) -> &'b mut ScriptInvocation<'a> {
    inv.key(&keys.lock)
        .key(&keys.fence)
        .key(&keys.wake)
        .key(&keys.waiting)
}

/// The last arguments of the two scripts that mint a fence: the proposal and the fence rule.
fn minting_args(inv: &mut ScriptInvocation<'_>, proposal: u64, rule: FenceKeys) {
    inv.arg(proposal)
        .arg(flag(rule.floor))
        .arg(ms(rule.retention));
}

/// confirm.lua: raise the fence key to `fence` while the lock holds `token`. Replies 1 when it did.
pub(crate) fn confirm(
    keys: &RedlockKeys,
    token: &str,
    fence: u64,
    retention: Duration,
) -> ScriptInvocation<'static> {
    let mut inv = CONFIRM.prepare_invoke();
    inv.key(&keys.lock)
        .key(&keys.fence)
        .arg(token)
        .arg(fence)
        .arg(ms(retention));
    inv
}

/// renew.lua: reset the lock's TTL to `ttl` if it holds `token`. Replies 1 when it was ours.
pub(crate) fn renew(keys: &RedlockKeys, token: &str, ttl: Duration) -> ScriptInvocation<'static> {
    let mut inv = RENEW.prepare_invoke();
    inv.key(&keys.lock).arg(token).arg(ms(ttl));
    inv
}

/// note.lua: write `note` beside the lock if it holds `token`, kept for `keep`. Replies 1 when it
/// was ours.
pub(crate) fn note(
    keys: &RedlockKeys,
    token: &str,
    note: &[u8],
    keep: Duration,
) -> ScriptInvocation<'static> {
    let mut inv = NOTE.prepare_invoke();
    inv.key(&keys.lock).arg(token).arg(note).arg(ms(keep));
    inv
}

/// read_note.lua: the note beside the lock on this master, or nil.
pub(crate) fn read_note(keys: &RedlockKeys) -> ScriptInvocation<'static> {
    let mut inv = READ_NOTE.prepare_invoke();
    inv.key(&keys.lock);
    inv
}

/// release.lua: delete the lock if it holds `token`, then push one wake-up if the waiting marker is
/// set. Replies 1 when it was ours.
pub(crate) fn release(keys: &RedlockKeys, token: &str) -> ScriptInvocation<'static> {
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

/// force_release.lua: delete the lock whoever holds it and record a fence candidate.
pub(crate) fn force_release(
    keys: &RedlockKeys,
    proposal: u64,
    rule: FenceKeys,
) -> ScriptInvocation<'static> {
    let mut inv = FORCE_RELEASE.prepare_invoke();
    minting_keys(&mut inv, keys).arg(ms(WAKE_LINGER));
    minting_args(&mut inv, proposal, rule);
    inv
}

/// raise.lua: raise the fence key to at least `fence`.
pub(crate) fn raise(
    keys: &RedlockKeys,
    fence: u64,
    retention: Duration,
) -> ScriptInvocation<'static> {
    let mut inv = RAISE.prepare_invoke();
    inv.key(&keys.fence).arg(fence).arg(ms(retention));
    inv
}

/// Sends prepared script calls in one pipeline (one round trip). If the master lost its script
/// cache (a restart), loads the scripts and sends the pipeline again, which is safe because every
/// script here has the same effect run once or twice. Per item: the reply, or the master's error.
pub(crate) async fn pipeline<C: ConnectionLike>(
    con: &mut C,
    invs: &[ScriptInvocation<'_>],
) -> RedisResult<Vec<RedisResult<Value>>> {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for inv in invs {
        pipe.invoke_script(inv);
    }
    let mut values: Vec<Value> = pipe.query_async(con).await?;
    if values.iter().any(value_is_noscript) {
        let mut load = redis::pipe();
        load_all(&mut load);
        load.query_async::<()>(con).await?;
        values = pipe.query_async(con).await?;
    }
    Ok(super::per_item(values))
}

/// Reads a 0/1 reply (confirm, renew, release, raise).
pub(crate) fn flag_reply(v: RedisResult<Value>) -> RedisResult<bool> {
    let v = v?;
    int(&v)
        .map(|n| n == 1)
        .ok_or_else(|| bad_reply("flag", "not 0 or 1"))
}

#[cfg(test)]
mod tests {
    //! Each script against a real redis-server, run twice where a retry can send it twice.

    use super::*;
    use leasehold_testkit::RedisServer;

    const SEC: Duration = Duration::from_secs(1);
    const KEEP: Duration = Duration::from_secs(3_600);
    const NO_FLOOR: FenceKeys = FenceKeys {
        floor: false,
        retention: KEEP,
    };
    const FLOOR: FenceKeys = FenceKeys {
        floor: true,
        retention: KEEP,
    };

    async fn one<C: ConnectionLike>(con: &mut C, inv: ScriptInvocation<'static>) -> Value {
        pipeline(con, &[inv]).await.unwrap().pop().unwrap().unwrap()
    }

    /// The fence key's value as stored on the master.
    async fn stored_fence<C: ConnectionLike>(con: &mut C, k: &RedlockKeys) -> String {
        redis::cmd("GET")
            .arg(&k.fence)
            .query_async(con)
            .await
            .unwrap()
    }

    async fn setup() -> (RedisServer, redis::aio::MultiplexedConnection, RedlockKeys) {
        let (srv, con) = super::super::test_server().await;
        (srv, con, RedlockKeys::for_checked("t", "rl"))
    }

    #[tokio::test]
    async fn acquire_records_the_largest_of_stored_plus_one_proposal_and_clock() {
        let (_srv, mut con, k) = setup().await;
        // No floor, no proposal: a plain counter.
        let a = NodeAcquire::from_value(
            one(&mut con, acquire(&k, "a", 30 * SEC, SEC, 0, NO_FLOOR)).await,
        )
        .unwrap();
        assert_eq!(
            a,
            NodeAcquire::Taken {
                fence: 1,
                waiting: false
            }
        );
        // Retried: the same fence, no second increment.
        let again = NodeAcquire::from_value(
            one(&mut con, acquire(&k, "a", 30 * SEC, SEC, 0, NO_FLOOR)).await,
        )
        .unwrap();
        assert_eq!(a, again);
        // Busy: the holder's prefix and its TTL, and the marker when the caller will wait.
        let busy = NodeAcquire::from_value(
            one(&mut con, acquire(&k, "b", 30 * SEC, 5 * SEC, 0, NO_FLOOR)).await,
        )
        .unwrap();
        match busy {
            NodeAcquire::Busy { pttl_ms, holder } => {
                assert!(pttl_ms > 29_000, "{pttl_ms}");
                assert_eq!(holder, "a");
            }
            other => panic!("{other:?}"),
        }
        assert!(flag_reply(Ok(one(&mut con, release(&k, "a")).await)).unwrap());
        // A proposal above stored + 1 wins.
        let p = NodeAcquire::from_value(
            one(&mut con, acquire(&k, "c", 30 * SEC, SEC, 1_000, NO_FLOOR)).await,
        )
        .unwrap();
        assert!(
            matches!(p, NodeAcquire::Taken { fence: 1_000, .. }),
            "{p:?}"
        );
        assert!(flag_reply(Ok(one(&mut con, release(&k, "c")).await)).unwrap());
        // The floor: the server clock in µs, far above 1001.
        let f =
            NodeAcquire::from_value(one(&mut con, acquire(&k, "d", 30 * SEC, SEC, 0, FLOOR)).await)
                .unwrap();
        match f {
            NodeAcquire::Taken { fence, .. } => assert!(fence > 1_600_000_000_000_000, "{fence}"),
            other => panic!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn confirm_writes_only_while_the_lock_is_ours_and_never_lowers() {
        let (_srv, mut con, k) = setup().await;
        one(&mut con, acquire(&k, "a", 30 * SEC, SEC, 10, NO_FLOOR)).await;
        // Not the holder: nothing written.
        assert!(!flag_reply(Ok(one(&mut con, confirm(&k, "x", 50, KEEP)).await)).unwrap());
        let fence = stored_fence(&mut con, &k).await;
        assert_eq!(fence, "10");
        // The holder: raised, twice is once, a lower value leaves it.
        for _ in 0..2 {
            assert!(flag_reply(Ok(one(&mut con, confirm(&k, "a", 50, KEEP)).await)).unwrap());
        }
        assert!(flag_reply(Ok(one(&mut con, confirm(&k, "a", 20, KEEP)).await)).unwrap());
        let fence = stored_fence(&mut con, &k).await;
        assert_eq!(fence, "50");
        // Released: a late confirm of the old holder writes nothing.
        assert!(flag_reply(Ok(one(&mut con, release(&k, "a")).await)).unwrap());
        assert!(!flag_reply(Ok(one(&mut con, confirm(&k, "a", 90, KEEP)).await)).unwrap());
        let fence = stored_fence(&mut con, &k).await;
        assert_eq!(fence, "50");
    }

    #[tokio::test]
    async fn renew_release_force_and_raise_run_twice_as_once() {
        let (_srv, mut con, k) = setup().await;
        one(&mut con, acquire(&k, "a", 30 * SEC, SEC, 5, NO_FLOOR)).await;
        for _ in 0..2 {
            assert!(flag_reply(Ok(one(&mut con, renew(&k, "a", 30 * SEC)).await)).unwrap());
        }
        assert!(!flag_reply(Ok(one(&mut con, renew(&k, "b", 30 * SEC)).await)).unwrap());
        for _ in 0..2 {
            assert!(flag_reply(Ok(one(&mut con, release(&k, "a")).await)).unwrap());
        }
        assert!(!flag_reply(Ok(one(&mut con, renew(&k, "a", 30 * SEC)).await)).unwrap());
        one(&mut con, acquire(&k, "b", 30 * SEC, SEC, 0, NO_FLOOR)).await;
        let (e1, f1) = forced(one(&mut con, force_release(&k, 0, NO_FLOOR)).await).unwrap();
        let (e2, f2) = forced(one(&mut con, force_release(&k, 0, NO_FLOOR)).await).unwrap();
        assert!(e1 && !e2 && f1 == 7 && f2 == 8, "{e1} {f1} {e2} {f2}");
        for _ in 0..2 {
            assert!(flag_reply(Ok(one(&mut con, raise(&k, 100, KEEP)).await)).unwrap());
        }
        assert!(flag_reply(Ok(one(&mut con, raise(&k, 3, KEEP)).await)).unwrap());
        let fence = stored_fence(&mut con, &k).await;
        assert_eq!(fence, "100");
    }

    async fn pttl(con: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query_async(con).await.unwrap()
    }

    /// `token` takes the free lock of `k` for `ttl`: the fence it was given.
    async fn taken(
        con: &mut redis::aio::MultiplexedConnection,
        k: &RedlockKeys,
        token: &str,
        ttl: Duration,
        fence_keys: FenceKeys,
    ) -> u64 {
        let reply = NodeAcquire::from_value(
            one(con, acquire(k, token, ttl, Duration::ZERO, 0, fence_keys)).await,
        );
        let Ok(NodeAcquire::Taken { fence, .. }) = reply else {
            panic!("{reply:?}")
        };
        fence
    }

    async fn released(
        con: &mut redis::aio::MultiplexedConnection,
        k: &RedlockKeys,
        token: &str,
    ) -> bool {
        flag_reply(Ok(one(con, release(k, token)).await)).unwrap()
    }

    /// The keys on the server that never expire.
    async fn keys_without_ttl(con: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
        let keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(con).await.unwrap();
        let mut permanent = Vec::new();
        for key in keys {
            if pttl(con, &key).await == -1 {
                permanent.push(key);
            }
        }
        permanent
    }

    /// The fence key lasts the retention from its last write (never shortened by a client with a
    /// shorter one) and then goes, leaving nothing of the name; a fence minted after that is still
    /// higher, by the clock floor.
    #[tokio::test]
    async fn the_fence_key_expires_after_the_retention_and_fences_still_increase() {
        let (_srv, mut con, k) = setup().await;
        let short = FenceKeys {
            floor: true,
            retention: SEC,
        };
        let long = FenceKeys {
            floor: true,
            retention: 10 * SEC,
        };
        // A lease longer than the retention keeps its fence key at least as long as the lease.
        let first = taken(&mut con, &k, "a", 2 * SEC, short).await;
        assert!((1_000..=2_000).contains(&pttl(&mut con, &k.fence).await));
        assert!(released(&mut con, &k, "a").await);
        // Another client with a longer retention: never shortened by the short one afterwards.
        one(&mut con, acquire(&k, "b", SEC, Duration::ZERO, 0, long)).await;
        let confirmed = one(&mut con, confirm(&k, "b", 4_000_000_000_000_000, SEC)).await;
        assert!(flag_reply(Ok(confirmed)).unwrap());
        assert!(pttl(&mut con, &k.fence).await > 9_000);
        let raised = one(&mut con, raise(&k, 5_000_000_000_000_000, SEC)).await;
        assert!(flag_reply(Ok(raised)).unwrap());
        assert!(pttl(&mut con, &k.fence).await > 9_000);
        assert!(released(&mut con, &k, "b").await);
        redis::cmd("DEL")
            .arg(&k.fence)
            .query_async::<()>(&mut con)
            .await
            .unwrap();
        // Gone after the retention: nothing of the name is left.
        one(&mut con, acquire(&k, "c", SEC, Duration::ZERO, 0, short)).await;
        assert!(released(&mut con, &k, "c").await);
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        let permanent = keys_without_ttl(&mut con).await;
        assert!(permanent.is_empty(), "keys without a TTL: {permanent:?}");
        assert_eq!(pttl(&mut con, &k.fence).await, -2, "the fence key is gone");
        let later = taken(&mut con, &k, "d", SEC, short).await;
        assert!(
            later > first,
            "the clock floor keeps fences increasing: {first} -> {later}"
        );
    }
}
