//! Which stores and commands this build of `leasehold` has (the crate's cargo features), and the
//! message for one it leaves out. Promise: a `--store` URL whose scheme needs a feature this build
//! lacks, or a command left out (`demo`, `verify`, `bench` without `lab`; `migrate` without a
//! database), is refused before anything is sent, exit 2, naming the feature and the `cargo install`
//! line that brings it. Limit: a scheme no feature knows is the library's to refuse.

use crate::exit;

/// Whether this build has `feature`: one of the library's (a store's, or `tls`, which the command's
/// features of the same names turn on) or the command's own `lab`.
pub(crate) fn built_with(feature: &str) -> bool {
    match feature {
        "lab" => cfg!(feature = "lab"),
        library => leasehold::lease::store::built_with(library),
    }
}

/// The features `url`'s scheme needs that this build lacks, with the store's name; `None` when it
/// has them all, or when no feature knows the scheme (the library refuses it then). The schemes are
/// the library's one table, [`KNOWN_SCHEMES`](leasehold::lease::store::KNOWN_SCHEMES).
pub(crate) fn missing_for(url: &str) -> Option<(&'static str, Vec<&'static str>)> {
    let scheme = url.trim().split_once(':')?.0.to_ascii_lowercase();
    let known = leasehold::lease::store::KNOWN_SCHEMES
        .iter()
        .find(|s| s.name == scheme)?;
    let missing: Vec<&str> = known
        .features
        .iter()
        .copied()
        .filter(|f| !built_with(f))
        .collect();
    (!missing.is_empty()).then_some((known.label, missing))
}

/// The store features and `lab`, in the order of the library's table.
fn all() -> Vec<&'static str> {
    let mut all: Vec<&str> = Vec::new();
    for f in leasehold::lease::store::KNOWN_SCHEMES
        .iter()
        .flat_map(|s| s.features.iter().copied())
        .chain(["lab"])
    {
        if !all.contains(&f) {
            all.push(f);
        }
    }
    all
}

/// How to get a build with `features` too, for the end of a message: this build's features and
/// those, or the default build.
pub(crate) fn install_hint(features: &[&str]) -> String {
    let mut wanted: Vec<&str> = all().into_iter().filter(|f| built_with(f)).collect();
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
