//! The lease scripts' effects, transcribed from the `.lua` files the library ships (names.lua,
//! fence.lua, lib.lua, lib_more.lua and each script), one Rust function per script over a
//! [`Keyspace`], with the same arguments and the same replies.
//!
//! Promise: for keys that leasehold wrote, each function changes the keys and answers as the script
//! does on a real Redis 7 (`tests/against_redis.rs` runs both on thousands of random sequences and
//! compares every reply and every key). Limit: the scripts' refusals of keys leasehold did not write
//! (`LEASEHOLD-FOREIGN`), the Redis Cluster's never-existing key, and Lua's arithmetic beyond 2^53
//! are not transcribed; [`Mutation`]s change the protocol on purpose, for the checker to catch.

use crate::keyspace::Keyspace;

/// What a script answered, in RESP's terms.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reply {
    /// An integer.
    Int(i64),
    /// A bulk string.
    Bulk(String),
    /// Nil (Lua's `false` / `nil`).
    Nil,
    /// An array.
    Array(Vec<Reply>),
    /// An error reply.
    Error(String),
}

fn ints(v: &[i64]) -> Reply {
    Reply::Array(v.iter().map(|n| Reply::Int(*n)).collect())
}

/// A deliberate change of the protocol, for the checker to find (each property has one that breaks
/// it; `tests/mutations.rs`). `None` is the protocol as shipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Mutation {
    /// The protocol as the scripts have it.
    #[default]
    None,
    /// renew.lua resets the TTL without comparing the token.
    RenewWithoutTokenCheck,
    /// renew_many.lua resets each lock's TTL without comparing the token.
    RenewManyWithoutTokenCheck,
    /// acquire's fast part takes a free lock although the record says waiters are queued.
    FastPartSkipsQueue,
    /// The fence without the clock's floor (`stored + 1` only): what a bare `INCR` does.
    FenceWithoutClock,
    /// The hand-over gives the lock to the newest waiter (last in the queue) instead of the first.
    HandToNewest,
    /// The release's hand-over sets the lock without an expiry.
    HandOverWithoutTtl,
    /// A waiter's step that finds the lock free with waiters queued does not hand it over (it
    /// answers busy, as when nobody live is queued): a lock freed by an expiry stays free.
    StepSkipsHandOver,
    /// A retried release (the lock already handed on) no longer finds its token in the record or
    /// the released marker, and says "not yours".
    ReleaseForgetsRetry,
    /// The client's stale-grant check compares the grant's time with the end of the step's block
    /// (when the `BLPOP` returned) instead of the time the step's script ran: a grant handed over
    /// during the block is taken for stale and thrown away.
    StaleCheckAfterTheBlock,
}

/// The timings a client sends (ms), as `scripts::Tuning` and `LeaseOptions` make them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timings {
    /// The lease's TTL.
    pub ttl_ms: i64,
    /// The first TTL of a lease handed over.
    pub first_ms: i64,
    /// One block of a waiter.
    pub block_ms: i64,
    /// Added to a block for a waiter's liveness.
    pub slack_ms: i64,
    /// The queue's life.
    pub life_ms: i64,
    /// The fence record's retention.
    pub retention_ms: i64,
    /// How long a given-up token is remembered.
    pub given_up_ms: i64,
    /// How long a release is remembered.
    pub released_ms: i64,
}

impl Timings {
    /// A waiter counts as live this long after joining: one block and the slack.
    pub fn window_ms(&self) -> i64 {
        self.block_ms + self.slack_ms
    }
}

/// The clock a client sends with an acquire or a release: its estimate of the server's µs (`hi` no
/// earlier, `lo` no later), or none (`0`: the script reads `TIME`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Estimate {
    /// No earlier than the server's clock.
    pub hi: i64,
    /// No later than the server's clock.
    pub lo: i64,
}

/// The name's keys, named as names.lua, lib.lua and lib_more.lua derive them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Names {
    /// `{prefix:name}:` (what every key begins with).
    pub base: String,
}

impl Names {
    /// The keys of `{prefix:name}`.
    pub fn new(prefix: &str, name: &str) -> Self {
        Names {
            base: format!("{{{prefix}:{name}}}:"),
        }
    }
    /// A key of the name.
    pub fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.base)
    }
    /// The lock key (`KEYS[1]` of every script).
    pub fn lock(&self) -> String {
        self.key("lock")
    }
}

fn fmt_num(n: i64) -> String {
    n.to_string()
}

/// "shorter is smaller; of two as long, the one that sorts first" (digit strings).
fn below(a: &str, b: &str) -> bool {
    a.len() < b.len() || (a.len() == b.len() && a < b)
}

fn all_digits(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// The record, `<fence>:<flags>:<holder>:<released>` (lib.lua's `parse_record`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Record {
    /// The last fence issued.
    pub fence: i64,
    /// `q`, `g`, `s`, in the order written.
    pub flags: String,
    /// The token the fence went to.
    pub holder: String,
    /// The token a hand-over released.
    pub released: String,
}

impl Record {
    fn empty() -> Self {
        Record {
            fence: 0,
            flags: String::new(),
            holder: String::new(),
            released: String::new(),
        }
    }

