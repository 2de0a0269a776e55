//! The Redis keys of a lease name.

use crate::error::Result;
use crate::lease::names::validate_name;

/// The Redis keys of one lease name. All four share the hash tag `{<prefix>:<name>}`, so in Redis
/// Cluster they live in one slot and the Lua scripts may touch them together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseKeys {
    /// Holds the current holder's token, and nothing else (interop with other `SET NX PX` locks).
    pub lock: String,
    /// The last fence issued for this name; never deleted by release.
    pub fence: String,
    /// Wake-up list a release pushes to, so waiters block instead of polling.
    pub wake: String,
    /// Marker that someone was told "busy" and may be blocked on `wake`; a release pushes a wake-up
    /// only while it exists. Expires on its own.
    pub waiting: String,
    /// The token of the last release, for a few seconds: a release retried after a reconnect hears
    /// "released" again.
    pub released: String,
}

impl LeaseKeys {
    /// Keys for `name` under `prefix`. Refuses an empty name, a name over
    /// [`MAX_NAME_LEN`](crate::lease::MAX_NAME_LEN) bytes, and
    /// names containing `{`, `}` or control characters (they would break the hash tag or the output).
    pub fn new(prefix: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        Ok(Self::for_checked(prefix, name))
    }
}

impl LeaseKeys {
    /// Keys for a name already checked by `validate_name`.
    pub(crate) fn for_checked(prefix: &str, name: &str) -> Self {
        let tag = format!("{{{prefix}:{name}}}");
        LeaseKeys {
            lock: format!("{tag}:lock"),
            fence: format!("{tag}:fence"),
            wake: format!("{tag}:wake"),
            waiting: format!("{tag}:waiting"),
            released: format!("{tag}:released"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::lease::names::MAX_NAME_LEN;

    #[test]
    fn keys_share_one_hash_tag() {
        let k = LeaseKeys::new("leasehold", "orders").unwrap();
        assert_eq!(k.lock, "{leasehold:orders}:lock");
        assert_eq!(k.fence, "{leasehold:orders}:fence");
        assert_eq!(k.wake, "{leasehold:orders}:wake");
        assert_eq!(k.waiting, "{leasehold:orders}:waiting");
    }

    #[test]
    fn garbage_names_are_refused_with_a_reason() {
        for bad in ["", "a{b", "x}", "tab\there", &"n".repeat(MAX_NAME_LEN + 1)] {
            let err = LeaseKeys::new("leasehold", bad).unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Invalid {
                        what: "lease name",
                        ..
                    }
                ),
                "{bad:?}: {err}"
            );
        }
    }
}
