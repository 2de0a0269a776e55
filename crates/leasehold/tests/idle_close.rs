//! Redis topologies beyond one server (Redlock, Sentinel, Cluster) whose data nodes close idle
//! connections (a `timeout` some managed services set, or a restart): a client that idled past it
//! neither fails its next request nor misses its next hand-over. Real redis-servers with
//! `timeout 1`; one server's own cases are in `lease_direct.rs`.
#![cfg(feature = "redis")]

mod lease_support;

use std::time::{Duration, Instant};

use lease_support::{client_at, ms, opts};
use leasehold::LeaseClient;
use leasehold_testkit::{RedisCluster, RedisServer, SentinelSet};

/// How long the nodes' idle timeout takes to close a connection idle since now, with margin (they
/// close one idle for more than a second, checked about ten times a second).
const IDLE: Duration = Duration::from_millis(2_500);

/// Has `srv` close client connections idle for more than a second.
fn close_idle(srv: &RedisServer) {
    let mut con = srv.connection().unwrap();
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("timeout")
        .arg("1")
        .query(&mut con)
        .unwrap();
}

/// Three private masters that close client connections idle for more than a second.
fn closing_masters() -> Vec<RedisServer> {
    (0..3)
        .map(|_| {
            let srv = RedisServer::start().unwrap();
            close_idle(&srv);
            srv
        })
        .collect()
}

async fn redlock(masters: &[RedisServer]) -> LeaseClient {
    LeaseClient::redlock(masters.iter().map(|m| m.url()))
        .response_timeout(ms(500))
        .connect_timeout(ms(500))
        .connect()
        .await
        .unwrap()
}

/// Rounds of acquire, renew and release with an idle spell after each, in which the nodes close
/// the client's connections; what failed.
async fn rounds(c: &LeaseClient, prefix: &str) -> Vec<String> {
    let o = opts(5_000);
    let mut failed = Vec::new();
    for round in 0..3 {
        let name = format!("{prefix}-idle-{round}");
        match c.try_acquire(&name, &o).await {
            Ok(lease) => {
                if let Err(e) = lease.renew().await {
                    failed.push(format!("round {round}: renew: {e}"));
                }
                if let Err(e) = lease.release().await {
                    failed.push(format!("round {round}: release: {e}"));
                }
            }
            Err(e) => failed.push(format!("round {round}: acquire: {e}")),
        }
        tokio::time::sleep(IDLE).await;
    }
    failed
}

/// Rounds in which `c` waits for a name `holder` holds (TTL 5 s) and the holder releases it, with
/// an idle spell after each; how long after each release the waiter had the name. Round 0's
/// connections are new; later rounds' were closed by the nodes while idle.
async fn hand_overs(c: &LeaseClient, holder: &LeaseClient, prefix: &str) -> Vec<Duration> {
    let o = opts(5_000);
    let mut after_release = Vec::new();
    for round in 0..3 {
        let name = format!("{prefix}-waited-{round}");
        let held = holder.try_acquire(&name, &o).await.unwrap();
        let waiter = {
            let (c, o, name) = (c.clone(), o.clone(), name.clone());
            tokio::spawn(async move {
                let lease = c.acquire(&name, &o, ms(10_000)).await;
                (lease, Instant::now())
            })
        };
        // The waiter asks, finds the name busy and blocks.
        tokio::time::sleep(ms(400)).await;
        let released = Instant::now();
        held.release().await.unwrap();
        let (lease, taken) = waiter.await.unwrap();
        lease.unwrap().release().await.unwrap();
        after_release.push(taken.duration_since(released));
        tokio::time::sleep(IDLE).await;
    }
    after_release
}

/// Taken within moments of the release after every idle spell, not when the holder's 5 s would
/// have run out (a wait whose blocking connection failed sleeps that long).
fn heard_every_release(after_release: &[Duration]) {
    let slowest = after_release[1..].iter().max().unwrap();
    assert!(
        *slowest < ms(1_000),
        "taken after the release by {after_release:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_requests_after_every_master_closed_the_idle_connections_do_not_fail() {
    let masters = closing_masters();
    let c = redlock(&masters).await;
    let failed = rounds(&c, "redlock").await;
    assert!(failed.is_empty(), "{failed:?}");
}

/// Several acquires at once after the idle spell (a process whose tasks acquire together): none
/// fails. Only the first request to a master meets the close (the `PING` now; without it, the first
/// acquire failed on every master); the manager reopens the connection at that failure, and the
/// requests behind it wait for the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_requests_at_once_after_every_master_closed_the_idle_connections_do_not_fail() {
    let masters = closing_masters();
    let c = redlock(&masters).await;
    let o = opts(5_000);
    let mut failed = Vec::new();
    for round in 0..3 {
        tokio::time::sleep(IDLE).await;
        let names: Vec<String> = (0..4).map(|i| format!("together-{round}-{i}")).collect();
        let tries = futures::future::join_all(names.iter().map(|n| c.try_acquire(n, &o))).await;
        for (i, r) in tries.into_iter().enumerate() {
            match r {
                Ok(lease) => lease.release().await.unwrap(),
                Err(e) => failed.push(format!("round {round}, lease {i}: {e}")),
            }
        }
    }
    assert!(failed.is_empty(), "{failed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redlock_waits_after_the_masters_closed_the_idle_blocking_connection_hear_the_release() {
    let masters = closing_masters();
    let (c, holder) = (redlock(&masters).await, redlock(&masters).await);
    heard_every_release(&hand_overs(&c, &holder, "redlock").await);
}

/// `rounds` and `hand_overs` on the store at `url`, its data nodes set to close idle connections.
async fn rounds_and_hand_overs(url: &str, prefix: &str) {
    let (c, holder) = (
        client_at(url, ms(1_000)).await,
        client_at(url, ms(1_000)).await,
    );
    let failed = rounds(&c, prefix).await;
    assert!(failed.is_empty(), "{failed:?}");
    heard_every_release(&hand_overs(&c, &holder, prefix).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_requests_and_waits_after_the_data_nodes_closed_the_idle_connections() {
    let set = tokio::task::block_in_place(|| SentinelSet::start().unwrap());
    for node in set.nodes() {
        close_idle(node);
    }
    rounds_and_hand_overs(&set.sentinel_url(), "sentinel").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_requests_and_waits_after_the_masters_closed_the_idle_connections() {
    let cluster = tokio::task::block_in_place(|| RedisCluster::start().unwrap());
    for node in cluster.nodes() {
        close_idle(node);
    }
    rounds_and_hand_overs(&cluster.seed_url(), "cluster").await;
}
