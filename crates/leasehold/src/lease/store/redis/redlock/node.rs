//! One Redis master of a Redlock: its connections (the single-server store's: a shared reconnecting
//! connection and dedicated ones for `BLPOP`), what it is (`INFO server` run id, `ROLE`), and every
//! request to it bounded in time.
//!
//! Promise: a request never waits past its bound; a master that could not be reached when the store
//! opened is checked (master, not a known server twice) the first time it answers, and is not used
//! before. Limit: a master that later becomes a replica, or restarts, is not checked again; its
//! restart shows as a new run id only in logs (see `docs/redlock.md` on restarts).

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionManager;
use redis::Value;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::lease::store::contract::Settings;
use crate::lease::store::redis::acl::{self, Deployment};
use crate::lease::store::redis::conn::{
    manager_config, BlockingPool, Counted, Nodes, Reconnecting, Route, Shared,
};
use crate::lease::store::redis::errors::{bounded, Failure};
use crate::lease::store::redis::node as redis_node;
use crate::url::StoreUrl;

/// What `INFO server` and `ROLE` say a server is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Identity {
    /// `run_id`: random per server process; two URLs with one run id name one server.
    pub(crate) run_id: String,
    /// `ROLE`'s first element: `master`, `slave`, `sentinel`.
    pub(crate) role: String,
    /// Its memory policy and the rest `INFO` says.
    pub(crate) facts: crate::lease::store::redis::health::NodeFacts,
    /// The commands Redlock needs that the user may not run there (`acl::check`'s answer).
    pub(crate) refused: Vec<String>,
}

/// Whether a master may be used yet.
#[derive(Debug, Clone)]
enum Standing {
    /// Checked: a master, and not a server another URL names too.
    Ready,
    /// Not reached since the store opened; checked when it first answers.
    Pending {
        /// A check is running.
        checking: bool,
        /// When the last check started (checks are at most one a second).
        last: Option<Instant>,
    },
    /// Refused for good, with the reason (logged once).
    Refused(Arc<str>),
}

/// One master.
pub(crate) struct Node {
    /// The URL without its password.
    pub(crate) location: Arc<str>,
    /// The reconnecting multiplexed connection every non-blocking request goes through.
    shared: Shared,
    /// Dedicated connections for `BLPOP`.
    blocking: BlockingPool,
    /// Ready, pending its first check, or refused.
    standing: Mutex<Standing>,
    /// The run id seen by the last successful check.
    run_id: Mutex<Option<String>>,
    /// Whether the last request got through (a down master is not chosen to wait on).
    up: AtomicBool,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("url", &self.location)
            .field("run_id", &self.run_id())
            .finish_non_exhaustive()
    }
}

/// A `redis::Client` for `url`, with TLS set up as the single-server store does. A malformed URL is
/// [`Error::Invalid`] naming it (without its password).
fn client(url: &StoreUrl, tls_root_ca_pem: Option<&[u8]>) -> Result<redis::Client> {
    let location = url.redacted();
    if !matches!(url.scheme(), "redis" | "rediss") {
        return Err(Error::invalid(
            "redis url",
            format!(
                "`{location}` is not a Redis URL; every Redlock master is redis://[user:password@]host[:port][/db] or rediss://... for TLS"
            ),
        ));
    }
    let client = redis_node::open_client(url)?;
    if url.scheme() != "rediss" {
        // Several masters may mix TLS and plain connections; the roots apply to the TLS ones.
        return Ok(client);
    }
    redis_node::prepare_tls(location)?;
    match tls_root_ca_pem {
        None => Ok(client),
        pem => redis_node::one_server_client(url, pem),
    }
}

impl Node {
    /// A master for `url`, not yet contacted: its connection opens on first use. Only the URL is
    /// checked here.
    pub(crate) fn new(url: &StoreUrl, settings: &Settings, count: Arc<AtomicU64>) -> Result<Node> {
        let location: Arc<str> = url.redacted().into();
        let client = client(url, settings.tls_root_ca_pem.as_deref())?;
        let manager =
            ConnectionManager::new_lazy_with_config(client.clone(), manager_config(settings))
                .map_err(|e| {
                    Error::invalid(
                        "redis url",
                        format!("`{location}`: the connection could not be set up ({e})"),
                    )
                })?;
        Ok(Node {
            location,
            shared: Counted {
                con: Route::Standalone(Reconnecting::probing(manager, count.clone())),
                count: count.clone(),
            },
            blocking: BlockingPool::new(
                Nodes::Standalone {
                    client: Box::new(client),
                    direct: None,
                },
                settings.connect_timeout,
                count,
            ),
            standing: Mutex::new(Standing::Pending {
                checking: false,
                last: None,
            }),
            run_id: Mutex::new(None),
            up: AtomicBool::new(false),
        })
    }

