//! Against a real cluster: what the client retries after a reconnect, run twice for real on each
//! master; and a batch of renewals costs one pipeline per master.
//!
//! Promise: on a real three-master cluster, for a name on each master, acquire, renew, release and
//! force-release run twice each have the effect of running once (the same lease and fence; the next
//! fence is higher), and renewing or releasing 102 leases, 12 of them in one slot, costs one
//! pipeline per master, each lease told its own answer.
//!
//! Limit: the commands are sent twice by the tests, not by a fault: no slot is moved, no master
//! fails over, no connection breaks mid-request, so the redirects and waits of `request.rs` are not
//! exercised here.

use std::time::Duration;

use super::super::keys::LeaseKeys;
use super::super::scripts::{self, AcquireReply, Ask, Tuning};
use super::super::topology::{self, Topology};
use super::super::RedisStore;
use super::*;
use crate::lease::store::contract::{Settings, Store};
use crate::lease::LeaseOptions;
use leasehold_testkit::RedisCluster;

const SEC: Duration = Duration::from_secs(1);

/// What every acquire here asks for: a lock (one permit) for 30 s.
const ASK: Ask = Ask {
    ttl: Duration::from_secs(30),
    first_ttl: SEC,
    permits: 1,
};

fn start() -> RedisCluster {
    tokio::task::block_in_place(|| RedisCluster::start().expect("start a redis cluster"))
}

fn settings() -> Settings {
    Settings {
        prefix: "t".into(),
        response_timeout: SEC,
        connect_timeout: SEC,
        ..Settings::default()
    }
}

/// Names whose keys land on each of the three masters.
fn names_on_every_master(cluster: &RedisCluster) -> Vec<String> {
    let mut by_master = std::collections::BTreeMap::new();
    for i in 0.. {
        let name = format!("n{i}");
        let m = cluster
            .master_of_key(LeaseKeys::new("t", &name).unwrap().lock)
            .unwrap();
        by_master.entry(m).or_insert(name);
        if by_master.len() == 3 {
            break;
        }
    }
    by_master.into_values().collect()
}

/// The cluster connection alone, without a store over it: the scripts go through its routing.
async fn connect(cluster: &RedisCluster) -> ClusterConn {
    let store_url = crate::url::StoreUrl::parse(&cluster.seed_url()).unwrap();
    let Topology::Cluster(url) = topology::parse(&store_url, None).unwrap() else {
        panic!("a cluster URL")
    };
    ClusterConn::connect(url, SEC, SEC, Arc::new(AtomicU64::new(0)))
        .await
        .unwrap()
}

/// `token` takes the free lease of `k`: its fence.
async fn taken_fence(con: &mut ClusterConn, k: &LeaseKeys, token: &str) -> u64 {
    let acquire = scripts::acquire(&k.lock, token, ASK, Duration::ZERO, &Tuning::default());
    match AcquireReply::from_value(scripts::invoke(con, &acquire).await).unwrap() {
        AcquireReply::Taken { fence, .. } => fence,
        other => panic!("{other:?}"),
    }
}

/// An acquire run twice: the same lease and fence; only the server clock reading moves on. Returns
/// the fence.
async fn acquire_twice_is_one_lease(con: &mut ClusterConn, k: &LeaseKeys, name: &str) -> u64 {
    let t = Tuning::default();
    let acquire = || scripts::acquire(&k.lock, "a", ASK, Duration::ZERO, &t);
    let first = AcquireReply::from_value(scripts::invoke(con, &acquire()).await);
    let again = AcquireReply::from_value(scripts::invoke(con, &acquire()).await);
    let first = first.unwrap();
    assert!(matches!(first, AcquireReply::Taken { .. }), "{first:?}");
    let (
        AcquireReply::Taken {
            fence: f1,
            ttl_ms: t1,
            ..
        },
        AcquireReply::Taken {
            fence: f2,
            ttl_ms: t2,
            ..
        },
    ) = (&first, &again.unwrap())
    else {
        panic!("{name}: the second run did not return the lease")
    };
    assert_eq!(f1, f2, "{name}: same lease and fence");
    assert!(
        t1.abs_diff(*t2) < 1_000,
        "{name}: same lease: {t1} vs {t2} ms"
    );
    *f1
}

