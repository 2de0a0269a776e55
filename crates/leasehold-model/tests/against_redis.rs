//! The model and the code cannot drift: random sequences of calls, drawn as the model's clients make
//! them (acquire with and without waiting, with and without a clock estimate, the waiter's step,
//! taking a grant off the wake list, renew, a batched renewal of several locks, release, abandon,
//! forced release, notes, the semaphore's three scripts, a call sent twice, the clock moving, the
//! keys lost, a replica's older keys promoted), on two names at once (a batch renews locks of
//! both), are applied both to `leasehold_model::scripts` and to the library's own scripts
//! (`script_sources()`: the very text the library loads) on a real redis-server whose clock stands
//! still between steps (libfaketime). After every step the reply and every key (type, value, TTL)
//! must be equal.
//!
//! `LEASEHOLD_MODEL_SEQUENCES` (default 2000) sets how many sequences, `LEASEHOLD_MODEL_SEED` the
//! first seed; a failure prints the seed and the calls that led to it.

use std::collections::{BTreeMap, HashMap};

use leasehold_model::checker;
use leasehold_model::keyspace::{Entry, Keyspace, Value as KValue};
use leasehold_model::scripts::{self, Call, Estimate, Mutation, Names, Reply, Timings};
use leasehold_testkit::RedisServer;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use redis::Value;

/// 2026-01-01T00:00:00Z, µs.
const T0: i64 = 1_767_225_600_000_000;

/// One Lua call that returns every key with its type, value and PTTL (one round trip per step).
const DUMP_LUA: &str = r#"
local out = {}
for _, k in ipairs(redis.call('KEYS', '*')) do
  local t = redis.call('TYPE', k)['ok']
  local v
  if t == 'string' then v = {redis.call('GET', k)}
  elseif t == 'list' then v = redis.call('LRANGE', k, 0, -1)
  elseif t == 'zset' then v = redis.call('ZRANGE', k, 0, -1, 'WITHSCORES')
  elseif t == 'hash' then v = redis.call('HGETALL', k)
  else v = {} end
  table.insert(out, {k, t, v, redis.call('PTTL', k)})
end
return out
"#;

/// A key as both sides describe it: type, value as strings, PTTL.
type Described = BTreeMap<String, (String, Vec<String>, i64)>;

fn timings() -> Timings {
    Timings {
        ttl_ms: 3000,
        first_ms: 1000,
        block_ms: 500,
        slack_ms: 500,
        life_ms: 60_000,
        retention_ms: 3_600_000,
        given_up_ms: 60_000,
        released_ms: 10_000,
    }
}

fn to_reply(v: redis::RedisResult<Value>) -> Reply {
    match v {
        Err(e) => Reply::Error(e.to_string()),
        Ok(v) => value_reply(v),
    }
}

fn value_reply(v: Value) -> Reply {
    match v {
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(b) => Reply::Bulk(String::from_utf8_lossy(&b).into_owned()),
        Value::SimpleString(s) => Reply::Bulk(s),
        Value::Okay => Reply::Bulk("OK".into()),
        Value::Array(a) => Reply::Array(a.into_iter().map(value_reply).collect()),
        Value::ServerError(e) => Reply::Error(format!("{e:?}")),
        other => Reply::Error(format!("unexpected {other:?}")),
    }
}

fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Array(a) => a
            .iter()
            .map(|x| match x {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::Int(n) => n.to_string(),
                other => format!("{other:?}"),
            })
            .collect(),
        _ => Vec::new(),
    }
}

fn describe_real(con: &mut redis::Connection, dump: &redis::Script) -> Described {
    let v: Value = dump.invoke(con).expect("the dump script runs");
    let mut out = Described::new();
    if let Value::Array(rows) = v {
        for row in rows {
            if let Value::Array(f) = row {
                let key = strings(&Value::Array(vec![f[0].clone()])).remove(0);
                let t = match &f[1] {
                    Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                    Value::SimpleString(s) => s.clone(),
                    o => format!("{o:?}"),
                };
                let pttl = match f[3] {
                    Value::Int(n) => n,
                    _ => -9,
                };
                out.insert(key, (t, strings(&f[2]), pttl));
            }
        }
    }
    out
}

