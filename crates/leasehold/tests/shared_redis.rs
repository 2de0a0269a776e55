//! A Redis that others share or configured: replicas, evicting memory policies, keys under
//! leasehold's names that leasehold did not write, ACL users, key prefixes. Each case against a
//! private redis-server, set up the way a shared server is found in the wild.

mod lease_support;

use std::time::Duration;

use lease_support::*;
use leasehold::{Error, LeaseClient, LostReason};
use leasehold_testkit::{documented_acl_lines, RedisServer};

fn sync_cmd<T: redis::FromRedisValue>(srv: &RedisServer, args: &[&str]) -> redis::RedisResult<T> {
    let mut con = srv.connection().expect("sync connection");
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut con)
}

async fn connect_with(url: &str, allow_eviction: bool) -> leasehold::Result<LeaseClient> {
    LeaseClient::builder(url)
        .key_prefix("shared")
        .response_timeout(ms(500))
        .connect_timeout(ms(500))
        .store_options(
            leasehold::lease::store::redis::RedisOptions::default().allow_eviction(allow_eviction),
        )
        .connect()
        .await
}

fn misconfigured(r: leasehold::Result<LeaseClient>) -> (String, String, String) {
    match r {
        Err(Error::Misconfigured { what, found, fix }) => (what, found, fix),
        other => panic!("expected Misconfigured, got {other:?}"),
    }
}

#[tokio::test]
async fn a_replica_writable_or_not_is_refused_before_anything_is_written() {
    let primary = server();
    for writable in [false, true] {
        let mut b = RedisServer::builder().replica_of(primary.port());
        if writable {
            b = b.arg("--replica-read-only").arg("no");
        }
        let replica = b.start().unwrap();
        replica.wait_until_synced().unwrap();
        let (what, found, fix) = misconfigured(connect_with(&replica.url(), false).await);
        assert!(what.contains(&replica.port().to_string()), "{what}");
        assert!(found.contains("replica"), "{found}");
        assert!(
            fix.contains("primary") && fix.contains("redis-sentinel://"),
            "{fix}"
        );
        let keys: i64 = sync_cmd(&replica, &["DBSIZE"]).unwrap();
        assert_eq!(
            keys, 0,
            "nothing was written on the replica (writable: {writable})"
        );
        let scripts: Vec<i64> = sync_cmd(&primary, &["SCRIPT", "EXISTS", "x"]).unwrap();
        assert_eq!(scripts, [0]);
    }
    // The primary itself is fine.
    connect_with(&primary.url(), false).await.unwrap();
}

fn evicting_server(policy: &str) -> RedisServer {
    RedisServer::builder()
        .arg("--maxmemory")
        .arg("4mb")
        .arg("--maxmemory-policy")
        .arg(policy)
        .start()
        .unwrap()
}

