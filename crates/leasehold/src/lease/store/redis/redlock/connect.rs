//! Opening a Redlock: every master asked what it is at once, replicas and duplicates refused.
//!
//! Promise: the store opens only over an odd number of three or more distinct masters (checked
//! before anything is sent), with a majority answering; every master that answers is asked at once
//! what it is, and a replica, an evicting server without the opt-in, a server two URLs name,
//! refused credentials or a user missing a command Redlock needs is refused, naming that master.
//!
//! Limit: a master that does not answer at connect is checked in the background when it first
//! does (and refused for good then, with an error logged, not returned to any caller).

use std::collections::HashMap;
use std::sync::Arc;

use super::node::{self, Node};
use super::quorum::majority;
use super::{FenceRule, Inner, RedlockStore};
use crate::error::{Error, Phase, Result};
use crate::lease::store::contract::{Settings, StoreKind, StoreMeta};
use crate::lease::store::redis::acl::{self, Deployment};
use crate::lease::store::redis::errors::Failure;
use crate::url::StoreUrl;

impl RedlockStore {
    /// Opens a Redlock over `urls`: an odd number, three or more, each any URL the single-server
    /// store takes. Every master is asked what it is (`INFO server`, `ROLE`) at once; a replica or
    /// a server two URLs name is [`Error::Invalid`]; a master that refuses the credentials of its URL
    /// is [`Error::Unauthorized`] naming it; fewer than a majority answering is
    /// [`Error::NoQuorum`]. A minority that does not answer is checked when it first does.
    pub(crate) async fn connect(urls: &[StoreUrl], settings: Settings) -> Result<Self> {
        Self::connect_with_rule(urls, settings, FenceRule::PROTOCOL).await
    }

    pub(crate) async fn connect_with_rule(
        urls: &[StoreUrl],
        settings: Settings,
        rule: FenceRule,
    ) -> Result<Self> {
        let allow_eviction = crate::lease::store::redis::RedisOptions::of(&settings).allow_eviction;
        let shown: Vec<&str> = urls.iter().map(StoreUrl::redacted).collect();
        check_masters(urls, &shown)?;
        let meta = StoreMeta::new(StoreKind::REDLOCK, format!("redlock {}", shown.join(" ")));
        let nodes = urls
            .iter()
            .map(|u| Node::new(u, &settings, meta.counter()))
            .collect::<Result<Vec<_>>>()?;
        let limit = settings.connect_timeout * 2 + settings.response_timeout;
        let ids =
            futures::future::join_all(nodes.iter().map(|n| n.identify(limit, &settings.prefix)))
                .await;
        let (seen, first_failure) =
            check_identities(&nodes, &ids, allow_eviction, &settings.prefix)?;
        let quorum = majority(nodes.len());
        if seen.len() < quorum {
            return Err(Error::NoQuorum {
                phase: Phase::Connect,
                answered: seen.len(),
                needed: quorum,
                nodes: nodes.len(),
                source: first_failure.map(Box::new),
            });
        }
        for (i, id) in ids.into_iter().enumerate() {
            if let Ok(id) = id {
                nodes[i].accept(id.run_id);
            }
        }
        let mut wake_order: Vec<usize> = (0..nodes.len()).collect();
        wake_order.sort_by_key(|&i| {
            (
                nodes[i].run_id().is_none(),
                nodes[i].run_id().unwrap_or_default(),
                nodes[i].location.to_string(),
            )
        });
        tracing::debug!(masters = %meta.location(), prefix = %settings.prefix, "redlock lease store connected");
        Ok(RedlockStore {
            inner: Arc::new(Inner {
                nodes,
                allow_eviction,
                watch: Default::default(),
                wake_order,
                waits: std::sync::Mutex::new(HashMap::new()),
                prefix: settings.prefix.into(),
                response_timeout: settings.response_timeout,
                retention: settings.retention,
                meta,
                rule,
            }),
        })
    }
}

/// Refuses a count of masters that is not odd and three or more, and a URL given twice, before
/// anything is sent. `shown`: the URLs redacted.
fn check_masters(urls: &[StoreUrl], shown: &[&str]) -> Result<()> {
    if urls.len() < 3 || urls.len().is_multiple_of(2) {
        return Err(Error::invalid(
            "redlock masters",
            format!(
                "{} given ({}); Redlock needs an odd number of independent Redis masters, at least 3 (give --redis URL three or five times)",
                urls.len(),
                shown.join(", ")
            ),
        ));
    }
    for (i, a) in urls.iter().enumerate() {
        if urls[..i].contains(a) {
            return Err(Error::invalid(
                "redlock masters",
                format!(
                    "`{}` is given twice; Redlock needs {} different masters",
                    shown[i],
                    urls.len()
                ),
            ));
        }
    }
    Ok(())
}

