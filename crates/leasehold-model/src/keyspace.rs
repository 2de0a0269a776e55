//! A Redis keyspace in memory: the handful of commands the lease scripts send, with Redis's own
//! expiry rule (a key is gone once the server's clock in ms is past its expiry), on a server clock
//! the model moves.
//!
//! Promise: each command here answers and changes keys as Redis 7 does for the arguments the
//! scripts pass (the model-based test, `tests/against_redis.rs`, compares the keys with a real
//! server's after every step). Limit: only those commands and arguments; scores and numbers are
//! integers (every score the scripts write is a whole number of µs or ms), and nothing here is
//! replicated or persisted (faults are whole-keyspace operations in `checker`).

use std::collections::BTreeMap;

/// A key's value, in the types the scripts use.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    /// A string.
    Str(String),
    /// A list, head first (`LPUSH` puts at the head).
    List(Vec<String>),
    /// A sorted set: member to score.
    ZSet(BTreeMap<String, i64>),
    /// A hash: field to value.
    Hash(BTreeMap<String, String>),
}

/// A key: its value and its expiry (absolute, server ms), if any.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Entry {
    /// What it holds.
    pub value: Value,
    /// When it expires (server ms since 1970); `None`: never.
    pub expires_at_ms: Option<i64>,
}

/// The server: its keys and its wall clock.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Keyspace {
    /// Every key that was written and not deleted (expired ones are dropped when the clock moves).
    pub keys: BTreeMap<String, Entry>,
    /// The server's wall clock, µs since 1970 (what `TIME` answers).
    pub now_us: i64,
}

impl Keyspace {
    /// An empty server whose clock reads `now_us`.
    pub fn new(now_us: i64) -> Self {
        Keyspace {
            keys: BTreeMap::new(),
            now_us,
        }
    }

    /// The clock in ms, as Redis judges expiries.
    pub fn now_ms(&self) -> i64 {
        self.now_us.div_euclid(1000)
    }

    /// Moves the clock to `now_us` and drops what expired by then (Redis drops them lazily, which
    /// no command can tell apart).
    pub fn set_clock(&mut self, now_us: i64) {
        self.now_us = now_us;
        let now = self.now_ms();
        self.keys
            .retain(|_, e| e.expires_at_ms.is_none_or(|at| at >= now));
    }

    fn live(&self, key: &str) -> Option<&Entry> {
        let now = self.now_ms();
        self.keys
            .get(key)
            .filter(|e| e.expires_at_ms.is_none_or(|at| at >= now))
    }

    fn live_mut(&mut self, key: &str) -> Option<&mut Entry> {
        let now = self.now_ms();
        if self
            .keys
            .get(key)
            .is_some_and(|e| e.expires_at_ms.is_some_and(|at| at < now))
        {
            self.keys.remove(key);
        }
        self.keys.get_mut(key)
    }

    /// `EXISTS key`.
    pub fn exists(&self, key: &str) -> bool {
        self.live(key).is_some()
    }

    /// `GET key` (`None` for a missing key; a key of another type answers `None` too: the scripts
    /// never meet one in the model).
    pub fn get(&self, key: &str) -> Option<String> {
        match self.live(key) {
            Some(Entry {
                value: Value::Str(s),
                ..
            }) => Some(s.clone()),
            _ => None,
        }
    }

    /// `SET key value` with `PX ms` (`Some`), or `KEEPTTL` (`keep_ttl`), or neither (no expiry).
    pub fn set(&mut self, key: &str, value: &str, px: Option<i64>, keep_ttl: bool) {
        let kept = if keep_ttl {
            self.live(key).and_then(|e| e.expires_at_ms)
        } else {
            None
        };
        let expires_at_ms = px.map(|ms| self.now_ms() + ms).or(kept);
        self.keys.insert(
            key.to_owned(),
            Entry {
                value: Value::Str(value.to_owned()),
                expires_at_ms,
            },
        );
    }

    /// `SET key value PX ms GET`: the old value.
    pub fn set_get(&mut self, key: &str, value: &str, px: i64) -> Option<String> {
        let old = self.get(key);
        self.set(key, value, Some(px), false);
        old
    }

    /// `SET key value NX PX ms GET`: `None` when it was free (and is now set), else the value held.
    pub fn set_nx_get(&mut self, key: &str, value: &str, px: i64) -> Option<String> {
        match self.get(key) {
            Some(v) => Some(v),
            None => {
                self.set(key, value, Some(px), false);
                None
            }
        }
    }

    /// `SET key value XX KEEPTTL`.
    pub fn set_xx_keepttl(&mut self, key: &str, value: &str) {
        if self.exists(key) {
            self.set(key, value, None, true);
        }
    }

    /// `DEL key`: whether it existed.
    pub fn del(&mut self, key: &str) -> bool {
        let existed = self.exists(key);
        self.keys.remove(key);
        existed
    }

    /// `PTTL key`: -2 missing, -1 no expiry, else ms left.
    pub fn pttl(&self, key: &str) -> i64 {
        match self.live(key) {
            None => -2,
            Some(Entry {
                expires_at_ms: None,
                ..
            }) => -1,
            Some(Entry {
                expires_at_ms: Some(at),
                ..
            }) => (at - self.now_ms()).max(0),
        }
    }

    /// `PEXPIRE key ms` (0 or less deletes the key, as Redis does).
    pub fn pexpire(&mut self, key: &str, ms: i64) {
        if ms <= 0 {
            self.keys.remove(key);
            return;
        }
        let at = self.now_ms() + ms;
        if let Some(e) = self.live_mut(key) {
            e.expires_at_ms = Some(at);
        }
    }

