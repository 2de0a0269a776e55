//! Bounded footprint through the client: with a retention of three seconds, every key a name used
//! (locks, fences, queues, wake lists, given-up tokens, semaphores) carries an expiry and is gone after
//! it; a name used again afterwards still gets larger fences. (The 100,000-name version runs at the
//! script level, `a_hundred_thousand_names_leave_nothing_behind_after_the_retention`.)

mod lease_support;

use std::time::Duration;

use lease_support::*;
use leasehold::{Error, LeaseClient, LeaseOptions};
use leasehold_testkit::RedisServer;

/// Long enough for the test's 2,000 names to be taken before the first ones expire.
const RETENTION: Duration = Duration::from_secs(3);

async fn short_retention(srv: &RedisServer) -> LeaseClient {
    LeaseClient::builder(srv.url())
        .retention(RETENTION)
        .connect()
        .await
        .unwrap()
}

fn keys_and_ttls(srv: &RedisServer) -> Vec<(String, i64)> {
    let mut con = srv.connection().unwrap();
    let mut keys: Vec<String> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(&mut con)
            .unwrap();
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    keys.into_iter()
        .map(|k| {
            let t: i64 = redis::cmd("PTTL").arg(&k).query(&mut con).unwrap();
            (k, t)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_key_of_a_name_expires_after_the_retention() {
    let srv = RedisServer::builder()
        .arg("--hz")
        .arg("100")
        .start()
        .unwrap();
    let c = short_retention(&srv).await;
    let o = LeaseOptions::builder().ttl(ms(1_000)).build().unwrap();
    let mut first = None;
    let mut tasks = Vec::new();
    for batch in 0..20 {
        for i in 0..100 {
            let (c, o) = (c.clone(), o.clone());
            tasks.push(tokio::spawn(async move {
                let l = c
                    .try_acquire(&format!("order:{batch}:{i}"), &o)
                    .await
                    .unwrap();
                let f = l.fence();
                l.release().await.unwrap();
                f
            }));
        }
        for t in tasks.drain(..) {
            first.get_or_insert(t.await.unwrap());
        }
    }
    // Contended names: waiters handed the lease, one that gives up, a semaphore.
    for i in 0..5 {
        let name = format!("busy:{i}");
        let a = c.try_acquire(&name, &o).await.unwrap();
        let w = {
            let (c, o, name) = (c.clone(), o.clone(), name.clone());
            tokio::spawn(async move { c.acquire(&name, &o, ms(5_000)).await })
        };
        let quitter = {
            let (c, o, name) = (c.clone(), o.clone(), name.clone());
            tokio::spawn(async move { c.acquire(&name, &o, ms(300)).await })
        };
        assert!(matches!(
            quitter.await.unwrap(),
            Err(Error::WaitTimeout { .. })
        ));
        a.release().await.unwrap();
        w.await.unwrap().unwrap().release().await.unwrap();
    }
    let sem = LeaseOptions::builder()
        .ttl(ms(1_000))
        .permits(3)
        .build()
        .unwrap();
    let permits: Vec<_> = take_permits(&c, "pool", &sem, 3).await;
    for p in permits {
        p.release().await.unwrap();
    }
    let live = tokio::task::block_in_place(|| keys_and_ttls(&srv));
    assert!(live.len() >= 2_000, "{} keys", live.len());
    let forever: Vec<_> = live.iter().filter(|(_, t)| *t == -1).collect();
    assert!(forever.is_empty(), "keys without expiry: {forever:?}");
    assert!(
        live.iter().all(|(_, t)| *t <= RETENTION.as_millis() as i64),
        "a key outlives the retention: {:?}",
        live.iter().max_by_key(|(_, t)| *t)
    );
    let emptied = eventually(ms(20_000), async || {
        let n: i64 = redis::cmd("DBSIZE")
            .query(&mut srv.connection().unwrap())
            .unwrap();
        n == 0
    })
    .await;
    assert!(emptied, "keys left: {:?}", keys_and_ttls(&srv));
    // The first name again, its fence key long gone: the fence still grows (the time floor).
    let again = c.try_acquire("order:0:0", &o).await.unwrap();
    assert!(again.fence() > first.unwrap());
    again.release().await.unwrap();
}

async fn take_permits(
    c: &LeaseClient,
    name: &str,
    o: &LeaseOptions,
    n: usize,
) -> Vec<leasehold::Lease> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(c.acquire(name, o, ms(5_000)).await.unwrap());
    }
    out
}

#[tokio::test]
async fn a_retention_out_of_range_is_refused_before_connecting() {
    for bad in [
        Duration::ZERO,
        ms(999),
        Duration::from_secs(800 * 24 * 3600),
    ] {
        match LeaseClient::builder("redis://127.0.0.1:1/")
            .retention(bad)
            .connect()
            .await
        {
            Err(Error::Invalid {
                what: "retention", ..
            }) => {}
            other => panic!("{bad:?}: expected Invalid retention, got {other:?}"),
        }
    }
}
