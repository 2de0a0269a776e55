//! Redlock's bad input and unreachable masters, against real servers: each refusal names what was
//! wrong and what to do, nothing is left held, and a minority of masters down is no failure.
#![cfg(feature = "redis")]

mod lease_support;

use std::time::Duration;

use lease_support::{ms, opts, raw_get, server};
use leasehold::{Error, LeaseClient, StoreKind};
use leasehold_testkit::{free_port, RedisServer};

async fn connect(urls: &[String]) -> leasehold::Result<LeaseClient> {
    LeaseClient::redlock(urls)
        .response_timeout(ms(300))
        .connect_timeout(ms(300))
        .connect()
        .await
}

fn invalid(r: leasehold::Result<LeaseClient>) -> String {
    match r {
        Err(e @ Error::Invalid { .. }) => {
            assert!(!e.is_unavailable());
            e.to_string()
        }
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn dead_url() -> String {
    format!("redis://127.0.0.1:{}/", free_port())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_count_of_masters_is_checked_before_anything_is_sent() {
    // Unreachable ports: a check that ran after connecting would say "unreachable" instead.
    for n in [0, 1, 2, 4, 6] {
        let urls: Vec<String> = (0..n).map(|_| dead_url()).collect();
        let msg = invalid(connect(&urls).await);
        assert!(
            msg.contains("odd number") && msg.contains("at least 3"),
            "{n}: {msg}"
        );
    }
    let same = dead_url();
    let msg = invalid(connect(&[same.clone(), dead_url(), same]).await);
    assert!(msg.contains("given twice"), "{msg}");
    let msg =
        invalid(connect(&[dead_url(), dead_url(), "mongodb://u:s3cret@h/x".to_owned()]).await);
    assert!(
        msg.contains("not a Redis URL") && !msg.contains("s3cret"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_server_under_two_urls_is_refused_by_its_run_id() {
    let a = server();
    let b = server();
    // `localhost` and `127.0.0.1`, and two databases of one server: different strings, one server.
    let alias = format!("redis://localhost:{}/3", a.port());
    let msg = invalid(connect(&[a.url(), b.url(), alias]).await);
    assert!(
        msg.contains("same Redis server") && msg.contains(&a.port().to_string()),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_is_refused() {
    let a = server();
    let b = server();
    let mut replica = server();
    tokio::task::block_in_place(|| replica.replicate_from(&a)).unwrap();
    match connect(&[b.url(), a.url(), replica.url()]).await {
        Err(e @ Error::Misconfigured { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("not a master") && msg.contains("slave"),
                "{msg}"
            );
            assert!(!e.is_unavailable() && !e.is_retryable());
        }
        other => panic!("expected Misconfigured, got {other:?}"),
    }
    // A master that may evict lease keys is refused like a single server.
    let evicting = RedisServer::builder()
        .arg("--maxmemory")
        .arg("8mb")
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start()
        .unwrap();
    match connect(&[b.url(), a.url(), evicting.url()]).await {
        Err(Error::Misconfigured { found, .. }) => {
            assert!(found.contains("allkeys-lru"), "{found}")
        }
        other => panic!("expected Misconfigured, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acl_users_and_passwords_work_per_master() {
    let a = RedisServer::builder()
        .acl_user("app", "pw-a")
        .start()
        .unwrap();
    let b = RedisServer::builder().password("pw-b").start().unwrap();
    let c = server();
    let c_wrong = format!("redis://app:nope@127.0.0.1:{}/", a.port());
    let client = connect(&[a.url(), b.url(), c.url()]).await.unwrap();
    assert_eq!(client.store_kind(), StoreKind::REDLOCK);
    assert!(!client.location().contains("pw-a") && !client.location().contains("pw-b"));
    let lease = client.try_acquire("job", &opts(5_000)).await.unwrap();
    lease.release().await.unwrap();
    // Wrong credentials on two of three: refused credentials (the CLI's 77), naming a master that
    // refused, not an outage (69), and without the password.
    let wrong_b = format!("redis://:nope@127.0.0.1:{}/", b.port());
    match connect(&[c_wrong.clone(), wrong_b, c.url()]).await {
        Err(e @ Error::Unauthorized { .. }) => {
            assert!(!e.is_unavailable() && !e.is_retryable(), "{e}");
            let msg = e.to_string();
            assert!(msg.contains("Redlock master redis://"), "{msg}");
            assert!(!msg.contains("nope"), "{msg}");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    // One master of three refusing is enough: a majority would answer, but the URL is wrong.
    match connect(&[c_wrong, b.url(), c.url()]).await {
        Err(e @ Error::Unauthorized { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&format!(":{}", a.port())), "{msg}");
            assert!(!msg.contains("nope"), "{msg}");
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
    // A master that wants a password its URL does not give (NOAUTH): the same.
    let anonymous_b = format!("redis://127.0.0.1:{}/", b.port());
    match connect(&[a.url(), anonymous_b, c.url()]).await {
        Err(e @ Error::Unauthorized { .. }) => {
            assert!(e.to_string().contains(&format!(":{}", b.port())), "{e}")
        }
        other => panic!("expected Unauthorized, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fewer_than_a_majority_reachable_is_a_typed_error_and_leaves_nothing_held() {
    let a = server();
    // At connect: one of three answers.
    match connect(&[a.url(), dead_url(), dead_url()]).await {
        Err(e @ Error::NoQuorum { .. }) => {
            assert!(e.is_unavailable() && e.is_retryable(), "{e}");
            assert!(e.to_string().contains("1 of 3"), "{e}");
        }
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    // After connect: two of three stop; the one left must not keep the lock it granted.
    let mut b = server();
    let mut c = server();
    let client = connect(&[a.url(), b.url(), c.url()]).await.unwrap();
    tokio::task::block_in_place(|| {
        b.kill().unwrap();
        c.pause().unwrap();
    });
    match client.try_acquire("job", &opts(30_000)).await {
        Err(e @ Error::NoQuorum { .. }) => assert!(e.is_unavailable(), "{e}"),
        other => panic!("expected NoQuorum, got {other:?}"),
    }
    let key = client.key_of("job").unwrap();
    assert_eq!(
        raw_get(&a, &key),
        None,
        "the master that answered was undone"
    );
    tokio::task::block_in_place(|| c.resume()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_minority_down_at_start_is_checked_and_counted_once_it_answers() {
    let a = server();
    let b = server();
    let port = free_port();
    let late = format!("redis://127.0.0.1:{port}/");
    let client = connect(&[a.url(), b.url(), late]).await.unwrap();
    // Two of three: leases work.
    let lease = client.try_acquire("job", &opts(5_000)).await.unwrap();
    lease.release().await.unwrap();
    // The third starts; once checked it takes part (its lock key appears with the next lease).
    let c = RedisServer::builder().port(port).start().unwrap();
    let key = client.key_of("job").unwrap();
    let mut seen = false;
    for _ in 0..50 {
        let lease = client.try_acquire("job", &opts(5_000)).await.unwrap();
        seen = raw_get(&c, &key).is_some();
        lease.release().await.unwrap();
        if seen {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(seen, "the late master never took part");
}

/// The lease contract suite (`leasehold::contract_suite!`: the tests every store runs, a store written
/// outside the crate too) on this store.
mod contract {
    #[allow(unused_imports)]
    use super::lease_support;
    #[allow(unused_imports)]
    use super::lease_support::contract::*;

    leasehold::contract_suite!(Env::open("redlock", async {
        // Three private redis-servers as the masters of a Redlock.
        (0..3).map(|_| lease_support::server()).collect::<Vec<_>>()
    }));
}