fn describe_model(ks: &Keyspace) -> Described {
    let mut out = Described::new();
    for k in ks.keys.keys() {
        if !ks.exists(k) {
            continue;
        }
        let e = &ks.keys[k];
        let (t, v) = match &e.value {
            KValue::Str(s) => ("string", vec![s.clone()]),
            KValue::List(l) => ("list", l.clone()),
            KValue::ZSet(_) => (
                "zset",
                ks.zrange(k)
                    .into_iter()
                    .flat_map(|(m, s)| [m, s.to_string()])
                    .collect(),
            ),
            KValue::Hash(h) => (
                "hash",
                h.iter().flat_map(|(a, b)| [a.clone(), b.clone()]).collect(),
            ),
        };
        out.insert(k.clone(), (t.to_owned(), v, ks.pttl(k)));
    }
    out
}

/// Hashes come back in Redis's order: compare them as sets of pairs.
fn normalise(mut d: Described) -> Described {
    for (t, v, _) in d.values_mut() {
        if t == "hash" {
            let mut pairs: Vec<(String, String)> = v
                .chunks(2)
                .map(|c| (c[0].clone(), c.get(1).cloned().unwrap_or_default()))
                .collect();
            pairs.sort();
            *v = pairs.into_iter().flat_map(|(a, b)| [a, b]).collect();
        }
    }
    d
}

/// Errors are compared by kind (the text is the script's; the model names the same case).
fn same_reply(a: &Reply, b: &Reply) -> bool {
    match (a, b) {
        (Reply::Error(x), Reply::Error(y)) => x.contains("LEASEHOLD") == y.contains("LEASEHOLD"),
        _ => a == b,
    }
}

/// What a step does, beside a script call.
#[derive(Debug, Clone)]
enum Step {
    /// A script call on the name of this index (a batched renewal names its own locks).
    Script(usize, Call),
    /// The client's `BLPOP` that finds a grant (or not) on its wake list, on the name of this index.
    TakeGrant(usize, String),
    /// The clock moves forward by this many µs.
    Advance(i64),
    /// The server restarts without persistence: every key is lost.
    LoseEverything,
    /// A failover to a replica that has the keys as they were some steps ago.
    Promote(usize),
}

struct Draw {
    /// The sequence's two names: most calls on the first, some on the second.
    names: [Names; 2],
    tokens: Vec<String>,
    next: usize,
    ops: usize,
    permits: i64,
}

impl Draw {
    fn token(&mut self, rng: &mut StdRng) -> String {
        if self.tokens.is_empty() || rng.random_bool(0.3) {
            self.next += 1;
            let t = format!("c{}a{}", rng.random_range(0..3), self.next);
            self.tokens.push(t.clone());
            t
        } else {
            let i = rng.random_range(0..self.tokens.len());
            self.tokens[i].clone()
        }
    }

    fn est(&self, rng: &mut StdRng, now: i64) -> Option<Estimate> {
        match rng.random_range(0..4) {
            0 => None,
            1 => Some(Estimate { hi: now, lo: now }),
            _ => Some(Estimate {
                hi: now + rng.random_range(0..3000),
                lo: now - rng.random_range(0..3000),
            }),
        }
    }

