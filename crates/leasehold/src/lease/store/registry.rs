//! The registry: which store a URL opens. The one file that names every store compiled in (besides
//! the `mod` lines in `store/mod.rs`); adding a store is a folder beside the others plus a line in each
//! table here (`SCHEMES`, `open`).
//!
//! Limit: a scheme picks a store; whether the server at the URL is really that store is for the
//! store's own connect to find out.

use std::sync::Arc;

use super::{Settings, Store};
use crate::error::{Error, Result};
use crate::url::StoreUrl;

/// URL schemes this build can open, for the message that refuses any other.
pub const SCHEMES: &[&str] = &[
    #[cfg(feature = "redis")]
    "redis://",
    #[cfg(feature = "redis")]
    "rediss://",
    #[cfg(feature = "redis")]
    "redis-sentinel://",
    #[cfg(feature = "redis")]
    "rediss-sentinel://",
    #[cfg(feature = "redis")]
    "redis-cluster://",
    #[cfg(feature = "redis")]
    "rediss-cluster://",
    #[cfg(feature = "etcd")]
    "etcd://",
    #[cfg(feature = "etcd")]
    "etcds://",
    #[cfg(feature = "postgres")]
    "postgres://",
    #[cfg(feature = "postgres")]
    "postgresql://",
    #[cfg(feature = "mysql")]
    "mysql://",
    #[cfg(feature = "mysql")]
    "mariadb://",
];

/// Opens the store `url` names, read once here ([`StoreUrl`]) and handed to the store as read. A
/// malformed URL or an unknown scheme is [`Error::Invalid`] saying what is wrong (an unknown scheme:
/// naming the schemes this build knows).
pub(crate) async fn open(url: &str, settings: Settings) -> Result<Arc<dyn Store>> {
    let parsed = StoreUrl::parse(url)?;
    let url = &parsed;
    match url.scheme() {
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis-sentinel" | "rediss-sentinel" | "redis-cluster"
        | "rediss-cluster" => Ok(Arc::new(
            super::redis::RedisStore::connect(url, settings).await?,
        )),
        #[cfg(feature = "etcd")]
        "etcd" | "etcds" => Ok(Arc::new(
            super::etcd::EtcdStore::connect(url, settings).await?,
        )),
        #[cfg(feature = "postgres")]
        "postgres" | "postgresql" => Ok(Arc::new(
            super::postgres::PostgresStore::connect(url, settings).await?,
        )),
        #[cfg(feature = "mysql")]
        "mysql" | "mariadb" => Ok(Arc::new(
            super::mysql::MySqlStore::connect(url, settings).await?,
        )),
        _ => Err(unknown_scheme(url)),
    }
}

/// Opens a Redlock over `urls` (an odd number, three or more, of independent Redis masters, each a
/// URL the Redis store takes). Wrong input is [`Error::Invalid`] before anything is sent (the count,
/// a URL given twice, a scheme that is not Redis) or once the masters answered (a replica, two URLs
/// naming one server); fewer than a majority answering is [`Error::NoQuorum`].
pub(crate) async fn open_redlock(urls: &[String], settings: Settings) -> Result<Arc<dyn Store>> {
    let urls = urls
        .iter()
        .map(|u| StoreUrl::parse(u))
        .collect::<Result<Vec<_>>>()?;
    #[cfg(feature = "redis")]
    {
        Ok(Arc::new(
            super::redis::RedlockStore::connect(&urls, settings).await?,
        ))
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = settings;
        Err(Error::invalid(
            "store url",
            format!(
                "{} Redis masters given for Redlock, but this build of leasehold has no Redis store; enable the `redis` feature",
                urls.len()
            ),
        ))
    }
}

fn unknown_scheme(url: &StoreUrl) -> Error {
    let known = if SCHEMES.is_empty() {
        "none: this build of leasehold has no lease store; enable the `redis`, `postgres`, `mysql` or `etcd` feature".to_owned()
    } else {
        SCHEMES.join(", ")
    };
    Error::invalid(
        "store url",
        format!("`{url}` does not start with a scheme this build knows; use one of {known}"),
    )
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::lease::store::DEFAULT_RETENTION;

    #[tokio::test]
    async fn an_unknown_scheme_names_the_known_ones_and_hides_the_password() {
        let settings = Settings {
            prefix: "t".into(),
            response_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            tls_root_ca_pem: None,
            retention: DEFAULT_RETENTION,
            allow_eviction: false,
        };
        let err = open("mongodb://u:secret@h/db", settings).await.unwrap_err();
        let msg = err.to_string();
        assert!(
            matches!(
                err,
                Error::Invalid {
                    what: "store url",
                    ..
                }
            ),
            "{msg}"
        );
        assert!(!msg.contains("secret"), "{msg}");
        for s in SCHEMES {
            assert!(msg.contains(s), "{msg}");
        }
    }
}
