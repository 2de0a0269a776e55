//! The keys of a Redlock lease name on each master. They share the hash tag `{<prefix>:<name>}` with
//! the single-server store's keys, so that the lock key is the same one a single-server lease or any
//! other `SET NX PX` lock on that master would use.

use crate::lease::store::redis::keys::LeaseKeys;

/// The keys of one name on one master.
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
