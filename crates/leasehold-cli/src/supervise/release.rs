//! The release after the command ended: bounded by a timeout, so that a store that stopped
//! answering costs a few seconds, not a hang; a release that fails is said with the time the lease
//! lapses by itself.

use std::time::Duration;

use leasehold::{Error, Lease};

use super::terms::Supervised;
use crate::duration::show;
use crate::exit;

/// How long `run` waits for the release after the command exited.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// Releases after the command exited; whether the lease is free now (or was lost anyway). A failure
/// is printed with the time the lease lapses by itself.
pub(super) async fn release(args: &Supervised<'_>, lease: Lease, already_lost: bool) -> bool {
    // The command is done; do not hang on a store that stopped answering. The TTL cleans up. A lost
    // lease's release is a courtesy (it frees a max-hold lease early), so it gets less patience.
    let patience = if already_lost {
        RELEASE_TIMEOUT / 5
    } else {
        RELEASE_TIMEOUT
    };
    // The store lets the lease lapse at most a TTL after the last renewal it accepted; the holder's
    // own deadline plus the drift allowance is no earlier than that.
    let lapses = (lease.remaining() + lease.options().drift()).min(args.ttl);
    let result = match tokio::time::timeout(patience, lease.release()).await {
        Ok(r) => r,
        Err(_) => {
            eprintln!(
                "leasehold: the store did not answer the release of `{}` within {}; the lease stays held until it lapses by itself within {} (exit {})",
                args.name,
                show(patience),
                show(lapses),
                exit::NOT_RELEASED
            );
            return already_lost;
        }
    };
    match result {
        Ok(()) => {
            if args.verbose {
                eprintln!("leasehold: released `{}`", args.name);
            }
            true
        }
        Err(Error::LeaseLost { .. }) if already_lost => true,
        Err(e @ Error::LeaseLost { .. }) => {
            eprintln!("leasehold: warning: {e}; the command finished, but may have overlapped with another holder at its end");
            true
        }
        Err(e) => {
            eprintln!(
                "leasehold: release of `{}` failed: {}; the lease stays held until it lapses by itself within {} (exit {})",
                args.name,
                exit::describe(&e),
                show(lapses),
                exit::NOT_RELEASED
            );
            already_lost
        }
    }
}