/// The holder's renewal twice renews, its release twice says released.
async fn renew_and_release_twice(con: &mut ClusterConn, k: &LeaseKeys, name: &str) {
    for _ in 0..2 {
        let v: Value = scripts::invoke(con, &scripts::renew(&k.lock, "a", 30 * SEC, 1, true))
            .await
            .unwrap();
        assert!(scripts::flag(Ok(v)).unwrap(), "{name}: renewed");
    }
    for _ in 0..2 {
        let v: Value = scripts::invoke(con, &scripts::release(&k.lock, "a", 1, &Tuning::default()))
            .await
            .unwrap();
        assert!(
            scripts::flag(Ok(v)).unwrap(),
            "{name}: a retried release says released"
        );
    }
}

/// A retried forced release carries the same request id: it evicts nobody new.
async fn force_release_twice(con: &mut ClusterConn, k: &LeaseKeys, name: &str) {
    let forced = scripts::force_release(&k.lock, "op-1", None, &Tuning::default());
    let (e1, f1): (i64, i64) = scripts::invoke(con, &forced).await.unwrap();
    let (e2, f2): (i64, i64) = scripts::invoke(con, &forced).await.unwrap();
    assert!(
        e1 == 0 && e2 == 0 && f2 >= f1,
        "{name}: nothing to evict, the fence never down"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_script_run_twice_on_each_master_has_the_effect_of_running_once() {
    let cluster = start();
    let mut con = connect(&cluster).await;
    for name in names_on_every_master(&cluster) {
        let k = LeaseKeys::new("t", &name).unwrap();
        let first = acquire_twice_is_one_lease(&mut con, &k, &name).await;
        renew_and_release_twice(&mut con, &k, &name).await;
        force_release_twice(&mut con, &k, &name).await;
        let next = taken_fence(&mut con, &k, "b").await;
        assert!(next > first, "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_renewals_is_one_pipeline_per_master() {
    let cluster = start();
    let store = RedisStore::connect(
        &crate::url::StoreUrl::parse(&cluster.seed_url()).unwrap(),
        settings(),
    )
    .await
    .unwrap();
    let opts = LeaseOptions::with_ttl(30 * SEC).unwrap();
    let mut names: Vec<String> = (0..90).map(|i| format!("batch-{i}")).collect();
    // And 12 names in the slot of the first: their renewals go as one renew_many.lua call.
    let slot = crate::lease::store::redis::node::key_slot(store.lock_key(&names[0]).as_bytes());
    let same: Vec<String> = (0..)
        .map(|i| format!("same-{i}"))
        .filter(|n| {
            crate::lease::store::redis::node::key_slot(store.lock_key(n).as_bytes()) == slot
        })
        .take(12)
        .collect();
    names.extend(same);
    let tokens: Vec<String> = (0..names.len()).map(|i| format!("{i:032x}")).collect();
    let held = super::super::renewal::tests::take_all(&store, &names, &tokens, &opts).await;
    // The first batch finds the scripts missing on each master and loads them all.
    store.renew(&held).await.unwrap();
    let before = store.round_trips();
    let renewed = store.renew(&held).await.unwrap();
    assert_eq!(store.round_trips() - before, 3, "one pipeline per master");
    assert!(renewed.iter().all(|r| matches!(r, Ok(true))), "{renewed:?}");
    let names_only: Vec<&str> = names.iter().map(String::as_str).collect();
    let infos = store.inspect(&names_only).await.unwrap();
    assert!(infos
        .iter()
        .all(|i| i.held && i.ttl_ms.unwrap_or(0) > 29_000));
    let before = store.round_trips();
    let released = store.release(&held).await.unwrap();
    assert_eq!(store.round_trips() - before, 3);
    assert!(released.iter().all(|r| matches!(r, Ok(true))));
    let infos = store.inspect(&names_only).await.unwrap();
    assert!(infos.iter().all(|i| !i.held));
}
