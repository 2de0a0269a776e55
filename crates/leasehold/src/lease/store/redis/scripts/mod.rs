//! The lease's Lua scripts, one `.lua` file each, each behind one typed function. Scripts run as
//! `EVALSHA`, reloaded automatically when the server answers `NOSCRIPT` (after a restart or failover).
//!
//! Every script but renew and the notes begins with `names.lua` (the lock and record keys, the clock
//! estimate), then `fence.lua` (the server clock and the fence rule, which Redlock's scripts begin
//! with too) and `lib.lua` (the record, the waiter queue and the hand-over; `lib_more.lua` after it
//! for the scripts off the lock's hot path: the semaphore's, the abandon's, the operator's), joined at compile time
//! with `concat!`, not built by formatting: they are written once, so the rule that hands a lock to
//! the next waiter cannot differ between the release, the abandon and the acquire that finds an
//! expired lock. The acquire and the release put a fast part (`acquire_fast.lua`, `release_fast.lua`)
//! right after `names.lua`: the uncontended case returns there, before any function is built, which
//! is most of the Redis CPU such a call would cost otherwise.
//!
//! Promise: each script has the effect of running once when a client runs it twice (a retry after a
//! reconnect): a retried acquire with the same token gets the same lease and fence back, a retried
//! release says "released", a retried abandon finds nothing left, a retried forced release (same
//! request id) does not evict the waiter the first run handed the lock to. Limit: a script is atomic on
//! one Redis server; it says nothing about what replicas have seen.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{RedisResult, Script, ToRedisArgs, Value};

use super::server_time::Estimate;

pub(crate) mod redlock;

const ACQUIRE_LUA: &str = concat!(
    include_str!("names.lua"),
    include_str!("acquire_fast.lua"),
    include_str!("fence.lua"),
    include_str!("lib.lua"),
    // The semaphore's check, built only when called (the record says the name may be one).
    "local function semaphore_in_use()\n",
    include_str!("lib_more.lua"),
    "return semaphore_in_use()\nend\n",
    include_str!("acquire.lua")
);
const RELEASE_LUA: &str = concat!(
    include_str!("names.lua"),
    include_str!("release_fast.lua"),
    include_str!("fence.lua"),
    include_str!("lib.lua"),
    include_str!("release.lua")
);
const ABANDON_LUA: &str = concat!(
    include_str!("names.lua"),
    include_str!("fence.lua"),
    include_str!("lib.lua"),
    include_str!("lib_more.lua"),
    include_str!("abandon.lua")
);
const FORCE_RELEASE_LUA: &str = concat!(
    include_str!("names.lua"),
    include_str!("fence.lua"),
    include_str!("lib.lua"),
    include_str!("lib_more.lua"),
    include_str!("force_release.lua")
);
/// Renewal is the one script on the path of every held lease, many times per TTL: it stays minimal.
const RENEW_LUA: &str = include_str!("renew.lua");
/// The renewal of a batch of locks in one call (one slot's, on a cluster).
const RENEW_MANY_LUA: &str = include_str!("renew_many.lua");
const SEM_ACQUIRE_LUA: &str = concat!(
    include_str!("names.lua"),
    include_str!("fence.lua"),
    include_str!("lib.lua"),
    include_str!("lib_more.lua"),
    include_str!("sem_acquire.lua")
);
const SEM_RELEASE_LUA: &str = concat!(
    include_str!("names.lua"),
    include_str!("fence.lua"),
    include_str!("lib.lua"),
    include_str!("lib_more.lua"),
    include_str!("sem_release.lua")
);
const SEM_RENEW_LUA: &str = concat!(
    include_str!("names.lua"),
    include_str!("fence.lua"),
    include_str!("lib.lua"),
    include_str!("lib_more.lua"),
    include_str!("sem_renew.lua")
);
const CHECK_LUA: &str = concat!(
    include_str!("names.lua"),
    include_str!("fence.lua"),
    include_str!("lib.lua"),
    include_str!("lib_more.lua"),
    include_str!("check.lua")
);

static ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(ACQUIRE_LUA));
static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_LUA));
static ABANDON: LazyLock<Script> = LazyLock::new(|| Script::new(ABANDON_LUA));
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(FORCE_RELEASE_LUA));
static RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_LUA));
static RENEW_MANY: LazyLock<Script> = LazyLock::new(|| Script::new(RENEW_MANY_LUA));
static SEM_ACQUIRE: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_ACQUIRE_LUA));
static SEM_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_RELEASE_LUA));
static SEM_RENEW: LazyLock<Script> = LazyLock::new(|| Script::new(SEM_RENEW_LUA));
static CHECK: LazyLock<Script> = LazyLock::new(|| Script::new(CHECK_LUA));
/// Notes need neither the prelude nor the library: one compare and one write or read.
const NOTE_LUA: &str = include_str!("note.lua");
const READ_NOTE_LUA: &str = include_str!("read_note.lua");
static NOTE: LazyLock<Script> = LazyLock::new(|| Script::new(NOTE_LUA));
static READ_NOTE: LazyLock<Script> = LazyLock::new(|| Script::new(READ_NOTE_LUA));
/// Every script, for reloading a server's lost script cache.
static ALL: [&LazyLock<Script>; 12] = [
    &ACQUIRE,
    &RELEASE,
    &ABANDON,
    &FORCE_RELEASE,
    &RENEW,
    &RENEW_MANY,
    &SEM_ACQUIRE,
    &SEM_RELEASE,
    &SEM_RENEW,
    &CHECK,
    &NOTE,
    &READ_NOTE,
];
/// Every script's joined source (what is loaded on the server), by its file's name, for the protocol
/// model's tests, which run exactly these on a real server and compare their replies and keys with the
/// model's (so the model and the scripts cannot drift apart). Not an API: hidden, and may change.
#[doc(hidden)]
pub fn sources() -> [(&'static str, &'static str); 12] {
    [
        ("acquire", ACQUIRE_LUA),
        ("release", RELEASE_LUA),
        ("abandon", ABANDON_LUA),
        ("force_release", FORCE_RELEASE_LUA),
        ("renew", RENEW_LUA),
        ("renew_many", RENEW_MANY_LUA),
        ("sem_acquire", SEM_ACQUIRE_LUA),
        ("sem_release", SEM_RELEASE_LUA),
        ("sem_renew", SEM_RENEW_LUA),
        ("check", CHECK_LUA),
        ("note", NOTE_LUA),
        ("read_note", READ_NOTE_LUA),
    ]
}
/// Every script's source, for loading them all in one pipeline.
const ALL_LUA: [&str; 12] = [
    ACQUIRE_LUA,
    RELEASE_LUA,
    ABANDON_LUA,
    FORCE_RELEASE_LUA,
    RENEW_LUA,
    RENEW_MANY_LUA,
    SEM_ACQUIRE_LUA,
    SEM_RELEASE_LUA,
    SEM_RENEW_LUA,
    CHECK_LUA,
    NOTE_LUA,
    READ_NOTE_LUA,
];