    /// `RENAME from to` (the TTL goes with the value); nothing when `from` is missing (Redis
    /// errors: the scripts rename only a key they just read).
    pub fn rename(&mut self, from: &str, to: &str) {
        if self.exists(from) {
            if let Some(e) = self.keys.remove(from) {
                self.keys.insert(to.to_owned(), e);
            }
        }
    }

    fn zset_mut(&mut self, key: &str) -> &mut BTreeMap<String, i64> {
        if self.live_mut(key).is_none() {
            self.keys.insert(
                key.to_owned(),
                Entry {
                    value: Value::ZSet(BTreeMap::new()),
                    expires_at_ms: None,
                },
            );
        }
        match &mut self.keys.get_mut(key).expect("just made").value {
            Value::ZSet(z) => z,
            _ => panic!("{key} is not a sorted set in the model"),
        }
    }

    fn drop_if_empty(&mut self, key: &str) {
        let empty = match self.keys.get(key).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z.is_empty(),
            Some(Value::List(l)) => l.is_empty(),
            Some(Value::Hash(h)) => h.is_empty(),
            _ => false,
        };
        if empty {
            self.keys.remove(key);
        }
    }

    /// `ZADD key NX score member`: whether it was added.
    pub fn zadd_nx(&mut self, key: &str, score: i64, member: &str) -> bool {
        let z = self.zset_mut(key);
        if z.contains_key(member) {
            return false;
        }
        z.insert(member.to_owned(), score);
        true
    }

    /// `ZADD key score member` (adds or moves).
    pub fn zadd(&mut self, key: &str, score: i64, member: &str) {
        self.zset_mut(key).insert(member.to_owned(), score);
    }

    /// `ZADD key XX score member`.
    pub fn zadd_xx(&mut self, key: &str, score: i64, member: &str) {
        if self.zscore(key, member).is_some() {
            self.zadd(key, score, member);
        }
    }

    /// `ZSCORE key member`.
    pub fn zscore(&self, key: &str, member: &str) -> Option<i64> {
        match self.live(key).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z.get(member).copied(),
            _ => None,
        }
    }

    /// `ZREM key member`: whether it was there.
    pub fn zrem(&mut self, key: &str, member: &str) -> bool {
        if self.zscore(key, member).is_none() {
            return false;
        }
        self.zset_mut(key).remove(member);
        self.drop_if_empty(key);
        true
    }

    /// The members by score (then by member), as `ZRANGE key 0 -1 WITHSCORES` orders them.
    pub fn zrange(&self, key: &str) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> = match self.live(key).map(|e| &e.value) {
            Some(Value::ZSet(z)) => z.iter().map(|(m, s)| (m.clone(), *s)).collect(),
            _ => Vec::new(),
        };
        v.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        v
    }

    /// `ZPOPMIN key`.
    pub fn zpopmin(&mut self, key: &str) -> Option<(String, i64)> {
        let first = self.zrange(key).into_iter().next()?;
        self.zrem(key, &first.0);
        Some(first)
    }

    /// `ZCARD key`.
    pub fn zcard(&self, key: &str) -> usize {
        self.zrange(key).len()
    }

    /// `ZREMRANGEBYSCORE key -inf max` (inclusive, or exclusive with `exclusive`): the members removed.
    pub fn zrem_upto(&mut self, key: &str, max: i64, exclusive: bool) -> Vec<String> {
        let gone: Vec<String> = self
            .zrange(key)
            .into_iter()
            .filter(|(_, s)| if exclusive { *s < max } else { *s <= max })
            .map(|(m, _)| m)
            .collect();
        for m in &gone {
            self.zrem(key, m);
        }
        gone
    }

    /// `LPUSH key value`.
    pub fn lpush(&mut self, key: &str, value: &str) {
        if self.live_mut(key).is_none() {
            self.keys.insert(
                key.to_owned(),
                Entry {
                    value: Value::List(Vec::new()),
                    expires_at_ms: None,
                },
            );
        }
        if let Some(Entry {
            value: Value::List(l),
            ..
        }) = self.keys.get_mut(key)
        {
            l.insert(0, value.to_owned());
        }
    }

    /// `LPOP key` (what a `BLPOP` that finds the list non-empty returns at once).
    pub fn lpop(&mut self, key: &str) -> Option<String> {
        let v = match self.live_mut(key).map(|e| &mut e.value) {
            Some(Value::List(l)) if !l.is_empty() => Some(l.remove(0)),
            _ => None,
        };
        self.drop_if_empty(key);
        v
    }

    /// `HSET key field value`.
    pub fn hset(&mut self, key: &str, field: &str, value: &str) {
        if self.live_mut(key).is_none() {
            self.keys.insert(
                key.to_owned(),
                Entry {
                    value: Value::Hash(BTreeMap::new()),
                    expires_at_ms: None,
                },
            );
        }
        if let Some(Entry {
            value: Value::Hash(h),
            ..
        }) = self.keys.get_mut(key)
        {
            h.insert(field.to_owned(), value.to_owned());
        }
    }

    /// `HGET key field`.
    pub fn hget(&self, key: &str, field: &str) -> Option<String> {
        match self.live(key).map(|e| &e.value) {
            Some(Value::Hash(h)) => h.get(field).cloned(),
            _ => None,
        }
    }

    /// `HDEL key field`.
    pub fn hdel(&mut self, key: &str, field: &str) {
        if let Some(Entry {
            value: Value::Hash(h),
            ..
        }) = self.live_mut(key)
        {
            h.remove(field);
        }
        self.drop_if_empty(key);
    }

    /// Keys that hold no expiry (the property "no key left without an expiry").
    pub fn keys_without_expiry(&self) -> Vec<String> {
        self.keys
            .iter()
            .filter(|(_, e)| e.expires_at_ms.is_none())
            .map(|(k, _)| k.clone())
            .collect()
    }
}
