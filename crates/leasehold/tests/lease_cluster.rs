//! Leases on a real Redis Cluster (three masters, three replicas): leases spread over every master
//! and `list` finds them all; a lease's slot migrated while it is held (ASK, then MOVED); its master
//! killed and the replica promoted, with the write replicated (the lease lives on) and without (it
//! is lost, the fence keeps rising); and the URLs of the wrong topology.

mod lease_support;

use std::collections::BTreeSet;
use std::time::Duration;

use lease_support::ms;
use leasehold::lease::ReplicaPolicy;
use leasehold::{Error, LeaseClient, LeaseOptions, LostReason};
use leasehold_testkit::cluster::key_slot;
use leasehold_testkit::{Credentials, RedisCluster, RedisServer};

const SETTLE: Duration = Duration::from_secs(30);

fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn start() -> RedisCluster {
    blocking(|| RedisCluster::start().expect("start a redis cluster (redis-server installed?)"))
}

async fn client(cluster: &RedisCluster) -> LeaseClient {
    LeaseClient::builder(cluster.seed_url())
        .response_timeout(ms(1_000))
        .connect_timeout(ms(1_000))
        .connect()
        .await
        .expect("connect to the cluster")
}

/// A raw connection to node `i` (no redirects followed).
fn raw(cluster: &RedisCluster, i: usize) -> redis::Connection {
    cluster.node(i).connection().expect("connect to the node")
}

