//! Which Redis topology a store URL names, read before anything is sent: one server (`redis://`,
//! `rediss://`), a primary found through Sentinel (`redis-sentinel://`, `rediss-sentinel://`), or a
//! Redis Cluster (`redis-cluster://`, `rediss-cluster://`).
//!
//! The Sentinel form is Lettuce's: `redis-sentinel://[[user]:password@]host[:port][,host[:port]…][/db]#master`
//! (sentinel port 26379 by default). The user-info is for the data nodes (primary and replicas);
//! the sentinels' own credentials, when they differ, go in the query: `?sentinel_user=…&sentinel_password=…`
//! (a password alone is the `default` user's). A user-info without `:` is a password, as in Lettuce.
//! Percent-encode `@ : / ? # & %` inside a credential.
//!
//! Promise: a malformed URL is refused with a message that says what to write instead, and no
//! message shows a password. Limit: host names are not resolved here; an unreachable host is found
//! out at connect.

use crate::error::{Error, Result};
use crate::url::StoreUrl;

use super::node::{addr, decode, NodeAuth};

/// The default port of a sentinel.
pub(crate) const SENTINEL_PORT: u16 = 26379;
/// The default port of a Redis node.
pub(crate) const REDIS_PORT: u16 = 6379;

/// What a store URL names.
#[derive(Debug)]
pub(crate) enum Topology {
    /// One server: the URL goes to the driver as it is.
    Standalone,
    /// A primary found through sentinels.
    Sentinel(SentinelUrl),
    /// A Redis Cluster, found from seed nodes.
    Cluster(ClusterUrl),
}

/// A `redis-sentinel://` URL, read.
#[derive(Debug)]
pub(crate) struct SentinelUrl {
    /// The sentinels, `host:port`.
    pub(crate) sentinels: Vec<String>,
    /// The name the sentinels monitor the primary under (the URL's `#fragment`).
    pub(crate) master: String,
    /// How to reach the primary (and the database to use there).
    pub(crate) data: NodeAuth,
    /// How to reach the sentinels.
    pub(crate) sentinel: NodeAuth,
}

/// A `redis-cluster://` URL, read.
#[derive(Debug)]
pub(crate) struct ClusterUrl {
    /// Nodes to learn the cluster from, `host:port`.
    pub(crate) seeds: Vec<String>,
    /// How to reach every node.
    pub(crate) auth: NodeAuth,
}

/// Reads `url` (as the registry read it). `root_ca`: PEM roots for TLS, refused for a URL without
/// TLS.
pub(crate) fn parse(url: &StoreUrl, root_ca: Option<&[u8]>) -> Result<Topology> {
    let shown = url.redacted();
    let scheme = url.scheme();
    let rest = &url.expose()[scheme.len() + "://".len()..];
    let (tls, sentinel) = match scheme {
        "redis" | "rediss" => return Ok(Topology::Standalone),
        "redis-sentinel" => (false, true),
        "rediss-sentinel" => (true, true),
        "redis-cluster" => (false, false),
        "rediss-cluster" => (true, false),
        _ => {
            return Err(Error::invalid(
                "store url",
                format!("`{shown}` is not a Redis URL"),
            ))
        }
    };
    let form = if sentinel {
        "redis-sentinel://[[user]:password@]host[:port][,host[:port]...][/db][?sentinel_user=...&sentinel_password=...]#master"
    } else {
        "redis-cluster://[[user]:password@]host:port[,host:port...]"
    };
    let bad = |why: String| Error::invalid("store url", format!("`{shown}`: {why}; use {form}"));

    let Parts {
        userinfo,
        hosts,
        path,
        query,
        fragment,
    } = Parts::of(rest);
    let default_port = if sentinel { SENTINEL_PORT } else { REDIS_PORT };
    let nodes = hosts
        .split(',')
        .map(|h| host_port(h, default_port))
        .collect::<std::result::Result<Vec<String>, String>>()
        .map_err(bad)?;

    let (user, password) = credentials(userinfo, &bad)?;

    let db: i64 = match path.trim_start_matches('/') {
        "" => 0,
        n => n
            .parse()
            .ok()
            .filter(|d| *d >= 0)
            .ok_or_else(|| bad(format!("`{n}` is not a database number")))?,
    };

    let sentinel_auth = query_credentials(query, sentinel, tls, root_ca, &bad)?;
    if root_ca.is_some() && !tls {
        return Err(Error::invalid(
            "tls root certificate",
            format!(
                "it was given for `{shown}`, which is not a TLS URL; use {}",
                if sentinel {
                    "rediss-sentinel://"
                } else {
                    "rediss-cluster://"
                }
            ),
        ));
    }
    let data = NodeAuth {
        tls,
        user,
        password,
        db,
        root_ca: root_ca.map(<[u8]>::to_vec),
    };

    if sentinel {
        sentinel_url(nodes, data, sentinel_auth, fragment, shown, form)
    } else {
        cluster_url(nodes, data, path, fragment, &bad)
    }
}

