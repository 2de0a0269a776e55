//! Reaching one Redis node of a topology (a sentinel, a sentinel-managed primary, a cluster node) by
//! address, with the credentials, TLS and database that side of the topology uses; and what the
//! topologies share about reading replies (redirects, `READONLY`, connection failures, key slots).
//!
//! Promise: credentials are only ever put into the URL handed to the driver, never into a message.
//! Limit: one set of credentials per side (all sentinels share one, all data nodes another).

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, RedisError, RedisResult, ServerErrorKind, Value};

/// How to reach the nodes of one side of a topology (the data nodes, or the sentinels).
#[derive(Clone, Default)]
pub(crate) struct NodeAuth {
    /// `rediss://` instead of `redis://`.
    pub(crate) tls: bool,
    /// ACL user (`None`: the `default` user).
    pub(crate) user: Option<String>,
    /// Password (`None`: no `AUTH`).
    pub(crate) password: Option<String>,
    /// Logical database (data nodes of a standalone or sentinel-managed primary only).
    pub(crate) db: i64,
    /// PEM roots to trust instead of the built-in ones (TLS only).
    pub(crate) root_ca: Option<Vec<u8>>,
}

impl std::fmt::Debug for NodeAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeAuth")
            .field("tls", &self.tls)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("db", &self.db)
            .field("root_ca", &self.root_ca.is_some())
            .finish()
    }
}

impl NodeAuth {
    /// A driver client for the node at `addr` (`host:port`, `[v6]:port`).
    pub(crate) fn client(&self, addr: &str) -> RedisResult<redis::Client> {
        let scheme = if self.tls { "rediss" } else { "redis" };
        let userinfo = match (&self.user, &self.password) {
            (None, None) => String::new(),
            (user, password) => format!(
                "{}:{}@",
                encode(user.as_deref().unwrap_or("")),
                encode(password.as_deref().unwrap_or(""))
            ),
        };
        let url = format!("{scheme}://{userinfo}{addr}/{}", self.db);
        match (&self.root_ca, self.tls) {
            (Some(pem), true) => client_trusting(url.as_str(), pem),
            _ => redis::Client::open(url.as_str()),
        }
    }
}

/// A driver client for the one-server URL `url` (`redis://`, `rediss://`); one the driver refuses is
/// [`Error::Invalid`](crate::Error::Invalid) naming it redacted and the forms it takes.
pub(crate) fn open_client(url: &crate::url::StoreUrl) -> crate::Result<redis::Client> {
    redis::Client::open(url.expose()).map_err(|e| {
        crate::Error::invalid(
            "redis url",
            format!(
                "`{}` was refused ({}); use redis://[user:password@]host[:port][/db] or rediss://... for TLS",
                url.redacted(),
                e.detail().unwrap_or("malformed")
            ),
        )
    })
}

/// A driver client for the one-server URL `url` ([`open_client`]) that trusts the PEM roots `pem`
/// when given and `url` is a TLS one (a refused certificate is [`Error::Invalid`](crate::Error::Invalid));
/// roots given for a plain URL are the caller's to refuse or ignore. Callers ran [`prepare_tls`].
pub(crate) fn one_server_client(
    url: &crate::url::StoreUrl,
    pem: Option<&[u8]>,
) -> crate::Result<redis::Client> {
    let client = open_client(url)?;
    match pem {
        Some(pem) if url.scheme() == "rediss" => client_trusting(url.expose(), pem).map_err(|e| {
            crate::Error::invalid(
                "tls root certificate",
                format!("it was refused ({e}); give PEM-encoded certificate(s)"),
            )
        }),
        _ => Ok(client),
    }
}

/// A driver client for the TLS URL `url` that trusts the PEM roots `pem` instead of the webpki ones.
/// Callers ran [`prepare_tls`] first; in a build without the `tls` feature this is never reached and
/// says so.
pub(crate) fn client_trusting(url: &str, pem: &[u8]) -> RedisResult<redis::Client> {
    #[cfg(feature = "tls")]
    {
        redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(pem.to_vec()),
            },
        )
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = (url, pem);
        Err(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "TLS needs leasehold's `tls` cargo feature",
        )))
    }
}

