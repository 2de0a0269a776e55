//! Which stores and commands this build of `leasehold` has (the crate's cargo features), and the
//! message for one it leaves out. Promise: a `--store` URL whose scheme needs a feature this build
//! lacks, or a command left out (`demo`, `verify`, `bench` without `lab`; `migrate` without a
//! database), is refused before anything is sent, exit 2, naming the feature and the `cargo install`
//! line that brings it. Limit: a scheme no feature knows is the library's to refuse.

use crate::exit;

/// A URL scheme (without `://`) and the features that must be on for it: the store's, and `tls` for
/// a TLS scheme.
const SCHEMES: &[(&str, &str, &[&str])] = &[
    ("redis", "Redis", &["redis"]),
    ("redis-sentinel", "Redis Sentinel", &["redis"]),
    ("redis-cluster", "Redis Cluster", &["redis"]),
    ("rediss", "Redis over TLS", &["redis", "tls"]),
    (
        "rediss-sentinel",
        "Redis Sentinel over TLS",
        &["redis", "tls"],
    ),
    (
        "rediss-cluster",
        "Redis Cluster over TLS",
        &["redis", "tls"],
    ),
    ("postgres", "PostgreSQL", &["postgres"]),
    ("postgresql", "PostgreSQL", &["postgres"]),
    ("mysql", "MySQL", &["mysql"]),
    ("mariadb", "MariaDB", &["mysql"]),
    ("etcd", "etcd", &["etcd"]),
    ("etcds", "etcd over TLS", &["etcd"]),
    ("sqlite", "SQLite", &["sqlite"]),
];

/// Whether this build has `feature` (one of the crate's store features).
// Each arm's value is the build's: in a build with every feature clippy sees `matches!`.
#[allow(clippy::match_like_matches_macro)]
pub(crate) fn built_with(feature: &str) -> bool {
    match feature {
        "redis" => cfg!(feature = "redis"),
        "tls" => cfg!(feature = "tls"),
        "postgres" => cfg!(feature = "postgres"),
        "mysql" => cfg!(feature = "mysql"),
        "sqlite" => cfg!(feature = "sqlite"),
        "etcd" => cfg!(feature = "etcd"),
        "lab" => cfg!(feature = "lab"),
        _ => false,
    }
}

/// The features `url`'s scheme needs that this build lacks, with the store's name; `None` when it
/// has them all, or when no feature knows the scheme (the library refuses it then).
pub(crate) fn missing_for(url: &str) -> Option<(&'static str, Vec<&'static str>)> {
    let scheme = url.trim().split_once(':')?.0.to_ascii_lowercase();
    let (_, store, needs) = SCHEMES.iter().find(|(s, _, _)| *s == scheme)?;
    let missing: Vec<&str> = needs.iter().copied().filter(|f| !built_with(f)).collect();
    (!missing.is_empty()).then_some((*store, missing))
}

/// The store features and `lab` this build has.
const ALL: &[&str] = &["redis", "tls", "postgres", "mysql", "sqlite", "etcd", "lab"];

/// How to get a build with `features` too, for the end of a message: this build's features and
/// those, or the default build.
pub(crate) fn install_hint(features: &[&str]) -> String {
    let mut wanted: Vec<&str> = ALL.iter().copied().filter(|f| built_with(f)).collect();
    for f in features {
        if !wanted.contains(f) {
            wanted.push(f);
        }
    }
    format!(
        "reinstall with `cargo install --locked leasehold-cli --no-default-features --features {}`, \
         or with the default features (every store and the lab)",
        wanted.join(",")
    )
}

/// Refuses (exit 2, the message on stderr) a store URL this build cannot open for want of a feature.
/// `leases`: the URLs name a lease store, which SQLite never is (the library says so), so a
/// `sqlite:` URL is left to it.
pub(crate) fn check_urls(urls: &[String], leases: bool) -> Result<(), i32> {
    for url in urls {
        if leases && url.trim().to_ascii_lowercase().starts_with("sqlite:") {
            continue;
        }
        if let Some((store, missing)) = missing_for(url) {
            let scheme = url.split_once(':').map_or(url.as_str(), |(s, _)| s);
            eprintln!(
                "leasehold: `{scheme}:` URLs need {store}, which this build of leasehold leaves out (its `{}` feature); {}",
                missing.join("` and `"),
                install_hint(&missing)
            );
            return Err(exit::USAGE);
        }
    }
    Ok(())
}

/// A command this build leaves out: says which feature brings it; exit 2.
#[cfg_attr(
    all(
        feature = "lab",
        any(feature = "postgres", feature = "mysql", feature = "sqlite")
    ),
    allow(dead_code)
)]
pub(crate) fn command_not_built(command: &str, features: &[&str]) -> i32 {
    let which = features
        .iter()
        .map(|f| format!("`{f}`"))
        .collect::<Vec<_>>()
        .join(" or ");
    eprintln!(
        "leasehold: `{command}` is not in this build of leasehold (it needs the {which} feature); {}",
        install_hint(&features[..1])
    );
    exit::USAGE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheme_names_what_it_needs_and_unknown_ones_are_left_to_the_library() {
        assert_eq!(missing_for("mongodb://h/db"), None);
        assert_eq!(missing_for("no scheme at all"), None);
        let rediss = missing_for("REDISS://h:6380");
        if cfg!(all(feature = "redis", feature = "tls")) {
            assert_eq!(rediss, None);
        } else {
            let (store, missing) = rediss.expect("a TLS scheme without TLS is refused");
            assert_eq!(store, "Redis over TLS");
            assert!(!missing.is_empty());
        }
        assert_eq!(
            missing_for("postgres://u@h/db").is_none(),
            cfg!(feature = "postgres")
        );
    }
}
