//! The stateright model of the protocol: clients that acquire (waiting or not), step while they
//! wait, take a grant off their wake list, renew, release, abandon and write a note; an operator's
//! forced release; a reply lost and the call sent again; the server's clock moving (TTLs expire);
//! a client paused (past its TTL) or crashed; a restart that loses every key; a failover to a replica
//! that missed the last writes. Every script step runs [`crate::scripts`], the transcription that
//! `tests/against_redis.rs` compares with the real scripts.
//!
//! Promise: [`LeaseModel::properties`] hold in every state reachable within [`Bounds`] (the
//! checker explores them all, breadth first), or the checker returns the path to one that breaks
//! them. Limit: fairness is built in, not assumed: the clock moves only after every running waiter
//! stepped and every running holder renewed or released in time (what the library's watchdog and
//! its 500 ms steps do in real time); real durations and the client's clock estimate (the model's
//! clients send none, so each script reads the server's clock) are not modelled; of the client's
//! own decisions the model makes the stale-grant rule ([`grant_is_stale`]), the try before a wait
//! and the batched renewal (docs/verification.md).

use std::collections::{BTreeMap, BTreeSet};

use stateright::{Model, Property};

use crate::keyspace::Keyspace;
use crate::scripts::{self, Call, Mutation, Names, Reply, Timings};

/// 2026-01-01T00:00:00Z in µs: where the model's clock starts.
pub const T0_US: i64 = 1_767_225_600_000_000;

/// One clock step of the model: a waiter's block.
pub const TICK_MS: i64 = 500;

/// How far the checker goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bounds {
    /// Clients (each with its own tokens).
    pub clients: usize,
    /// Acquisitions each client makes (one token each).
    pub attempts: u8,
    /// Clock steps ([`TICK_MS`] each) before the model stops.
    pub ticks: u8,
    /// Permits: 1 is a lock, more a semaphore.
    pub permits: i64,
    /// Whether a restart that loses every key may happen (at most once).
    pub restart: bool,
    /// Whether a failover to the replica may happen (at most once).
    pub failover: bool,
    /// Whether one client may be paused (once) and one crash.
    pub pause_and_crash: bool,
    /// Whether one reply may be lost (the call then sent again).
    pub lost_reply: bool,
    /// Whether the operator may force a release (once).
    pub force: bool,
    /// Renewals per lease.
    pub renewals: u8,
}

/// What a client is doing.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Not holding, not waiting.
    Idle,
    /// Queued behind the holder, stepping.
    Waiting {
        /// The attempt's token.
        token: String,
        /// The tick its place was made (or made again).
        joined: u8,
        /// Queue steps sent for this token so far (a grant popped by the first is never stale).
        steps: u8,
        /// The server's µs in the last step's busy reply (0 before the first).
        queued_us: i64,
    },
    /// Holding the lease (as the client believes).
    Holding {
        /// The lease's token.
        token: String,
        /// Its fence.
        fence: i64,
        /// Server ms by which the client counts the lease lost.
        deadline_ms: i64,
        /// Renewals made.
        renewed: u8,
        /// Whether it wrote its note (once per lease).
        noted: bool,
    },
    /// Stopped for good.
    Crashed,
}

/// A client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Client {
    /// What it does.
    pub phase: Phase,
    /// Acquisitions started.
    pub attempts: u8,
    /// Paused (SIGSTOP): takes no step until resumed.
    pub paused: bool,
    /// A call whose reply was lost: the next thing the client does is send it again.
    pub retry: Option<Call>,
    /// Whether it stepped (waiting) in the current tick.
    pub stepped: bool,
    /// The reply to its next call is lost.
    pub lose_next: bool,
}

