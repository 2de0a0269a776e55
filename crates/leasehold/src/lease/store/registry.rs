//! The registry: which store a URL opens. The one file that names every store compiled in (besides
//! the `mod` lines in `store/mod.rs`); adding a store is a folder beside the others plus its rows in
//! [`KNOWN_SCHEMES`], its feature in [`built_with`] and its arm in `open`, all here. The command's
//! feature checks read the same table.
//!
//! Promise: every URL is parsed once, here, and handed to its store as read; one URL opens the
//! store its scheme names, several open a Redlock; a malformed URL, an unknown scheme (naming the
//! schemes this build knows, [`lease_schemes`]) or a store left out of the build is refused with
//! [`Error::Invalid`](crate::Error::Invalid) before anything is sent.
//!
//! Limit: a scheme picks a store; whether the server at the URL is really that store is for the
//! store's own connect to find out.

use std::sync::Arc;

use super::contract::{Settings, Store};
use crate::error::{Error, Result};
use crate::url::StoreUrl;

/// A URL scheme leasehold knows, whether or not this build has the store behind it: what a
/// command line or a configuration checks a URL against before anything is opened, and what a
/// message names when a build leaves the store out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Scheme {
    /// The scheme, without `://` (`rediss-cluster`).
    pub name: &'static str,
    /// What it names, for messages (`Redis Cluster over TLS`).
    pub label: &'static str,
    /// The library's cargo features it needs: the store's, and `tls` for a TLS scheme of Redis.
    pub features: &'static [&'static str],
    /// Whether leases can be kept there (SQLite's scheme names a database for the SQL guards only).
    pub leases: bool,
}

impl Scheme {
    const fn lease(
        name: &'static str,
        label: &'static str,
        features: &'static [&'static str],
    ) -> Self {
        Scheme {
            name,
            label,
            features,
            leases: true,
        }
    }

    /// Whether this build has every feature it needs.
    pub fn built(&self) -> bool {
        self.features.iter().all(|f| built_with(f))
    }
}

/// Every scheme leasehold knows, one row per scheme: the one list the registry, the command's
/// feature checks and the messages read. A store adds its rows here, its arm to [`built_with`] and
/// its arm to `open`.
pub const KNOWN_SCHEMES: &[Scheme] = &[
    Scheme::lease("redis", "Redis", &["redis"]),
    Scheme::lease("rediss", "Redis over TLS", &["redis", "tls"]),
    Scheme::lease("redis-sentinel", "Redis Sentinel", &["redis"]),
    Scheme::lease(
        "rediss-sentinel",
        "Redis Sentinel over TLS",
        &["redis", "tls"],
    ),
    Scheme::lease("redis-cluster", "Redis Cluster", &["redis"]),
    Scheme::lease(
        "rediss-cluster",
        "Redis Cluster over TLS",
        &["redis", "tls"],
    ),
    Scheme::lease("etcd", "etcd", &["etcd"]),
    Scheme::lease("etcds", "etcd over TLS", &["etcd"]),
    Scheme::lease("postgres", "PostgreSQL", &["postgres"]),
    Scheme::lease("postgresql", "PostgreSQL", &["postgres"]),
    Scheme::lease("mysql", "MySQL", &["mysql"]),
    Scheme::lease("mariadb", "MariaDB", &["mysql"]),
    Scheme {
        name: "sqlite",
        label: "SQLite",
        features: &["sqlite"],
        leases: false,
    },
];

/// Whether this build of the library has cargo feature `feature` (a store's, or `tls`).
// Each arm's value is the build's: in a build with every feature clippy sees `matches!`.
#[allow(clippy::match_like_matches_macro)]
pub fn built_with(feature: &str) -> bool {
    match feature {
        "redis" => cfg!(feature = "redis"),
        "tls" => cfg!(feature = "tls"),
        "etcd" => cfg!(feature = "etcd"),
        "postgres" => cfg!(feature = "postgres"),
        "mysql" => cfg!(feature = "mysql"),
        "sqlite" => cfg!(feature = "sqlite"),
        _ => false,
    }
}

/// The lease schemes this build can open, with `://` (`redis://`, ...), for the message that
/// refuses any other.
pub fn lease_schemes() -> Vec<String> {
    KNOWN_SCHEMES
        .iter()
        .filter(|s| s.leases && s.built())
        .map(|s| format!("{}://", s.name))
        .collect()
}

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
    let built = lease_schemes();
    let known = if built.is_empty() {
        "none: this build of leasehold has no lease store; enable the `redis`, `postgres`, `mysql` or `etcd` feature".to_owned()
    } else {
        built.join(", ")
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
        for s in lease_schemes() {
            assert!(msg.contains(&s), "{msg}");
        }
    }
}