/// The timings of the queue protocol. One value per store; tests shorten them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Tuning {
    /// Longest single block of a waiter on its wake list. A waiter contacts Redis at least this often
    /// while it waits, which refreshes its place and hands over a lock that expired (its holder or a
    /// dead waiter stopped renewing).
    pub(crate) wait_refresh: Duration,
    /// Added to a waiter's block to make its deadline in the queue; covers the round trip and the
    /// client's own delay between two blocks. A waiter whose deadline passed is skipped.
    pub(crate) entry_slack: Duration,
    /// Life of the queue keys after their last write (every live waiter writes them each
    /// `wait_refresh`).
    pub(crate) queue_life: Duration,
    /// How long a given-up token is remembered, so an acquire with it that arrives later (sent on
    /// another connection before the abandon) does nothing.
    pub(crate) given_up_memory: Duration,
    /// How long a release (and a forced release) is remembered for a retry to hear the same answer.
    pub(crate) released_memory: Duration,
    /// How long the fence key outlives the name's last use.
    pub(crate) retention: Duration,
    /// The store is a Redis Cluster: scripts declare the name's never-existing key (`never_key`).
    pub(crate) cluster: bool,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            wait_refresh: Duration::from_millis(500),
            entry_slack: Duration::from_millis(500),
            queue_life: Duration::from_secs(60),
            given_up_memory: Duration::from_secs(60),
            released_memory: Duration::from_secs(10),
            retention: crate::lease::store::contract::DEFAULT_RETENTION,
            cluster: false,
        }
    }
}

impl Tuning {
    /// The default timings with `retention`: the fence key outlives a name's last use by that long,
    /// and no other key of the name by more (a shorter retention shortens how long a release is
    /// remembered for a retry, too). Never under the one second a waiter's place must last.
    pub(crate) fn with_retention(retention: Duration) -> Self {
        let d = Tuning::default();
        let cap = retention.max(d.wait_refresh + d.entry_slack);
        Tuning {
            retention,
            queue_life: d.queue_life.min(cap),
            given_up_memory: d.given_up_memory.min(cap),
            released_memory: d.released_memory.min(cap),
            ..d
        }
    }
}

impl Tuning {
    /// How long a waiter counts as live after it joined the queue without refreshing its place: its
    /// first block and the slack.
    pub(crate) fn window(&self) -> Duration {
        self.wait_refresh + self.entry_slack
    }
}

/// What acquire.lua answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireReply {
    /// Taken (or taken before, by a run of the same call that the caller did not hear back from),
    /// with the fence, the TTL the lock has now, and the time the script went by: the server's
    /// (`exact`) or the caller's estimate of it (the upper bound it sent).
    Taken {
        fence: u64,
        ttl_ms: i64,
        server_us: i64,
        exact: bool,
    },
    /// Busy; `pttl_ms` is the holder's remaining TTL (-1: held without expiry; -3: not read; 0: free,
    /// but the queue goes first).
    Busy {
        pttl_ms: i64,
        server_us: i64,
        exact: bool,
    },
    /// The caller gave up on this token before the script ran: nothing was done.
    GivenUp,
    /// The name is in use with another number of permits (1: as a lock): nothing was done.
    PermitsInUse { permits: u32 },
}

impl AcquireReply {
    /// The server's time the reply carries, in microseconds, when the script read the server's
    /// clock (not the caller's estimate).
    pub(crate) fn server_us(&self) -> Option<i64> {
        match *self {
            AcquireReply::Taken {
                server_us,
                exact: true,
                ..
            }
            | AcquireReply::Busy {
                server_us,
                exact: true,
                ..
            } => Some(server_us),
            _ => None,
        }
    }

    /// Reads acquire.lua's reply. The fast part's, a bulk string of the fence's digits, is the lock
    /// taken on the caller's estimate (which is the fence) with the TTL asked for (`ttl_ms` -1, which
    /// [`granted_ttl`](super::granted_ttl) reads as that).
    pub(crate) fn from_value(v: RedisResult<Value>) -> RedisResult<Self> {
        let v = v?;
        if let Value::BulkString(digits) = &v {
            let fence = std::str::from_utf8(digits)
                .ok()
                .and_then(|d| d.parse::<u64>().ok())
                .ok_or_else(|| bad_reply("acquire", "a fence that is not digits"))?;
            return Ok(AcquireReply::Taken {
                fence,
                ttl_ms: -1,
                server_us: i64::try_from(fence).unwrap_or(i64::MAX),
                exact: false,
            });
        }
        let reply: Vec<i64> = redis::from_redis_value(v)?;
        match *reply {
            [1, n, ttl_ms, server_us, exact] => Ok(AcquireReply::Taken {
                fence: u64::try_from(n).map_err(|_| bad_reply("acquire", "negative fence"))?,
                ttl_ms,
                server_us,
                exact: exact == 1,
            }),
            [0, pttl_ms, server_us, exact] => Ok(AcquireReply::Busy {
                pttl_ms,
                server_us,
                exact: exact == 1,
            }),
            [2] => Ok(AcquireReply::GivenUp),
            [3, permits] => Ok(AcquireReply::PermitsInUse {
                permits: u32::try_from(permits)
                    .map_err(|_| bad_reply("acquire", "permits out of range"))?,
            }),
            _ => Err(bad_reply(
                "acquire",
                "not {1, fence, ttl, time, exact}, {0, pttl, time, exact}, {2} or {3, permits}",
            )),
        }
    }
}

