//! Faults done to real redis-server processes: a stopped server (SIGSTOP), a killed server, a killed
//! connection, a restart without persistence, a failover to a replica that missed the last write,
//! replica acknowledgements (`WAIT`), ACL authentication.

mod lease_support;

use std::time::Instant;

use lease_support::*;
use leasehold::lease::ReplicaPolicy;
use leasehold::{Error, LeaseClient, LeaseOptions, LostReason, Phase};
use leasehold_testkit::RedisServer;

#[tokio::test]
async fn a_stopped_redis_makes_the_lost_signal_fire_within_the_deadline() {
    let mut srv = server();
    let c = client(&srv).await;
    let other = client(&srv).await;
    let a = c.try_acquire("paused", &opts(600)).await.unwrap();
    tokio::time::sleep(ms(250)).await; // at least one renewal went through
    assert!(!a.is_lost());

    srv.pause().unwrap();
    let t0 = Instant::now();
    let reason = tokio::time::timeout(ms(3_000), a.lost().fired())
        .await
        .expect("signal must fire");
    let after = t0.elapsed();
    assert_eq!(reason, LostReason::DeadlinePassed);
    // Deadline: (last renewal sent, before the pause) + 600 ms - drift; slack for a loaded machine.
    assert!(after <= ms(600 + 400), "fired {after:?} after the pause");
    assert!(a.remaining().is_zero());

    // Calls do not hang on a stopped server: they fail within the configured bounds.
    let t1 = Instant::now();
    match c.try_acquire("other-name", &opts(1_000)).await {
        Err(
            e @ Error::Store {
                phase: Phase::Acquire,
                ..
            },
        ) => assert!(e.is_retryable(), "{e}"),
        other => panic!("expected a Redis error, got {other:?}"),
    }
    assert!(t1.elapsed() < ms(3_000), "took {:?}", t1.elapsed());

    // Why the signal matters: Redis expires the key on its own clock, so once it runs again another
    // holder gets in while a holder that ignored its deadline would still be working.
    srv.resume().unwrap();
    let b = other
        .acquire("paused", &opts(5_000), ms(3_000))
        .await
        .expect("B gets the lease");
    assert!(b.fence() > a.fence());
    assert!(matches!(a.release().await, Err(Error::LeaseLost { .. })));
    b.release().await.unwrap();
}

#[tokio::test]
async fn a_killed_redis_makes_the_lost_signal_fire_within_the_deadline() {
    let mut srv = server();
    let c = client(&srv).await;
    let a = c.try_acquire("killed", &opts(600)).await.unwrap();
    tokio::time::sleep(ms(250)).await;
    srv.kill().unwrap();
    let t0 = Instant::now();
    let reason = tokio::time::timeout(ms(3_000), a.lost().fired())
        .await
        .expect("signal must fire");
    assert_eq!(reason, LostReason::DeadlinePassed);
    assert!(
        t0.elapsed() <= ms(1_000),
        "fired {:?} after the kill",
        t0.elapsed()
    );
}

#[tokio::test]
async fn a_restart_without_persistence_is_noticed_by_the_next_renewal() {
    let mut srv = server();
    let c = client(&srv).await;
    let a = c.try_acquire("restarted", &opts(1_500)).await.unwrap();
    srv.restart().unwrap();
    let t0 = Instant::now();
    let reason = tokio::time::timeout(ms(4_000), a.lost().fired())
        .await
        .expect("signal must fire");
    // The renewal after the reconnect finds the key gone, well before the 1.5 s deadline (on a
    // loaded machine the deadline may come first; either way the holder is told in time).
    assert!(
        matches!(reason, LostReason::NotOurs | LostReason::DeadlinePassed),
        "{reason:?}"
    );
    assert!(
        t0.elapsed() <= ms(1_500 + 500),
        "fired {:?} after the restart",
        t0.elapsed()
    );
}

#[tokio::test]
async fn a_killed_connection_is_reopened_and_the_lease_survives() {
    let srv = server();
    let c = client(&srv).await;
    let a = c.try_acquire("reconnect", &opts(900)).await.unwrap();
    let mut admin = srv.connection().unwrap();
    for _ in 0..3 {
        // Kills every client connection but the admin's own (SKIPME yes is the default).
        let killed: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("normal")
            .query(&mut admin)
            .unwrap();
        assert!(killed >= 1);
        tokio::time::sleep(ms(400)).await;
    }
    assert!(!a.is_lost(), "lost: {:?}", a.lost().reason());
    assert_eq!(raw_get(&srv, &lock_key(&a)).as_deref(), Some(a.token()));
    a.release().await.unwrap();
}