/// The whole system.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct State {
    /// The primary's keys and clock.
    pub server: Keyspace,
    /// The replica's keys: the primary's before the last script that ran there (with
    /// [`Bounds::failover`]; else left empty).
    pub replica: Keyspace,
    /// The clients.
    pub clients: Vec<Client>,
    /// Clock steps so far.
    pub tick: u8,
    /// Faults left: restart, failover, pause, crash, lost reply, forced release.
    pub faults: [bool; 6],
    /// Keys were lost (a restart, or a failover to a replica that missed writes): mutual exclusion
    /// and FIFO are not promised from here on (the fence still is).
    pub data_lost: bool,
    /// Tokens an operator evicted (their holders learn it at their next renewal).
    pub evicted: BTreeSet<String>,
    /// Every grant so far: token to fence.
    pub granted: BTreeMap<String, i64>,
    /// The first broken rule seen on a transition (a property reads it), if any.
    pub broken: Option<&'static str>,
}

/// What can happen next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Action {
    /// Client `.0` acquires with a new token; `.1`: it waits, joining the queue at once (the
    /// library does so on a name this client found busy last time: the contention hint).
    Acquire(usize, bool),
    /// Client `.0` acquires with a new token and waits, trying first (the library's waiting acquire
    /// on a name not known busy): the fast part's try, and when that finds the name busy, the first
    /// queue step as the waiter's next [`Action::Step`].
    TryFirst(usize),
    /// A waiter's next step (the acquire again, which refreshes its place).
    Step(usize),
    /// A waiter's `BLPOP` returns the grant on its wake list.
    TakeGrant(usize),
    /// The holder's watchdog renews (renew.lua: a client with this one lease due).
    Renew(usize),
    /// The holder's watchdog renews in a batch (renew_many.lua: a client with several leases due;
    /// the batch's other locks are of other names, whose keys this one never touches).
    RenewBatched(usize),
    /// The holder releases.
    Release(usize),
    /// A waiter gives up (cancelled or timed out).
    Abandon(usize),
    /// The holder writes its note (an election's leader record: the term is the fence).
    Note(usize),
    /// The next reply to client `.0` is lost.
    LoseNextReply(usize),
    /// The client sends its call again (after a reconnect).
    Retry(usize),
    /// The operator forces a release of whoever holds.
    Force,
    /// The clock moves one tick.
    Tick,
    /// The client is paused (SIGSTOP) / resumed / crashes.
    Pause(usize),
    /// See [`Action::Pause`].
    Resume(usize),
    /// See [`Action::Pause`].
    Crash(usize),
    /// The server restarts without persistence.
    Restart,
    /// The replica is promoted: it missed the last script's writes.
    Failover,
}

/// The model: bounds, timings and (for the mutation tests) a change of the protocol.
#[derive(Debug, Clone)]
pub struct LeaseModel {
    /// How far to go.
    pub bounds: Bounds,
    /// The clients' timings.
    pub timings: Timings,
    /// The protocol as shipped ([`Mutation::None`]) or changed.
    pub mutation: Mutation,
    /// The name's keys.
    pub names: Names,
}

impl LeaseModel {
    /// The model with short timings (TTL 1 s, first TTL 0.5 s, block 0.5 s, slack 0.5 s), so that
    /// expiries happen within a few ticks.
    pub fn new(bounds: Bounds, mutation: Mutation) -> Self {
        LeaseModel {
            bounds,
            timings: Timings {
                ttl_ms: 1000,
                first_ms: 500,
                block_ms: TICK_MS,
                slack_ms: 500,
                life_ms: 60_000,
                retention_ms: 3_600_000,
                given_up_ms: 60_000,
                released_ms: 10_000,
            },
            mutation,
            names: Names::new("m", "n"),
        }
    }

    fn run(&self, ks: &mut Keyspace, call: &Call) -> Reply {
        scripts::run(ks, &self.names, &self.timings, call, self.mutation)
    }

    fn token(c: usize, attempt: u8) -> String {
        format!("c{c}a{attempt}")
    }