/// What a hand-over put on a waiter's wake list: the lease is the waiter's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct HandOver {
    /// The fence minted for the waiter.
    pub(crate) fence: u64,
    /// Server time of the hand-over, in microseconds: the lock's TTL started then.
    pub(crate) at_us: i64,
    /// The TTL set.
    pub(crate) ttl_ms: i64,
}

impl HandOver {
    /// Reads `"<fence>,<server µs>,<ttl ms>"`.
    pub(crate) fn parse(s: &str) -> RedisResult<Self> {
        let mut it = s.split(',').map(str::parse::<i64>);
        match (it.next(), it.next(), it.next(), it.next()) {
            (Some(Ok(fence)), Some(Ok(at_us)), Some(Ok(ttl_ms)), None) => Ok(HandOver {
                fence: u64::try_from(fence)
                    .map_err(|_| bad_reply("wake list", "negative fence"))?,
                at_us,
                ttl_ms,
            }),
            _ => Err(bad_reply("wake list", "not <fence>,<time>,<ttl>")),
        }
    }
}

pub(crate) fn bad_reply(script: &'static str, what: &'static str) -> redis::RedisError {
    unexpected("unexpected reply from a leasehold script", script, what)
}

/// The driver error for a reply of `script` that is not what it returns (`what`), described as
/// `desc`.
fn unexpected(desc: &'static str, script: &'static str, what: &'static str) -> redis::RedisError {
    redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        desc,
        format!("{script}: {what}"),
    ))
}

/// `d` in whole milliseconds, at least 1 (a script's TTL or linger: 0 would mean none).
fn ms(d: Duration) -> u64 {
    ms_or_zero(d).max(1)
}

/// `d` in whole milliseconds, saturating.
fn ms_or_zero(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

// Each script's keys and arguments are written once, in the function that prepares its invocation;
// a single call (`invoke`) and a pipeline (`pipeline`) both send that invocation.

/// What an acquire asks for: `permits` 1 is a lock; more, one permit of a semaphore.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub(crate) ttl: Duration,
    /// The first TTL if a release hands it over.
    pub(crate) first_ttl: Duration,
    pub(crate) permits: u32,
}

/// acquire.lua (a lock) or sem_acquire.lua (a permit): take it with `token` for `ttl` if one is free
/// and nobody is queued first; mint the fence. When busy and `block` is not zero (a `BLPOP` of the
/// caller's wake list for `block` follows in the same pipeline), queue the caller or refresh its
/// place; a release that hands it over sets `first_ttl`. The script reads the server's clock.
#[cfg(test)]
pub(crate) fn acquire(lock_key: &str, token: &str, ask: Ask, block: Duration, t: &Tuning) -> Call {
    acquire_at(lock_key, token, ask, block, t, None)
}