    /// Parses a record (a bare number is a record with only the fence).
    pub fn parse(v: &str) -> Option<Record> {
        if all_digits(v) {
            return Some(Record {
                fence: v.parse().ok()?,
                ..Record::empty()
            });
        }
        let parts: Vec<&str> = v.split(':').collect();
        if parts.len() != 4
            || !all_digits(parts[0])
            || !parts[1].bytes().all(|b| b"gqs".contains(&b))
        {
            return None;
        }
        Some(Record {
            fence: parts[0].parse().ok()?,
            flags: parts[1].to_owned(),
            holder: parts[2].to_owned(),
            released: parts[3].to_owned(),
        })
    }

    fn text(&self) -> String {
        format!(
            "{}:{}:{}:{}",
            self.fence, self.flags, self.holder, self.released
        )
    }

    fn flagged(&self, f: char) -> bool {
        self.flags.contains(f)
    }

    fn set_flag(&mut self, f: char, on: bool) {
        let mut without: String = self.flags.chars().filter(|c| *c != f).collect();
        if on {
            without.push(f);
        }
        self.flags = without;
    }
}

/// One run of a script: the keyspace, the name's keys and the clock the script goes by.
struct Run<'a> {
    ks: &'a mut Keyspace,
    n: &'a Names,
    hi: i64,
    lo: i64,
    exact: bool,
    m: Mutation,
}

impl Run<'_> {
    fn k(&self, s: &str) -> String {
        self.n.key(s)
    }

    fn now_us(&self) -> i64 {
        self.ks.now_us
    }

    fn now_ms(&self) -> i64 {
        self.now_us().div_euclid(1000)
    }

    fn clock_exact(&mut self) {
        self.hi = self.now_us();
        self.lo = self.hi;
        self.exact = true;
    }

    /// fence.lua's `fence_after(stored, proposal, false)`: the proposal is the clock (`hi`).
    fn fence_after(&self, stored: i64, proposal: i64) -> i64 {
        if self.m == Mutation::FenceWithoutClock {
            return stored + 1;
        }
        (stored + 1).max(proposal)
    }

    fn mint(&self, r: &mut Record) -> i64 {
        r.fence = self.fence_after(r.fence, self.hi);
        r.fence
    }

    fn keep(&mut self, key: &str, ms: i64) {
        if self.ks.pttl(key) < ms {
            self.ks.pexpire(key, ms);
        }
    }

    fn read_record(&self) -> (Record, bool) {
        match self.ks.get(&self.k("fence")) {
            None => (Record::empty(), false),
            Some(v) => (Record::parse(&v).unwrap_or_else(Record::empty), true),
        }
    }

    fn write_record(&mut self, r: &Record, ms: Option<i64>) {
        let key = self.k("fence");
        match ms {
            Some(ms) => self.ks.set(&key, &r.text(), Some(ms), false),
            None => self.ks.set(&key, &r.text(), None, true),
        }
    }

    fn enqueue(&mut self, token: &str, t: &Timings) -> bool {
        let q = self.k("queue");
        let added = self
            .ks
            .zadd_nx(&q, self.hi, &format!("{token},{}", t.first_ms));
        self.ks.pexpire(&q, t.life_ms);
        if !added {
            let alive = self.k(&format!("alive:{token}"));
            self.ks
                .set(&alive, "1", Some(t.block_ms + t.slack_ms), false);
            let f = self.k("fence");
            self.keep(&f, t.life_ms);
        }
        added
    }

    fn pop_head(&mut self) -> Option<(String, i64)> {
        let q = self.k("queue");
        if self.m == Mutation::HandToNewest {
            let last = self.ks.zrange(&q).into_iter().last()?;
            self.ks.zrem(&q, &last.0);
            return Some(last);
        }
        self.ks.zpopmin(&q)
    }

    fn live_by_join(&self, score: i64, window_ms: i64) -> bool {
        self.hi <= score + window_ms * 1000
    }

    fn pop_live(&mut self, window_ms: i64) -> Option<(String, i64)> {
        for _ in 0..256 {
            let (member, score) = self.pop_head()?;
            let Some((token, first)) = member.split_once(',') else {
                continue;
            };
            let Ok(first) = first.parse::<i64>() else {
                continue;
            };
            if self.live_by_join(score, window_ms) {
                return Some((token.to_owned(), first));
            }
            let alive = self.k(&format!("alive:{token}"));
            if self.ks.del(&alive) {
                return Some((token.to_owned(), first));
            }
        }
        None
    }

    fn notify(&mut self, token: &str, fence: i64, ttl_ms: i64) {
        let wake = self.k(&format!("wake:{token}"));
        self.ks
            .lpush(&wake, &format!("{fence},{},{ttl_ms}", self.lo));
        self.ks.pexpire(&wake, ttl_ms);
    }

    fn settle_queue_flag(&self, r: &mut Record) {
        if r.flagged('q') && !self.ks.exists(&self.k("queue")) {
            r.set_flag('q', false);
        }
    }

    fn lock_px(&mut self, value: &str, px: i64) {
        let lock = self.n.lock();
        if self.m == Mutation::HandOverWithoutTtl {
            self.ks.set(&lock, value, None, false);
        } else {
            self.ks.set(&lock, value, Some(px), false);
        }
    }

    fn hand_lock(&mut self, r: &mut Record, window_ms: i64) -> Option<(String, i64, i64)> {
        loop {
            let (head, first) = self.pop_live(window_ms)?;
            let gone = r.flagged('g') && self.ks.zscore(&self.k("gone"), &head).is_some();
            if !gone {
                self.mint(r);
                r.holder = head.clone();
                self.settle_queue_flag(r);
                let v = if r.flagged('q') {
                    format!("{head}:q")
                } else {
                    head.clone()
                };
                self.lock_px(&v, first);
                self.notify(&head, r.fence, first);
                return Some((head, r.fence, first));
            }
        }
    }

    // lib_more.lua: the semaphore's bookkeeping.

    fn stored_number(&self, key: &str) -> Option<i64> {
        self.ks.get(key).and_then(|v| v.parse().ok())
    }

    fn prune_holders(&mut self) -> usize {
        let now = self.now_ms();
        let holders = self.k("holders");
        let expired = self.ks.zrem_upto(&holders, now, false);
        let held = self.k("held");
        for t in expired {
            self.ks.hdel(&held, &t);
        }
        self.ks.zcard(&holders)
    }

    fn add_holder(&mut self, token: &str, fence: i64, ttl_ms: i64) {
        let (holders, held, permits) = (self.k("holders"), self.k("held"), self.k("permits"));
        self.ks.zadd(&holders, self.now_ms() + ttl_ms, token);
        self.ks.hset(&held, token, &fmt_num(fence));
        self.keep(&holders, ttl_ms);
        self.keep(&held, ttl_ms);
        self.keep(&permits, ttl_ms);
    }

    fn permit_fence(&mut self, retention_ms: i64) -> i64 {
        let (mut r, _) = self.read_record();
        self.mint(&mut r);
        r.holder = String::new();
        r.set_flag('s', true);
        self.write_record(&r, Some(retention_ms));
        r.fence
    }

    fn fill_permits(
        &mut self,
        token: &str,
        window_ms: i64,
        retention_ms: i64,
    ) -> (i64, Option<(i64, i64)>) {
        let n = self.stored_number(&self.k("permits")).unwrap_or(0);
        let mut free = n - self.prune_holders() as i64;
        let mut mine = None;
        while free > 0 && self.ks.exists(&self.k("queue")) {
            let Some((head, first)) = self.pop_live(window_ms) else {
                break;
            };
            let fence = self.permit_fence(retention_ms);
            self.add_holder(&head, fence, first);
            self.notify(&head, fence, first);
            if head == token {
                mine = Some((fence, first));
            }
            free -= 1;
        }
        (free, mine)
    }

    fn semaphore_in_use(&mut self) -> Option<i64> {
        let stored = self.stored_number(&self.k("permits"))?;
        if self.prune_holders() > 0 || self.ks.exists(&self.k("queue")) {
            return Some(stored);
        }
        for k in ["permits", "holders", "held"] {
            let key = self.k(k);
            self.ks.del(&key);
        }
        None
    }
}