    fn step(&mut self, rng: &mut StdRng, now: i64, last: Option<&Step>) -> Step {
        let name = usize::from(rng.random_bool(0.2));
        let permits = if rng.random_bool(0.95) {
            self.permits
        } else {
            3 - self.permits
        };
        match rng.random_range(0..100) {
            0..=27 => Step::Script(
                name,
                Call::Acquire {
                    token: self.token(rng),
                    wait: rng.random_bool(0.7),
                    est: self.est(rng, now),
                    permits,
                },
            ),
            28..=37 => Step::TakeGrant(name, self.token(rng)),
            38..=51 => Step::Script(
                name,
                Call::Release {
                    token: self.token(rng),
                    est: self.est(rng, now),
                    permits,
                },
            ),
            52..=55 => Step::Script(
                name,
                Call::Renew {
                    token: self.token(rng),
                    clock: rng.random_bool(0.5),
                    permits,
                },
            ),
            // The watchdog's batch: one to three locks, of either name (a lock twice too).
            56..=58 => {
                let batch = (0..rng.random_range(1..4))
                    .map(|_| {
                        let n = &self.names[usize::from(rng.random_bool(0.5))];
                        (n.lock(), self.token(rng))
                    })
                    .collect();
                Step::Script(
                    name,
                    Call::RenewMany {
                        batch,
                        clock: rng.random_bool(0.5),
                    },
                )
            }
            59..=64 => Step::Script(
                name,
                Call::Abandon {
                    token: self.token(rng),
                },
            ),
            65..=67 => {
                if rng.random_bool(0.7) {
                    self.ops += 1;
                }
                Step::Script(
                    name,
                    Call::ForceRelease {
                        op: format!("op{}", self.ops),
                        target: rng.random_bool(0.5).then(|| self.token(rng)),
                    },
                )
            }
            68..=70 => Step::Script(
                name,
                Call::Note {
                    token: self.token(rng),
                    note: format!("n{}", rng.random_range(0..9)),
                },
            ),
            71 => Step::Script(name, Call::ReadNote),
            72..=79 => match last {
                // Sent twice: a retry after a reconnect.
                Some(Step::Script(n, c)) => Step::Script(*n, c.clone()),
                _ => Step::Advance(1000),
            },
            80..=96 => Step::Advance(
                [
                    1, 999, 1000, 200_000, 500_000, 1_000_000, 1_000_001, 3_000_000, 61_000_000,
                ][rng.random_range(0..9)],
            ),
            97 | 98 => Step::LoseEverything,
            _ => Step::Promote(rng.random_range(1..4)),
        }
    }
}

/// Writes the model's keys into the real server (the promoted replica's keyspace).
fn load_into(con: &mut redis::Connection, ks: &Keyspace) {
    redis::cmd("FLUSHALL").exec(con).expect("FLUSHALL");
    for (k, e) in &ks.keys {
        if !ks.exists(k) {
            continue;
        }
        let Entry {
            value,
            expires_at_ms,
        } = e;
        let mut p = redis::pipe();
        match value {
            KValue::Str(s) => {
                p.cmd("SET").arg(k).arg(s);
            }
            KValue::List(l) => {
                p.cmd("RPUSH").arg(k).arg(l);
            }
            KValue::ZSet(z) => {
                let mut c = redis::cmd("ZADD");
                c.arg(k);
                for (m, s) in z {
                    c.arg(*s).arg(m);
                }
                p.add_command(c);
            }
            KValue::Hash(h) => {
                let mut c = redis::cmd("HSET");
                c.arg(k);
                for (a, b) in h {
                    c.arg(a).arg(b);
                }
                p.add_command(c);
            }
        }
        if let Some(at) = expires_at_ms {
            p.cmd("PEXPIREAT").arg(k).arg(*at);
        }
        p.exec(con).expect("restoring a key");
    }
}

