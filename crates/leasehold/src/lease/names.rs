//! What a lease name may be, the same for every store, so that a name that works with one store works
//! with all of them.
//!
//! Promise: a name accepted here is accepted by every store (the same bytes, the same key layout rule),
//! and one refused is refused before anything is sent, with a message that says why.
//! Limit: names are compared as bytes: `Job` and `job` are two leases; nothing reserves a name for one
//! application (share a store between applications with a key prefix).

use crate::error::{Error, Result};

/// Longest lease name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 256;

/// Refuses an empty name, a name over [`MAX_NAME_LEN`] bytes, and names containing `{`, `}` or control
/// characters, with a message that says why: the check acquire makes, for checking input before
/// connecting.
///
/// # Errors
///
/// [`Error::Invalid`] naming what is wrong.
pub fn check_name(name: &str) -> Result<()> {
    validate_name(name)
}

/// Refuses an empty key prefix and one with braces, control characters or `:`.
///
/// A Redis key is `{<prefix>:<name>}:…` and a name may hold `:`, so a `:` in the prefix would let
/// two different (prefix, name) pairs name the same keys: prefix `pa` with name `b:c` and prefix
/// `pa:b` with name `c`. Without it the first `:` after the brace is the boundary.
///
/// # Errors
///
/// [`Error::Invalid`] naming what is wrong.
pub fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        return Err(Error::invalid(
            "key prefix",
            "it is empty; use a short word such as `leasehold` or your service name",
        ));
    }
    if prefix.contains(':') {
        return Err(Error::invalid(
            "key prefix",
            format!(
                "`{prefix}` contains `:`, which separates the prefix from the lease name in every key (prefix `a:b` with name `c` would be prefix `a` with name `b:c`); use `-`, `.` or `_` instead, e.g. `{}`",
                prefix.replace(':', "-")
            ),
        ));
    }
    refuse_tag_breakers("key prefix", prefix)
}

/// Escapes the glob metacharacters of `list` patterns (`*`, `?`, `[`, `]`, `\\`), so that a pattern
/// built from a prefix or a name matches it literally, in every store.
pub(crate) fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Refuses a `list` pattern that is empty or holds braces or control characters, the check
/// [`LeaseClient::list`](crate::LeaseClient::list) makes, for checking input before connecting.
///
/// # Errors
///
/// [`Error::Invalid`] naming what is wrong.
pub fn check_pattern(pattern: &str) -> Result<()> {
    if pattern.is_empty() {
        return Err(Error::invalid(
            "name pattern",
            "it is empty; use `*` to list every lease",
        ));
    }
    refuse_tag_breakers("name pattern", pattern)
}

pub(crate) fn validate_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::invalid(
            "lease name",
            "it is empty; give the lease a name such as `nightly-import`",
        ));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            "lease name",
            format!(
                "it is {} bytes long; the limit is {MAX_NAME_LEN}",
                name.len()
            ),
        ));
    }
    refuse_tag_breakers("lease name", name)
}

/// Refuses braces (they would break the Redis Cluster hash tag `{prefix:name}`) and control characters
/// (they would garble output) in anything that becomes part of a key: names, the prefix, patterns.
pub(crate) fn refuse_tag_breakers(what: &'static str, value: &str) -> Result<()> {
    match value
        .chars()
        .find(|c| *c == '{' || *c == '}' || c.is_control())
    {
        Some(c) => Err(Error::invalid(
            what,
            format!("it contains {c:?}; braces and control characters are not allowed (braces would break the Redis Cluster hash tag)"),
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lock key of (prefix, name) as the Redis store writes it (every other key of the name
    /// shares its hash tag).
    #[cfg(feature = "redis")]
    fn tag(prefix: &str, name: &str) -> String {
        crate::lease::store::redis::keys::lock_key(prefix, name)
    }

    #[cfg(feature = "redis")]
    #[test]
    fn two_different_prefix_and_name_pairs_never_share_keys() {
        use rand::RngExt;
        assert!(
            check_prefix("pa:b").is_err(),
            "the colliding pair is refused"
        );
        let mut rng = rand::rng();
        let alphabet: Vec<char> = "ab:-_.{}* \u{e9}".chars().collect();
        let word = |rng: &mut rand::rngs::ThreadRng, max: usize| -> String {
            let n = rng.random_range(0..=max);
            (0..n)
                .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                .collect()
        };
        let mut seen = std::collections::HashMap::new();
        let mut accepted = 0;
        for _ in 0..200_000 {
            let (prefix, name) = (word(&mut rng, 4), word(&mut rng, 5));
            if check_prefix(&prefix).is_err() || check_name(&name).is_err() {
                continue;
            }
            accepted += 1;
            let key = tag(&prefix, &name);
            if let Some(other) = seen.insert(key.clone(), (prefix.clone(), name.clone())) {
                assert_eq!(other, (prefix, name), "both map to {key}");
            }
        }
        assert!(
            accepted > 10_000,
            "the generator exercised the rule ({accepted})"
        );
    }

    #[test]
    fn patterns_are_checked_like_names() {
        assert!(check_pattern("").is_err());
        assert!(check_pattern("a{b").is_err());
        assert!(check_pattern("jobs-*").is_ok());
    }
}
