//! `--health ADDR` on `run` and `elect`: `/healthz` and `/leader` over HTTP, for Kubernetes probes and
//! load balancers.
//!
//! Promise: `GET /healthz` answers 503 while the lease this process holds is suspect (renewals
//! failing, the store's clock running fast) or lost, and 200 otherwise (held and healthy, or not
//! holding one: a standby waiting to lead is healthy). `GET /leader` answers who leads the name
//! (`leasehold leader --json`'s object, `null` for nobody, with `"self"` saying whether it is this
//! process), 200 when this process leads and 503 when it does not, so a readiness probe routes
//! traffic to the leader alone. Anything else is 404. Limit: what the answer says may change the
//! moment after; it is for probes and routing, never for deciding who may write (the term is).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use leasehold::{Fence, HealthWatch, LeaseClient, LeaseHealth};

/// What the endpoints report: the lease held now (its health and fence), and how to ask who leads.
#[derive(Clone)]
pub(crate) struct Health {
    inner: Arc<Inner>,
}

struct Inner {
    client: LeaseClient,
    name: String,
    held: Mutex<Option<(HealthWatch, Fence)>>,
}

impl Health {
    /// Serves `/healthz` and `/leader` on `addr` for `name` from now on, in the background.
    pub(crate) async fn serve(
        addr: SocketAddr,
        client: &LeaseClient,
        name: &str,
    ) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let health = Health {
            inner: Arc::new(Inner {
                client: client.clone(),
                name: name.to_owned(),
                held: Mutex::new(None),
            }),
        };
        let serving = health.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let h = serving.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let h = h.clone();
                        async move { Ok::<_, std::convert::Infallible>(h.answer(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(health)
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

    async fn answer<B>(&self, req: Request<B>) -> Response<Full<Bytes>> {
        match req.uri().path() {
            "/healthz" => self.healthz(),
            "/leader" => self.leader().await,
            _ => reply(StatusCode::NOT_FOUND, "try /healthz or /leader\n".into()),
        }
    }

    fn healthz(&self) -> Response<Full<Bytes>> {
        match self.held().map(|(h, _)| h.current()) {
            None => reply(StatusCode::OK, "ok: not holding (standby)\n".into()),
            Some(LeaseHealth::Held) => reply(StatusCode::OK, "ok: held\n".into()),
            Some(LeaseHealth::Suspect { reason }) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("suspect: {reason}\n"),
            ),
            Some(LeaseHealth::Lost { reason }) => {
                reply(StatusCode::SERVICE_UNAVAILABLE, format!("lost: {reason}\n"))
            }
            Some(_) => reply(StatusCode::SERVICE_UNAVAILABLE, "unknown\n".into()),
        }
    }

    async fn leader(&self) -> Response<Full<Bytes>> {
        let mine = self
            .held()
            .filter(|(h, _)| !matches!(h.current(), LeaseHealth::Lost { .. }))
            .map(|(_, fence)| fence);
        match leasehold::election::leader_of(&self.inner.client, &self.inner.name).await {
            Ok(leader) => {
                let is_self = matches!((&leader, mine), (Some(l), Some(f)) if l.term == f);
                let mut v = serde_json::to_value(&leader).unwrap_or(serde_json::Value::Null);
                if let Some(obj) = v.as_object_mut() {
                    obj.insert("self".into(), is_self.into());
                }
                let status = if is_self {
                    StatusCode::OK
                } else {
                    StatusCode::SERVICE_UNAVAILABLE
                };
                reply(status, format!("{v}\n"))
            }
            Err(e) => reply(
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{}\n",
                    serde_json::json!({"error": crate::exit::describe(&e)})
                ),
            ),
        }
    }
}

fn reply(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r
}