/// [`acquire`], going by the caller's estimate of the server's clock when it has one (no `TIME` on
/// the common path). The fast part's arguments come first, one each; what only the slow part reads
/// rides in one packed argument (fewer arguments are less work for Redis and for this client on
/// every call).
pub(crate) fn acquire_at(
    lock_key: &str,
    token: &str,
    ask: Ask,
    block: Duration,
    t: &Tuning,
    at: Option<Estimate>,
) -> Call {
    let script = if ask.permits > 1 {
        &SEM_ACQUIRE
    } else {
        &ACQUIRE
    };
    let at = at.unwrap_or(Estimate { lo: 0, hi: 0 });
    let mut call = Call::on_lock(script, lock_key, t);
    call.arg(token)
        .arg(ms(ask.ttl))
        .arg(at.hi)
        .arg(ms(ask.ttl.max(t.retention)))
        .arg(packed(&[
            ms_or_zero(block),
            u64::try_from(at.lo).unwrap_or(0),
            ms(first_ttl(&ask)),
            ms(t.entry_slack),
            ms(t.window()),
            ms(t.queue_life),
            ms(t.retention),
        ]));
    if ask.permits > 1 {
        call.arg(ask.permits);
    }
    call
}

/// The TTL a lock handed over starts with: what the caller asked for, never above its TTL.
pub(crate) fn first_ttl(ask: &Ask) -> Duration {
    ask.first_ttl.min(ask.ttl)
}

/// release.lua (a lock) or sem_release.lua (a permit, `permits` above 1): give it back if `token`
/// holds it, then hand it to the first live waiter. Replies 1 when it was ours.
#[cfg(test)]
pub(crate) fn release(lock_key: &str, token: &str, permits: u32, t: &Tuning) -> Call {
    release_at(lock_key, token, permits, t, None)
}

/// [`release`], going by the caller's estimate of the server's clock when a hand-over needs one.
/// The fast part reads only the token; the rest rides in one packed argument.
pub(crate) fn release_at(
    lock_key: &str,
    token: &str,
    permits: u32,
    t: &Tuning,
    at: Option<Estimate>,
) -> Call {
    let script = if permits > 1 { &SEM_RELEASE } else { &RELEASE };
    let at = at.unwrap_or(Estimate { lo: 0, hi: 0 });
    let mut call = Call::on_lock(script, lock_key, t);
    let hi = u64::try_from(at.hi).unwrap_or(0);
    call.arg(token).arg(packed(&[
        hi,
        u64::try_from(at.lo).unwrap_or(0),
        ms(t.released_memory),
        ms(t.window()),
        ms(t.retention),
        // The earliest join time of a waiter still live by it (the fast hand-over compares it with
        // the queue's scores as digits).
        hi.saturating_sub(ms(t.window()).saturating_mul(1000)),
    ]));
    call
}

/// abandon.lua: leave the queue, remember `token` as given up, release (and hand on) a lock the token
/// holds. `ask` is what the acquire asked for (its queue entry names the first TTL). Replies 1 when
/// it released one.
pub(crate) fn abandon(lock_key: &str, token: &str, ask: &Ask, t: &Tuning) -> Call {
    let mut call = Call::new(&ABANDON, &[lock_key, &never_key(lock_key)]);
    call.arg(token)
        .arg(ms(t.given_up_memory))
        .arg(ms(t.released_memory))
        .arg(ms(t.window()))
        .arg(ms(t.retention))
        .arg(ms(first_ttl(ask)));
    call
}

/// renew.lua (a lock) or sem_renew.lua (a permit): reset its TTL to `ttl` if `token` holds it.
/// Replies whether it was ours ([`renewed`] reads it) and, when `clock` asks for it (sem_renew.lua
/// always), the server's time.
pub(crate) fn renew(lock_key: &str, token: &str, ttl: Duration, permits: u32, clock: bool) -> Call {
    let mut call = if permits > 1 {
        // sem_renew.lua touches the semaphore's holder keys too (renew.lua only the lock).
        Call::new(&SEM_RENEW, &[lock_key, &never_key(lock_key)])
    } else {
        Call::new(&RENEW, &[lock_key])
    };
    call.arg(token).arg(ms(ttl));
    if permits == 1 {
        call.arg(if clock { "1" } else { "0" });
    }
    call
}

