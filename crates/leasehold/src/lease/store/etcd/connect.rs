//! From an `etcd://` URL to a checked connection: the URL's grammar, TLS, credentials, and the first
//! request, which tells an etcd that answers from a port that is down or is something else.
//!
//! Promise: a malformed URL is refused before anything is sent, with the form it should take; the
//! password is never part of a message. Limit: endpoints are used as given; members the cluster
//! adds later are not discovered.

use std::time::Duration;

use etcd_client::ConnectOptions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use etcd_client::GetOptions;

use super::keepalive::KeepAlives;
use super::members::Members;
use super::retention::RetentionLease;
use super::{keys, prefix_end, EtcdStore};

use crate::error::{Error, Phase, Result};
use crate::lease::store::contract::{Settings, StoreKind, StoreMeta};
use crate::url::StoreUrl;

/// What the URL says.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Target {
    /// `etcds://`: TLS to every member.
    pub(super) tls: bool,
    /// `http(s)://host:port`, one per member.
    pub(super) endpoints: Vec<String>,
    /// User and password for etcd's authentication, when the URL has them.
    pub(super) user: Option<(String, String)>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("tls", &self.tls)
            .field("endpoints", &self.endpoints)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

/// etcd's client port when the URL gives none.
const DEFAULT_PORT: u16 = 2379;

const FORM: &str = "use etcd://[user:password@]host:port[,host:port…] (etcds://… for TLS)";

/// Reads `etcd://[user:password@]host[:port][,host[:port]…][/]` and `etcds://…`.
pub(super) fn parse(url: &StoreUrl) -> Result<Target> {
    parse_text(url.expose(), url.redacted())
}

/// [`parse`] on the URL's text; `shown` is its redacted form, for the messages.
fn parse_text(url: &str, shown: &str) -> Result<Target> {
    let bad = |why: &dyn std::fmt::Display| {
        Error::invalid("etcd url", format!("`{shown}` {why}; {FORM}"))
    };
    let (tls, rest) = if let Some(r) = url.strip_prefix("etcd://") {
        (false, r)
    } else if let Some(r) = url.strip_prefix("etcds://") {
        (true, r)
    } else {
        return Err(bad(&"does not start with etcd:// or etcds://"));
    };
    let (userinfo, hosts) = match rest.rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    let hosts = hosts.strip_suffix('/').unwrap_or(hosts);
    if let Some(c) = hosts.chars().find(|c| matches!(c, '/' | '?' | '#')) {
        return Err(bad(&format!(
            "has {c:?} after the hosts; an etcd URL has no path, query or fragment"
        )));
    }
    let user = match userinfo {
        None => None,
        Some(info) => {
            let Some((user, password)) = info.split_once(':') else {
                return Err(bad(&"names a user without a password"));
            };
            if user.is_empty() {
                return Err(bad(&"has a password without a user name"));
            }
            let decode = |s: &str, what: &str| {
                crate::url::percent_decode(s).ok_or_else(|| {
                    bad(&format!(
                        "has a {what} whose %-escapes do not decode to UTF-8"
                    ))
                })
            };
            Some((decode(user, "user name")?, decode(password, "password")?))
        }
    };
    if hosts.is_empty() {
        return Err(bad(&"names no host"));
    }
    let scheme = if tls { "https" } else { "http" };
    let mut endpoints = Vec::new();
    for host in hosts.split(',') {
        let (name, port) = split_host_port(host).map_err(|why| bad(&why))?;
        endpoints.push(format!("{scheme}://{name}:{port}"));
    }
    Ok(Target {
        tls,
        endpoints,
        user,
    })
}

fn split_host_port(hostport: &str) -> std::result::Result<(&str, u16), String> {
    if hostport.is_empty() {
        return Err("has an empty host between commas".to_owned());
    }
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let Some(end) = v6.find(']') else {
            return Err(format!(
                "has `{hostport}`, an IPv6 address without its closing `]`"
            ));
        };
        let after = &v6[end + 1..];
        let port = match after.strip_prefix(':') {
            Some(p) => Some(p),
            None if after.is_empty() => None,
            None => return Err(format!("has `{hostport}`, which is not [address]:port")),
        };
        (&hostport[..end + 2], port)
    } else {
        match hostport.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hostport, None),
        }
    };
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':'))
    {
        return Err(format!(
            "has `{hostport}`, which is not a host name or address"
        ));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => {
                return Err(format!(
                    "has `{hostport}`, whose port is not a number from 1 to 65535"
                ))
            }
        },
    };
    Ok((host, port))
}