    /// The tokens the server would renew now (its view of who holds): by renew.lua, or by
    /// renew_many.lua for a lock (each run on a copy).
    pub fn server_holders(&self, s: &State) -> Vec<String> {
        let mut out = Vec::new();
        for c in &s.clients {
            if let Phase::Holding { token, .. } = &c.phase {
                let mut ks = s.server.clone();
                let call = Call::Renew {
                    token: token.clone(),
                    clock: false,
                    permits: self.bounds.permits,
                };
                let mut renews = self.run(&mut ks, &call) != Reply::Int(0);
                if !renews && self.bounds.permits == 1 {
                    let mut ks = s.server.clone();
                    let batch = Call::RenewMany {
                        batch: vec![(self.names.lock(), token.clone())],
                        clock: false,
                    };
                    let reply = self.run(&mut ks, &batch);
                    renews = meaning(&batch, &reply) == Meaning::Other(Reply::Int(1));
                }
                if renews {
                    out.push(token.clone());
                }
            }
        }
        out
    }

    /// A queue entry that counts as live (the hand-over would give it the lock).
    fn live_entry(&self, ks: &Keyspace, member: &str, score: i64) -> bool {
        let token = member.split(',').next().unwrap_or("");
        ks.now_us <= score + self.timings.window_ms() * 1000
            || ks.exists(&self.names.key(&format!("alive:{token}")))
    }

    fn holders_of(&self, ks: &Keyspace) -> BTreeSet<String> {
        if self.bounds.permits > 1 {
            let now = ks.now_ms();
            return ks
                .zrange(&self.names.key("holders"))
                .into_iter()
                .filter(|(_, until)| *until > now)
                .map(|(t, _)| t)
                .collect();
        }
        ks.get(&self.names.lock())
            .map(|v| v.strip_suffix(":q").unwrap_or(&v).to_owned())
            .into_iter()
            .collect()
    }

    /// Runs a script on the primary with the checks that look at one transition: FIFO (a token
    /// that became a holder had no live waiter queued before it), and "run twice = once".
    fn script(&self, s: &mut State, call: &Call) -> Reply {
        let queue_key = self.names.key("queue");
        let before_holders = self.holders_of(&s.server);
        let before_queue = s.server.zrange(&queue_key);
        // Run twice, on a copy: the same effect as once.
        let mut twice = s.server.clone();
        let once_reply = self.run(&mut twice, call);
        let mut once = twice.clone();
        let again_reply = self.run(&mut twice, call);
        if s.broken.is_none() && !self.same_effect(&once, &twice, call, &once_reply, &again_reply) {
            s.broken = Some("a script run twice has the effect of running once");
        }
        if self.bounds.failover {
            // The replica has everything but this script's writes (replication is asynchronous:
            // a failover right after it loses exactly them).
            s.replica.keys = s.server.keys.clone();
        }
        std::mem::swap(&mut s.server, &mut once);
        let reply = once_reply;
        let after_holders = self.holders_of(&s.server);
        for t in after_holders.difference(&before_holders) {
            let my_score = before_queue
                .iter()
                .find(|(m, _)| m.split(',').next() == Some(t.as_str()))
                .map(|(_, sc)| *sc);
            let remaining = s.server.zrange(&queue_key);
            let jumped = remaining.iter().any(|(m, sc)| {
                my_score.is_none_or(|mine| *sc < mine) && self.live_entry(&s.server, m, *sc)
            });
            if jumped && !s.data_lost && s.broken.is_none() {
                s.broken = Some("FIFO: a free lock goes to the first live waiter");
            }
        }
        reply
    }

    /// What a client can tell apart, and what the protocol state is, after one run and after two.
    fn same_effect(&self, a: &Keyspace, b: &Keyspace, call: &Call, ra: &Reply, rb: &Reply) -> bool {
        let view = |ks: &Keyspace| {
            let queue: Vec<String> = ks
                .zrange(&self.names.key("queue"))
                .into_iter()
                .map(|(m, _)| m)
                .collect();
            let record = ks
                .get(&self.names.key("fence"))
                .and_then(|r| scripts::Record::parse(&r))
                .map(|r| (r.fence, r.holder));
            (
                self.holders_of(ks),
                ks.pttl(&self.names.lock()),
                record,
                queue,
                ks.get(&self.names.key("note")),
            )
        };
        view(a) == view(b) && meaning(call, ra) == meaning(call, rb)
    }