/// One call of a script, as the client prepares it (`scripts/mod.rs`'s `acquire_at`, `release_at`,
/// `renew`, `abandon`, `force_release`, `note`, `read_note`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Call {
    /// acquire.lua (sem_acquire.lua with `permits` > 1); `wait`: a block follows (joins the queue).
    Acquire {
        /// The attempt's token.
        token: String,
        /// Whether the caller waits (the packed block is `block_ms`, else 0).
        wait: bool,
        /// The clock the caller sends, or none.
        est: Option<Estimate>,
        /// 1: a lock.
        permits: i64,
    },
    /// release.lua (sem_release.lua).
    Release {
        /// The lease's token.
        token: String,
        /// The clock the caller sends, or none.
        est: Option<Estimate>,
        /// 1: a lock.
        permits: i64,
    },
    /// renew.lua (sem_renew.lua).
    Renew {
        /// The lease's token.
        token: String,
        /// Ask for the server's clock (locks only).
        clock: bool,
        /// 1: a lock.
        permits: i64,
    },
    /// renew_many.lua: renew.lua's compare-and-pexpire for each lock of a batch, in one call (the
    /// watchdog's renewal of several leases of one client). Its locks may be of any names, not only
    /// the one [`run`] is given: the batch names its lock keys.
    RenewMany {
        /// Each lock key with the token it should hold (the TTL is [`Timings::ttl_ms`]).
        batch: Vec<(String, String)>,
        /// Ask for the server's clock.
        clock: bool,
    },
    /// abandon.lua.
    Abandon {
        /// The attempt's token.
        token: String,
    },
    /// force_release.lua.
    ForceRelease {
        /// The request's id (letters and digits).
        op: String,
        /// The token to evict, or every holder.
        target: Option<String>,
    },
    /// note.lua.
    Note {
        /// The writer's token.
        token: String,
        /// The note.
        note: String,
    },
    /// read_note.lua.
    ReadNote,
}