fn incr(srv: &RedisServer, key: &str) -> i64 {
    let mut con = srv.connection().unwrap();
    redis::cmd("INCR").arg(key).query(&mut con).unwrap()
}

#[tokio::test]
async fn the_fence_survives_a_restart_without_persistence_where_a_bare_incr_repeats() {
    let mut srv = server();
    let o = LeaseOptions::builder()
        .ttl(ms(5_000))
        .no_renewal()
        .build()
        .unwrap();
    let mut last = 0;
    let mut last_naive = 0;
    {
        let c = client(&srv).await;
        for _ in 0..5 {
            let l = c.try_acquire("job", &o).await.unwrap();
            assert!(l.fence().get() > last);
            last = l.fence().get();
            last_naive = incr(&srv, "naive-fence");
            l.release().await.unwrap();
        }
    }
    srv.restart().unwrap();
    let c = client(&srv).await;
    assert_eq!(
        c.inspect("job").await.unwrap().fence,
        None,
        "the restart lost the fence key"
    );
    let l = c.try_acquire("job", &o).await.unwrap();
    assert!(
        l.fence().get() > last,
        "fence went backwards: {} after {last}",
        l.fence()
    );
    // The unsafe strategy: a bare INCR hands out a fence that was already used.
    let naive = incr(&srv, "naive-fence");
    assert!(
        naive <= last_naive,
        "INCR after the restart: {naive}, before: {last_naive}"
    );
    l.release().await.unwrap();
}

#[tokio::test]
async fn the_fence_survives_a_failover_to_a_replica_that_missed_the_last_write() {
    let mut primary = server();
    let replica = RedisServer::builder()
        .replica_of(primary.port())
        .start()
        .unwrap();
    replica.wait_until_synced().unwrap();
    let o = LeaseOptions::builder()
        .ttl(ms(5_000))
        .no_renewal()
        .build()
        .unwrap();
    let c = client(&primary).await;

    let l = c.try_acquire("job", &o).await.unwrap();
    incr(&primary, "naive-fence");
    l.release().await.unwrap();
    let mut pcon = primary.connection().unwrap();
    // WAIT counts the acknowledgements of this connection's own last write: without one it returns
    // at once, whatever the replica has seen. A write here comes after every earlier write in the
    // replication stream, so its acknowledgement covers the lease's keys too.
    let _: () = redis::cmd("SET")
        .arg("replicated-up-to-here")
        .arg(1)
        .query(&mut pcon)
        .unwrap();
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(2_000)
        .query(&mut pcon)
        .unwrap();
    assert_eq!(acked, 1, "the replica has everything so far");

    // Partition: the replica loses its link (points at a dead primary); the primary goes on.
    let mut rcon = replica.connection().unwrap();
    let dead = leasehold_testkit::free_port();
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(dead)
        .query(&mut rcon)
        .unwrap();
    let mut last = 0;
    let mut last_naive = 0;
    for _ in 0..3 {
        let l = c.try_acquire("job", &o).await.unwrap();
        last = l.fence().get();
        last_naive = incr(&primary, "naive-fence");
        l.release().await.unwrap();
    }
    let replica_fence: Option<u64> = redis::cmd("GET")
        .arg(
            leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "job")
                .unwrap()
                .fence,
        )
        .query::<Option<String>>(&mut rcon)
        .unwrap()
        // The record begins with the fence (`<fence>:<flags>:<holder>:<released>`).
        .map(|s| s.split(':').next().unwrap().parse().unwrap());
    assert!(
        replica_fence.unwrap() < last,
        "the replica really missed the last fences"
    );

    // Failover: the primary dies, the stale replica is promoted.
    primary.kill().unwrap();
    let mut replica = replica;
    replica.promote().unwrap();
    let c2 = client(&replica).await;
    let l = c2.try_acquire("job", &o).await.unwrap();
    assert!(
        l.fence().get() > last,
        "fence went backwards after failover: {} after {last}",
        l.fence()
    );
    // The unsafe strategy repeats a fence.
    let naive = incr(&replica, "naive-fence");
    assert!(
        naive <= last_naive,
        "INCR after failover: {naive}, issued before: {last_naive}"
    );
    l.release().await.unwrap();
}