    fn grant(&self, s: &mut State, c: usize, token: &str, fence: i64, deadline_ms: i64) {
        let earlier = s
            .granted
            .iter()
            .filter(|(t, _)| t.as_str() != token)
            .map(|(_, f)| *f)
            .max();
        let again = s.granted.get(token).copied();
        if (earlier.is_some_and(|e| fence <= e) || again.is_some_and(|g| g != fence))
            && s.broken.is_none()
        {
            s.broken = Some("the fence never goes backwards");
        }
        s.granted.insert(token.to_owned(), fence);
        s.clients[c].phase = if deadline_ms > s.server.now_ms() {
            Phase::Holding {
                token: token.to_owned(),
                fence,
                deadline_ms,
                renewed: 0,
                noted: false,
            }
        } else {
            // A grant that ran out before the client took it: lost at once.
            Phase::Idle
        };
    }

    /// Sends `call` for client `c` (or loses its reply) and acts on the reply.
    fn send(&self, s: &mut State, c: usize, call: Call, lose: bool) {
        let reply = self.script(s, &call);
        if lose {
            s.clients[c].retry = Some(call);
            return;
        }
        self.on_reply(s, c, &call, reply);
    }

    fn on_reply(&self, s: &mut State, c: usize, call: &Call, reply: Reply) {
        let now_ms = s.server.now_ms();
        match call {
            Call::Acquire { token, wait, .. } => match meaning(call, &reply) {
                Meaning::Taken(fence, ttl) => {
                    if *wait {
                        // The BLPOP in the same pipeline returns the grant at once.
                        s.server.lpop(&self.names.key(&format!("wake:{token}")));
                    }
                    let ttl = if ttl < 0 { self.timings.ttl_ms } else { ttl };
                    self.grant(s, c, token, fence, now_ms + ttl);
                }
                Meaning::Busy if *wait => {
                    let (joined, steps) = match &s.clients[c].phase {
                        Phase::Waiting { joined, steps, .. } => (*joined, *steps),
                        _ => (s.tick, 0),
                    };
                    let queued_us = match &reply {
                        Reply::Array(v) => match v.get(2) {
                            Some(Reply::Int(us)) => *us,
                            _ => 0,
                        },
                        _ => 0,
                    };
                    s.clients[c].phase = Phase::Waiting {
                        token: token.clone(),
                        joined,
                        steps: steps.saturating_add(1),
                        queued_us,
                    };
                    s.clients[c].stepped = true;
                }
                _ => s.clients[c].phase = Phase::Idle,
            },
            Call::Renew { .. } | Call::RenewMany { .. } => {
                if let Phase::Holding {
                    deadline_ms,
                    renewed,
                    ..
                } = &mut s.clients[c].phase
                {
                    if meaning(call, &reply) != Meaning::Other(Reply::Int(1)) {
                        s.clients[c].phase = Phase::Idle;
                    } else {
                        *deadline_ms = now_ms + self.timings.ttl_ms;
                        *renewed += 1;
                    }
                }
            }
            Call::Release { .. } | Call::Abandon { .. } => s.clients[c].phase = Phase::Idle,
            Call::Note { token, .. } => {
                let holds = s
                    .server
                    .get(&self.names.lock())
                    .is_some_and(|v| v.strip_suffix(":q").unwrap_or(&v) == token.as_str());
                if reply == Reply::Int(1) && !holds && s.broken.is_none() {
                    s.broken = Some("only the holder writes the note");
                }
            }
            _ => {}
        }
    }

    fn active(c: &Client) -> bool {
        !c.paused && c.phase != Phase::Crashed
    }
}

/// The property that a grant the server still holds for its waiter is taken.
const GRANT_KEPT: &str =
    "a grant the server still holds for its waiter is taken, never thrown away";