/// Whether TLS is usable for a `rediss` URL: in a build without the `tls` feature,
/// [`Error::Invalid`] naming the URL (`location`, redacted) and the feature.
///
/// No crypto provider is installed for the process: that is the application's choice. The driver
/// builds its rustls configuration from rustls's process default, which rustls picks by itself
/// when one provider is compiled in (leasehold compiles `ring`); an application that compiles
/// `aws-lc-rs` too installs one before connecting, as rustls asks of every user. (The driver takes
/// no rustls configuration of ours, so the provider cannot be passed to it explicitly.)
#[cfg_attr(feature = "tls", allow(clippy::unnecessary_wraps))]
pub(crate) fn prepare_tls(location: &str) -> crate::Result<()> {
    #[cfg(feature = "tls")]
    {
        let _ = location;
        Ok(())
    }
    #[cfg(not(feature = "tls"))]
    Err(crate::Error::invalid(
        "store url",
        format!(
            "`{location}` asks for TLS, but this build of leasehold has no TLS: enable its `tls` \
             cargo feature (on by default), or use a redis:// URL"
        ),
    ))
}

/// Opens a multiplexed connection to `addr`. `response_timeout` `None` for connections that carry
/// blocking commands (their callers bound each command themselves).
pub(crate) async fn open(
    auth: &NodeAuth,
    addr: &str,
    connect_timeout: Duration,
    response_timeout: Option<Duration>,
) -> RedisResult<MultiplexedConnection> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(connect_timeout))
        .set_response_timeout(response_timeout);
    // The driver's own timeout covers the TCP connect; this one also covers a TLS handshake or an
    // AUTH that a stopped server never answers.
    match tokio::time::timeout(
        connect_timeout + response_timeout.unwrap_or(connect_timeout),
        auth.client(addr)?
            .get_multiplexed_async_connection_with_config(&config),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(io_error(
            "connecting timed out",
            format!("{addr} did not complete the connection in time"),
        )),
    }
}

pub(crate) use crate::url::{percent_decode as decode, percent_encode as encode};

/// A driver error of kind I/O: the driver and the lease code treat it as "could not reach the store"
/// (retryable, CLI exit 69).
pub(crate) fn io_error(what: &'static str, detail: String) -> RedisError {
    RedisError::from((redis::ErrorKind::Io, what, detail))
}

/// The error a reply carries, if it is one.
pub(crate) fn server_error(v: &Value) -> Option<RedisError> {
    match v {
        Value::ServerError(e) => Some(e.clone().into()),
        _ => None,
    }
}

/// Whether a request that failed this way should be sent again elsewhere (after finding the node
/// again): the connection broke, timed out or was refused. The request may have run; every lease
/// script has the effect of running once when run twice.
pub(crate) fn is_connection_failure(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_timeout() || e.is_connection_refusal()
}

/// A node that is a replica refused a write: the primary moved.
pub(crate) fn is_readonly(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(ServerErrorKind::ReadOnly)
}

/// The name of a command, upper-cased.
pub(crate) fn command_name(cmd: &Cmd) -> Vec<u8> {
    match cmd.args_iter().next() {
        Some(redis::Arg::Simple(name)) => name.to_ascii_uppercase(),
        _ => Vec::new(),
    }
}

/// Commands that hold their connection until something happens: never resent on their own after a
/// redirect (the caller's bound on the wait would be spent twice); the caller asks again instead.
pub(crate) fn is_blocking(cmd: &Cmd) -> bool {
    matches!(
        command_name(cmd).as_slice(),
        b"BLPOP"
            | b"BRPOP"
            | b"BLMOVE"
            | b"BRPOPLPUSH"
            | b"BLMPOP"
            | b"BZPOPMIN"
            | b"BZPOPMAX"
            | b"BZMPOP"
            | b"WAIT"
            | b"WAITAOF"
            | b"XREAD"
            | b"XREADGROUP"
    )
}

