//! The registry: which store a URL opens. The one file that names every store compiled in (besides
//! the `mod` lines in `store/mod.rs`); adding a store is a folder beside the others plus a line in each
//! table here (`SCHEMES`, `open`).
//!
//! Promise: every URL is parsed once, here, and handed to its store as read; one URL opens the
//! store its scheme names, several open a Redlock; a malformed URL, an unknown scheme (naming the
//! schemes this build knows, [`SCHEMES`]) or a store left out of the build is refused with
//! [`Error::Invalid`](crate::Error::Invalid) before anything is sent.
//!
//! Limit: a scheme picks a store; whether the server at the URL is really that store is for the
//! store's own connect to find out.

use std::sync::Arc;

use super::contract::{Settings, Store};
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

/// Opens the store `urls` name, each read once here ([`StoreUrl`]) and handed to the store as read.
/// One URL: its scheme picks the store. Several: a Redlock over that many independent Redis masters
/// (an odd number, three or more, each a URL the Redis store takes), the one store that spans
/// servers it does not replicate between. A malformed URL, an unknown scheme, or several URLs of a
/// store that takes one is [`Error::Invalid`] saying what is wrong (an unknown scheme: naming the
/// schemes this build knows); the Redis family's own refusals (a count of masters that is not odd
/// and three or more, a replica, two URLs naming one server) and [`Error::NoQuorum`] are its own.
pub(crate) async fn open(urls: &[String], settings: Settings) -> Result<Arc<dyn Store>> {
    let parsed = urls
        .iter()
        .map(|u| StoreUrl::parse(u))
        .collect::<Result<Vec<_>>>()?;
    let [url] = parsed.as_slice() else {
        return open_several(&parsed, settings).await;
    };
    match url.scheme() {
        #[cfg(feature = "redis")]
        "redis" | "rediss" | "redis-sentinel" | "rediss-sentinel" | "redis-cluster"
        | "rediss-cluster" => super::redis::open(&parsed, settings).await,
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

/// Several URLs (or none): only the Redis family spans several servers (Redlock), and it checks the
/// count and every URL itself.
async fn open_several(urls: &[StoreUrl], settings: Settings) -> Result<Arc<dyn Store>> {
    #[cfg(feature = "redis")]
    {
        super::redis::open(urls, settings).await
    }
    #[cfg(not(feature = "redis"))]
    {
        let _ = settings;
        Err(Error::invalid(
            "store url",
            format!(
                "{} URLs given for a Redlock, but this build of leasehold has no Redis store; enable the `redis` feature",
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

    #[tokio::test]
    async fn an_unknown_scheme_names_the_known_ones_and_hides_the_password() {
        let settings = Settings {
            prefix: "t".into(),
            response_timeout: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(1),
            ..Settings::default()
        };
        let err = open(&["mongodb://u:secret@h/db".to_owned()], settings)
            .await
            .unwrap_err();
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
