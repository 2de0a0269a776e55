//! The etcd lease store as the harness runs it: a private three-member cluster with etcd's default
//! timings, started once per run.
//!
//! Limit: etcd keeps a lease at least [`MIN_LEASE`] whatever TTL is asked, so the harness's fault
//! windows on it are longer than on the other stores (`Timing::for_strategy`).

use std::time::Duration;

use anyhow::Context as _;
use leasehold_testkit::EtcdCluster;

/// Members of the etcd lease store: three, so that one can be lost.
pub(crate) const ETCD_MEMBERS: usize = 3;

/// The shortest lease etcd keeps: one and a half election timeouts rounded up to a second, 2 s
/// with etcd's default timings (which the test cluster uses). A holder's lease lives on in etcd at
/// least this long after its last renewal, whatever TTL it asked for.
pub(super) const MIN_LEASE: Duration = Duration::from_secs(2);

/// Starts a private etcd cluster of [`ETCD_MEMBERS`].
pub(super) async fn start() -> anyhow::Result<EtcdCluster> {
    tokio::task::spawn_blocking(|| EtcdCluster::start(ETCD_MEMBERS))
        .await?
        .context("cannot start an etcd cluster for the lease store")
}