/// A Sentinel URL's topology: the master's name is the URL's `#fragment`, and must be there.
fn sentinel_url(
    sentinels: Vec<String>,
    data: NodeAuth,
    sentinel: NodeAuth,
    fragment: Option<&str>,
    shown: &str,
    form: &str,
) -> Result<Topology> {
    let master = fragment
        .map(|f| decode(f).unwrap_or_else(|| f.to_owned()))
        .filter(|m| !m.is_empty())
        .ok_or_else(|| {
            Error::invalid(
                "sentinel master name",
                format!(
                    "`{shown}` does not name the master the sentinels monitor; end the URL with #<master name> (the name in `sentinel monitor <name> ...`), as in {form}"
                ),
            )
        })?;
    Ok(Topology::Sentinel(SentinelUrl {
        sentinels,
        master,
        data,
        sentinel,
    }))
}

/// A Cluster URL's topology: database 0 only, no `#fragment`.
fn cluster_url(
    seeds: Vec<String>,
    auth: NodeAuth,
    path: &str,
    fragment: Option<&str>,
    bad: &dyn Fn(String) -> Error,
) -> Result<Topology> {
    if auth.db != 0 {
        return Err(bad(format!(
            "Redis Cluster has only database 0, not {}; remove `{path}`",
            auth.db
        )));
    }
    if let Some(f) = fragment {
        return Err(bad(format!(
            "a cluster URL has no `#{f}` (that names a Sentinel master)"
        )));
    }
    Ok(Topology::Cluster(ClusterUrl { seeds, auth }))
}

/// The parts of a multi-host URL after its `scheme://`.
struct Parts<'a> {
    userinfo: Option<&'a str>,
    hosts: &'a str,
    path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

impl<'a> Parts<'a> {
    fn of(rest: &'a str) -> Self {
        let (userinfo, tail) = match crate::url::userinfo_end(rest) {
            Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
            None => (None, rest),
        };
        let hosts_end = tail.find(['/', '?', '#']).unwrap_or(tail.len());
        let (hosts, after) = tail.split_at(hosts_end);
        let (before_fragment, fragment) = match after.split_once('#') {
            Some((b, f)) => (b, Some(f)),
            None => (after, None),
        };
        let (path, query) = match before_fragment.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (before_fragment, None),
        };
        Parts {
            userinfo,
            hosts,
            path,
            query,
            fragment,
        }
    }
}

