//! The etcd lease store as the lab runs it: for the verifier a private three-member cluster with
//! etcd's default timings, started once per run; for the benchmarks a single member.
//!
//! Limit: etcd keeps a lease at least [`MIN_LEASE`] whatever TTL is asked, so the harness's fault
//! windows on it are longer than on the other stores (`Timing::for_strategy`).

use std::time::Duration;

use anyhow::Context as _;
use leasehold_testkit::EtcdCluster;

use super::{RunWide, Started};

/// Members of the etcd lease store: three, so that one can be lost.
pub(crate) const ETCD_MEMBERS: usize = 3;

/// The shortest lease etcd keeps: one and a half election timeouts rounded up to a second, 2 s
/// with etcd's default timings (which the test cluster uses). A holder's lease lives on in etcd at
/// least this long after its last renewal, whatever TTL it asked for.
const MIN_LEASE: Duration = Duration::from_secs(2);

/// The store's line of the harness's table of run-wide stores (`RUN_WIDE`).
pub(crate) static STORE: RunWide = RunWide {
    name: "etcd",
    needs_installed: "etcd",
    available: leasehold_testkit::etcd_available,
    min_lease: Some(MIN_LEASE),
    start: || Box::pin(start()),
    strategies: ["etcd-lease", "etcd-lease-fence"],
    lease_from: "a three-member etcd cluster",
    scheme: "etcd://",
    label: "etcd",
    measured: |_| Box::pin(measured()),
};

/// Starts a private etcd cluster of [`ETCD_MEMBERS`].
async fn start() -> anyhow::Result<Started> {
    let cluster = tokio::task::spawn_blocking(|| EtcdCluster::start(ETCD_MEMBERS))
        .await?
        .context("cannot start an etcd cluster for the lease store")?;
    Ok(Started::new(cluster.url(), cluster))
}

/// A private single-node etcd for the benchmarks.
async fn measured() -> anyhow::Result<Started> {
    let etcd = tokio::task::spawn_blocking(EtcdCluster::start_single)
        .await?
        .context("cannot start etcd")?;
    Ok(Started::new(etcd.url(), etcd))
}
