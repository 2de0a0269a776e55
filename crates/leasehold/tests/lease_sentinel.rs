//! Leases on a Sentinel-managed Redis (one primary, one replica, three sentinels, all real
//! processes), through real failovers: a plain one the lease survives, a lossy one that loses it
//! (and the fence that keeps counting up), a manual one that demotes a live primary, the `WAIT`
//! policy with the replica cut off, and the bad inputs (unknown master, sentinels unreachable, a URL
//! that points at the wrong kind of server).

mod lease_support;

use std::time::Duration;

use lease_support::ms;
use leasehold::lease::ReplicaPolicy;
use leasehold::{Error, LeaseClient, LeaseOptions, LostReason, Phase};
use leasehold_testkit::{Credentials, SentinelSet};

const FAILOVER: Duration = Duration::from_secs(30);

/// The testkit's helpers block; run them without stalling this runtime's other tasks (the lease
/// watchdog among them).
fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn start() -> SentinelSet {
    blocking(|| SentinelSet::start().expect("start a sentinel set (redis-server installed?)"))
}

async fn client(url: &str) -> LeaseClient {
    lease_support::client_at(url, ms(1_000)).await
}

/// The raw value of `key` on data node `i`, or `None`.
fn raw_get(set: &SentinelSet, i: usize, key: &str) -> Option<String> {
    let mut con = set.node(i).connection().expect("connect to the node");
    redis::cmd("GET").arg(key).query(&mut con).expect("GET")
}

fn raw_pttl(set: &SentinelSet, i: usize, key: &str) -> i64 {
    let mut con = set.node(i).connection().expect("connect to the node");
    redis::cmd("PTTL").arg(key).query(&mut con).expect("PTTL")
}

