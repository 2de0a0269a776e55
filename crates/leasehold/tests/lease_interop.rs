//! Interop: the lock key holds just the token, so any `SET key token NX PX` lock on the same key
//! (redis-py's `Lock`, and the raw commands it sends) excludes leasehold and is excluded by it.

mod lease_support;

use std::process::Command;

use lease_support::*;
use leasehold::Error;

fn set_nx_px(srv: &leasehold_testkit::RedisServer, key: &str, token: &str, px: u64) -> bool {
    let mut con = srv.connection().unwrap();
    redis::cmd("SET")
        .arg(key)
        .arg(token)
        .arg("NX")
        .arg("PX")
        .arg(px)
        .query::<Option<String>>(&mut con)
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn raw_set_nx_px_locks_and_leasehold_exclude_each_other() {
    let srv = server();
    let c = client(&srv).await;
    let key = leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "shared")
        .unwrap()
        .lock;

    // A foreign lock first: leasehold is busy and reports the foreign TTL.
    assert!(set_nx_px(&srv, &key, "foreign-token", 800));
    match c.try_acquire("shared", &opts(5_000)).await {
        Err(Error::Busy {
            remaining: Some(r), ..
        }) => assert!(r <= ms(800)),
        other => panic!("expected Busy, got {other:?}"),
    }
    // Waiting leasehold gets it once the foreign lock expires.
    let l = c.acquire("shared", &opts(5_000), ms(5_000)).await.unwrap();
    // Now the foreign locker is excluded.
    assert!(!set_nx_px(&srv, &key, "foreign-token", 800));
    assert_eq!(raw_get(&srv, &key).as_deref(), Some(l.token()));
    l.release().await.unwrap();
    assert!(
        set_nx_px(&srv, &key, "foreign-token", 800),
        "free again after release"
    );
}

fn redis_py_available() -> bool {
    Command::new("python3")
        .args(["-c", "import redis"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Runs a python3 snippet with `PORT` and `KEY` bound; returns its stdout, trimmed.
fn python(port: u16, key: &str, body: &str) -> String {
    let script = format!(
        "import redis, time\nr = redis.Redis(host='127.0.0.1', port={port})\nKEY = {key:?}\n{body}"
    );
    let out = Command::new("python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "python failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

#[tokio::test]
async fn redis_py_lock_and_leasehold_exclude_each_other() {
    if !redis_py_available() {
        println!("note: redis-py is not installed (pip install redis); skipping the redis-py half, the raw SET NX PX test still ran");
        return;
    }
    let srv = server();
    let c = client(&srv).await;
    let key = leasehold::lease::store::redis::keys::LeaseKeys::new(c.key_prefix(), "py")
        .unwrap()
        .lock;

    // redis-py takes the lock (5 s timeout) and exits without releasing, as a crashed holder would.
    let token = python(
        srv.port(),
        &key,
        "l = r.lock(KEY, timeout=5, blocking=False)\nassert l.acquire()\nprint(l.local.token.decode())",
    );
    assert_eq!(raw_get(&srv, &key).as_deref(), Some(token.as_str()));
    assert!(matches!(
        c.try_acquire("py", &opts(5_000)).await,
        Err(Error::Busy { .. })
    ));
    // redis-py's own release (compare-and-delete by token) frees it for leasehold.
    let released = python(
        srv.port(),
        &key,
        &format!("l = r.lock(KEY)\nl.local.token = b{token:?}\nl.release()\nprint('released')"),
    );
    assert_eq!(released, "released");
    let l = c.try_acquire("py", &opts(5_000)).await.unwrap();

    // While leasehold holds it, redis-py's Lock cannot take it, and cannot release it either.
    let got = python(
        srv.port(),
        &key,
        "l = r.lock(KEY, timeout=5, blocking=False)\nprint(l.acquire())",
    );
    assert_eq!(got, "False");
    let foreign_release = python(
        srv.port(),
        &key,
        "l = r.lock(KEY)\nl.local.token = b'not-the-token'\ntry:\n    l.release()\n    print('released')\nexcept redis.exceptions.LockNotOwnedError:\n    print('not owned')",
    );
    assert_eq!(foreign_release, "not owned");
    assert_eq!(raw_get(&srv, &key).as_deref(), Some(l.token()));
    l.release().await.unwrap();
    let got = python(
        srv.port(),
        &key,
        "l = r.lock(KEY, timeout=5, blocking=False)\nprint(l.acquire())\nl.release()",
    );
    assert_eq!(got, "True", "free for redis-py after leasehold released");
}