/// Reads what each master said it is: refuses a replica, an evicting one, a server another URL
/// names, and a master that refuses its URL's credentials. Returns the run ids seen (run id →
/// master) and the first failure of a master that did not answer.
fn check_identities(
    nodes: &[Node],
    ids: &[std::result::Result<node::Identity, Failure>],
    allow_eviction: bool,
    prefix: &str,
) -> Result<(HashMap<String, usize>, Option<Error>)> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut first_failure = None;
    for (i, id) in ids.iter().enumerate() {
        match id {
            Ok(id) => {
                check_identity(nodes, i, id, &seen, allow_eviction, prefix)?;
                seen.insert(id.run_id.clone(), i);
            }
            Err(Failure::Redis(e))
                if crate::lease::store::redis::errors::is_credentials_refused(e) =>
            {
                // A master that refuses our credentials will not take a lock later either:
                // the URL is wrong, which no majority of the others makes right.
                return Err(crate::lease::store::redis::errors::refused_credentials(
                    Phase::Connect,
                    &format!("Redlock master {}", nodes[i].location),
                    e,
                    "give each master's user and password in its own URL \
                     (redis://user:password@host:port, or redis://:password@host:port for \
                     the default user)",
                ));
            }
            Err(f) => {
                tracing::warn!(url = %nodes[i].location, error = %f.to_error(Phase::Connect), "redlock master not reachable; it will be checked when it answers");
                first_failure.get_or_insert_with(|| f.to_error(Phase::Connect));
            }
        }
    }
    Ok((seen, first_failure))
}

/// Refuses master `i` when its user may not run a command Redlock needs, when `id` says it is not a master, or is a server another URL names (`seen`:
/// run id → index of the masters already checked).
pub(super) fn check_identity(
    nodes: &[Node],
    i: usize,
    id: &node::Identity,
    seen: &HashMap<String, usize>,
    allow_eviction: bool,
    prefix: &str,
) -> Result<()> {
    let here = &nodes[i].location;
    // A master whose user may not run a command Redlock needs refuses now, naming each one.
    acl::refused_error(here, Deployment::Redlock, prefix, &id.refused)?;
    if id.role != "master" {
        return Err(Error::Misconfigured {
            what: format!("Redlock master `{here}`"),
            found: format!(
                "it is not a master (ROLE says `{}`)",
                if id.role.is_empty() { "nothing" } else { &id.role }
            ),
            fix: "Redlock needs independent masters: give each master's URL, never a replica's or a sentinel's".into(),
        });
    }
    if id.facts.can_evict() && !allow_eviction {
        return Err(crate::lease::store::redis::health::evicting(
            here, &id.facts,
        ));
    }
    if id.run_id.is_empty() {
        return Err(Error::invalid(
            "redlock masters",
            format!("`{here}` did not say its run_id in INFO server; is it Redis?"),
        ));
    }
    if let Some(&j) = seen.get(&id.run_id) {
        return Err(Error::invalid(
            "redlock masters",
            format!(
                "`{}` and `{here}` are the same Redis server (run_id {}…); Redlock needs independent masters, one URL each",
                nodes[j].location,
                &id.run_id[..id.run_id.len().min(8)]
            ),
        ));
    }
    Ok(())
}

impl RedlockStore {
    /// Starts a background check of every master still pending (rate-limited per master).
    pub(super) fn check_pending(&self) {
        for (i, node) in self.inner.nodes.iter().enumerate() {
            if node.is_pending() && node.claim_check() {
                let this = self.clone();
                tokio::spawn(async move { this.check_later(i).await });
            }
        }
    }

    /// Checks master `i`, which did not answer when the store opened: a master that is a known
    /// server under another URL, or a replica, is refused for good (logged as an error).
    pub(super) async fn check_later(&self, i: usize) {
        let node = &self.inner.nodes[i];
        match node
            .identify(self.inner.response_timeout * 2, &self.inner.prefix)
            .await
        {
            Err(_) => node.check_failed(),
            Ok(id) => {
                let seen: HashMap<String, usize> = self
                    .inner
                    .nodes
                    .iter()
                    .enumerate()
                    .filter_map(|(j, n)| n.run_id().map(|r| (r, j)))
                    .filter(|&(_, j)| j != i)
                    .collect();
                match check_identity(
                    &self.inner.nodes,
                    i,
                    &id,
                    &seen,
                    self.inner.allow_eviction,
                    &self.inner.prefix,
                ) {
                    Ok(()) => {
                        tracing::info!(url = %node.location, "redlock master reachable and checked; it counts from now on");
                        node.accept(id.run_id);
                    }
                    Err(e) => {
                        tracing::error!(url = %node.location, error = %e, "redlock master refused; it never counts");
                        node.refuse(e.to_string());
                    }
                }
            }
        }
    }
}