/// The members of `target`, with the connection settings (nothing is sent yet).
pub(super) fn members(location: &str, target: &Target, settings: &Settings) -> Result<Members> {
    let mut options = ConnectOptions::new()
        .with_connect_timeout(settings.connect_timeout)
        // A member that stops answering (paused, cut off) is noticed by HTTP/2 pings even while no
        // request is waiting.
        .with_keep_alive(
            Duration::from_secs(1),
            settings.response_timeout.max(Duration::from_millis(500)),
        )
        .with_keep_alive_while_idle(true)
        // A member cut off from its cluster refuses at once instead of holding a request (or a
        // watch) until it rejoins.
        .with_require_leader(true);
    match (&settings.tls_root_ca_pem, target.tls) {
        (Some(_), false) => {
            return Err(Error::invalid(
                "tls root certificate",
                format!("it was given for `{location}`, which is not a TLS URL; use etcds://"),
            ))
        }
        (pem, true) => {
            let tls = match pem {
                Some(pem) => etcd_client::TlsOptions::new()
                    .ca_certificate(etcd_client::Certificate::from_pem(pem.clone())),
                None => etcd_client::TlsOptions::new().with_webpki_roots(),
            };
            options = options.with_tls(tls);
        }
        (None, false) => {}
    }
    if let Some((user, password)) = &target.user {
        options = options.with_user(user.clone(), password.clone());
    }
    Ok(Members::new(target.endpoints.clone(), options))
}

/// A connect-time failure of the member at `endpoint`, told apart: a refused or unreachable port is
/// the store being down ([`Error::Store`], exit 69); refused credentials are
/// [`Error::Unauthorized`] (exit 77); an answer that is not etcd's, or a TLS mismatch, is a wrong
/// URL ([`Error::Invalid`], exit 2).
pub(super) fn connect_error(location: &str, endpoint: &str, e: etcd_client::Error) -> Error {
    // At connect, a connection that opened and was then closed without an HTTP/2 answer is a
    // server that does not speak gRPC (an HTTP/1 server, or a TLS port spoken to in plain text);
    // later the same error means a member went away mid-request.
    let closed_unanswered = || {
        let text = super::errors::describe(&e).to_ascii_lowercase();
        ["connection closed", "connection reset", "broken pipe"]
            .iter()
            .any(|s| text.contains(s))
            .then(|| super::errors::describe(&e))
    };
    if super::errors::is_credentials_refused(&e) {
        return Error::Unauthorized {
            phase: crate::Phase::Connect,
            store: location.to_owned(),
            detail: super::errors::describe(&e),
            fix: "give an etcd user and its password in the URL (etcd://user:password@host:port)"
                .to_owned(),
        };
    }
    match super::errors::not_etcd(&e).or_else(closed_unanswered) {
        Some(what) => Error::invalid(
            "etcd url",
            format!(
                "`{location}`: {endpoint} answered, but not as etcd ({what}); check that each \
                 host:port is an etcd client URL (port 2379 by default, not the peer port 2380), \
                 and use etcds:// if the members serve TLS or etcd:// if they do not"
            ),
        ),
        None => super::errors::from_etcd(crate::Phase::Connect, e),
    }
}

impl EtcdStore {
    /// Connects to the members the URL names (`etcd://[user:password@]host:port[,…]`, `etcds://`
    /// for TLS) and asks the cluster once, so that a cluster without a leader, wrong credentials, or a
    /// port that is not etcd is an error now rather than at the first acquire.
    pub(crate) async fn connect(url: &StoreUrl, settings: Settings) -> Result<Self> {
        let target = parse(url)?;
        let meta = StoreMeta::new(StoreKind::ETCD, url.redacted());
        let members = Arc::new(members(meta.location(), &target, &settings)?);
        let store = EtcdStore {
            keepalives: Arc::new(KeepAlives::new(members.clone(), meta.clone())),
            members,
            prefix: settings.prefix.into(),
            response_timeout: settings.response_timeout,
            connect_timeout: settings.connect_timeout,
            meta,
            queued: Arc::new(Mutex::new(HashMap::new())),
            records: Arc::new(RetentionLease::new(settings.retention)),
        };
        store.probe().await?;
        tracing::debug!(url = %store.meta.location(), prefix = %store.prefix, "etcd lease store connected");
        Ok(store)
    }