/// The user and password of the URL's user-info, %-decoded (a user-info without a colon is a
/// password, as Lettuce reads it).
fn credentials(
    userinfo: Option<&str>,
    bad: &dyn Fn(String) -> Error,
) -> Result<(Option<String>, Option<String>)> {
    let Some(info) = userinfo else {
        return Ok((None, None));
    };
    let (user, password) = match info.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        // Lettuce: a user-info without a colon is a password.
        None => ("", Some(info)),
    };
    let user = decode(user)
        .ok_or_else(|| bad("the user name's %-escapes do not decode to UTF-8".into()))?;
    let password = password
        .map(|p| {
            decode(p).ok_or_else(|| bad("the password's %-escapes do not decode to UTF-8".into()))
        })
        .transpose()?;
    Ok(((!user.is_empty()).then_some(user), password))
}

/// The sentinels' own credentials from the query (`sentinel_user`, `sentinel_password`); any other
/// parameter, and any at all in a cluster URL, is refused.
fn query_credentials(
    query: Option<&str>,
    sentinel: bool,
    tls: bool,
    root_ca: Option<&[u8]>,
    bad: &dyn Fn(String) -> Error,
) -> Result<NodeAuth> {
    let mut sentinel_auth = NodeAuth {
        tls,
        root_ca: root_ca.map(<[u8]>::to_vec),
        ..NodeAuth::default()
    };
    for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let v = decode(v).ok_or_else(|| {
            bad(format!(
                "the value of `{k}` has %-escapes that do not decode to UTF-8"
            ))
        })?;
        match (sentinel, k) {
            (true, "sentinel_user") => sentinel_auth.user = Some(v).filter(|u| !u.is_empty()),
            (true, "sentinel_password") => sentinel_auth.password = Some(v),
            (true, _) => {
                return Err(bad(format!(
                    "unknown parameter `{k}` (known: sentinel_user, sentinel_password)"
                )))
            }
            (false, _) => {
                return Err(bad(format!(
                    "unknown parameter `{k}` (a cluster URL takes none)"
                )))
            }
        }
    }
    Ok(sentinel_auth)
}

