//! One server's direct connections (`redis/direct.rs`): a reply still due on a connection whose
//! request was given up is never read as the answer to the next request; credentials and the
//! database number reach every direct connection; many requests at once stay within the bound and
//! overflow onto the multiplexed connection; `RedisOptions::multiplexed_only` opens none. On a
//! server that closes idle connections, no request, renewal or wait fails for it.

mod lease_support;

use std::io::{Read, Write};

use lease_support::*;
use leasehold::lease::store::redis::RedisOptions;
use leasehold::LeaseClient;
use leasehold_testkit::RedisServer;

/// `n` names starting with `prefix`.
fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i}")).collect()
}

/// The server's `CLIENT LIST TYPE normal`: a line per client connection, the caller's own included.
fn client_list(srv: &RedisServer) -> String {
    let mut admin = srv.connection().unwrap();
    redis::cmd("CLIENT")
        .arg("LIST")
        .arg("TYPE")
        .arg("normal")
        .query(&mut admin)
        .unwrap()
}

/// How many client connections the server counts, the caller's own included.
fn clients(srv: &RedisServer) -> usize {
    client_list(srv).lines().count()
}

/// A private redis-server that closes client connections idle for more than a second (checked
/// about ten times a second).
fn closing_server() -> RedisServer {
    RedisServer::builder()
        .arg("--timeout")
        .arg("1")
        .start()
        .unwrap()
}

/// A client of `srv` with direct connections, or (`only`) with the multiplexed connection only.
async fn client_with(srv: &RedisServer, only: bool) -> LeaseClient {
    LeaseClient::builder(srv.url())
        .response_timeout(ms(500))
        .connect_timeout(ms(500))
        .store_options(RedisOptions::default().multiplexed_only(only))
        .connect()
        .await
        .unwrap()
}

/// The hazard the pool guards against, on a raw socket: a request sent to a stopped server and
/// given up leaves its reply due, and the next request on that connection reads it.
#[test]
fn a_connection_reused_after_a_given_up_request_reads_the_old_reply() {
    let mut srv = server();
    let mut raw = std::net::TcpStream::connect(("127.0.0.1", srv.port())).unwrap();
    raw.set_read_timeout(Some(ms(200))).unwrap();
    srv.pause().unwrap();
    raw.write_all(b"*2\r\n$4\r\nECHO\r\n$5\r\nfirst\r\n")
        .unwrap();
    let mut buf = [0u8; 64];
    assert!(
        raw.read(&mut buf).is_err(),
        "a stopped server answers nothing"
    );
    srv.resume().unwrap();
    // Given up; the next request on the same connection.
    raw.write_all(b"*2\r\n$4\r\nECHO\r\n$6\r\nsecond\r\n")
        .unwrap();
    std::thread::sleep(ms(100));
    let n = raw.read(&mut buf).unwrap();
    assert!(
        buf[..n].starts_with(b"$5\r\nfirst\r\n"),
        "the old reply comes first: {:?}",
        String::from_utf8_lossy(&buf[..n])
    );
}

/// The same through leasehold: requests given up while the server was stopped leave nothing behind
/// that a later request could read. Every later acquire gets its own lease (its own token in the
/// lock key, a fence above the last), and every release finds it.
#[tokio::test]
async fn a_reply_still_due_is_never_read_by_the_next_request() {
    let o = opts(5_000);
    let mut srv = server();
    let c = client(&srv).await;
    // Open a few direct connections, then leave them idle in the pool.
    let warm: Vec<_> =
        futures::future::join_all(names("warm", 4).iter().map(|n| c.try_acquire(n, &o))).await;
    let mut last_fence = 0;
    for lease in warm {
        let lease = lease.unwrap();
        last_fence = last_fence.max(lease.fence().get());
        lease.release().await.unwrap();
    }

    let late = names("late", 6);
    srv.pause().unwrap();
    let given_up = futures::future::join_all(late.iter().map(|n| {
        let (c, o) = (&c, &o);
        async move { tokio::time::timeout(ms(100), c.try_acquire(n, o)).await }
    }))
    .await;
    assert!(given_up.iter().all(|r| r.is_err()), "all given up");
    srv.resume().unwrap();

    for round in 0..20 {
        let name = format!("after-{round}");
        let lease = c.try_acquire(name.as_str(), &opts(5_000)).await.unwrap();
        assert_eq!(
            raw_get(&srv, &lock_key(&lease)).as_deref(),
            Some(lease.token()),
            "round {round}: the lock holds this acquire's token"
        );
        assert!(lease.fence().get() > last_fence, "round {round}");
        last_fence = lease.fence().get();
        let key = lock_key(&lease);
        lease.release().await.unwrap();
        assert_eq!(raw_get(&srv, &key), None, "round {round}");
    }
}

