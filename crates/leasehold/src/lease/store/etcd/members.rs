//! The members a client talks to: one gRPC channel per member, and the one it uses now.
//!
//! Why not one channel balanced over all members: a balanced channel keeps handing requests to a
//! member that was killed (each fails at once with "connection refused"), so a third of the
//! requests of a three-member cluster would fail until the member came back. Here every request goes
//! to the current member; a member that refuses connections, times out or breaks a stream is left for
//! the next one, and a request that provably never reached it is sent to the next member at once.
//!
//! Promise: while a majority of the members is up and one of them is reachable, every request reaches
//! one of them within a few connection attempts. Limit: a request that timed out is not resent (it
//! may have been executed); the caller hears of the timeout and decides.

use std::sync::atomic::{AtomicUsize, Ordering};

use etcd_client::{Client, ConnectOptions};
use tokio::sync::OnceCell;

/// One channel per member, opened (and authenticated) on first use.
pub(super) struct Members {
    /// `http(s)://host:port`, one per member, in the URL's order.
    endpoints: Vec<String>,
    /// TLS, credentials, timeouts: the same for every member.
    options: ConnectOptions,
    /// The client of each member, once made.
    clients: Vec<OnceCell<Client>>,
    /// The member requests go to now.
    current: AtomicUsize,
}

impl std::fmt::Debug for Members {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Members")
            .field("endpoints", &self.endpoints)
            .field("current", &self.current.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Members {
    pub(super) fn new(endpoints: Vec<String>, options: ConnectOptions) -> Self {
        let clients = endpoints.iter().map(|_| OnceCell::new()).collect();
        // Clients of one cluster spread over its members rather than all starting on the first.
        let current = rand::random_range(0..endpoints.len().max(1));
        Members {
            endpoints,
            options,
            clients,
            current: AtomicUsize::new(current),
        }
    }

    /// How many members the URL named.
    pub(super) fn len(&self) -> usize {
        self.endpoints.len()
    }

    /// The member requests go to now.
    pub(super) fn current(&self) -> usize {
        self.current.load(Ordering::Relaxed) % self.len()
    }

    /// `host:port` of member `i`.
    pub(super) fn endpoint(&self, i: usize) -> &str {
        let e = &self.endpoints[i % self.len()];
        e.split_once("://").map_or(e.as_str(), |(_, hp)| hp)
    }

    /// The client of member `i`. Without credentials nothing is sent (the connection opens with the
    /// first request); with credentials this authenticates. A failure is not kept: the next call
    /// tries again.
    pub(super) async fn client(&self, i: usize) -> Result<Client, etcd_client::Error> {
        let i = i % self.len();
        self.clients[i]
            .get_or_try_init(|| {
                Client::connect(
                    std::slice::from_ref(&self.endpoints[i]),
                    Some(self.options.clone()),
                )
            })
            .await
            .cloned()
    }

    /// Sends requests to member `i` from now on.
    pub(super) fn use_member(&self, i: usize) {
        self.current.store(i % self.len(), Ordering::Relaxed);
    }

    /// Leaves member `i` for the next one, unless another request already moved on.
    pub(super) fn skip(&self, i: usize) {
        let n = self.len();
        let _ =
            self.current
                .compare_exchange(i % n, (i + 1) % n, Ordering::Relaxed, Ordering::Relaxed);
    }
}