impl Call {
    /// The script's name in `leasehold::lease::store::redis::script_sources()`.
    pub fn script(&self) -> &'static str {
        match self {
            Call::Acquire { permits, .. } if *permits > 1 => "sem_acquire",
            Call::Acquire { .. } => "acquire",
            Call::Release { permits, .. } if *permits > 1 => "sem_release",
            Call::Release { .. } => "release",
            Call::Renew { permits, .. } if *permits > 1 => "sem_renew",
            Call::Renew { .. } => "renew",
            Call::RenewMany { .. } => "renew_many",
            Call::Abandon { .. } => "abandon",
            Call::ForceRelease { .. } => "force_release",
            Call::Note { .. } => "note",
            Call::ReadNote => "read_note",
        }
    }

    /// The keys (`KEYS`), as the client sends them: the name's lock key, or a batch's lock keys.
    pub fn keys(&self, n: &Names) -> Vec<String> {
        match self {
            Call::RenewMany { batch, .. } => batch.iter().map(|(key, _)| key.clone()).collect(),
            _ => vec![n.lock()],
        }
    }

    /// The arguments (`ARGV`), as the client sends them.
    pub fn argv(&self, t: &Timings) -> Vec<String> {
        let first = t.first_ms.min(t.ttl_ms);
        let packed = |v: &[i64]| {
            v.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Call::Acquire {
                token,
                wait,
                est,
                permits,
            } => {
                let e = est.unwrap_or(Estimate { hi: 0, lo: 0 });
                let block = if *wait { t.block_ms } else { 0 };
                let mut v = vec![
                    token.clone(),
                    t.ttl_ms.to_string(),
                    e.hi.to_string(),
                    t.ttl_ms.max(t.retention_ms).to_string(),
                    packed(&[
                        block,
                        e.lo,
                        first,
                        t.slack_ms,
                        t.window_ms(),
                        t.life_ms,
                        t.retention_ms,
                    ]),
                ];
                if *permits > 1 {
                    v.push(permits.to_string());
                }
                v
            }
            Call::Release { token, est, .. } => {
                let e = est.unwrap_or(Estimate { hi: 0, lo: 0 });
                vec![
                    token.clone(),
                    packed(&[
                        e.hi,
                        e.lo,
                        t.released_ms,
                        t.window_ms(),
                        t.retention_ms,
                        (e.hi - t.window_ms() * 1000).max(0),
                    ]),
                ]
            }
            Call::Renew {
                token,
                clock,
                permits,
            } => {
                let mut v = vec![token.clone(), t.ttl_ms.to_string()];
                if *permits == 1 {
                    v.push(if *clock { "1" } else { "0" }.to_owned());
                }
                v
            }
            Call::RenewMany { batch, clock } => {
                let mut v = vec![if *clock { "1" } else { "0" }.to_owned()];
                for (_, token) in batch {
                    v.push(token.clone());
                    v.push(t.ttl_ms.to_string());
                }
                v
            }
            Call::Abandon { token } => vec![
                token.clone(),
                t.given_up_ms.to_string(),
                t.released_ms.to_string(),
                t.window_ms().to_string(),
                t.retention_ms.to_string(),
                first.to_string(),
            ],
            Call::ForceRelease { op, target } => vec![
                op.clone(),
                t.released_ms.to_string(),
                t.window_ms().to_string(),
                t.retention_ms.to_string(),
                target.clone().unwrap_or_default(),
            ],
            Call::Note { token, note } => {
                vec![token.clone(), note.clone(), t.retention_ms.to_string()]
            }
            Call::ReadNote => Vec::new(),
        }
    }
}

/// Runs `call` on the keyspace as the script would, with `m` changing the protocol (or not).
pub fn run(ks: &mut Keyspace, n: &Names, t: &Timings, call: &Call, m: Mutation) -> Reply {
    let mut r = Run {
        ks,
        n,
        hi: 0,
        lo: 0,
        exact: false,
        m,
    };
    let first = t.first_ms.min(t.ttl_ms);
    let t = Timings {
        first_ms: first,
        ..*t
    };
    match call {
        Call::Acquire {
            token,
            wait,
            est,
            permits,
        } => {
            let block = if *wait { t.block_ms } else { 0 };
            if *permits > 1 {
                r.sem_acquire(token, block, *permits, &t)
            } else {
                r.acquire(token, block, *est, &t)
            }
        }
        Call::Release {
            token,
            est,
            permits,
        } => {
            if *permits > 1 {
                r.sem_release(token, &t)
            } else {
                r.release(token, *est, &t)
            }
        }
        Call::Renew {
            token,
            clock,
            permits,
        } => {
            if *permits > 1 {
                r.sem_renew(token, &t)
            } else {
                r.renew(token, *clock, &t)
            }
        }
        Call::RenewMany { batch, clock } => r.renew_many(batch, *clock, &t),
        Call::Abandon { token } => r.abandon(token, &t),
        Call::ForceRelease { op, target } => r.force_release(op, target.as_deref(), &t),
        Call::Note { token, note } => {
            let held = r.ks.get(&n.lock());
            if held.as_deref() != Some(token) && held != Some(format!("{token}:q")) {
                return Reply::Int(0);
            }
            r.ks.set(&n.key("note"), note, Some(t.retention_ms), false);
            Reply::Int(1)
        }
        Call::ReadNote => r.ks.get(&n.key("note")).map_or(Reply::Nil, Reply::Bulk),
    }
}