/// A server with an idle `timeout` closes the pooled connections; the next requests open new ones
/// instead of failing on a closed one. The multiplexed connection alone learns of the close from the
/// first request after it, which it sends once more on a new connection (`conn::Reconnecting`).
#[tokio::test]
async fn connections_the_server_closed_while_idle_are_not_used() {
    let srv = closing_server();
    let o = opts(5_000);
    for only in [false, true] {
        let c = client_with(&srv, only).await;
        let leases =
            futures::future::join_all(names("idle", 4).iter().map(|n| c.try_acquire(n, &o))).await;
        for l in leases {
            l.unwrap().release().await.unwrap();
        }
        // The server closes connections idle for more than a second (checked about ten times a
        // second).
        tokio::time::sleep(ms(2_500)).await;
        let mut failed = Vec::new();
        for name in names("after-idle", 4) {
            match c.try_acquire(&name, &o).await {
                Ok(lease) => lease.release().await.unwrap(),
                Err(e) => failed.push(format!("{name}: {e}")),
            }
        }
        assert!(failed.is_empty(), "multiplexed only {only}: {failed:?}");
    }
}

#[tokio::test]
async fn credentials_and_the_database_number_reach_the_direct_connections() {
    let o = opts(5_000);
    let srv = RedisServer::builder()
        .acl_user("worker", "s3cret")
        .start()
        .unwrap();
    let url = format!("{}5", srv.url()); // redis://worker:s3cret@127.0.0.1:PORT/5
    let c = LeaseClient::builder(url)
        .response_timeout(ms(500))
        .connect_timeout(ms(500))
        .connect()
        .await
        .unwrap();
    let leases =
        futures::future::join_all(names("db", 4).iter().map(|n| c.try_acquire(n, &o))).await;
    let mut admin = srv.connection().unwrap();
    // The multiplexed connection and the first dedicated one, and direct ones beside them: all
    // authenticated as the URL's user, on its database.
    let list = client_list(&srv);
    let on_5 = list
        .lines()
        .filter(|l| l.contains(" db=5 ") && l.contains(" user=worker "))
        .count();
    assert!(on_5 >= 3, "direct connections on database 5:\n{list}");
    for lease in leases {
        let lease = lease.unwrap();
        let key = lock_key(&lease);
        let in_0: Option<String> = redis::cmd("GET").arg(&key).query(&mut admin).unwrap();
        redis::cmd("SELECT").arg(5).exec(&mut admin).unwrap();
        let in_5: Option<String> = redis::cmd("GET").arg(&key).query(&mut admin).unwrap();
        redis::cmd("SELECT").arg(0).exec(&mut admin).unwrap();
        assert_eq!(in_0, None, "written to database 0");
        assert_eq!(in_5.as_deref(), Some(lease.token()));
        lease.release().await.unwrap();
    }
}

#[tokio::test]
async fn many_requests_at_once_stay_within_the_bound_and_all_succeed() {
    let o = opts(5_000);
    let srv = server();
    let before = clients(&srv);
    let c = client(&srv).await;
    for _ in 0..3 {
        let leases =
            futures::future::join_all(names("many", 64).iter().map(|n| c.try_acquire(n, &o))).await;
        let leases: Vec<_> = leases.into_iter().map(Result::unwrap).collect();
        futures::future::join_all(leases.into_iter().map(|l| l.release()))
            .await
            .into_iter()
            .for_each(|r| r.unwrap());
    }
    // The multiplexed connection, the first dedicated one (opened at connect), at most 8 direct.
    let opened = clients(&srv) - before;
    assert!((2..=10).contains(&opened), "{opened} connections");

    // Kept on the multiplexed connection: nothing more than the two.
    let before = clients(&srv);
    let only = LeaseClient::builder(srv.url())
        .store_options(RedisOptions::default().multiplexed_only(true))
        .connect()
        .await
        .unwrap();
    let leases =
        futures::future::join_all(names("only", 64).iter().map(|n| only.try_acquire(n, &o))).await;
    for l in leases {
        l.unwrap().release().await.unwrap();
    }
    let opened = clients(&srv) - before;
    assert!(opened <= 2, "{opened} connections");
}

