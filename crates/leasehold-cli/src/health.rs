//! `--health ADDR` (or `--metrics-addr ADDR`: one listener) on `run` and `elect`: `/healthz` and
//! `/leader` over HTTP, for Kubernetes probes and load balancers, beside `/metrics` ([`crate::http`]).
//!
//! Promise: every answer comes from what the process already knows, never from a request to the
//! store made while the client waits, so it comes within milliseconds (the tests hold it to 200 ms)
//! whether or not the store answers, and its body says how fresh that knowledge is. `GET /healthz`
//! answers 503 while the lease this process holds is suspect (renewals failing, the store's clock
//! running fast) or lost, and 200 otherwise (held and healthy, or not holding one: a standby
//! waiting to lead is healthy, so it is the probe for liveness and readiness alike). `GET /leader`
//! answers who leads the name (`leasehold leader --json`'s object, `null` for nobody, as last read
//! from the store in the background every 500 ms, with `"as_of_ms"`: how long ago that read
//! succeeded, and `"self"`: whether this process leads, by its own lease), 200 when this process
//! leads and 503 when it does not: for routing traffic to the leader, never as a readiness probe
//! (standbys would never be ready and a rolling update would never finish; docs/election.md has
//! the recipe). `/metrics` is Prometheus's text ([`crate::prom`]); anything else is 404.
//!
//! Limit: what the answer says may change the moment after, and the leader another process reads
//! is up to `as_of_ms` old; it is for probes and routing, never for deciding who may write (the
//! term is).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use hyper::StatusCode;
use leasehold::{Fence, HealthWatch, LeaseClient, LeaseHealth};

use crate::http::{Reply, TEXT};

/// What the endpoints report: the lease held now (its health and fence), and how to ask who leads.
#[derive(Clone)]
pub(crate) struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    client: LeaseClient,
    name: String,
    held: Mutex<Option<(HealthWatch, Fence)>>,
    /// What this process advertises while it leads (`leasehold leader --json`'s object), for
    /// `/leader` to answer with before the background reader has read it back.
    own: Mutex<Option<serde_json::Value>>,
    /// The leader as last read from the store, by the background reader.
    seen: Mutex<Seen>,
}

/// What the background reader last learned of the leader.
#[derive(Default)]
struct Seen {
    /// The last successful read: the leader object (JSON, `null` for nobody) and when.
    leader: Option<(serde_json::Value, Instant)>,
    /// The last read's error, when it failed (or did not answer within `READ_TIMEOUT`).
    error: Option<String>,
}

/// How often the background reader asks who leads.
const READ_EVERY: Duration = Duration::from_millis(500);
/// How long one background read may take before it counts as failed.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