/// The most locks one renew_many.lua call renews: Redis runs nothing else while a script runs, so a
/// batch stays short (about 100 µs here).
pub(crate) const RENEW_BATCH: usize = 100;

/// renew_many.lua: renew.lua for each `(lock key, token, ttl)` of `batch` (at most
/// [`RENEW_BATCH`]; on a Redis Cluster, all in one slot) in one call. [`renewed_many`] reads the reply.
pub(crate) fn renew_many(batch: &[(&str, &str, Duration)], clock: bool) -> Call {
    let keys: Vec<&str> = batch.iter().map(|(key, _, _)| *key).collect();
    let mut call = Call::new(&RENEW_MANY, &keys);
    call.arg(if clock { "1" } else { "0" });
    for (_, token, ttl) in batch {
        call.arg(*token).arg(ms(*ttl));
    }
    call
}

/// Reads renew_many.lua's reply for a batch of `n`: per lock `Some(ours)`, or `None` when its key
/// holds another type (to be renewed alone); and the server's time in microseconds when asked for.
pub(crate) fn renewed_many(
    v: RedisResult<Value>,
    n: usize,
) -> RedisResult<(Vec<Option<bool>>, Option<i64>)> {
    let bad = || {
        bad_reply(
            "renew_many",
            "not {flags} or {flags, seconds, microseconds}",
        )
    };
    let Value::Array(items) = v? else {
        return Err(bad());
    };
    let mut items = items.into_iter();
    let flags: Vec<u8> = redis::from_redis_value(items.next().ok_or_else(bad)?)?;
    if flags.len() != n {
        return Err(bad_reply("renew_many", "one flag per lock"));
    }
    let at = match (items.next(), items.next()) {
        (Some(s), Some(us)) => {
            let (s, us): (i64, i64) = (redis::from_redis_value(s)?, redis::from_redis_value(us)?);
            Some(s * 1_000_000 + us)
        }
        (None, None) => None,
        _ => return Err(bad()),
    };
    let flags = flags
        .into_iter()
        .map(|f| match f {
            b'1' => Ok(Some(true)),
            b'0' => Ok(Some(false)),
            b'x' => Ok(None),
            _ => Err(bad_reply("renew_many", "a flag is not 1, 0 or x")),
        })
        .collect::<RedisResult<_>>()?;
    Ok((flags, at))
}

/// force_release.lua: evict the holder whose token is `holder` (`None`: every holder, of a lock or a
/// semaphore), advance the fence, hand what was freed to the first live waiters. `op` identifies this
/// request (a retry sends the same). Replies `{evicted, fence}`.
pub(crate) fn force_release(lock_key: &str, op: &str, holder: Option<&str>, t: &Tuning) -> Call {
    let mut call = Call::new(&FORCE_RELEASE, &[lock_key, &never_key(lock_key)]);
    call.arg(op)
        .arg(ms(t.released_memory))
        .arg(ms(t.window()))
        .arg(ms(t.retention))
        .arg(holder.unwrap_or(""));
    call
}

/// The name's key that never exists, declared as `KEYS[2]` by every script that touches more than the
/// lock, so that Redis Cluster refuses the script whole (`TRYAGAIN`) while the name's slot is being
/// migrated instead of letting it stop half-way (names.lua).
fn never_key(lock_key: &str) -> String {
    format!("{}never", lock_key.strip_suffix("lock").unwrap_or(lock_key))
}

/// One script call, prepared: `EVALSHA <sha1> <numkeys> <keys…> <args…>` written straight into the
/// command that goes out (one buffer, not a list of arguments copied into a command later), and the
/// script to load when the server answers `NOSCRIPT`.
#[derive(Debug, Clone)]
pub(crate) struct Call {
    cmd: redis::Cmd,
    script: &'static Script,
}