/// `host[:port]` or `[v6][:port]` to `host:port`.
fn host_port(s: &str, default_port: u16) -> std::result::Result<String, String> {
    // A host entry holding `@` is a user-info that was not recognised as one: never echo it.
    let s_shown = if s.contains('@') {
        "a host entry holding `@`".to_owned()
    } else {
        format!("`{s}`")
    };
    if s.is_empty() {
        return Err("an empty host in the host list".into());
    }
    let (host, port) = if let Some(v6) = s.strip_prefix('[') {
        let (host, rest) = v6
            .split_once(']')
            .ok_or_else(|| format!("{s_shown} opens `[` without closing it"))?;
        match rest {
            "" => (host, None),
            r => (
                host,
                Some(
                    r.strip_prefix(':')
                        .ok_or_else(|| format!("{s_shown}: expected `:port` after `]`"))?,
                ),
            ),
        }
    } else {
        match s.split_once(':') {
            Some((_, p)) if p.contains(':') => {
                return Err(format!(
                    "{s_shown}: write an IPv6 address in brackets, [addr]:port"
                ))
            }
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    if host.is_empty() {
        return Err(format!("{s_shown} has no host name"));
    }
    let port = match port {
        None => default_port,
        Some(p) => p.parse::<u16>().ok().filter(|p| *p > 0).ok_or_else(|| {
            format!(
                "`{}` in {s_shown} is not a port",
                if p.contains('@') { "the port" } else { p }
            )
        })?,
    };
    Ok(addr(host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sentinel(url: &str) -> SentinelUrl {
        match parse(&StoreUrl::parse(url).unwrap(), None).unwrap() {
            Topology::Sentinel(s) => s,
            other => panic!("{other:?}"),
        }
    }

    fn refused(url: &str) -> (&'static str, String) {
        match parse(&StoreUrl::parse(url).unwrap(), None) {
            Err(Error::Invalid { what, why }) => {
                assert!(!why.contains("secret"), "{why}");
                (what, why)
            }
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn sentinel_urls_in_the_lettuce_form() {
        let s = sentinel("redis-sentinel://h1,h2:26380,[::1]:5000/2#orders");
        assert_eq!(s.sentinels, ["h1:26379", "h2:26380", "[::1]:5000"]);
        assert_eq!(s.master, "orders");
        assert_eq!(s.data.db, 2);
        assert_eq!((s.data.user, s.data.password), (None, None));
        assert!(!s.data.tls && !s.sentinel.tls);

        let s = sentinel("redis-sentinel://app:p%40ss@h1:1#m");
        assert_eq!(s.data.user.as_deref(), Some("app"));
        assert_eq!(s.data.password.as_deref(), Some("p@ss"));
        assert_eq!(
            s.sentinel.password, None,
            "data credentials stay on the data side"
        );

        let s = sentinel("redis-sentinel://:pw@h1#m");
        assert_eq!(
            (s.data.user, s.data.password.as_deref()),
            (None, Some("pw"))
        );
        let s = sentinel("redis-sentinel://pw@h1#m");
        assert_eq!(
            s.data.password.as_deref(),
            Some("pw"),
            "Lettuce: no colon, a password"
        );

        let s =
            sentinel("rediss-sentinel://app:d@h1/0?sentinel_user=watch&sentinel_password=s%26t#m");
        assert!(s.data.tls && s.sentinel.tls);
        assert_eq!(s.sentinel.user.as_deref(), Some("watch"));
        assert_eq!(s.sentinel.password.as_deref(), Some("s&t"));
        assert_eq!(s.sentinel.db, 0);
    }

    #[test]
    fn cluster_urls_list_seed_nodes() {
        let Topology::Cluster(c) = parse(
            &StoreUrl::parse("rediss-cluster://u:p@10.0.0.1:7000,10.0.0.2").unwrap(),
            None,
        )
        .unwrap() else {
            panic!()
        };
        assert_eq!(c.seeds, ["10.0.0.1:7000", "10.0.0.2:6379"]);
        assert!(c.auth.tls);
        assert_eq!(c.auth.user.as_deref(), Some("u"));
        assert!(matches!(
            parse(&StoreUrl::parse("redis://h:1/0").unwrap(), None).unwrap(),
            Topology::Standalone
        ));
    }

    #[test]
    fn malformed_urls_say_what_to_write_instead() {
        let (what, why) = refused("redis-sentinel://:secret@h1,h2");
        assert_eq!(what, "sentinel master name");
        assert!(why.contains("#<master name>"), "{why}");
        let (what, _) = refused("redis-sentinel://:secret@h1#");
        assert_eq!(what, "sentinel master name");
        for (url, says) in [
            ("redis-sentinel://:secret@h1,,h2#m", "empty host"),
            ("redis-sentinel://:secret@h1:0#m", "not a port"),
            ("redis-sentinel://:secret@h1:x#m", "not a port"),
            ("redis-sentinel://:secret@::1#m", "brackets"),
            ("redis-sentinel://:secret@h1/x#m", "database"),
            (
                "redis-sentinel://:secret@h1?timeout=1#m",
                "unknown parameter",
            ),
            ("redis-cluster://:secret@h1:7000/3", "only database 0"),
            ("redis-cluster://:secret@h1:7000#m", "Sentinel master"),
            (
                "redis-cluster://:secret@h1:7000?sentinel_user=x",
                "takes none",
            ),
            ("redis-cluster://:secret@", "empty host"),
            ("redis-clusters://:secret@h", "not a Redis URL"),
        ] {
            let (_, why) = refused(url);
            assert!(why.contains(says), "{url}: {why}");
        }
        match parse(
            &StoreUrl::parse("redis-cluster://h:1").unwrap(),
            Some(b"pem"),
        ) {
            Err(Error::Invalid { what, why }) => {
                assert_eq!(what, "tls root certificate");
                assert!(why.contains("rediss-cluster://"), "{why}");
            }
            other => panic!("{other:?}"),
        }
    }
}