#[tokio::test]
async fn wait_for_replicas_fail_closed_and_fail_open() {
    let primary = server();
    let mut replica = RedisServer::builder()
        .replica_of(primary.port())
        .start()
        .unwrap();
    replica.wait_until_synced().unwrap();
    let c = client(&primary).await;
    let closed = LeaseOptions::builder()
        .ttl(ms(5_000))
        .wait_for_replicas(1, ms(1_000), ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    let open = LeaseOptions::builder()
        .ttl(ms(5_000))
        .wait_for_replicas(1, ms(300), ReplicaPolicy::FailOpen)
        .build()
        .unwrap();

    // Healthy replica: acknowledged, and the lock is on the replica.
    let l = c.try_acquire("replicated", &closed).await.unwrap();
    let mut rcon = replica.connection().unwrap();
    let on_replica: Option<String> = redis::cmd("GET")
        .arg(lock_key(&l))
        .query(&mut rcon)
        .unwrap();
    assert_eq!(on_replica.as_deref(), Some(l.token()));
    l.release().await.unwrap();

    // Asking for more replicas than exist falls short at once.
    let two = LeaseOptions::builder()
        .ttl(ms(5_000))
        .wait_for_replicas(2, ms(200), ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    match c.try_acquire("replicated", &two).await {
        Err(Error::NotReplicated {
            acked: 1,
            wanted: 2,
            ..
        }) => {}
        other => panic!("expected NotReplicated 1/2, got {other:?}"),
    }
    assert!(
        !c.inspect("replicated").await.unwrap().held,
        "fail-closed released it"
    );

    // Stopped replica: the write is not acknowledged.
    replica.pause().unwrap();
    let short = LeaseOptions::builder()
        .ttl(ms(5_000))
        .wait_for_replicas(1, ms(300), ReplicaPolicy::FailClosed)
        .build()
        .unwrap();
    match c.try_acquire("replicated", &short).await {
        Err(
            e @ Error::NotReplicated {
                acked: 0,
                wanted: 1,
                ..
            },
        ) => assert!(e.is_retryable()),
        other => panic!("expected NotReplicated 0/1, got {other:?}"),
    }
    assert!(
        !c.inspect("replicated").await.unwrap().held,
        "fail-closed released it"
    );
    let kept = c
        .try_acquire("replicated", &open)
        .await
        .expect("fail-open keeps the lease");
    assert!(c.inspect("replicated").await.unwrap().held);
    replica.resume().unwrap();
    kept.release().await.unwrap();
}

#[tokio::test]
async fn acl_users_authenticate_from_the_url_and_a_wrong_password_is_a_clear_error() {
    let srv = RedisServer::builder()
        .acl_user("app", "s3cret-pw")
        .start()
        .unwrap();
    let c = LeaseClient::connect(&srv.url()).await.unwrap();
    let l = c.try_acquire("acl", &opts(2_000)).await.unwrap();
    l.release().await.unwrap();

    let wrong = format!("redis://app:hunter2x@127.0.0.1:{}/", srv.port());
    match LeaseClient::connect(&wrong).await {
        Err(
            e @ Error::Unauthorized {
                phase: Phase::Connect,
                ..
            },
        ) => {
            let msg = e.to_string();
            println!("wrong password: {msg}");
            assert!(
                msg.contains("WRONGPASS") || msg.to_lowercase().contains("password"),
                "{msg}"
            );
            assert!(
                !msg.contains("hunter2x"),
                "the password leaked into the message: {msg}"
            );
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    let anonymous = format!("redis://127.0.0.1:{}/", srv.port());
    // A server that wants credentials the URL does not give (NOAUTH) is a refusal too, not an
    // unreachable store.
    match LeaseClient::connect(&anonymous).await {
        Err(
            e @ Error::Unauthorized {
                phase: Phase::Connect,
                ..
            },
        ) => println!("no credentials: {e}"),
        other => panic!("expected a connect error, got {other:?}"),
    }
}

/// A redis-server that only speaks TLS, with a certificate from a fresh private CA; killed on drop.
struct TlsRedis {
    child: std::process::Child,
    port: u16,
    cert: Vec<u8>,
    _dir: tempfile::TempDir,
}

impl Drop for TlsRedis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tls_redis() -> Option<TlsRedis> {
    let dir = tempfile::tempdir().unwrap();
    let p = |f: &str| dir.path().join(f).to_string_lossy().into_owned();
    let p = &p;
    let openssl = |args: &[&str]| {
        std::process::Command::new("openssl")
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    };
    // A private CA and a server certificate it signed (web PKI refuses a CA as the end entity).
    std::fs::write(
        p("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    let made = openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-keyout",
        &p("ca.key"),
        "-out",
        &p("ca.pem"),
        "-subj",
        "/CN=leasehold test CA",
    ]) && openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        &p("key.pem"),
        "-out",
        &p("server.csr"),
        "-subj",
        "/CN=127.0.0.1",
    ]) && openssl(&[
        "x509",
        "-req",
        "-in",
        &p("server.csr"),
        "-CA",
        &p("ca.pem"),
        "-CAkey",
        &p("ca.key"),
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        &p("cert.pem"),
        "-extfile",
        &p("ext.cnf"),
    ]);
    if !made {
        return None;
    }
    let port = leasehold_testkit::free_port();
    let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".to_owned());
    let child = std::process::Command::new(bin)
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--tls-cert-file",
            &p("cert.pem"),
            "--tls-key-file",
            &p("key.pem"),
        ])
        .args([
            "--tls-ca-cert-file",
            &p("ca.pem"),
            "--tls-auth-clients",
            "no",
        ])
        .args(["--save", "", "--appendonly", "no", "--dir", &p("")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let cert = std::fs::read(p("ca.pem")).unwrap();
    let server = TlsRedis {
        child,
        port,
        cert,
        _dir: dir,
    };
    let end = Instant::now() + ms(5_000);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if Instant::now() > end {
            return None;
        }
        std::thread::sleep(ms(20));
    }
    Some(server)
}

#[tokio::test]
async fn tls_through_a_rediss_url_with_a_private_root_certificate() {
    let Some(srv) = tls_redis() else {
        println!("note: openssl or a TLS-capable redis-server is missing; skipping the TLS test");
        return;
    };
    let url = format!("rediss://127.0.0.1:{}/", srv.port);
    let c = LeaseClient::builder(&url)
        .tls_root_ca_pem(srv.cert.clone())
        .connect()
        .await
        .expect("TLS connect with the server's certificate as root");
    let l = c.try_acquire("tls", &opts(2_000)).await.unwrap();
    assert!(matches!(
        c.try_acquire("tls", &opts(2_000)).await,
        Err(Error::Busy { .. })
    ));
    l.release().await.unwrap();

    // Without trusting the certificate, the handshake is refused.
    let untrusted = LeaseClient::builder(&url)
        .connect_timeout(ms(1_000))
        .connect()
        .await;
    assert!(
        matches!(
            untrusted,
            Err(Error::Store {
                phase: Phase::Connect,
                ..
            })
        ),
        "{untrusted:?}"
    );
    // Plain text to a TLS port does not get through either.
    let plain = LeaseClient::builder(format!("redis://127.0.0.1:{}/", srv.port))
        .connect_timeout(ms(500))
        .response_timeout(ms(500))
        .connect()
        .await;
    assert!(
        matches!(
            plain,
            Err(Error::Store {
                phase: Phase::Connect,
                ..
            })
        ),
        "{plain:?}"
    );
    // A root certificate for a non-TLS URL, or one that is not PEM, is a configuration error.
    let misuse = LeaseClient::builder("redis://127.0.0.1:1/")
        .tls_root_ca_pem(srv.cert.clone())
        .connect()
        .await;
    assert!(
        matches!(
            misuse,
            Err(Error::Invalid {
                what: "tls root certificate",
                ..
            })
        ),
        "{misuse:?}"
    );
    let garbage = LeaseClient::builder(&url)
        .tls_root_ca_pem(b"not a certificate".to_vec())
        .connect()
        .await;
    assert!(
        matches!(
            garbage,
            Err(Error::Invalid { .. })
                | Err(Error::Store {
                    phase: Phase::Connect,
                    ..
                })
        ),
        "{garbage:?}"
    );
}

#[tokio::test]
async fn a_waiter_rides_out_a_redis_restart_within_its_bound() {
    let mut srv = server();
    let holder = client(&srv).await;
    let waiter = client(&srv).await;
    let _a = holder
        .try_acquire("through-restart", &opts(20_000))
        .await
        .unwrap();
    let w = tokio::spawn(async move {
        waiter
            .acquire("through-restart", &opts(5_000), ms(6_000))
            .await
    });
    tokio::time::sleep(ms(300)).await; // the waiter is blocked on the wake list
    srv.restart().unwrap(); // the lock is gone with the data; the waiter's connection drops
    let l = w
        .await
        .unwrap()
        .expect("the waiter gets the lease after the restart");
    assert!(l.fence().get() > 0);
}