impl Call {
    /// A call of `script` with these keys; the arguments follow with [`arg`](Self::arg).
    fn new(script: &'static Script, keys: &[&str]) -> Self {
        // Room for the arguments that follow, so that the buffers are not grown on the way.
        let mut cmd = redis::Cmd::with_capacity(12, 256);
        cmd.arg("EVALSHA")
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys);
        Call { cmd, script }
    }

    /// A call of `script` on the lock key, declaring the name's never-existing key as `KEYS[2]` on a
    /// Redis Cluster (elsewhere it would only cost an argument).
    fn on_lock(script: &'static Script, lock_key: &str, t: &Tuning) -> Self {
        if t.cluster {
            Call::new(script, &[lock_key, &never_key(lock_key)])
        } else {
            Call::new(script, &[lock_key])
        }
    }

    fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.cmd.arg(arg);
        self
    }
}

/// Numbers joined by commas, the packed argument of the fields a script's fast part does not read
/// (written with `itoa`: this runs on every acquire and release).
fn packed(numbers: &[u64]) -> String {
    let mut out = String::with_capacity(numbers.len() * 21);
    let mut buf = itoa::Buffer::new();
    for (i, n) in numbers.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(buf.format(*n));
    }
    out
}

/// Sends one prepared script call (EVALSHA, reloaded once on NOSCRIPT).
pub(crate) async fn invoke<C: ConnectionLike, T: redis::FromRedisValue>(
    con: &mut C,
    call: &Call,
) -> RedisResult<T> {
    let v = single(con, call).await??;
    Ok(redis::from_redis_value(v)?)
}

/// Sends one prepared script call as [`pipeline`] sends each of its own: the outer error is the
/// connection's, the inner one the server's answer to this call (the scripts reloaded and the call
/// sent again once on NOSCRIPT). One call costs less this way than as a pipeline of one.
pub(crate) async fn single<C: ConnectionLike>(
    con: &mut C,
    call: &Call,
) -> RedisResult<RedisResult<Value>> {
    let mut v = con.req_packed_command(&call.cmd).await?;
    if value_is_noscript(&v) {
        call.script.load_async(con).await?;
        v = con.req_packed_command(&call.cmd).await?;
    }
    Ok(match v {
        Value::ServerError(e) => Err(e.into()),
        other => Ok(other),
    })
}

/// Loads every script into the server's cache in one round trip: done on each new dedicated
/// connection, so that a pipelined acquire + `BLPOP` is not answered `NOSCRIPT` after a restart (the
/// `BLPOP` would block its whole time before the retry).
/// check.lua: which key of the name holds something leasehold did not write (read-only).
pub(crate) fn check(lock_key: &str) -> Call {
    Call::new(&CHECK, &[lock_key])
}

/// note.lua: write `note` beside the lock if `token` holds it, kept for `keep`. Replies 1 when it
/// was ours ([`flag`] reads it).
pub(crate) fn note(lock_key: &str, token: &str, note: &[u8], keep: Duration) -> Call {
    let mut call = Call::new(&NOTE, &[lock_key]);
    call.arg(token).arg(note).arg(ms(keep));
    call
}

/// read_note.lua: the note beside the lock, or nil.
pub(crate) fn read_note(lock_key: &str) -> Call {
    Call::new(&READ_NOTE, &[lock_key])
}

/// check.lua's reply: the foreign key and what it holds, or `None`.
pub(crate) fn foreign_of(v: Value) -> RedisResult<Option<(String, String)>> {
    let reply: Vec<String> = redis::from_redis_value(v)?;
    Ok(match <[String; 2]>::try_from(reply) {
        Ok([key, found]) => Some((key, found)),
        Err(_) => None,
    })
}

pub(crate) async fn load_all<C: ConnectionLike>(con: &mut C) -> RedisResult<()> {
    let mut pipe = redis::pipe();
    for lua in ALL_LUA {
        pipe.cmd("SCRIPT").arg("LOAD").arg(lua).ignore();
    }
    pipe.query_async::<()>(con).await
}