impl Health {
    /// Serves `/healthz`, `/leader` and `/metrics` on `listener` for `name` from now on, in the
    /// background.
    pub(crate) async fn serve(
        listener: std::net::TcpListener,
        client: &LeaseClient,
        name: &str,
    ) -> std::io::Result<Self> {
        let health = Health {
            inner: Arc::new(Inner {
                client: client.clone(),
                name: name.to_owned(),
                held: Mutex::new(None),
                own: Mutex::new(None),
                seen: Mutex::new(Seen::default()),
            }),
        };
        // The first read before serving, so that the endpoints know something from the start.
        read_leader(&health.inner).await;
        let reader = Arc::downgrade(&health.inner);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(READ_EVERY).await;
                let Some(inner) = reader.upgrade() else {
                    return;
                };
                read_leader(&inner).await;
            }
        });
        let serving = health.clone();
        crate::http::serve(
            listener,
            "/healthz, /leader or /metrics",
            move |path| match path {
                "/healthz" => Some(serving.healthz()),
                "/leader" => Some(serving.leader()),
                _ => None,
            },
        )?;
        Ok(health)
    }

    /// What this process leads with (`None` when it does not lead), beside [`holding`](Self::holding).
    pub(crate) fn advertising(&self, own: Option<serde_json::Value>) {
        *self.inner.own.lock().unwrap_or_else(|e| e.into_inner()) = own;
    }

    /// The lease this process holds now (`None`: none).
    pub(crate) fn holding(&self, held: Option<(HealthWatch, Fence)>) {
        *self.inner.held.lock().unwrap_or_else(|e| e.into_inner()) = held;
    }

    fn held(&self) -> Option<(HealthWatch, Fence)> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The held lease's health (the watchdog updates it on every renewal's outcome, so it is as
    /// fresh as the last renewal attempt), or a standby's.
    fn healthz(&self) -> Reply {
        let read = {
            let seen = self.inner.seen.lock().unwrap_or_else(|e| e.into_inner());
            match (&seen.leader, &seen.error) {
                (_, Some(e)) => format!("; the last read of the leader failed: {e}"),
                (Some((_, at)), None) => {
                    format!("; leader read {} ms ago", at.elapsed().as_millis())
                }
                (None, None) => String::new(),
            }
        };
        match self.held().map(|(h, f)| (h.current(), f)) {
            None => reply(StatusCode::OK, format!("ok: not holding (standby){read}\n")),
            Some((LeaseHealth::Held, fence)) => reply(
                StatusCode::OK,
                format!("ok: held (fence {fence}), as of the last renewal{read}\n"),
            ),
            Some((LeaseHealth::Suspect { reason }, _)) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("suspect: {reason}{read}\n"),
            ),
            Some((LeaseHealth::Lost { reason }, _)) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("lost: {reason}{read}\n"),
            ),
            Some(_) => reply(StatusCode::SERVICE_UNAVAILABLE, "unknown\n".into()),
        }
    }

    /// Who leads, from the background reader's last read and this process's own lease.
    fn leader(&self) -> Reply {
        let mine = self
            .held()
            .filter(|(h, _)| !matches!(h.current(), LeaseHealth::Lost { .. }))
            .map(|(_, fence)| fence);
        let (leader, as_of, error) = {
            let seen = self.inner.seen.lock().unwrap_or_else(|e| e.into_inner());
            let (v, at) = seen
                .leader
                .clone()
                .map_or((serde_json::Value::Null, None), |(v, at)| (v, Some(at)));
            (v, at, seen.error.clone())
        };
        let own = self
            .inner
            .own
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let read_term = leader.get("term").and_then(|t| t.as_u64());
        let mut v = match mine {
            // This process knows it leads from its own lease, whatever the last read said.
            Some(term) if read_term != Some(term.get()) => own.unwrap_or_else(
                || serde_json::json!({ "name": self.inner.name, "term": term.get() }),
            ),
            _ => leader,
        };
        if let Some(obj) = v.as_object_mut() {
            obj.insert("self".into(), mine.is_some().into());
            obj.insert(
                "as_of_ms".into(),
                as_of.map(|at| at.elapsed().as_millis() as u64).into(),
            );
            if let Some(e) = error {
                obj.insert("store_error".into(), e.into());
            }
        } else {
            // Nobody leads, as last read: still say how fresh that is.
            v = serde_json::json!({
                "leader": null,
                "self": false,
                "as_of_ms": as_of.map(|at| at.elapsed().as_millis() as u64),
                "store_error": error,
            });
        }
        let status = if mine.is_some() {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        };
        (status, "application/json", format!("{v}\n"))
    }
}

/// One background read of who leads, kept in `inner.seen`.
async fn read_leader(inner: &Inner) {
    let read = tokio::time::timeout(
        READ_TIMEOUT,
        leasehold::election::leader_of(&inner.client, &inner.name),
    )
    .await;
    let mut seen = inner.seen.lock().unwrap_or_else(|e| e.into_inner());
    match read {
        Ok(Ok(leader)) => {
            let v = serde_json::to_value(&leader).unwrap_or_default();
            seen.leader = Some((v, Instant::now()));
            seen.error = None;
        }
        Ok(Err(e)) => seen.error = Some(crate::exit::describe(&e)),
        Err(_) => {
            seen.error = Some(format!(
                "the store did not answer within {}",
                crate::duration::show(READ_TIMEOUT)
            ))
        }
    }
}

fn reply(status: StatusCode, body: String) -> Reply {
    (status, TEXT, body)
}