    /// The run id of the last successful check.
    pub(crate) fn run_id(&self) -> Option<String> {
        self.run_id.lock().expect("run id lock").clone()
    }

    /// Whether the last request reached it and it is ready.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed) && self.is_ready()
    }

    fn is_ready(&self) -> bool {
        matches!(
            *self.standing.lock().expect("standing lock"),
            Standing::Ready
        )
    }

    /// The master's memory policy and evicted keys as `INFO` says them now, bounded by `limit`:
    /// `None` for a master not checked yet, refused, or not answering (a look skips it).
    pub(crate) async fn look(
        &self,
        limit: Duration,
    ) -> Option<crate::lease::store::redis::health::NodeFacts> {
        if !self.is_ready() {
            return None;
        }
        let mut con = self.shared.clone();
        bounded(limit, crate::lease::store::redis::health::facts(&mut con))
            .await
            .ok()
    }

    /// Asks the server what it is: `PING` (refused without valid credentials), `INFO server`
    /// (`run_id`) and `ROLE`, and loads the scripts, in one pipeline; then whether the user may run
    /// every command Redlock needs on keys under `prefix` (`acl::check`).
    pub(crate) async fn identify(
        &self,
        limit: Duration,
        prefix: &str,
    ) -> std::result::Result<Identity, Failure> {
        let mut con = self.shared.clone();
        let mut pipe = redis::pipe();
        pipe.cmd("PING").ignore();
        super::scripts::load_all(&mut pipe);
        // The default sections: `run_id` (server), and the memory policy (`health`).
        pipe.cmd("INFO").cmd("ROLE");
        let (info, role): (String, Vec<Value>) = bounded(limit, pipe.query_async(&mut con))
            .await
            .inspect_err(|f| self.mark(f))?;
        // The ACL check once the credentials proved good: a server closes the connection of a
        // client not yet authenticated that sends a command of more than 10 words.
        let mut pipe = redis::pipe();
        acl::add_check(&mut pipe, Deployment::Redlock, prefix);
        let (refused,): (Vec<String>,) = bounded(limit, pipe.query_async(&mut con))
            .await
            .inspect_err(|f| self.mark(f))?;
        self.up.store(true, Ordering::Relaxed);
        let role = match role.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => String::new(),
        };
        let facts = crate::lease::store::redis::health::NodeFacts::parse(&info);
        Ok(Identity {
            run_id: facts.run_id.clone(),
            role,
            facts,
            refused,
        })
    }

    /// Marks the master ready with `run_id`.
    pub(crate) fn accept(&self, run_id: String) {
        *self.run_id.lock().expect("run id lock") = Some(run_id);
        *self.standing.lock().expect("standing lock") = Standing::Ready;
    }

    /// Refuses the master for good.
    pub(crate) fn refuse(&self, why: String) {
        *self.standing.lock().expect("standing lock") = Standing::Refused(why.into());
    }

    /// Whether a background check should start now (pending, none running, none in the last
    /// second); if so, marks one running.
    pub(crate) fn claim_check(&self) -> bool {
        let mut s = self.standing.lock().expect("standing lock");
        match &mut *s {
            Standing::Pending { checking, last } => {
                if *checking || last.is_some_and(|t| t.elapsed() < Duration::from_secs(1)) {
                    return false;
                }
                *checking = true;
                *last = Some(Instant::now());
                true
            }
            _ => false,
        }
    }

    /// A background check ended without a verdict (unreachable again).
    pub(crate) fn check_failed(&self) {
        if let Standing::Pending { checking, .. } =
            &mut *self.standing.lock().expect("standing lock")
        {
            *checking = false;
        }
    }

    /// `Ok` when requests may go out; else why not.
    fn usable(&self) -> std::result::Result<(), Failure> {
        match &*self.standing.lock().expect("standing lock") {
            Standing::Ready => Ok(()),
            Standing::Pending { .. } => Err(Failure::Unusable(
                format!(
                    "{} has not answered since the lease store opened",
                    self.location
                )
                .into(),
            )),
            Standing::Refused(why) => Err(Failure::Unusable(why.clone())),
        }
    }

    /// Whether it is waiting for its first check.
    pub(crate) fn is_pending(&self) -> bool {
        matches!(
            *self.standing.lock().expect("standing lock"),
            Standing::Pending { .. }
        )
    }

    fn mark(&self, f: &Failure) {
        if f.is_transport() {
            self.up.store(false, Ordering::Relaxed);
        }
    }

    /// Sends prepared script calls in one pipeline, bounded by `limit`. Per item the reply or the
    /// master's error for it.
    pub(crate) async fn scripts(
        &self,
        invs: &[redis::ScriptInvocation<'_>],
        limit: Duration,
    ) -> std::result::Result<Vec<redis::RedisResult<Value>>, Failure> {
        self.send(limit, |mut con| async move {
            super::scripts::pipeline(&mut con, invs).await
        })
        .await
    }

    /// Sends one prepared script call, bounded by `limit`, and reads its reply with `read` (a
    /// missing reply is `nil`).
    pub(crate) async fn script<T>(
        &self,
        inv: &redis::ScriptInvocation<'_>,
        limit: Duration,
        read: impl FnOnce(Value) -> redis::RedisResult<T>,
    ) -> std::result::Result<T, Failure> {
        let mut r = self.scripts(std::slice::from_ref(inv), limit).await?;
        r.pop()
            .unwrap_or(Ok(Value::Nil))
            .and_then(read)
            .map_err(Failure::Redis)
    }

    /// Sends one command and reads its reply, bounded by `limit`.
    pub(crate) async fn query<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
        limit: Duration,
    ) -> std::result::Result<T, Failure> {
        self.send(limit, |mut con| async move {
            cmd.query_async::<T>(&mut con).await
        })
        .await
    }

    /// Sends a pipeline and reads its replies, bounded by `limit`.
    pub(crate) async fn query_pipe<T: redis::FromRedisValue>(
        &self,
        pipe: &redis::Pipeline,
        limit: Duration,
    ) -> std::result::Result<T, Failure> {
        self.send(limit, |mut con| async move {
            pipe.query_async::<T>(&mut con).await
        })
        .await
    }

    /// One request on the shared connection once the master is usable, bounded by `limit`; its
    /// outcome says whether the master is up.
    async fn send<T, F>(
        &self,
        limit: Duration,
        request: impl FnOnce(Shared) -> F,
    ) -> std::result::Result<T, Failure>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        self.usable()?;
        let r = bounded(limit, request(self.shared.clone())).await;
        match &r {
            Ok(_) => self.up.store(true, Ordering::Relaxed),
            Err(f) => self.mark(f),
        }
        r
    }

    /// `BLPOP wake` for at most `block` on a dedicated connection; `Ok(true)` when woken. A
    /// connection taken from the pool that turns out closed (the master's idle `timeout`, a
    /// restart) costs no failure: the pool is emptied and the `BLPOP` goes once more, at once, on a
    /// new connection (a `BLPOP` that never reached the master popped nothing).
    pub(crate) async fn block_on(
        &self,
        wake: &str,
        block: Duration,
        slack: Duration,
    ) -> std::result::Result<bool, Failure> {
        self.usable()?;
        let secs = format!("{:.3}", block.as_secs_f64().max(0.001)); // never "0": that blocks forever
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(wake).arg(secs);
        let mut r = self.blpop(wake, &cmd, block + slack).await;
        if let Err((false, Failure::Redis(e))) = &r {
            if e.is_connection_dropped() {
                self.blocking.clear();
                r = self.blpop(wake, &cmd, block + slack).await;
            }
        }
        match r {
            Ok(woken) => {
                self.up.store(true, Ordering::Relaxed);
                Ok(woken)
            }
            Err((_, f)) => {
                self.blocking.clear();
                self.mark(&f);
                Err(f)
            }
        }
    }

    /// `cmd` (the `BLPOP` of `wake`) on a dedicated connection for `wake`, bounded by `limit`; the
    /// connection goes back to the pool when it answered. On failure, whether the connection was
    /// new.
    async fn blpop(
        &self,
        wake: &str,
        cmd: &redis::Cmd,
        limit: Duration,
    ) -> std::result::Result<bool, (bool, Failure)> {
        let mut con = self
            .blocking
            .get_for(wake)
            .await
            .map_err(|e| (true, Failure::Redis(e)))?;
        let fresh = con.is_fresh();
        match bounded(limit, cmd.query_async::<Option<(String, String)>>(&mut con)).await {
            Ok(woken) => {
                self.blocking.put(con);
                Ok(woken.is_some())
            }
            Err(f) => Err((fresh, f)),
        }
    }
}