/// `PTTL key` on node `i`, with `ASKING` first (the node may be importing the slot).
fn pttl_asking(cluster: &RedisCluster, i: usize, key: &str) -> i64 {
    let mut con = raw(cluster, i);
    let (_, pttl): (String, i64) = redis::pipe()
        .cmd("ASKING")
        .cmd("PTTL")
        .arg(key)
        .query(&mut con)
        .expect("ASKING PTTL");
    pttl
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leases_spread_over_every_master_and_list_and_status_see_them_all() {
    let cluster = start();
    let c = client(&cluster).await;
    assert!(c.location().starts_with("redis-cluster://"));
    let opts = LeaseOptions::builder()
        .ttl(ms(5_000))
        .renew_every(ms(300))
        .build()
        .unwrap();
    let names: Vec<String> = (0..30).map(|i| format!("job-{i}")).collect();
    let mut leases = Vec::new();
    for n in &names {
        leases.push(c.try_acquire(n, &opts).await.unwrap());
    }
    let masters: BTreeSet<usize> = names
        .iter()
        .map(|n| {
            cluster
                .master_of_key(
                    leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), n)
                        .unwrap()
                        .lock,
                )
                .unwrap()
        })
        .collect();
    assert_eq!(masters.len(), 3, "30 names land on all three masters");

    // Renewed in batches (split per master) for several TTLs' worth of renewals.
    tokio::time::sleep(ms(1_200)).await;
    assert!(leases.iter().all(|l| !l.is_lost()));

    let listed: BTreeSet<String> = c
        .list("job-*")
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.held)
        .map(|i| i.name)
        .collect();
    assert_eq!(
        listed,
        names.iter().cloned().collect(),
        "SCAN on every master"
    );
    let one = c.inspect("job-7").await.unwrap();
    assert!(one.held && one.fence == Some(leases[7].fence()));

    // Another client is excluded on every master.
    let other = client(&cluster).await;
    for n in &names {
        assert!(matches!(
            other.try_acquire(n, &opts).await,
            Err(Error::Busy { .. })
        ));
    }
    for l in leases {
        l.release().await.unwrap();
    }
    assert!(c.list("job-*").await.unwrap().iter().all(|i| !i.held));

    // URLs of the wrong topology are refused as bad input, naming the right one.
    match LeaseClient::connect(&cluster.node(0).url()).await {
        Err(Error::Invalid { why, .. }) => assert!(why.contains("redis-cluster://"), "{why}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    let standalone = blocking(|| RedisServer::start().unwrap());
    let wrong = format!("redis-cluster://127.0.0.1:{}", standalone.port());
    match LeaseClient::connect(&wrong).await {
        Err(Error::Invalid { why, .. }) => {
            assert!(why.contains("not a Redis Cluster node"), "{why}");
            assert!(why.contains("redis://"), "{why}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    // Seeds that are all gone: unreachable.
    let err = LeaseClient::builder("redis-cluster://127.0.0.1:1,127.0.0.1:2")
        .connect_timeout(ms(500))
        .connect()
        .await
        .unwrap_err();
    assert!(err.is_unavailable(), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_migrated_while_the_lease_is_held_keeps_renew_and_release_working() {
    let cluster = start();
    // Requests retry TRYAGAIN within the response bound: give a loaded machine room to finish the
    // migration inside it.
    let c = LeaseClient::builder(cluster.seed_url())
        .response_timeout(ms(4_000))
        .connect_timeout(ms(1_000))
        .connect()
        .await
        .unwrap();
    let opts = LeaseOptions::builder()
        .ttl(ms(10_000))
        .renew_every(ms(500))
        .build()
        .unwrap();
    let a = c.try_acquire("moving", &opts).await.unwrap();
    let keys =
        leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "moving").unwrap();
    let slot = key_slot(&keys.lock);
    let from = cluster.master_of_slot(slot).unwrap();
    let to = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != from)
        .unwrap();

    // Mid-migration: the lock key is on the target, the fence still on the source.
    let m = blocking(|| {
        let m = cluster.begin_slot_migration(slot, to).unwrap();
        cluster.move_keys(&m, &[keys.lock.as_bytes()]).unwrap();
        m
    });
    // The unsafe variant, a client that does not follow redirects, is turned away by the source.
    let refused: redis::RedisResult<Option<String>> = redis::cmd("GET")
        .arg(&keys.lock)
        .query(&mut raw(&cluster, from));
    let e = refused.unwrap_err();
    assert_eq!(e.code(), Some("ASK"), "{e}");
    // Ours follows ASK: the renewal lands on the target's copy of the lock.
    tokio::time::sleep(ms(1_000)).await;
    a.renew().await.expect("renewed through ASK");
    assert!(pttl_asking(&cluster, to, &keys.lock) > 9_000);
    assert!(!a.is_lost());
    // An acquire touches several keys, split between the two nodes now: the cluster answers
    // TRYAGAIN until the slot has moved, so it fails (retryably) and takes nothing.
    let other = client(&cluster).await;
    let split = other.try_acquire("moving", &opts).await;
    assert!(
        matches!(&split, Err(e) if e.is_retryable() && !matches!(e, Error::Busy { .. })),
        "{split:?}"
    );

    // A release (several keys) during the migration waits out TRYAGAIN until the slot has moved.
    let first = a.fence();
    let releasing = tokio::spawn(async move { a.release().await });
    tokio::time::sleep(ms(300)).await;
    blocking(|| cluster.finish_slot_migration(m).unwrap());
    releasing
        .await
        .unwrap()
        .expect("released once the slot moved");
    assert_eq!(cluster.master_of_slot(slot).unwrap(), to);

    // After the migration (MOVED): the next holder gets a higher fence from the target.
    let b = other.try_acquire("moving", &opts).await.unwrap();
    assert!(b.fence() > first);
    tokio::time::sleep(ms(1_000)).await;
    b.renew().await.unwrap();
    let mut on_target = raw(&cluster, to);
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&keys.lock)
        .query(&mut on_target)
        .unwrap();
    assert!(pttl > 9_000, "{pttl}");
    b.release().await.unwrap();
}

/// The lock still on the migrating node, the fence already moved: a release must not delete the lock
/// and then stop at the next key the node no longer holds (it would come back "not ours" once the
/// slot moved, the lease released by nobody's account). Declaring the name's never-existing key makes
/// the node refuse the script whole until the slot has moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_while_its_slot_moves_is_done_whole_once_the_slot_has_moved() {
    let cluster = start();
    let c = LeaseClient::builder(cluster.seed_url())
        .response_timeout(ms(4_000))
        .connect_timeout(ms(1_000))
        .connect()
        .await
        .unwrap();
    let opts = LeaseOptions::builder().ttl(ms(10_000)).build().unwrap();
    let a = c.try_acquire("halfway", &opts).await.unwrap();
    let first = a.fence();
    let keys =
        leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "halfway").unwrap();
    let slot = key_slot(&keys.lock);
    let from = cluster.master_of_slot(slot).unwrap();
    let to = cluster
        .masters()
        .unwrap()
        .into_iter()
        .find(|&m| m != from)
        .unwrap();
    let m = blocking(|| {
        let m = cluster.begin_slot_migration(slot, to).unwrap();
        cluster.move_keys(&m, &[keys.fence.as_bytes()]).unwrap();
        m
    });
    let releasing = tokio::spawn(async move { a.release().await });
    tokio::time::sleep(ms(300)).await;
    assert!(
        !releasing.is_finished(),
        "no release while the slot is split"
    );
    blocking(|| cluster.finish_slot_migration(m).unwrap());
    releasing
        .await
        .unwrap()
        .expect("released whole once the slot moved, not reported lost");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(&keys.lock)
        .query(&mut raw(&cluster, to))
        .unwrap();
    assert_eq!(exists, 0, "the lock is gone");
    let b = c.try_acquire("halfway", &opts).await.unwrap();
    assert!(b.fence() > first);
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_master_with_the_write_replicated_keeps_the_lease_and_without_loses_it() {
    let mut cluster = start();
    let c = client(&cluster).await;
    // Replicated (WAIT on the slot's master, on a dedicated connection): survives the failover.
    let careful = LeaseOptions::builder()
        .ttl(ms(10_000))
        .renew_every(ms(500))
        .wait_for_replicas(1, ms(2_000), ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    let a = c.try_acquire("kept", &careful).await.unwrap();
    let key = leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "kept")
        .unwrap()
        .lock;
    let slot = key_slot(&key);
    let new = blocking(|| cluster.kill_master_of_slot(slot, SETTLE).unwrap());
    tokio::time::sleep(ms(1_000)).await;
    a.renew().await.expect("renewed on the promoted replica");
    assert!(!a.is_lost());
    let pttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query(&mut raw(&cluster, new))
        .unwrap();
    assert!(pttl > 9_000, "{pttl}");
    let first = a.fence();
    a.release().await.unwrap();

    // Not replicated: the master's replica is stopped and its link cut, the lease taken, the master
    // killed, the replica promoted without the lock.
    let plain = LeaseOptions::builder()
        .ttl(ms(15_000))
        .renew_every(ms(500))
        .build()
        .unwrap();
    let name = (0..)
        .map(|i| format!("lossy-{i}"))
        .find(|n| {
            let m = cluster
                .master_of_key(
                    leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), n)
                        .unwrap()
                        .lock,
                )
                .unwrap();
            !cluster.replicas_of(m).unwrap().is_empty()
        })
        .unwrap();
    let lossy_key = leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), &name)
        .unwrap()
        .lock;
    let master = cluster.master_of_key(&lossy_key).unwrap();
    let replica = cluster.replicas_of(master).unwrap()[0];
    blocking(|| {
        cluster.node_mut(replica).pause().unwrap();
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query::<i64>(&mut raw(&cluster, master))
            .unwrap();
    });
    let lost_one = c.try_acquire(&name, &plain).await.unwrap();
    let lost = lost_one.lost();
    blocking(|| {
        cluster.node_mut(master).kill().unwrap();
        cluster.node_mut(replica).resume().unwrap();
        cluster.wait_until_ok(SETTLE).unwrap();
    });
    assert_eq!(cluster.master_of_key(&lossy_key).unwrap(), replica);
    // Two holders: the promoted replica never saw the lock, so another client gets in...
    let other = client(&cluster).await;
    let b = other
        .try_acquire(&name, &plain)
        .await
        .expect("the promoted replica never saw the lock");
    assert!(b.fence() > lost_one.fence(), "the fence keeps rising");
    // ...and the first holder is told.
    let reason = tokio::time::timeout(ms(10_000), lost.fired())
        .await
        .expect("the lost signal fires");
    assert_eq!(reason, LostReason::NotOurs);
    b.release().await.unwrap();
    let again = other.try_acquire("kept", &plain).await.unwrap();
    assert!(again.fence() > first);
    again.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_unauthorized_naming_the_node() {
    let cluster = blocking(|| {
        RedisCluster::builder()
            .masters(3)
            .replicas_per_master(0)
            .credentials(Credentials::password("cluster-pw"))
            .start()
            .expect("start a redis cluster with requirepass")
    });
    // The right password works.
    let c = client(&cluster).await;
    assert!(!c.location().contains("cluster-pw"), "{}", c.location());
    let l = c
        .try_acquire("auth", &LeaseOptions::with_ttl(ms(5_000)).unwrap())
        .await
        .unwrap();
    l.release().await.unwrap();
    let hosts: Vec<String> = (0..3).map(|i| cluster.addr(i).to_string()).collect();
    // A wrong password, and none at all (NOAUTH): Unauthorized (the CLI's 77), not an outage.
    for url in [
        format!("redis-cluster://:wrong-pw@{}", hosts.join(",")),
        format!("redis-cluster://{}", hosts.join(",")),
    ] {
        match LeaseClient::connect(&url).await {
            Err(e @ Error::Unauthorized { .. }) => {
                assert!(!e.is_unavailable() && !e.is_retryable(), "{e}");
                let msg = e.to_string();
                assert!(msg.contains("cluster node 127.0.0.1:"), "{msg}");
                assert!(!msg.contains("wrong-pw"), "{msg}");
            }
            other => panic!("{url}: expected Unauthorized, got {other:?}"),
        }
    }
}

/// The lease contract suite (`leasehold::contract_suite!`: the tests every store runs, a store written
/// outside the crate too) on this store.
mod contract {
    #[allow(unused_imports)]
    use super::lease_support;
    #[allow(unused_imports)]
    use super::lease_support::contract::*;

    leasehold::contract_suite!(Env::open("cluster", async {
        // A Redis Cluster of three masters and three replicas, shared by the contract tests that run at
        // the same time.
        shared(&CLUSTERS, || {
            leasehold_testkit::RedisCluster::start().expect("start a redis cluster")
        })
    }));
}