#[test]
fn the_scripts_answer_and_write_what_the_model_predicts() {
    if leasehold_testkit::libfaketime_path().is_none() {
        panic!("needs libfaketime (apt-get install -y faketime, or set LEASEHOLD_LIBFAKETIME)");
    }
    let sequences: u64 = std::env::var("LEASEHOLD_MODEL_SEQUENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2000);
    let first_seed: u64 = std::env::var("LEASEHOLD_MODEL_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    let steps = 30;
    let mut server = RedisServer::builder()
        .frozen_clock(T0 as u64)
        .start()
        .expect("a redis-server under a frozen fake clock");
    let mut con = server.connection().expect("a connection");
    let sources: HashMap<&str, redis::Script> = leasehold::lease::store::redis::script_sources()
        .into_iter()
        .map(|(name, src)| (name, redis::Script::new(src)))
        .collect();
    let dump = redis::Script::new(DUMP_LUA);
    let t = timings();
    let started = std::time::Instant::now();
    let mut calls_by_script: BTreeMap<&str, u64> = BTreeMap::new();
    let mut replies_seen: BTreeMap<String, u64> = BTreeMap::new();
    // How often the paths that matter ran: a release or an abandon that handed the lock on, a grant
    // popped off a wake list, a retry of the same call.
    let (mut hand_overs, mut grants_popped, mut retries) = (0u64, 0u64, 0u64);
    // Grants popped after a busy queue step, judged by the model's stale-grant rule and by the Redis
    // store's own decision: (taken, thrown away as stale).
    let (mut grants_fresh, mut grants_stale) = (0u64, 0u64);
    // Batched renewals that renewed a lock, and those that renewed one and refused another.
    let (mut batches_renewing, mut batches_mixed) = (0u64, 0u64);
    for seed in first_seed..first_seed + sequences {
        let mut rng = StdRng::seed_from_u64(seed);
        let mut now = T0 + rng.random_range(0..1000) * 1000;
        server.set_frozen_clock(now as u64).expect("clock set");
        redis::cmd("FLUSHALL").exec(&mut con).expect("FLUSHALL");
        let names = [
            Names::new("m", &format!("n{}", seed % 7)),
            Names::new("m", &format!("o{}", seed % 5)),
        ];
        let mut ks = Keyspace::new(now);
        let mut history: Vec<Keyspace> = vec![ks.clone()];
        let mut draw = Draw {
            names: names.clone(),
            tokens: Vec::new(),
            next: 0,
            ops: 0,
            permits: if rng.random_bool(0.25) { 2 } else { 1 },
        };
        let mut done: Vec<Step> = Vec::new();
        // Per (name, token) of a lock: the queue steps sent and the server µs of the last busy one.
        let mut waits: HashMap<(usize, String), (u32, i64)> = HashMap::new();
        for _ in 0..steps {
            let step = draw.step(&mut rng, now, done.last());
            if matches!((&step, done.last()), (Step::Script(i, a), Some(Step::Script(j, b))) if i == j && a == b)
            {
                retries += 1;
            }
            let on = match &step {
                Step::Script(i, _) | Step::TakeGrant(i, _) => &names[*i],
                _ => &names[0],
            };
            let holder_before = ks.get(&on.lock());
            let (predicted, real) = match &step {
                Step::Script(_, call) => {
                    *calls_by_script.entry(call.script()).or_default() += 1;
                    let predicted = scripts::run(&mut ks, on, &t, call, Mutation::None);
                    let script = &sources[call.script()];
                    let mut inv = script.prepare_invoke();
                    for k in call.keys(on) {
                        inv.key(k);
                    }
                    for a in call.argv(&t) {
                        inv.arg(a);
                    }
                    let real = to_reply(inv.invoke::<Value>(&mut con));
                    (predicted, real)
                }
                Step::TakeGrant(_, token) => {
                    let key = on.key(&format!("wake:{token}"));
                    let predicted = ks.lpop(&key).map_or(Reply::Nil, Reply::Bulk);
                    let real = to_reply(redis::cmd("LPOP").arg(&key).query::<Value>(&mut con));
                    (predicted, real)
                }
                Step::Advance(us) => {
                    now += us;
                    ks.set_clock(now);
                    server.set_frozen_clock(now as u64).expect("clock set");
                    (Reply::Nil, Reply::Nil)
                }
                Step::LoseEverything => {
                    ks.keys.clear();
                    redis::cmd("FLUSHALL").exec(&mut con).expect("FLUSHALL");
                    (Reply::Nil, Reply::Nil)
                }
                Step::Promote(back) => {
                    let i = history.len().saturating_sub(1 + back);
                    let mut old = history[i].clone();
                    old.set_clock(now);
                    // A key at its last ms is gone on the replica (PEXPIREAT now deletes it).
                    let ms = old.now_ms();
                    old.keys
                        .retain(|_, e| e.expires_at_ms.is_none_or(|at| at > ms));
                    ks = old;
                    load_into(&mut con, &ks);
                    (Reply::Nil, Reply::Nil)
                }
            };
            if let Step::Script(_, Call::Release { token, .. } | Call::Abandon { token }) = &step {
                let after = ks.get(&on.lock());
                if holder_before.as_deref().and_then(|h| h.strip_suffix(":q")) == Some(token)
                    && after.is_some_and(|a| !a.starts_with(&format!("{token}:")))
                {
                    hand_overs += 1;
                }
            }
            match (&step, &predicted) {
                (
                    Step::Script(
                        i,
                        Call::Acquire {
                            token,
                            wait: true,
                            permits: 1,
                            ..
                        },
                    ),
                    Reply::Array(r),
                ) => match r.as_slice() {
                    [Reply::Int(0), _, Reply::Int(us), ..] => {
                        let w = waits.entry((*i, token.clone())).or_insert((0, 0));
                        *w = (w.0 + 1, *us);
                    }
                    _ => {
                        waits.remove(&(*i, token.clone()));
                    }
                },
                (Step::TakeGrant(i, token), Reply::Bulk(grant)) => {
                    if let Some((steps, queued_us)) = waits.get(&(*i, token.clone())).copied() {
                        let step = steps.saturating_sub(1);
                        let at_us: i64 = grant
                            .split(',')
                            .nth(1)
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0);
                        let model = checker::grant_is_stale(step, at_us, queued_us);
                        let store =
                            leasehold::lease::store::redis::stale_grant(grant, step, queued_us);
                        assert_eq!(
                            Some(model),
                            store,
                            "seed {seed}: grant {grant:?} popped by step {step} after a busy reply at {queued_us}: the model says stale {model}, the store {store:?}"
                        );
                        grants_stale += u64::from(model);
                        grants_fresh += u64::from(!model);
                    }
                }
                _ => {}
            }
            if let (Step::Script(_, Call::RenewMany { .. }), Reply::Array(r)) = (&step, &predicted)
            {
                if let Some(Reply::Bulk(flags)) = r.first() {
                    batches_renewing += u64::from(flags.contains('1'));
                    batches_mixed += u64::from(flags.contains('1') && flags.contains('0'));
                }
            }
            if matches!(step, Step::TakeGrant(..)) && predicted != Reply::Nil {
                grants_popped += 1;
            }
            done.push(step);
            let kind = match &predicted {
                Reply::Array(a) => format!("{:?}", a.first()),
                other => format!("{other:?}").chars().take(12).collect(),
            };
            *replies_seen.entry(kind).or_default() += 1;
            let keys_model = normalise(describe_model(&ks));
            let keys_real = normalise(describe_real(&mut con, &dump));
            if !same_reply(&predicted, &real) || keys_model != keys_real {
                let mut diff = String::new();
                for k in keys_model.keys().chain(keys_real.keys()) {
                    if keys_model.get(k) != keys_real.get(k) {
                        diff.push_str(&format!(
                            "  {k}\n    model: {:?}\n    redis: {:?}\n",
                            keys_model.get(k),
                            keys_real.get(k)
                        ));
                    }
                }
                panic!(
                    "seed {seed}: the model and the scripts disagree after {} steps\n\
                     steps:\n{}\nreply: model {predicted:?}, redis {real:?}\nkeys that differ:\n{diff}",
                    done.len(),
                    done.iter()
                        .map(|s| format!("  {s:?}"))
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
            }
            history.push(ks.clone());
        }
    }
    eprintln!(
        "{sequences} sequences of {steps} steps in {:.1?}; calls per script {calls_by_script:?}; \
         replies {replies_seen:?}; hand-overs {hand_overs}, grants popped {grants_popped}, \
         retries {retries}, grants after a busy step taken {grants_fresh} and thrown away as stale \
         {grants_stale}, batched renewals that renewed {batches_renewing} (and refused another \
         lock {batches_mixed})",
        started.elapsed()
    );
    assert!(hand_overs > 0 && grants_popped > 0 && retries > 0);
    assert!(batches_renewing > 0 && batches_mixed > 0);
    assert!(grants_fresh > 0, "no grant popped after a busy step");
    // Every script was exercised, and the runs reached the interesting replies.
    for s in [
        "acquire",
        "release",
        "renew",
        "renew_many",
        "abandon",
        "force_release",
        "note",
        "read_note",
        "sem_acquire",
        "sem_release",
        "sem_renew",
    ] {
        assert!(
            calls_by_script.get(s).copied().unwrap_or(0) > 0,
            "{s} never called"
        );
    }
}