impl Run<'_> {
    fn taken(&mut self, token: &str, block: i64, fence: i64, ttl_now: i64) -> Reply {
        if block > 0 {
            self.notify(token, fence, ttl_now);
        }
        ints(&[1, fence, ttl_now, self.hi, i64::from(self.exact)])
    }

    fn busy(&self, pttl: i64) -> Reply {
        ints(&[0, pttl, self.hi, i64::from(self.exact)])
    }

    /// acquire_fast.lua, then acquire.lua.
    fn acquire(&mut self, token: &str, block: i64, est: Option<Estimate>, t: &Timings) -> Reply {
        let lock = self.n.lock();
        let fence_key = self.k("fence");
        let mut hi_text = est.map_or("0".to_owned(), |e| e.hi.to_string());
        let lo_sent = est.map_or(0, |e| e.lo);
        if hi_text == "0" {
            self.hi = self.now_us();
            self.lo = self.hi;
            self.exact = true;
            hi_text = fmt_num(self.hi);
        }
        let held = self.ks.set_nx_get(&lock, token, t.ttl_ms);
        let mut old = None;
        if held.is_none() {
            old = self.ks.set_get(
                &fence_key,
                &format!("{hi_text}::{token}:"),
                t.retention_ms.max(t.ttl_ms),
            );
            // Without the clock the fence is the record's + 1, which only the second part mints.
            let mut newer = old.is_none() && self.m != Mutation::FenceWithoutClock;
            if let Some(o) = &old {
                let digits = o.bytes().take_while(u8::is_ascii_digit).count();
                if digits > 0 && o[digits..].starts_with("::") {
                    newer = digits < hi_text.len()
                        || (digits == hi_text.len() && o[..digits] < *hi_text);
                }
                if self.m == Mutation::FastPartSkipsQueue {
                    // Takes a free lock as if the record had no flags.
                    if let Some(rec) = Record::parse(o) {
                        if rec.fence < hi_text.parse::<i64>().unwrap_or(0) {
                            newer = true;
                        }
                    }
                }
            }
            if newer {
                if block > 0 {
                    let lo_text = if self.exact {
                        hi_text.clone()
                    } else {
                        lo_sent.to_string()
                    };
                    let wake = self.k(&format!("wake:{token}"));
                    self.ks
                        .lpush(&wake, &format!("{hi_text},{lo_text},{}", t.ttl_ms));
                    self.ks.pexpire(&wake, t.ttl_ms);
                }
                if !self.exact {
                    return Reply::Bulk(hi_text);
                }
                return ints(&[1, self.hi, t.ttl_ms, self.hi, 1]);
            }
        }
        if let Some(h) = &held {
            // A try behind a holder that already has others queued (a waiting acquire's first
            // step, mostly): busy with the holder's TTL, nothing written.
            if block == 0 && h.ends_with(":q") && *h != format!("{token}:q") {
                let hi_n: i64 = hi_text.parse().unwrap_or(0);
                return ints(&[0, self.ks.pttl(&lock), hi_n, i64::from(self.exact)]);
            }
            if block > 0 && h.ends_with(":q") && *h != format!("{token}:q") {
                let hi_n: i64 = hi_text.parse().unwrap_or(0);
                let q = self.k("queue");
                let added = self
                    .ks
                    .zadd_nx(&q, hi_n, &format!("{token},{}", t.first_ms));
                self.ks.pexpire(&q, t.life_ms);
                let mut pttl = -3;
                if !added {
                    let alive = self.k(&format!("alive:{token}"));
                    self.ks.set(&alive, "1", Some(block + t.slack_ms), false);
                    if self.ks.pttl(&fence_key) < t.life_ms {
                        self.ks.pexpire(&fence_key, t.life_ms);
                    }
                    pttl = self.ks.pttl(&lock);
                }
                return ints(&[0, pttl, hi_n, i64::from(self.exact)]);
            }
        }
        // acquire.lua
        if !self.exact {
            self.hi = hi_text.parse().unwrap_or(0);
            self.lo = lo_sent;
        }
        let window = t.window_ms();
        let keep_ms = t.retention_ms.max(t.ttl_ms);
        match held {
            None => {
                let mut r = old
                    .as_deref()
                    .and_then(Record::parse)
                    .unwrap_or_else(Record::empty);
                let gone = self.k("gone");
                let undo = |s: &mut Self| {
                    s.ks.del(&lock);
                    match &old {
                        Some(o) => s.ks.set(&fence_key, o, None, true),
                        None => {
                            s.ks.del(&fence_key);
                        }
                    }
                };
                if r.flagged('g') {
                    if self.ks.zscore(&gone, token).is_some() {
                        undo(self);
                        return ints(&[2]);
                    }
                    if !self.ks.exists(&gone) {
                        r.set_flag('g', false);
                    }
                }
                if r.flagged('s') {
                    if let Some(p) = self.semaphore_in_use() {
                        undo(self);
                        return ints(&[3, p]);
                    }
                    r.set_flag('s', false);
                }
                if r.flagged('q') {
                    let handed = if self.m == Mutation::StepSkipsHandOver {
                        None
                    } else {
                        self.hand_lock(&mut r, window)
                    };
                    if let Some((head, fence, head_first)) = handed {
                        self.write_record(&r, Some(keep_ms));
                        if head == token {
                            return ints(&[1, fence, head_first, self.hi, i64::from(self.exact)]);
                        }
                        if block > 0 {
                            self.enqueue_block(token, block, t);
                        }
                        return self.busy(head_first);
                    }
                    self.settle_queue_flag(&mut r);
                    if r.flagged('q') {
                        self.ks.del(&lock);
                        self.write_record(&r, Some(keep_ms));
                        if block > 0 {
                            self.enqueue_block(token, block, t);
                        }
                        return self.busy(0);
                    }
                }
                self.mint(&mut r);
                r.holder = token.to_owned();
                self.write_record(&r, Some(keep_ms));
                self.taken(token, block, r.fence, t.ttl_ms)
            }
            Some(h) if h == token || h == format!("{token}:q") => {
                let (r, existed) = self.read_record();
                if !existed {
                    return Reply::Error(
                        "LEASEHOLD the fence of this lease outlived its retention; acquire again"
                            .into(),
                    );
                }
                let pttl = self.ks.pttl(&lock);
                self.taken(token, block, r.fence, pttl)
            }
            Some(h) => {
                let queued_behind = h.ends_with(":q");
                let mut pttl = -3;
                if block == 0 || !queued_behind {
                    pttl = self.ks.pttl(&lock);
                }
                let (mut r, mut existed) = (Record::empty(), false);
                if !queued_behind {
                    (r, existed) = self.read_record();
                    if r.flagged('g') && self.ks.zscore(&self.k("gone"), token).is_some() {
                        return ints(&[2]);
                    }
                }
                if block > 0 {
                    if !self.enqueue_block(token, block, t) && pttl == -3 {
                        pttl = self.ks.pttl(&lock);
                    }
                    if !queued_behind {
                        if r.holder == h {
                            self.ks.set_xx_keepttl(&lock, &format!("{h}:q"));
                        }
                        if !r.flagged('q') {
                            r.set_flag('q', true);
                            let ms = (!existed).then(|| keep_ms.max(t.life_ms));
                            self.write_record(&r, ms);
                        }
                    }
                }
                self.busy(pttl)
            }
        }
    }

    fn enqueue_block(&mut self, token: &str, block: i64, t: &Timings) -> bool {
        let tb = Timings {
            block_ms: block,
            ..*t
        };
        self.enqueue(token, &tb)
    }

    fn released(&self) -> Reply {
        if self.exact {
            ints(&[
                1,
                self.hi.div_euclid(1_000_000),
                self.hi.rem_euclid(1_000_000),
            ])
        } else {
            Reply::Int(1)
        }
    }

    /// release_fast.lua, then release.lua.
    fn release(&mut self, token: &str, est: Option<Estimate>, t: &Timings) -> Reply {
        let lock = self.n.lock();
        let held = self.ks.get(&lock);
        if held.as_deref() == Some(token) {
            self.ks.rename(&lock, &self.k("released"));
            return Reply::Int(1);
        }
        if held != Some(format!("{token}:q")) {
            if self.m == Mutation::ReleaseForgetsRetry {
                return Reply::Int(0);
            }
            if self.ks.get(&self.k("released")).as_deref() == Some(token) {
                return Reply::Int(1);
            }
            if let Some(rec) = self.ks.get(&self.k("fence")) {
                let parts: Vec<&str> = rec.split(':').collect();
                if parts.len() == 4
                    && all_digits(parts[0])
                    && parts[1].chars().all(|c| c.is_ascii_alphabetic())
                    && parts[3] == token
                {
                    return Reply::Int(1);
                }
            }
            return Reply::Int(0);
        }
        let window = t.window_ms();
        let (mut hi_s, mut lo_s) = match est {
            Some(e) => (e.hi.to_string(), e.lo.to_string()),
            None => ("0".to_owned(), "0".to_owned()),
        };
        let mut live_from = est.map_or(0, |e| (e.hi - window * 1000).max(0)).to_string();
        if hi_s == "0" {
            self.hi = self.now_us();
            self.lo = self.hi;
            self.exact = true;
            hi_s = fmt_num(self.hi);
            lo_s = hi_s.clone();
            live_from = fmt_num(self.hi - window * 1000);
        }
        let mut pending: Option<(String, i64, Option<String>)> = None;
        if let Some((member, score)) = self.pop_head() {
            let score_s = fmt_num(score);
            if let Some((head, first)) = member.split_once(',') {
                let first: i64 = first.parse().unwrap_or(0);
                let live =
                    !below(&score_s, &live_from) || self.ks.del(&self.k(&format!("alive:{head}")));
                if live {
                    let old = self.ks.set_get(
                        &self.k("fence"),
                        &format!("{hi_s}:q:{head}:{token}"),
                        t.retention_ms,
                    );
                    let plain_fence = old.as_deref().and_then(|o| {
                        let p: Vec<&str> = o.split(':').collect();
                        (p.len() == 4 && all_digits(p[0]) && p[1] == "q").then(|| p[0].to_owned())
                    });
                    if old.is_none() || plain_fence.as_deref().is_some_and(|f| below(f, &hi_s)) {
                        self.lock_px(&format!("{head}:q"), first);
                        let wake = self.k(&format!("wake:{head}"));
                        self.ks.lpush(&wake, &format!("{hi_s},{lo_s},{first}"));
                        self.ks.pexpire(&wake, first);
                        if self.exact {
                            return self.released();
                        }
                        return Reply::Int(1);
                    }
                    pending = Some((head.to_owned(), first, old));
                }
            }
        }
        if !self.exact {
            self.hi = hi_s.parse().unwrap_or(0);
            self.lo = lo_s.parse().unwrap_or(0);
        }
        // release.lua
        if let Some((head, first, old)) = pending {
            if self.hand_to(token, &head, first, Some(old), t) {
                return self.released();
            }
        }
        while let Some((head, first)) = self.pop_live(window) {
            if self.hand_to(token, &head, first, None, t) {
                return self.released();
            }
        }
        self.ks.rename(&lock, &self.k("released"));
        let (mut r, existed) = self.read_record();
        if existed {
            self.settle_queue_flag(&mut r);
            r.released = token.to_owned();
            self.write_record(&r, None);
        }
        self.released()
    }

    fn hand_to(
        &mut self,
        token: &str,
        head: &str,
        first: i64,
        written: Option<Option<String>>,
        t: &Timings,
    ) -> bool {
        let mut r = Record {
            fence: self.hi,
            flags: "q".into(),
            holder: head.to_owned(),
            released: token.to_owned(),
        };
        let old = match written {
            Some(old) => old,
            None => self.ks.set_get(&self.k("fence"), &r.text(), t.retention_ms),
        };
        if let Some(prev) = old.as_deref().and_then(Record::parse) {
            let mut fix = false;
            if prev.fence >= r.fence {
                r.fence = self.fence_after(prev.fence, self.hi);
                fix = true;
            }
            for f in ['g', 's'] {
                if prev.flagged(f) {
                    r.set_flag(f, true);
                    fix = true;
                }
            }
            if prev.flagged('g') && self.ks.zscore(&self.k("gone"), head).is_some() {
                r.holder = prev.holder.clone();
                self.write_record(&r, Some(t.retention_ms));
                return false;
            }
            if fix {
                self.write_record(&r, Some(t.retention_ms));
            }
        }
        self.lock_px(&format!("{head}:q"), first);
        self.notify(head, r.fence, first);
        true
    }

    /// renew.lua.
    fn renew(&mut self, token: &str, clock: bool, t: &Timings) -> Reply {
        let lock = self.n.lock();
        let held = self.ks.get(&lock);
        let ours = held.as_deref() == Some(token) || held == Some(format!("{token}:q"));
        let unchecked = self.m == Mutation::RenewWithoutTokenCheck && held.is_some();
        if !(ours || unchecked) {
            return Reply::Int(0);
        }
        self.ks.pexpire(&lock, t.ttl_ms);
        if !clock {
            return Reply::Int(1);
        }
        let us = self.now_us();
        ints(&[1, us.div_euclid(1_000_000), us.rem_euclid(1_000_000)])
    }

    /// renew_many.lua: one flag a lock (`1` ours and its TTL reset, `0` not ours, `x` a key of
    /// another type, left alone), then the server's clock if asked.
    fn renew_many(&mut self, batch: &[(String, String)], clock: bool, t: &Timings) -> Reply {
        let mut flags = String::with_capacity(batch.len());
        for (key, token) in batch {
            let held = self.ks.get(key);
            if held.is_none() && self.ks.exists(key) {
                flags.push('x');
                continue;
            }
            let ours =
                held.as_deref() == Some(token.as_str()) || held == Some(format!("{token}:q"));
            let unchecked = self.m == Mutation::RenewManyWithoutTokenCheck && held.is_some();
            if ours || unchecked {
                self.ks.pexpire(key, t.ttl_ms);
                flags.push('1');
            } else {
                flags.push('0');
            }
        }
        if !clock {
            return Reply::Array(vec![Reply::Bulk(flags)]);
        }
        let us = self.now_us();
        Reply::Array(vec![
            Reply::Bulk(flags),
            Reply::Int(us.div_euclid(1_000_000)),
            Reply::Int(us.rem_euclid(1_000_000)),
        ])
    }

    /// abandon.lua.
    fn abandon(&mut self, token: &str, t: &Timings) -> Reply {
        self.clock_exact();
        let window = t.window_ms();
        let (q, gone, lock) = (self.k("queue"), self.k("gone"), self.n.lock());
        self.ks.zrem(&q, &format!("{token},{}", t.first_ms));
        let alive = self.k(&format!("alive:{token}"));
        self.ks.del(&alive);
        let wake = self.k(&format!("wake:{token}"));
        self.ks.del(&wake);
        let now = self.now_ms();
        self.ks.zadd(&gone, now + t.given_up_ms, token);
        self.ks.zrem_upto(&gone, now, true);
        self.ks.pexpire(&gone, t.given_up_ms);
        let (mut r, existed) = self.read_record();
        if !r.flagged('g') {
            r.set_flag('g', true);
            self.write_record(&r, (!existed).then_some(t.retention_ms));
        }
        let f = self.k("fence");
        self.keep(&f, t.given_up_ms);
        let held = self.ks.get(&lock);
        if held.as_deref() == Some(token) || held == Some(format!("{token}:q")) {
            if self.hand_lock(&mut r, window).is_some() {
                r.released = token.to_owned();
                self.write_record(&r, Some(t.retention_ms));
            } else {
                self.ks.del(&lock);
                let rel = self.k("released");
                self.ks.set(&rel, token, Some(t.released_ms), false);
                self.settle_queue_flag(&mut r);
                self.write_record(&r, None);
            }
            return Reply::Int(1);
        }
        let holders = self.k("holders");
        if self.ks.zrem(&holders, token) {
            let held_key = self.k("held");
            self.ks.hdel(&held_key, token);
            let rp = self.k(&format!("released:{token}"));
            self.ks.set(&rp, "1", Some(t.released_ms), false);
            self.fill_permits(token, window, t.retention_ms);
            return Reply::Int(1);
        }
        Reply::Int(0)
    }

    /// force_release.lua.
    fn force_release(&mut self, op: &str, target: Option<&str>, t: &Timings) -> Reply {
        self.clock_exact();
        let window = t.window_ms();
        let (forced, lock) = (self.k("forced"), self.n.lock());
        if let Some(last) = self.ks.get(&forced) {
            let p: Vec<&str> = last.split(',').collect();
            if p.len() == 3 && p[0] == op {
                return ints(&[p[1].parse().unwrap_or(0), p[2].parse().unwrap_or(0)]);
            }
        }
        let target = target.unwrap_or("");
        let mut evicted = 0;
        let held = self.ks.get(&lock);
        if let Some(h) = &held {
            let holder = h.strip_suffix(":q").unwrap_or(h);
            if target.is_empty() || holder == target {
                let wake = self.k(&format!("wake:{holder}"));
                self.ks.del(&wake);
            }
        }
        let (holders, held_key) = (self.k("holders"), self.k("held"));
        if target.is_empty() {
            evicted = i64::from(self.ks.del(&lock));
            if self.prune_holders() > 0 {
                evicted = 1;
            }
            self.ks.del(&holders);
            self.ks.del(&held_key);
        } else if held
            .as_deref()
            .is_some_and(|h| h == target || h == format!("{target}:q"))
        {
            evicted = i64::from(self.ks.del(&lock));
        } else if self.ks.zrem(&holders, target) {
            self.ks.hdel(&held_key, target);
            evicted = 1;
        }
        let (mut r, _) = self.read_record();
        let fence = self.mint(&mut r);
        r.holder = String::new();
        if self.ks.exists(&self.k("queue")) {
            if self.ks.exists(&self.k("permits")) {
                self.write_record(&r, Some(t.retention_ms));
                self.fill_permits("", window, t.retention_ms);
                r = self.read_record().0;
            } else if !self.ks.exists(&lock) {
                self.hand_lock(&mut r, window);
            }
        }
        self.settle_queue_flag(&mut r);
        self.write_record(&r, Some(t.retention_ms));
        self.ks.set(
            &forced,
            &format!("{op},{evicted},{fence}"),
            Some(t.released_ms),
            false,
        );
        ints(&[evicted, fence])
    }

    /// sem_acquire.lua.
    fn sem_acquire(&mut self, token: &str, block: i64, permits: i64, t: &Timings) -> Reply {
        self.clock_exact();
        let window = t.window_ms();
        let (holders, held_key, permits_key) =
            (self.k("holders"), self.k("held"), self.k("permits"));
        if let Some(until) = self.ks.zscore(&holders, token) {
            if until > self.now_ms() {
                let fence = self
                    .ks
                    .hget(&held_key, token)
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(0);
                let left = until - self.now_ms();
                return self.taken(token, block, fence, left);
            }
        }
        if self.ks.zscore(&self.k("gone"), token).is_some() {
            return ints(&[2]);
        }
        if self.ks.exists(&self.n.lock()) {
            return ints(&[3, 1]);
        }
        let stored = self.stored_number(&permits_key).unwrap_or(0);
        let live = self.prune_holders();
        let queued = self.ks.exists(&self.k("queue"));
        if stored != permits {
            if stored > 0 && (live > 0 || queued) {
                return ints(&[3, stored]);
            }
            if stored == 0 && queued {
                return ints(&[3, 1]);
            }
            self.ks
                .set(&permits_key, &permits.to_string(), Some(t.life_ms), false);
        }
        self.keep(&permits_key, t.life_ms);
        let (free, mine) = self.fill_permits(token, window, t.retention_ms);
        if let Some((fence, first)) = mine {
            return ints(&[1, fence, first, self.hi, 1]);
        }
        if free > 0 && !self.ks.exists(&self.k("queue")) {
            let fence = self.permit_fence(t.retention_ms);
            self.add_holder(token, fence, t.ttl_ms);
            return self.taken(token, block, fence, t.ttl_ms);
        }
        let remaining = self
            .ks
            .zrange(&holders)
            .first()
            .map_or(0, |(_, s)| s - self.now_ms());
        if block > 0 {
            let (mut r, existed) = self.read_record();
            if !r.flagged('q') || !r.flagged('s') {
                r.set_flag('q', true);
                r.set_flag('s', true);
                let ms = (!existed).then(|| t.retention_ms.max(t.life_ms));
                self.write_record(&r, ms);
            }
            self.enqueue_block(token, block, t);
        }
        ints(&[0, remaining, self.hi, 1])
    }

    /// sem_release.lua.
    fn sem_release(&mut self, token: &str, t: &Timings) -> Reply {
        self.clock_exact();
        let holders = self.k("holders");
        let live = self
            .ks
            .zscore(&holders, token)
            .is_some_and(|until| until > self.now_ms());
        let rp = self.k(&format!("released:{token}"));
        if !live {
            return Reply::Int(i64::from(self.ks.exists(&rp)));
        }
        self.ks.zrem(&holders, token);
        let held_key = self.k("held");
        self.ks.hdel(&held_key, token);
        self.ks.set(&rp, "1", Some(t.released_ms), false);
        self.fill_permits(token, t.window_ms(), t.retention_ms);
        Reply::Int(1)
    }

    /// sem_renew.lua.
    fn sem_renew(&mut self, token: &str, t: &Timings) -> Reply {
        self.clock_exact();
        let holders = self.k("holders");
        let live = self
            .ks
            .zscore(&holders, token)
            .is_some_and(|until| until > self.now_ms());
        if !live {
            return Reply::Int(0);
        }
        self.ks.zadd_xx(&holders, self.now_ms() + t.ttl_ms, token);
        let (held_key, permits_key) = (self.k("held"), self.k("permits"));
        self.keep(&holders, t.ttl_ms);
        self.keep(&held_key, t.ttl_ms);
        self.keep(&permits_key, t.ttl_ms);
        let us = self.now_us();
        ints(&[1, us.div_euclid(1_000_000), us.rem_euclid(1_000_000)])
    }
}