/// Renewals of several leases go out as one pipeline on the multiplexed connection. On a server
/// that closes connections idle for a second, renewed every 1.5 s, that connection is closed
/// before each renewal: the renewal is sent again on a new connection, and no lease is ever at risk.
#[tokio::test]
async fn renewals_after_the_server_closed_the_idle_connection_do_not_fail() {
    let srv = closing_server();
    let o = leasehold::LeaseOptions::builder()
        .ttl(ms(4_000))
        .renew_every(ms(1_500))
        .build()
        .unwrap();
    for only in [false, true] {
        let c = client_with(&srv, only).await;
        let leases =
            futures::future::join_all(names("renewed", 4).iter().map(|n| c.try_acquire(n, &o)))
                .await;
        let leases: Vec<_> = leases.into_iter().map(Result::unwrap).collect();
        let watches: Vec<_> = leases
            .iter()
            .map(|l| {
                let mut h = l.health();
                tokio::spawn(async move { h.at_risk().await.to_string() })
            })
            .collect();
        // Three renewals, each after the server closed the idle connection.
        tokio::time::sleep(ms(5_000)).await;
        let mut at_risk = Vec::new();
        for w in watches {
            if w.is_finished() {
                at_risk.push(w.await.unwrap());
            } else {
                w.abort();
            }
        }
        assert!(at_risk.is_empty(), "multiplexed only {only}: {at_risk:?}");
        for l in leases {
            l.release().await.unwrap();
        }
    }
}

/// The waits' dedicated connections sit idle in their pool between waits; on a server that closes
/// idle connections, the next wait takes one the server closed. It is sent again at once on a new
/// one, not after the 50-150 ms pause that follows a failure of the server: the waiter is queued
/// within a few milliseconds of asking. (The quickest of three waits after an idle spell is
/// judged, so that one slow moment of a busy machine does not fail the test; with the pause, every
/// one of them takes 50 ms or more.)
#[tokio::test]
async fn waits_after_the_server_closed_the_idle_dedicated_connection() {
    let srv = closing_server();
    let o = opts(5_000);
    // Direct dedicated connections, then multiplexed ones.
    for only in [false, true] {
        let (c, holder) = (client_with(&srv, only).await, client_with(&srv, only).await);
        let mut after_idle = Vec::new();
        for round in 0..4 {
            let name = format!("waited-{only}-{round}");
            let held = holder.try_acquire(&name, &o).await.unwrap();
            let waiter = {
                let (c, o, name) = (c.clone(), o.clone(), name.clone());
                tokio::spawn(async move { c.acquire(&name, &o, ms(5_000)).await })
            };
            let asked = std::time::Instant::now();
            resource::wait_for_queue(&srv, &c, &name, 1).await;
            let queued = asked.elapsed();
            held.release().await.unwrap();
            waiter.await.unwrap().unwrap().release().await.unwrap();
            if round > 0 {
                after_idle.push(queued);
            }
            // The server closes both clients' connections, idle for more than a second.
            tokio::time::sleep(ms(2_500)).await;
        }
        let quickest = after_idle.iter().min().unwrap();
        assert!(
            *quickest < ms(45),
            "multiplexed only {only}: queued after {after_idle:?}"
        );
    }
}

/// An acquire that waits for replicas sends its `WAIT` on a dedicated connection too: after the
/// server closed the idle ones, it still succeeds (no replica here, so `WAIT` counts none and
/// the lease is kept, `FailOpen`).
#[tokio::test]
async fn replica_waits_after_the_server_closed_the_idle_dedicated_connection() {
    let srv = closing_server();
    let o = leasehold::LeaseOptions::builder()
        .ttl(ms(5_000))
        .wait_for_replicas(1, ms(20), leasehold::ReplicaPolicy::FailOpen)
        .build()
        .unwrap();
    for only in [false, true] {
        let c = client_with(&srv, only).await;
        let mut failed = Vec::new();
        for round in 0..3 {
            match c
                .try_acquire(&format!("replicated-{only}-{round}"), &o)
                .await
            {
                Ok(lease) => lease.release().await.unwrap(),
                Err(e) => failed.push(format!("round {round}: {e}")),
            }
            tokio::time::sleep(ms(2_500)).await;
        }
        assert!(failed.is_empty(), "multiplexed only {only}: {failed:?}");
    }
}
