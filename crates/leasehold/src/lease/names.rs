//! What a lease name may be, the same for every store, so that a name that works with one store works
//! with all of them.

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

/// Refuses an empty key prefix and one with braces or control characters.
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
    refuse_tag_breakers("key prefix", prefix)
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