/// The client's stale-grant rule (the Redis store's `grant_is_stale`, which the model-based test
/// compares with this on every grant it pops): a grant popped by queue step `step` (0: the first
/// for its token) whose hand-over ran at server µs `at_us`, before that step's script ran at
/// `queued_us`, was made for an earlier step, for a lock deleted since (else that step's script
/// would have found the lock its own and answered taken).
pub fn grant_is_stale(step: u32, at_us: i64, queued_us: i64) -> bool {
    step > 0 && at_us < queued_us
}

/// A reply as the client reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Meaning {
    Taken(i64, i64),
    Busy,
    Other(Reply),
}

fn meaning(call: &Call, r: &Reply) -> Meaning {
    match (call, r) {
        (Call::Acquire { .. }, Reply::Bulk(d)) => Meaning::Taken(d.parse().unwrap_or(-1), -1),
        (Call::Acquire { .. }, Reply::Array(v)) => match v.as_slice() {
            [Reply::Int(1), Reply::Int(f), Reply::Int(ttl), ..] => Meaning::Taken(*f, *ttl),
            [Reply::Int(0), ..] => Meaning::Busy,
            _ => Meaning::Other(r.clone()),
        },
        // A release, a renewal: 1 or {1, seconds, µs} both say "yes".
        (Call::Release { .. } | Call::Renew { .. }, Reply::Array(v))
            if v.first() == Some(&Reply::Int(1)) =>
        {
            Meaning::Other(Reply::Int(1))
        }
        // A batch of one lock: its flag.
        (Call::RenewMany { .. }, Reply::Array(v)) => match v.first() {
            Some(Reply::Bulk(flags)) if flags == "1" => Meaning::Other(Reply::Int(1)),
            _ => Meaning::Other(Reply::Int(0)),
        },
        // An abandon's reply says whether this run released something: a retry's says no.
        (Call::Abandon { .. }, _) => Meaning::Busy,
        _ => Meaning::Other(r.clone()),
    }
}