/// Sends prepared script calls, then `tail` (a command that must follow them on the same connection,
/// such as `WAIT` or `BLPOP`), in one pipeline: one round trip. If the server lost its script cache (a
/// restart or failover), loads the scripts and sends the pipeline again, which is safe because every
/// script here has the same effect run once or twice. Per item: the reply, or the server's error for
/// it.
pub(crate) async fn pipeline<C: ConnectionLike>(
    con: &mut C,
    calls: impl IntoIterator<Item = Call>,
    tail: Option<redis::Cmd>,
) -> RedisResult<Vec<RedisResult<Value>>> {
    send(con, &pipe_of(calls, tail)).await
}

/// The pipeline [`pipeline`] sends, to be sent by [`send`] (more than once if need be).
pub(crate) fn pipe_of(
    calls: impl IntoIterator<Item = Call>,
    tail: Option<redis::Cmd>,
) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for call in calls {
        pipe.add_command(call.cmd);
    }
    if let Some(cmd) = tail {
        pipe.add_command(cmd);
    }
    pipe
}

/// Sends `pipe` (made by [`pipe_of`]) as [`pipeline`] does.
pub(crate) async fn send<C: ConnectionLike>(
    con: &mut C,
    pipe: &redis::Pipeline,
) -> RedisResult<Vec<RedisResult<Value>>> {
    let mut values: Vec<Value> = pipe.query_async(con).await?;
    if values.iter().any(value_is_noscript) {
        for script in ALL {
            script.load_async(con).await?;
        }
        values = pipe.query_async(con).await?;
    }
    Ok(per_item(values))
}

/// A pipeline's replies sent with errors ignored, one result per item: the reply, or the error
/// the server gave for that item.
fn per_item(values: Vec<Value>) -> Vec<RedisResult<Value>> {
    values
        .into_iter()
        .map(|v| match v {
            Value::ServerError(e) => Err(e.into()),
            other => Ok(other),
        })
        .collect()
}

/// Reads a 0/1 reply (release, abandon), or a renewal's or a hand-over's (whether it was ours).
#[cfg(test)]
pub(crate) fn flag(v: RedisResult<Value>) -> RedisResult<bool> {
    renewed(v).map(|(ours, _)| ours)
}

/// Reads a renewal's reply: whether it was ours and, when it was, the server's time in microseconds.
/// A plain 0/1 (an older renew.lua still cached under another SHA cannot be: the SHA is the source's)
/// is read as well, without a time.
pub(crate) fn renewed(v: RedisResult<Value>) -> RedisResult<(bool, Option<i64>)> {
    match v? {
        Value::Array(items) => {
            let nums: Vec<i64> = redis::from_redis_value(Value::Array(items))?;
            match *nums {
                [1, secs, micros] => Ok((true, Some(secs * 1_000_000 + micros))),
                [0] => Ok((false, None)),
                _ => Err(bad_reply("renew", "not {1, seconds, microseconds} or 0")),
            }
        }
        other => redis::from_redis_value::<i64>(other)
            .map(|n| (n == 1, None))
            .map_err(Into::into),
    }
}

/// Whether a reply is the server's `NOSCRIPT` (its script cache lost a script).
fn value_is_noscript(v: &Value) -> bool {
    matches!(v, Value::ServerError(e) if e.code() == "NOSCRIPT")
}

/// A private redis-server for the scripts' tests, and a connection to it.
#[cfg(test)]
pub(crate) async fn test_server() -> (
    leasehold_testkit::RedisServer,
    redis::aio::MultiplexedConnection,
) {
    let srv = leasehold_testkit::RedisServer::start().expect("start a private redis-server");
    let con = redis::Client::open(srv.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    (srv, con)
}

#[cfg(test)]
mod tests;