    /// Asks every member for a count of this prefix's keys, all at once: one answer is enough to go
    /// on (the others may be down), but a member that answers as something other than etcd is a
    /// wrong URL even when the others are fine. Requests then start at a member that answered.
    pub(super) async fn probe(&self) -> Result<()> {
        let start = keys::names_start(&self.prefix);
        let options = GetOptions::new()
            .with_range(prefix_end(start.as_bytes()))
            .with_count_only();
        let limit = self.limit();
        let asks = (0..self.members.len()).map(|i| {
            let (start, options) = (start.clone(), options.clone());
            async move {
                self.meta.count(1);
                let ask = async {
                    let mut client = self.members.client(i).await?;
                    client.get(start, Some(options)).await
                };
                (i, tokio::time::timeout(limit, ask).await)
            }
        });
        let answers = futures::future::join_all(asks).await;
        let mut failure = None;
        let mut answered = None;
        for (i, answer) in answers {
            let endpoint = self.members.endpoint(i);
            match answer {
                Ok(Ok(_)) => answered = answered.or(Some(i)),
                Ok(Err(e)) => {
                    let e = connect_error(self.meta.location(), endpoint, e);
                    let wrong = matches!(e, Error::Invalid { .. });
                    if wrong || failure.is_none() {
                        failure = Some(e);
                    }
                    if wrong {
                        break;
                    }
                }
                Err(_) => {
                    failure = failure.or(Some(Error::Timeout {
                        phase: Phase::Connect,
                        after: limit,
                    }))
                }
            }
        }
        match (answered, failure) {
            (_, Some(e @ Error::Invalid { .. })) => Err(e),
            (Some(i), _) => {
                self.members.use_member(i);
                Ok(())
            }
            (None, Some(e)) => Err(e),
            (None, None) => Err(Error::invalid("etcd url", "it names no member")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(url: &str) -> Result<Target> {
        parse_text(url, &crate::url::redact(url))
    }

    #[test]
    fn urls_name_members_credentials_and_tls() {
        let t = parse("etcd://10.0.0.1:2379,10.0.0.2:2379,[::1]:2381").unwrap();
        assert!(!t.tls);
        assert_eq!(
            t.endpoints,
            [
                "http://10.0.0.1:2379",
                "http://10.0.0.2:2379",
                "http://[::1]:2381"
            ]
        );
        assert_eq!(t.user, None);
        let t = parse("etcds://app:p%40ss:w@db.example:2379/").unwrap();
        assert!(t.tls);
        assert_eq!(t.endpoints, ["https://db.example:2379"]);
        assert_eq!(t.user, Some(("app".to_owned(), "p@ss:w".to_owned())));
        assert_eq!(
            parse("etcd://h").unwrap().endpoints,
            ["http://h:2379"],
            "the default client port"
        );
        assert!(!format!("{t:?}").contains("p@ss"));
    }

    #[test]
    fn malformed_urls_say_what_is_wrong_and_never_show_the_password() {
        for bad_url in [
            "etcd://",
            "etcd://u:secret@",
            "etcd://h:2379,",
            "etcd://h:0",
            "etcd://h:99999",
            "etcd://h:port",
            "etcd://h:2379/path",
            "etcd://h:2379?x=1",
            "etcd://[::1:2379",
            "etcd://u@h:2379",
            "etcd://:secret@h:2379",
            "etcd://h o:1",
            "redis://h:1",
        ] {
            let e = parse(bad_url).unwrap_err();
            let msg = e.to_string();
            assert!(
                matches!(
                    e,
                    Error::Invalid {
                        what: "etcd url",
                        ..
                    }
                ),
                "{bad_url}: {msg}"
            );
            assert!(msg.contains("etcd://[user:password@]host:port"), "{msg}");
            assert!(!msg.contains("secret"), "{msg}");
        }
    }

    #[test]
    fn percent_escapes_decode_and_stray_percents_stay() {
        let decode = |s| crate::url::percent_decode(s).unwrap();
        assert_eq!(decode("a%2Cb%3a"), "a,b:");
        assert_eq!(decode("100%"), "100%");
        assert_eq!(decode("%zz"), "%zz");
    }
}