#[tokio::test]
async fn an_evicting_policy_is_refused_by_default_and_accepted_when_opted_in() {
    for policy in ["allkeys-lru", "volatile-ttl"] {
        let srv = evicting_server(policy);
        let (what, found, fix) = misconfigured(connect_with(&srv.url(), false).await);
        assert!(what.contains(&srv.port().to_string()), "{what}");
        assert!(found.contains(policy), "{found}");
        assert!(
            fix.contains("noeviction") && fix.contains("--allow-eviction"),
            "{fix}"
        );
        let c = connect_with(&srv.url(), true).await.unwrap();
        c.try_acquire("opted-in", &opts(2_000))
            .await
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    // maxmemory 0 (no limit) never evicts, whatever the policy.
    let srv = RedisServer::builder()
        .arg("--maxmemory-policy")
        .arg("allkeys-lru")
        .start()
        .unwrap();
    connect_with(&srv.url(), false).await.unwrap();
}

/// Whether `c` takes (and gives back) a lease on `after` within 12 s: the renewal task's look
/// noticed a repaired policy.
async fn acquires_within_12s(c: &LeaseClient) -> bool {
    eventually(Duration::from_secs(12), async || {
        match c.try_acquire("after", &opts(2_000)).await {
            Ok(l) => {
                l.release().await.unwrap();
                true
            }
            Err(_) => false,
        }
    })
    .await
}

#[tokio::test]
async fn a_policy_changed_to_evicting_at_run_time_is_seen_and_refuses_new_leases() {
    let srv = server();
    let c = connect_with(&srv.url(), false).await.unwrap();
    c.try_acquire("before", &opts(2_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let _: () = sync_cmd(&srv, &["CONFIG", "SET", "maxmemory", "64mb"]).unwrap();
    let _: () = sync_cmd(&srv, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]).unwrap();
    // The renewal task looks every few seconds; it runs while the client lives.
    let refused = eventually(Duration::from_secs(12), async || {
        matches!(
            c.try_acquire("after", &opts(2_000)).await,
            Err(Error::Misconfigured { .. })
        )
    })
    .await;
    assert!(refused, "the changed policy was never noticed");
    let _: () = sync_cmd(&srv, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).unwrap();
    assert!(
        acquires_within_12s(&c).await,
        "the repaired policy was never noticed"
    );
}

/// Fills the server with keys without a TTL until it refuses (OOM) or has evicted something.
fn fill_until_evicting(srv: &RedisServer) -> u64 {
    let mut con = srv.connection().unwrap();
    let blob = "x".repeat(16 * 1024);
    for i in 0..100_000 {
        let r: redis::RedisResult<()> = redis::cmd("SET")
            .arg(format!("cache:{i}"))
            .arg(&blob)
            .query(&mut con);
        let info: String = redis::cmd("INFO").arg("stats").query(&mut con).unwrap();
        let evicted: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("evicted_keys:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        if evicted > 0 || r.is_err() {
            return evicted;
        }
    }
    0
}

#[tokio::test]
async fn an_evicted_lease_is_reported_lost_as_evicted_at_its_next_renewal() {
    // volatile-*: only keys with a TTL are evicted, and every lease key has one; the cache's keys
    // do not, so memory pressure takes the lease's keys first.
    let srv = evicting_server("volatile-lru");
    let c = connect_with(&srv.url(), true).await.unwrap();
    let lease = c
        .try_acquire("evicted", &opts(3_000))
        .await
        .expect("opted in");
    let evicted = fill_until_evicting(&srv);
    assert!(evicted > 0, "the server evicted nothing");
    let reason = tokio::time::timeout(Duration::from_secs(5), lease.lost().fired())
        .await
        .expect("lost at the next renewal");
    assert_eq!(reason, LostReason::Evicted);
    assert!(matches!(
        lease.release().await,
        Err(Error::LeaseLost {
            reason: LostReason::Evicted,
            ..
        })
    ));
}

#[tokio::test]
async fn keys_leasehold_did_not_write_are_named_and_left_alone() {
    let srv = server();
    let c = connect_with(&srv.url(), false).await.unwrap();
    let _: () = sync_cmd(&srv, &["HSET", "{shared:hashed}:lock", "owner", "someone"]).unwrap();
    let _: () = sync_cmd(&srv, &["SET", "{shared:worded}:fence", "seven"]).unwrap();
    let _: () = sync_cmd(&srv, &["SET", "{shared:queued}:queue", "a string"]).unwrap();
    let _: () = sync_cmd(&srv, &["SET", "{shared:counted}:permits", "many"]).unwrap();
    c.try_acquire("healthy", &opts(5_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let names = [
        ("hashed", "{shared:hashed}:lock", "hash"),
        ("worded", "{shared:worded}:fence", "seven"),
        ("queued", "{shared:queued}:queue", "string"),
        ("counted", "{shared:counted}:permits", "many"),
    ];
    let refused =
        |name: &str, key: &str, says: &str, r: leasehold::Result<leasehold::Lease>| match r {
            Err(Error::Misconfigured { what, found, fix }) => {
                assert!(what.contains(key), "{name}: {what}");
                assert!(found.contains(says), "{name}: {found}");
                assert!(fix.contains("prefix"), "{fix}");
            }
            other => panic!("{name}: {other:?}"),
        };
    for (name, key, says) in names {
        // Every acquire reads the lock and the record: a foreign one refuses them all. The queue and
        // a semaphore's count are read only by what uses them: a lock found free is taken without
        // them (nothing is written to them), a waiter that must queue or a semaphore is refused.
        let on_the_common_path = key.ends_with(":lock") || key.ends_with(":fence");
        for permits in [1, 3] {
            let o = leasehold::LeaseOptions::builder()
                .ttl(ms(2_000))
                .permits(permits)
                .build()
                .unwrap();
            // A waiting acquire too: it may reach the queue key.
            for wait in [Duration::ZERO, ms(300)] {
                let r = c.acquire(name, &o, wait).await;
                if on_the_common_path || permits > 1 {
                    refused(name, key, says, r);
                } else {
                    let held = r.unwrap_or_else(|e| panic!("{name}: {e}"));
                    // Someone waiting behind the holder must queue: refused, naming the key.
                    if key.ends_with(":queue") {
                        refused(name, key, says, c.acquire(name, &o, ms(300)).await);
                    }
                    held.release().await.unwrap();
                }
            }
        }
        match c.force_release(name).await {
            Err(Error::Misconfigured { what, .. }) => assert!(what.contains(key), "{what}"),
            other => panic!("force release of {name}: {other:?}"),
        }
        let info = c.inspect(name).await.unwrap();
        let problem = info.problem.expect("status says what is wrong");
        assert!(problem.contains(key) && problem.contains(says), "{problem}");
    }
    // Nothing was overwritten or deleted.
    let owner: Option<String> = sync_cmd(&srv, &["HGET", "{shared:hashed}:lock", "owner"]).unwrap();
    assert_eq!(owner.as_deref(), Some("someone"));
    assert_eq!(
        raw_get(&srv, "{shared:worded}:fence").as_deref(),
        Some("seven")
    );
    assert_eq!(
        raw_get(&srv, "{shared:queued}:queue").as_deref(),
        Some("a string")
    );
    assert_eq!(
        raw_get(&srv, "{shared:counted}:permits").as_deref(),
        Some("many")
    );
    // One bad name does not hide the others.
    let listed = c.list("*").await.unwrap();
    let healthy = listed.iter().find(|i| i.name == "healthy").expect("listed");
    assert!(healthy.problem.is_none() && healthy.fence.is_some());
    for (name, key, _) in names {
        let bad = listed.iter().find(|i| i.name == name).expect("listed");
        assert!(
            bad.problem.as_deref().unwrap_or("").contains(key),
            "{bad:?}"
        );
    }
}

/// Creates the documented user on `srv` (prefix `shared`, password `pw`) with `line`.
fn create_user(srv: &RedisServer, line: &str) {
    let line = line
        .replace(">PASSWORD", ">pw")
        .replace("~{leasehold:*", "~{shared:*");
    let mut cmd = redis::cmd("ACL");
    cmd.arg("SETUSER");
    for w in line.split_whitespace().skip(2) {
        cmd.arg(w);
    }
    let mut con = srv.connection().unwrap();
    let _: () = cmd.query(&mut con).unwrap();
}

#[tokio::test]
async fn the_documented_acl_user_can_do_everything_and_a_missing_command_is_named() {
    let lines = documented_acl_lines();
    assert_eq!(lines.len(), 3, "one server, Cluster, Redlock: {lines:?}");
    let srv = server();
    create_user(&srv, &lines[0]);
    let url = format!("redis://leasehold:pw@127.0.0.1:{}/", srv.port());
    let c = connect_with(&url, false).await.unwrap();
    let other = connect_with(&url, false).await.unwrap();
    // A lock: take, renew, hand over to a waiter, release; a semaphore; status, list, force.
    let a = c.try_acquire("acl-lock", &opts(1_000)).await.unwrap();
    let waiter = tokio::spawn(async move {
        let l = other
            .acquire("acl-lock", &opts(1_000), Duration::from_secs(5))
            .await
            .unwrap();
        l.release().await.unwrap();
    });
    tokio::time::sleep(ms(700)).await;
    a.renew().await.unwrap();
    a.release().await.unwrap();
    waiter.await.unwrap();
    let sem = leasehold::LeaseOptions::builder()
        .ttl(ms(1_000))
        .permits(2)
        .build()
        .unwrap();
    let p1 = c.try_acquire("acl-sem", &sem).await.unwrap();
    let p2 = c.try_acquire("acl-sem", &sem).await.unwrap();
    tokio::time::sleep(ms(500)).await;
    assert!(!p1.is_lost() && !p2.is_lost(), "permits renewed");
    p1.release().await.unwrap();
    p2.release().await.unwrap();
    assert!(c.inspect("acl-lock").await.unwrap().fence.is_some());
    assert_eq!(c.list("acl-*").await.unwrap().len(), 2);
    c.force_release("acl-lock").await.unwrap();

    // The same user without TIME (the issue's +@read +@write +@scripting user lacked it).
    let without_time = lines[0].replace(" +time", "");
    let srv2 = server();
    create_user(&srv2, &without_time);
    let url2 = format!("redis://leasehold:pw@127.0.0.1:{}/", srv2.port());
    match connect_with(&url2, false).await {
        Err(e @ Error::Denied { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains("TIME") && msg.contains("ACL SETUSER"), "{msg}");
        }
        other => panic!("expected Denied naming TIME, got {other:?}"),
    }
    // A user that may touch keys of another prefix only: refused at connect, naming the pattern.
    let srv3 = server();
    create_user(&srv3, &lines[0].replace("~{leasehold:*", "~{elsewhere:*"));
    let url3 = format!("redis://leasehold:pw@127.0.0.1:{}/", srv3.port());
    match connect_with(&url3, false).await {
        Err(e @ Error::Denied { .. }) => {
            assert!(!e.is_unavailable() && !e.is_retryable());
            assert!(e.to_string().contains("`{shared:*`"), "{e}");
        }
        other => panic!("expected Denied, got {other:?}"),
    }
}

/// Every command of the documented one-server line, taken away from a user of its own: connect
/// refuses before anything runs, naming that command (RENAME included: the release's command, which
/// a user without it used to meet only after its work, leaving the name busy for the whole TTL).
#[tokio::test]
async fn a_user_missing_any_listed_command_is_refused_at_connect_naming_it() {
    use leasehold::lease::store::redis::acl::{commands, Deployment};
    let line = &documented_acl_lines()[0];
    let srv = server();
    let mut checked = 0;
    for c in commands(Deployment::OneServer) {
        let user = format!("lacks-{}", c.name.replace('|', "-"));
        // `-name` where the line has `+name`: after `+@connection`, which grants WAIT too.
        let without = format!("{line} ")
            .replace(&format!(" +{} ", c.name), &format!(" -{} ", c.name))
            .replace("ACL SETUSER leasehold ", &format!("ACL SETUSER {user} "));
        assert!(
            without.contains(&format!(" -{} ", c.name)),
            "{} is in the line",
            c.name
        );
        create_user(&srv, &without);
        let url = format!("redis://{user}:pw@127.0.0.1:{}/", srv.port());
        let shown = c.name.to_ascii_uppercase();
        match connect_with(&url, false).await {
            Err(e @ Error::Denied { .. }) => {
                let msg = e.to_string();
                assert!(msg.to_ascii_uppercase().contains(&shown), "{shown}: {msg}");
                // The check names only what is missing (EVAL's refusal stops it first, and Redis
                // names EVAL itself).
                if c.name != "eval" {
                    assert!(msg.contains(&format!("+{}", c.name)), "{shown}: {msg}");
                }
            }
            other => panic!("without {shown}: expected Denied, got {other:?}"),
        }
        checked += 1;
    }
    assert!(checked >= 25, "{checked} commands checked");
    // Nothing was written by any of these connects.
    let mut con = srv.connection().unwrap();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    assert!(keys.is_empty(), "{keys:?}");
}

/// Redlock looks at its masters at the renewal task's cadence too: one master switched to an
/// evicting policy at run time refuses new leases (naming it) until it is set back.
#[tokio::test]
async fn a_redlock_master_turned_evicting_at_run_time_refuses_new_leases() {
    let masters: Vec<RedisServer> = (0..3).map(|_| server()).collect();
    let c = LeaseClient::redlock(masters.iter().map(|m| m.url()))
        .key_prefix("shared")
        .response_timeout(ms(500))
        .connect_timeout(ms(500))
        .connect()
        .await
        .unwrap();
    c.try_acquire("before", &opts(2_000))
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let turned = &masters[1];
    let _: () = sync_cmd(turned, &["CONFIG", "SET", "maxmemory", "64mb"]).unwrap();
    let _: () = sync_cmd(
        turned,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    )
    .unwrap();
    let mut named = String::new();
    let refused = eventually(Duration::from_secs(12), async || {
        match c.try_acquire("after", &opts(2_000)).await {
            Err(Error::Misconfigured { what, .. }) => {
                named = what;
                true
            }
            Ok(l) => {
                l.release().await.unwrap();
                false
            }
            Err(_) => false,
        }
    })
    .await;
    assert!(
        refused,
        "the changed policy on one master was never noticed"
    );
    assert!(named.contains(&turned.port().to_string()), "{named}");
    let _: () = sync_cmd(turned, &["CONFIG", "SET", "maxmemory-policy", "noeviction"]).unwrap();
    assert!(
        acquires_within_12s(&c).await,
        "the repaired policy was never noticed"
    );
}