/// The key that decides where `cmd` goes in a cluster, for the commands the lease store sends;
/// `None` for commands without a key (`SCRIPT LOAD`, `PING`, `WAIT`, `SCAN`, ...).
pub(crate) fn first_key(cmd: &Cmd) -> Option<Vec<u8>> {
    let args: Vec<&[u8]> = cmd
        .args_iter()
        .filter_map(|a| match a {
            redis::Arg::Simple(b) => Some(b),
            _ => None,
        })
        .collect();
    let name = args.first()?.to_ascii_uppercase();
    match name.as_slice() {
        b"EVAL" | b"EVALSHA" | b"EVAL_RO" | b"EVALSHA_RO" | b"FCALL" | b"FCALL_RO" => {
            let numkeys: usize = std::str::from_utf8(args.get(2)?).ok()?.parse().ok()?;
            (numkeys > 0)
                .then(|| args.get(3).map(|k| k.to_vec()))
                .flatten()
        }
        b"SCRIPT" | b"PING" | b"WAIT" | b"WAITAOF" | b"SCAN" | b"INFO" | b"CLUSTER" | b"ROLE"
        | b"CLIENT" | b"CONFIG" | b"TIME" | b"DBSIZE" | b"ECHO" | b"HELLO" | b"AUTH"
        | b"SELECT" | b"ASKING" | b"READONLY" | b"READWRITE" | b"MULTI" | b"EXEC" | b"DISCARD"
        | b"FLUSHALL" | b"FLUSHDB" | b"FUNCTION" | b"SENTINEL" | b"COMMAND" => None,
        _ => args.get(1).map(|k| k.to_vec()),
    }
}

/// The Redis Cluster hash slot of `key`: CRC16 (XMODEM) of its hash tag (the text between the
/// first `{` and the next `}`, when not empty) or of the whole key, modulo 16384.
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    let mut crc: u16 = 0;
    for &byte in hashed {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// `host:port`, with brackets around an IPv6 host.
pub(crate) fn addr(host: &str, port: u16) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With the feature, TLS is made ready; without it (`cargo test -p leasehold --lib
    /// --no-default-features --features redis`, which `./dev test` runs too) a TLS URL is refused
    /// before any connection, naming the URL and the feature, and no password.
    #[test]
    fn tls_is_ready_or_refused_naming_the_feature() {
        let result = prepare_tls("rediss://app:***@cache:6380");
        if cfg!(feature = "tls") {
            assert!(result.is_ok(), "{result:?}");
        } else {
            match result {
                Err(crate::Error::Invalid { what, why }) => {
                    assert_eq!(what, "store url");
                    assert!(why.contains("`tls` cargo feature"), "{why}");
                    assert!(why.contains("rediss://app:***@cache:6380"), "{why}");
                }
                other => panic!("{other:?}"),
            }
        }
    }

    #[test]
    fn slots_follow_the_cluster_specification() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(
            key_slot(b"123456789"),
            0x31C3,
            "CRC16 of 123456789 is 0x31C3, below 16384"
        );
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_eq!(
            key_slot(b"foo{}{bar}"),
            8363,
            "an empty tag hashes the whole key"
        );
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(
            key_slot(b"{leasehold:orders}:lock"),
            key_slot(b"{leasehold:orders}:fence")
        );
    }

    #[test]
    fn keys_are_found_where_cluster_routing_looks() {
        let mut eval = redis::cmd("EVALSHA");
        eval.arg("abc").arg(2).arg("k1").arg("k2").arg("argv");
        assert_eq!(first_key(&eval).as_deref(), Some(&b"k1"[..]));
        let mut nokeys = redis::cmd("EVALSHA");
        nokeys.arg("abc").arg(0).arg("argv");
        assert_eq!(first_key(&nokeys), None);
        let mut pttl = redis::cmd("pttl");
        pttl.arg("k");
        assert_eq!(first_key(&pttl).as_deref(), Some(&b"k"[..]));
        let mut load = redis::cmd("SCRIPT");
        load.arg("LOAD").arg("return 1");
        assert_eq!(first_key(&load), None);
        assert!(is_blocking(redis::cmd("BLPOP").arg("k").arg(1)));
        assert!(!is_blocking(&pttl));
    }

    #[test]
    fn credentials_round_trip_through_percent_encoding() {
        for s in ["p w", "a@b:c/d?e#f%", "plain", "ü"] {
            assert_eq!(decode(&encode(s)).as_deref(), Some(s));
        }
        // The one rule of every store (crate::url): a stray `%` stays as written.
        assert_eq!(decode("%zz").as_deref(), Some("%zz"));
        assert_eq!(decode("%4").as_deref(), Some("%4"));
        assert_eq!(decode("%ff"), None, "not UTF-8");
        assert_eq!(addr("::1", 7000), "[::1]:7000");
        assert_eq!(addr("[::1]", 7000), "[::1]:7000");
        assert_eq!(addr("10.0.0.1", 7000), "10.0.0.1:7000");
    }

    #[test]
    fn debug_hides_the_password() {
        let auth = NodeAuth {
            password: Some("hunter2".into()),
            ..NodeAuth::default()
        };
        assert!(!format!("{auth:?}").contains("hunter2"));
    }
}