impl Model for LeaseModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let server = Keyspace::new(T0_US);
        vec![State {
            replica: server.clone(),
            server,
            clients: vec![
                Client {
                    phase: Phase::Idle,
                    attempts: 0,
                    paused: false,
                    retry: None,
                    stepped: false,
                    lose_next: false,
                };
                self.bounds.clients
            ],
            tick: 0,
            faults: [
                self.bounds.restart,
                self.bounds.failover,
                self.bounds.pause_and_crash,
                self.bounds.pause_and_crash,
                self.bounds.lost_reply,
                self.bounds.force,
            ],
            data_lost: false,
            evicted: BTreeSet::new(),
            granted: BTreeMap::new(),
            broken: None,
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.broken.is_some() {
            return;
        }
        let b = &self.bounds;
        for (i, c) in s.clients.iter().enumerate() {
            if c.phase == Phase::Crashed {
                continue;
            }
            if c.paused {
                actions.push(Action::Resume(i));
                continue;
            }
            if c.retry.is_some() {
                actions.push(Action::Retry(i));
                continue;
            }
            match &c.phase {
                Phase::Idle if c.attempts < b.attempts => {
                    actions.push(Action::Acquire(i, true));
                    actions.push(Action::Acquire(i, false));
                    actions.push(Action::TryFirst(i));
                }
                Phase::Waiting { token, .. } => {
                    if s.server.exists(&self.names.key(&format!("wake:{token}"))) {
                        actions.push(Action::TakeGrant(i));
                    }
                    if !c.stepped {
                        actions.push(Action::Step(i));
                    }
                    actions.push(Action::Abandon(i));
                }
                Phase::Holding {
                    renewed,
                    deadline_ms,
                    noted,
                    ..
                } => {
                    if *renewed < b.renewals && *deadline_ms > s.server.now_ms() {
                        actions.push(Action::Renew(i));
                        if b.permits == 1 {
                            actions.push(Action::RenewBatched(i));
                        }
                    }
                    actions.push(Action::Release(i));
                    if b.permits == 1 && !*noted {
                        actions.push(Action::Note(i));
                    }
                }
                _ => {}
            }
            if s.faults[4] && !c.lose_next {
                actions.push(Action::LoseNextReply(i));
            }
            if s.faults[2] && c.phase != Phase::Idle {
                actions.push(Action::Pause(i));
            }
            if s.faults[3] && c.phase != Phase::Idle {
                actions.push(Action::Crash(i));
            }
        }
        // The clock moves only once every running waiter stepped in this tick and every running
        // holder renewed (or will be past its deadline only by its own pause): fair scheduling, as
        // the watchdog and the 500 ms steps make it in real time.
        let fair = s.clients.iter().all(|c| {
            !Self::active(c)
                || c.retry.is_none()
                    && match &c.phase {
                        Phase::Waiting { .. } => c.stepped,
                        Phase::Holding { deadline_ms, .. } => {
                            *deadline_ms > s.server.now_ms() + TICK_MS
                        }
                        _ => true,
                    }
        });
        if s.tick < b.ticks && fair {
            actions.push(Action::Tick);
        }
        if s.faults[5] && s.server.exists(&self.names.lock()) {
            actions.push(Action::Force);
        }
        if s.faults[0] {
            actions.push(Action::Restart);
        }
        if s.faults[1] && s.replica.keys != s.server.keys {
            actions.push(Action::Failover);
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        let permits = self.bounds.permits;
        match action {
            Action::Acquire(i, wait) => {
                let token = Self::token(i, s.clients[i].attempts);
                s.clients[i].attempts += 1;
                let call = Call::Acquire {
                    token,
                    wait,
                    est: None,
                    permits,
                };
                let l = std::mem::take(&mut s.clients[i].lose_next);
                self.send(&mut s, i, call, l);
            }
            Action::TryFirst(i) => {
                let token = Self::token(i, s.clients[i].attempts);
                s.clients[i].attempts += 1;
                let call = Call::Acquire {
                    token: token.clone(),
                    wait: false,
                    est: None,
                    permits,
                };
                // The try's reply is not lost here (a lost reply is modelled on the calls that
                // follow): a lost try is retried as any call is.
                let reply = self.script(&mut s, &call);
                if meaning(&call, &reply) == Meaning::Busy {
                    // The try left nothing for this token (neither queued nor handed a grant):
                    // its first queue step comes next, before the clock moves.
                    s.clients[i].phase = Phase::Waiting {
                        token,
                        joined: s.tick,
                        steps: 0,
                        queued_us: 0,
                    };
                    s.clients[i].stepped = false;
                } else {
                    self.on_reply(&mut s, i, &call, reply);
                }
            }
            Action::Step(i) => {
                if let Phase::Waiting { token, .. } = &s.clients[i].phase {
                    let call = Call::Acquire {
                        token: token.clone(),
                        wait: true,
                        est: None,
                        permits,
                    };
                    let l = std::mem::take(&mut s.clients[i].lose_next);
                    self.send(&mut s, i, call, l);
                }
            }
            Action::TakeGrant(i) => {
                if let Phase::Waiting {
                    token,
                    steps,
                    queued_us,
                    ..
                } = s.clients[i].phase.clone()
                {
                    let key = self.names.key(&format!("wake:{token}"));
                    if let Some(g) = s.server.lpop(&key) {
                        let f: Vec<i64> = g.split(',').filter_map(|x| x.parse().ok()).collect();
                        if let [fence, lo, ttl] = f[..] {
                            let step = u32::from(steps.saturating_sub(1));
                            let queued = if self.mutation == Mutation::StaleCheckAfterTheBlock {
                                queued_us + self.timings.block_ms * 1000
                            } else {
                                queued_us
                            };
                            if grant_is_stale(step, lo, queued) {
                                // Made for an earlier step, for a lock deleted since: not a
                                // lease; the waiter goes on stepping. The server must not still
                                // hold the lock for this token.
                                let held = s.server.get(&self.names.lock());
                                if held == Some(format!("{token}:q")) && s.broken.is_none() {
                                    s.broken = Some(GRANT_KEPT);
                                }
                            } else {
                                self.grant(&mut s, i, &token, fence, lo.div_euclid(1000) + ttl);
                            }
                        }
                    }
                }
            }
            Action::Renew(i) => {
                if let Phase::Holding { token, .. } = &s.clients[i].phase {
                    let call = Call::Renew {
                        token: token.clone(),
                        clock: true,
                        permits,
                    };
                    let l = std::mem::take(&mut s.clients[i].lose_next);
                    self.send(&mut s, i, call, l);
                }
            }
            Action::RenewBatched(i) => {
                if let Phase::Holding { token, .. } = &s.clients[i].phase {
                    let call = Call::RenewMany {
                        batch: vec![(self.names.lock(), token.clone())],
                        clock: true,
                    };
                    let l = std::mem::take(&mut s.clients[i].lose_next);
                    self.send(&mut s, i, call, l);
                }
            }
            Action::Release(i) => {
                if let Phase::Holding { token, .. } = &s.clients[i].phase {
                    let call = Call::Release {
                        token: token.clone(),
                        est: None,
                        permits,
                    };
                    let l = std::mem::take(&mut s.clients[i].lose_next);
                    self.send(&mut s, i, call, l);
                }
            }
            Action::Abandon(i) => {
                if let Phase::Waiting { token, .. } = &s.clients[i].phase {
                    let call = Call::Abandon {
                        token: token.clone(),
                    };
                    let l = std::mem::take(&mut s.clients[i].lose_next);
                    self.send(&mut s, i, call, l);
                }
            }
            Action::Note(i) => {
                if let Phase::Holding {
                    token,
                    fence,
                    noted,
                    ..
                } = &mut s.clients[i].phase
                {
                    *noted = true;
                    let call = Call::Note {
                        token: token.clone(),
                        note: format!("term={fence}"),
                    };
                    self.send(&mut s, i, call, false);
                }
            }
            Action::LoseNextReply(i) => {
                s.faults[4] = false;
                s.clients[i].lose_next = true;
            }
            Action::Retry(i) => {
                if let Some(call) = s.clients[i].retry.take() {
                    let reply = self.script(&mut s, &call);
                    self.on_reply(&mut s, i, &call, reply);
                }
            }
            Action::Force => {
                s.faults[5] = false;
                if let Some(h) = s.server.get(&self.names.lock()) {
                    s.evicted
                        .insert(h.strip_suffix(":q").unwrap_or(&h).to_owned());
                }
                let call = Call::ForceRelease {
                    op: "op1".into(),
                    target: None,
                };
                self.script(&mut s, &call);
            }
            Action::Tick => {
                s.tick += 1;
                let now = s.server.now_us + TICK_MS * 1000;
                s.server.set_clock(now);
                s.replica.set_clock(now);
                for c in &mut s.clients {
                    c.stepped = false;
                    // The watchdog's lost signal fires at the deadline (a paused client's fires
                    // when it resumes; it is counted as holding until then).
                    if let Phase::Holding { deadline_ms, .. } = c.phase {
                        if deadline_ms <= s.server.now_ms() && !c.paused && c.retry.is_none() {
                            c.phase = Phase::Idle;
                        }
                    }
                }
            }
            Action::Pause(i) => {
                s.faults[2] = false;
                s.clients[i].paused = true;
            }
            Action::Resume(i) => {
                s.clients[i].paused = false;
                // Its place may have lapsed meanwhile: its wait starts again.
                if let Phase::Waiting { joined, .. } = &mut s.clients[i].phase {
                    *joined = s.tick;
                }
                if let Phase::Holding { deadline_ms, .. } = s.clients[i].phase {
                    if deadline_ms <= s.server.now_ms() {
                        s.clients[i].phase = Phase::Idle;
                    }
                }
            }
            Action::Crash(i) => {
                s.faults[3] = false;
                s.clients[i].phase = Phase::Crashed;
                s.clients[i].retry = None;
            }
            Action::Restart => {
                s.faults[0] = false;
                // An outage takes time: at least 1 ms, longer than the fences minted in one tick
                // at one per µs (the fence's floor assumes no more than a million acquisitions a
                // second on a name, which one Redis cannot run).
                s.server.set_clock(s.server.now_us + 1000);
                s.replica.set_clock(s.server.now_us);
                s.server.keys.clear();
                s.data_lost = true;
            }
            Action::Failover => {
                s.faults[1] = false;
                if s.replica.keys != s.server.keys {
                    s.data_lost = true;
                }
                s.server.keys = s.replica.keys.clone();
                s.server.set_clock(s.server.now_us + 1000);
                s.replica.set_clock(s.server.now_us);
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "at most N live holders in the server's view",
                |m: &LeaseModel, s: &State| m.server_holders(s).len() as i64 <= m.bounds.permits,
            ),
            Property::always(
                "at most N clients hold a lease they count as live (no data lost, none evicted)",
                |m: &LeaseModel, s: &State| {
                    if s.data_lost {
                        return true;
                    }
                    let now = s.server.now_ms();
                    let n = s
                        .clients
                        .iter()
                        .filter(|c| match &c.phase {
                            // A client whose release is on its way (its reply lost) no longer
                            // uses the lease.
                            Phase::Holding {
                                token, deadline_ms, ..
                            } => {
                                *deadline_ms > now
                                    && !s.evicted.contains(token)
                                    && !matches!(c.retry, Some(Call::Release { .. }))
                            }
                            _ => false,
                        })
                        .count();
                    n as i64 <= m.bounds.permits
                },
            ),
            Property::always(
                "the fence never goes backwards",
                |_: &LeaseModel, s: &State| s.broken != Some("the fence never goes backwards"),
            ),
            Property::always(
                "FIFO: a free lock goes to the first live waiter",
                |_: &LeaseModel, s: &State| {
                    s.broken != Some("FIFO: a free lock goes to the first live waiter")
                },
            ),
            Property::always("no key without an expiry", |_: &LeaseModel, s: &State| {
                s.server.keys_without_expiry().is_empty()
                    && s.replica.keys_without_expiry().is_empty()
            }),
            Property::always(
                "a script run twice has the effect of running once",
                |_: &LeaseModel, s: &State| {
                    s.broken != Some("a script run twice has the effect of running once")
                },
            ),
            Property::always(GRANT_KEPT, |_: &LeaseModel, s: &State| {
                s.broken != Some(GRANT_KEPT)
            }),
            Property::always(
                "only the holder writes the note",
                |_: &LeaseModel, s: &State| s.broken != Some("only the holder writes the note"),
            ),
            Property::always(
                "a waiter that keeps stepping is granted within the bound (no data lost)",
                |m: &LeaseModel, s: &State| {
                    if s.data_lost {
                        return true;
                    }
                    s.clients.iter().all(|c| match &c.phase {
                        Phase::Waiting { joined, .. } if Self::active(c) => {
                            s.tick.saturating_sub(*joined) <= m.wait_bound()
                        }
                        _ => true,
                    })
                },
            ),
            Property::sometimes(
                "a lease is handed over to a waiter",
                |_: &LeaseModel, s: &State| s.granted.len() >= 2,
            ),
        ]
    }

    fn within_boundary(&self, s: &State) -> bool {
        s.tick <= self.bounds.ticks
    }
}

impl LeaseModel {
    /// The longest a waiter that keeps stepping may wait, in ticks: each client ahead of it holds
    /// for at most its TTL and its renewals, or leaves a lock that runs out after its TTL (a crash),
    /// or a grant it never takes that runs out after the first TTL, and the hand-over then waits for
    /// the next step (one tick).
    pub fn wait_bound(&self) -> u8 {
        let t = &self.timings;
        let hold = t.ttl_ms * (1 + i64::from(self.bounds.renewals)) + t.first_ms;
        let per = hold / TICK_MS + 2;
        let ahead = (self.bounds.clients as i64 - 1) * i64::from(self.bounds.attempts);
        u8::try_from(per * ahead + 1).unwrap_or(u8::MAX)
    }
}