fn primary(set: &SentinelSet) -> usize {
    set.primary_index().expect("the sentinels name a primary")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_write_reached_the_replica_survives_a_failover_and_renews_on_the_new_primary()
{
    let mut set = start();
    let c = client(&set.sentinel_url()).await;
    assert!(c.location().starts_with("redis-sentinel://"));
    let opts = LeaseOptions::builder()
        .ttl(ms(10_000))
        .renew_every(ms(1_000))
        // The lock write is on the replica before the failover starts.
        .wait_for_replicas(1, ms(2_000), ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    let a = c.try_acquire("nightly", &opts).await.unwrap();
    let key = leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "nightly")
        .unwrap()
        .lock;
    let old = primary(&set);
    let new = 1 - old;
    assert_eq!(raw_get(&set, new, &key).as_deref(), Some(a.token()));

    blocking(|| {
        set.kill_primary().unwrap();
        set.wait_for_failover(FAILOVER).unwrap()
    });
    assert_eq!(primary(&set), new);
    // Renewals go to the new primary: its copy of the lock gets its TTL reset to the full 10 s.
    tokio::time::sleep(ms(1_500)).await;
    a.renew()
        .await
        .expect("the renewal reaches the new primary");
    let pttl = raw_pttl(&set, new, &key);
    assert!(
        pttl > 9_000,
        "the new primary's lock was renewed: PTTL {pttl}"
    );
    assert!(!a.is_lost());

    // It is still exclusive there, and the next holder's fence is higher.
    let other = client(&set.sentinel_url()).await;
    assert!(matches!(
        other.try_acquire("nightly", &opts).await,
        Err(Error::Busy { .. })
    ));
    let first = a.fence();
    a.release().await.unwrap();
    let b = other.try_acquire("nightly", &opts.clone()).await;
    // The old primary is gone, so nothing acknowledges WAIT: fail-closed refuses, and releases.
    assert!(matches!(b, Err(Error::NotReplicated { .. })), "{b:?}");
    let b = other
        .try_acquire("nightly", &LeaseOptions::with_ttl(ms(10_000)).unwrap())
        .await
        .unwrap();
    assert!(b.fence() > first);
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_whose_write_was_lost_in_the_failover_is_reported_lost_and_the_fence_keeps_rising()
{
    let mut set = start();
    let c = client(&set.sentinel_url()).await;
    let opts = LeaseOptions::builder()
        .ttl(ms(15_000))
        .renew_every(ms(500))
        .build()
        .unwrap();

    blocking(|| set.begin_lossy_failover().unwrap());
    // With the replica cut off, WAIT cannot be satisfied: fail-closed refuses and leaves nothing.
    let careful = LeaseOptions::builder()
        .ttl(ms(15_000))
        .wait_for_replicas(1, ms(300), ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    match c.try_acquire("ledger", &careful).await {
        Err(Error::NotReplicated { acked, wanted, .. }) => assert_eq!((acked, wanted), (0, 1)),
        other => panic!("expected NotReplicated, got {other:?}"),
    }
    assert!(!c.inspect("ledger").await.unwrap().held, "released again");

    // Without WAIT (the unsafe variant) the lease is granted on the primary alone...
    let a = c.try_acquire("ledger", &opts).await.unwrap();
    let lost = a.lost();
    blocking(|| set.finish_lossy_failover(FAILOVER).unwrap());

    // ...and the failover lost it: another client takes the name while A has not been told yet or
    // just now: two holders, the bug the fence exists for.
    let b_client = client(&set.sentinel_url()).await;
    let b = b_client
        .try_acquire("ledger", &opts)
        .await
        .expect("the new primary never saw A's lock");
    assert!(
        b.fence() > a.fence(),
        "the fence keeps rising across the failover: {} then {}",
        a.fence(),
        b.fence()
    );

    // A is told, by its first renewal on the new primary: not silently re-taken with a new token.
    let reason = tokio::time::timeout(ms(10_000), lost.fired())
        .await
        .expect("the lost signal fires");
    assert_eq!(reason, LostReason::NotOurs);
    assert!(matches!(a.release().await, Err(Error::LeaseLost { .. })));
    assert!(b_client.inspect("ledger").await.unwrap().held, "B keeps it");
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demoted_primary_that_is_still_up_gets_no_more_writes() {
    let mut set = start();
    let url = set.sentinel_url();
    let c = client(&url).await;
    let opts = LeaseOptions::builder()
        .ttl(ms(10_000))
        .renew_every(ms(500))
        .wait_for_replicas(1, ms(2_000), ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    let a = c.try_acquire("report", &opts).await.unwrap();
    let old = primary(&set);
    // The unsafe variant: a client pinned to the old primary's address.
    let pinned = LeaseClient::builder(set.node(old).url())
        .response_timeout(ms(1_000))
        .connect()
        .await
        .unwrap();
    let p = pinned
        .try_acquire("pinned", &LeaseOptions::with_ttl(ms(10_000)).unwrap())
        .await
        .unwrap();

    // A manual failover: the old primary stays up and is turned into a replica.
    blocking(|| {
        let mut s = set.sentinels()[0].connection().unwrap();
        redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(set.master_name())
            .query::<()>(&mut s)
            .unwrap();
        set.wait_for_failover(FAILOVER).unwrap();
    });
    let new = primary(&set);
    assert_ne!(new, old);
    let key = leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "report")
        .unwrap()
        .lock;
    tokio::time::sleep(ms(1_500)).await;

    // The pinned client keeps writing to the old primary: accepted while that node still thinks it
    // is primary (the write is lost when the sentinels turn it into a replica), or refused with
    // READONLY once they have. Either way not where the lease lives now.
    let pinned_key =
        leasehold::lease::store::redis::keys::LeaseKeys::new(pinned.key_prefix(), "pinned")
            .unwrap()
            .lock;
    match p.renew().await {
        Ok(()) => {
            // It believes it renewed; the primary's copy of its lock keeps running down.
            let real = raw_pttl(&set, new, &pinned_key);
            assert!(real < 9_000, "PTTL {real} on the real primary");
        }
        Err(
            e @ Error::Store {
                phase: Phase::Renew,
                ..
            },
        ) => {
            let source = e
                .store_source::<redis::RedisError>()
                .expect("a Redis error");
            assert_eq!(source.code(), Some("READONLY"), "{source}")
        }
        Err(other) => panic!("unexpected {other}"),
    }
    // Ours followed the sentinels (+switch-master): renewed on the new primary, not on the old one.
    a.renew().await.expect("renewed on the new primary");
    assert!(!a.is_lost());
    assert!(raw_pttl(&set, new, &key) > 9_000);
    let on_old = raw_pttl(&set, old, &key);
    assert!(
        on_old < 9_000,
        "the old primary got our renewal (PTTL {on_old} there)"
    );
    let b = c
        .try_acquire("fresh", &LeaseOptions::with_ttl(ms(5_000)).unwrap())
        .await
        .expect("new writes go to the new primary");
    assert!(raw_get(
        &set,
        new,
        &leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "fresh")
            .unwrap()
            .lock
    )
    .is_some());
    b.release().await.unwrap();
    a.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn separate_credentials_for_sentinels_and_data_nodes() {
    let set = blocking(|| {
        SentinelSet::builder()
            .data_credentials(Credentials::user("app", "data-secret"))
            .sentinel_credentials(Credentials::password("sentinel-secret"))
            .start()
            .unwrap()
    });
    let url = format!(
        "redis-sentinel://app:data-secret@{}?sentinel_password=sentinel-secret#{}",
        set.sentinel_hosts(),
        set.master_name()
    );
    let c = client(&url).await;
    assert!(!c.location().contains("secret"), "{}", c.location());
    let a = c
        .try_acquire("both", &LeaseOptions::with_ttl(ms(5_000)).unwrap())
        .await
        .unwrap();
    a.release().await.unwrap();

    // Without the sentinels' password: the sentinels refuse, which is Unauthorized naming a
    // sentinel (the CLI's 77, not the 69 of a store that did not answer), with no secret in the
    // message.
    let err = LeaseClient::builder(set.sentinel_url())
        .connect_timeout(ms(1_000))
        .response_timeout(ms(1_000))
        .connect()
        .await
        .unwrap_err();
    assert!(!err.to_string().contains("secret"), "{err}");
    match &err {
        Error::Unauthorized { store, fix, .. } => {
            assert!(store.starts_with("sentinel "), "{err}");
            assert!(fix.contains("sentinel_password"), "{err}");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert!(!err.is_unavailable() && !err.is_retryable(), "{err}");
    // A wrong sentinel password: the same.
    let wrong_sentinel = format!(
        "redis-sentinel://app:data-secret@{}?sentinel_password=nope-nope#{}",
        set.sentinel_hosts(),
        set.master_name()
    );
    match LeaseClient::connect(&wrong_sentinel).await {
        Err(e @ Error::Unauthorized { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("sentinel 127.0.0.1:"), "{msg}");
            assert!(
                !msg.contains("nope-nope") && !msg.contains("secret"),
                "{msg}"
            );
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    // With a wrong data password: the sentinels answer, the primary they name refuses.
    let wrong = format!(
        "redis-sentinel://app:nope@{}?sentinel_password=sentinel-secret#{}",
        set.sentinel_hosts(),
        set.master_name()
    );
    let err = LeaseClient::connect(&wrong).await.unwrap_err();
    assert!(!err.to_string().contains("secret"), "{err}");
    match &err {
        Error::Unauthorized { store, fix, .. } => {
            assert!(store.starts_with("primary 127.0.0.1:"), "{err}");
            assert!(fix.contains("user-info"), "{err}");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    assert!(!err.is_unavailable(), "{err}");
    // No data credentials at all (the primary answers NOAUTH): refused too.
    let anonymous = format!(
        "redis-sentinel://{}?sentinel_password=sentinel-secret#{}",
        set.sentinel_hosts(),
        set.master_name()
    );
    match LeaseClient::connect(&anonymous).await {
        Err(Error::Unauthorized { store, .. }) => assert!(store.starts_with("primary "), "{store}"),
        other => panic!("expected Unauthorized, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sentinel_input_is_refused_clearly() {
    let mut set = start();
    // An unknown master name: bad input (exit 2), naming the name.
    match LeaseClient::connect(&set.sentinel_url_for_master("nope")).await {
        Err(Error::Invalid { what, why }) => {
            assert_eq!(what, "sentinel master name");
            assert!(why.contains("`nope`"), "{why}");
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
    // No master name at all.
    let bare = format!("redis-sentinel://{}", set.sentinel_hosts());
    assert!(matches!(
        LeaseClient::connect(&bare).await,
        Err(Error::Invalid {
            what: "sentinel master name",
            ..
        })
    ));
    // A data node listed as a sentinel.
    let data_node = format!(
        "redis-sentinel://127.0.0.1:{}#{}",
        set.node(0).port(),
        set.master_name()
    );
    match LeaseClient::connect(&data_node).await {
        Err(Error::Invalid { why, .. }) => assert!(why.contains("not as a sentinel"), "{why}"),
        other => panic!("expected Invalid, got {other:?}"),
    }
    // A sentinel given as a plain server.
    let sentinel_as_server = set.sentinels()[0].url();
    match LeaseClient::connect(&sentinel_as_server).await {
        Err(Error::Invalid { why, .. }) => assert!(why.contains("redis-sentinel://"), "{why}"),
        other => panic!("expected Invalid, got {other:?}"),
    }

    // Sentinels that hang (SIGSTOP): a connect error within the bounds, not a hang.
    blocking(|| set.pause_sentinels().unwrap());
    let started = std::time::Instant::now();
    let err = LeaseClient::builder(set.sentinel_url())
        .connect_timeout(ms(500))
        .response_timeout(ms(500))
        .connect()
        .await
        .unwrap_err();
    assert!(started.elapsed() < ms(5_000), "{:?}", started.elapsed());
    assert!(
        err.is_unavailable()
            && matches!(
                err,
                Error::Store {
                    phase: Phase::Connect,
                    ..
                }
            ),
        "{err}"
    );
    blocking(|| set.resume_sentinels().unwrap());
    // Sentinels that are gone: connection refused, unavailable.
    blocking(|| set.kill_sentinels().unwrap());
    let err = LeaseClient::connect(&set.sentinel_url()).await.unwrap_err();
    assert!(err.is_unavailable(), "{err}");
    assert!(
        err.report().to_string().contains("sentinel"),
        "{}",
        err.report()
    );
}

/// The lease contract suite (`leasehold::contract_suite!`: the tests every store runs, a store written
/// outside the crate too) on this store.
mod contract {
    #[allow(unused_imports)]
    use super::lease_support;
    #[allow(unused_imports)]
    use super::lease_support::contract::*;

    leasehold::contract_suite!(Env::open("sentinel", async {
        // A primary, a replica and three sentinels; the client finds the primary through them; one set
        // shared by the contract tests that run at the same time.
        shared(&SENTINELS, || {
            leasehold_testkit::SentinelSet::start().expect("start a sentinel set")
        })
    }));
}
