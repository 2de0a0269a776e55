//! The Redis keys of a lease name.
//!
//! Promise: every key of a name shares the hash tag `{<prefix>:<name>}`, so in Redis Cluster they live
//! in one slot and a script may touch them together; the scripts derive the names below from the lock
//! key they are given (`scripts/names.lua`), and a test checks that both agree. Limit: the names are a
//! layout, not an API; only `lock` is promised to stay (other `SET NX PX` locks share it).

use crate::error::Result;
use crate::lease::names::validate_name;

/// The Redis keys of one lease name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseKeys {
    /// Holds the current holder's token (interop with other `SET NX PX` locks), marked `<token>:q`
    /// while waiters are queued behind a leasehold holder.
    pub lock: String,
    /// The name's record, `<fence>:<flags>:<holder>:<released>`: the last fence issued (release keeps
    /// it; it expires after the retention), what an acquire that finds the lock free must look at
    /// first (`q` waiters, `g` given-up tokens, `s` a semaphore), the token the fence went to, and
    /// the token a hand-over released.
    pub fence: String,
    /// The waiters in arrival order (a sorted set of `<token>,<first TTL ms>` by arrival, µs): a
    /// release hands the lease to the first live one.
    pub queue: String,
    /// The common start of every waiter's liveness key, `{<prefix>:<name>}:alive:<token>`: written by
    /// a waiter's every step after its first, for one block; a waiter past its first block without
    /// one is skipped.
    pub alive_prefix: String,
    /// Tokens whose acquire was given up (a sorted set by expiry): an acquire that reaches Redis after
    /// its caller gave up does nothing.
    pub gone: String,
    /// The token of the last release, for a few seconds: a release retried after a reconnect hears
    /// "released" again.
    pub released: String,
    /// The result of the last forced release, for a few seconds, so that a retried forced release
    /// does not evict the waiter the first one handed the lease to.
    pub forced: String,
    /// The common start of every per-waiter wake list: `{<prefix>:<name>}:wake:<token>`.
    pub wake_prefix: String,
    /// A semaphore's number of permits, while it is in use.
    pub permits: String,
    /// A semaphore's holders (a sorted set of tokens by expiry, server milliseconds).
    pub holders: String,
    /// The fence of each of a semaphore's holders (a hash by token).
    pub held: String,
    /// A note its holder wrote beside the lock (an election's leader record), kept for the
    /// retention after its last write.
    pub note: String,
}

impl LeaseKeys {
    /// Keys for `name` under `prefix`. Refuses an empty name, a name over
    /// [`MAX_NAME_LEN`](crate::lease::MAX_NAME_LEN) bytes, and
    /// names containing `{`, `}` or control characters (they would break the hash tag or the output).
    pub fn new(prefix: &str, name: &str) -> Result<Self> {
        validate_name(name)?;
        Ok(Self::for_checked(prefix, name))
    }

    /// The wake list of the waiter holding `token`: a hand-over pushes the lease's fence there.
    pub fn wake(&self, token: &str) -> String {
        format!("{}{token}", self.wake_prefix)
    }

    /// The liveness key of the waiter holding `token`.
    pub fn alive(&self, token: &str) -> String {
        format!("{}{token}", self.alive_prefix)
    }

    /// Remembers, for a few seconds, that the semaphore permit of `token` was given back.
    pub fn released_permit(&self, token: &str) -> String {
        let tag = self.lock.strip_suffix("lock").unwrap_or(&self.lock);
        format!("{tag}released:{token}")
    }
}

impl LeaseKeys {
    /// Keys for a name already checked by `validate_name`.
    pub(crate) fn for_checked(prefix: &str, name: &str) -> Self {
        let tag = format!("{{{prefix}:{name}}}");
        LeaseKeys {
            lock: format!("{tag}:lock"),
            fence: format!("{tag}:fence"),
            queue: format!("{tag}:queue"),
            alive_prefix: format!("{tag}:alive:"),
            gone: format!("{tag}:gone"),
            released: format!("{tag}:released"),
            forced: format!("{tag}:forced"),
            wake_prefix: format!("{tag}:wake:"),
            permits: format!("{tag}:permits"),
            holders: format!("{tag}:holders"),
            held: format!("{tag}:held"),
            note: format!("{tag}:note"),
        }
    }
}

/// The lock key alone (what every script is given; the scripts derive the rest).
pub(crate) fn lock_key(prefix: &str, name: &str) -> String {
    // Pushed piece by piece rather than with `format!`: this runs on every acquire and release.
    let mut key = String::with_capacity(prefix.len() + name.len() + 8);
    key.push('{');
    key.push_str(prefix);
    key.push(':');
    key.push_str(name);
    key.push_str("}:lock");
    key
}

/// The wake list of one waiter.
pub(crate) fn wake_key(prefix: &str, name: &str, token: &str) -> String {
    format!("{{{prefix}:{name}}}:wake:{token}")
}

/// Escapes glob metacharacters so that `SCAN MATCH` matches a prefix or name literally (the Redis
/// store's and Redlock's `list`).
pub(crate) use crate::lease::names::glob_escape;

/// The keys of a Redlock lease name on each master. They share the hash tag `{<prefix>:<name>}` with
/// the single-server store's keys, so that the lock key is the same one a single-server lease or any
/// other `SET NX PX` lock on that master would use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RedlockKeys {
    /// Holds the holder's token, and nothing else (interop with other `SET NX PX` locks).
    pub(crate) lock: String,
    /// The fence this master recorded for the name.
    pub(crate) fence: String,
    /// The wake-up list a release pushes to while someone waits.
    pub(crate) wake: String,
    /// Marker that someone was told "busy" and may block on `wake`.
    pub(crate) waiting: String,
    /// The token of the last release, for a few seconds (a retried release hears "released").
    pub(crate) released: String,
}

impl RedlockKeys {
    /// Keys for a name already checked.
    pub(crate) fn for_checked(prefix: &str, name: &str) -> Self {
        let lock = LeaseKeys::for_checked(prefix, name).lock;
        let tag = lock.strip_suffix(":lock").unwrap_or(&lock).to_owned();
        RedlockKeys {
            fence: format!("{tag}:rl-fence"),
            wake: format!("{tag}:rl-wake"),
            waiting: format!("{tag}:rl-waiting"),
            released: format!("{tag}:rl-released"),
            lock,
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
        assert_eq!(k.queue, "{leasehold:orders}:queue");
        assert_eq!(k.alive("ab"), "{leasehold:orders}:alive:ab");
        assert_eq!(k.wake("ab"), "{leasehold:orders}:wake:ab");
        assert_eq!(k.released_permit("ab"), "{leasehold:orders}:released:ab");
        assert_eq!(k.holders, "{leasehold:orders}:holders");
        assert_eq!(k.note, "{leasehold:orders}:note");
        assert_eq!(k.lock, lock_key("leasehold", "orders"));
        assert_eq!(k.wake("ab"), wake_key("leasehold", "orders", "ab"));
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
