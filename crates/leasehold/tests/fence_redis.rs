//! Fenced writes to values in Redis, against the local redis-server (unique key names per test).

use leasehold::fence::{redis_fenced_set, FencedKey, RedisWrite};
use leasehold::{Error, Fence};
use redis::AsyncCommands;

async fn conn() -> redis::aio::MultiplexedConnection {
    let url = std::env::var("LEASEHOLD_TEST_REDIS_URL")
        .unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("redis must be reachable at 127.0.0.1:6379")
}

fn unique(name: &str) -> String {
    format!("leasehold-test:{name}:{:016x}", rand::random::<u64>())
}

#[tokio::test]
async fn stale_fence_is_refused_and_value_kept() {
    let mut c = conn().await;
    let key = FencedKey::new(&unique("set")).unwrap();
    assert!(key.data_key().starts_with('{') && key.fence_key().starts_with(key.data_key()));

    redis_fenced_set(&mut c, &key, Fence::new(10), RedisWrite::Set(b"ten"))
        .await
        .unwrap();
    redis_fenced_set(&mut c, &key, Fence::new(10), RedisWrite::Set(b"ten again"))
        .await
        .unwrap();
    let err = redis_fenced_set(&mut c, &key, Fence::new(9), RedisWrite::Set(b"nine"))
        .await
        .unwrap_err();
    match err {
        Error::StaleFence {
            presented, current, ..
        } => {
            assert_eq!((presented, current), (Fence::new(9), Fence::new(10)));
        }
        other => panic!("expected StaleFence, got {other:?}"),
    }
    let v: String = c.get(key.data_key()).await.unwrap();
    assert_eq!(v, "ten again");
    // Fences above 2^53 compare exactly (Lua doubles would not).
    let big = (1u64 << 60) + 1;
    redis_fenced_set(&mut c, &key, Fence::new(big), RedisWrite::Set(b"big"))
        .await
        .unwrap();
    let err = redis_fenced_set(&mut c, &key, Fence::new(big - 1), RedisWrite::Set(b"x"))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::StaleFence { .. }), "{err:?}");
    let _: () = c.del(&[key.data_key(), key.fence_key()]).await.unwrap();
}

#[tokio::test]
async fn fenced_hset_and_bad_input() {
    let mut c = conn().await;
    let key = FencedKey::new(&unique("hset")).unwrap();
    redis_fenced_set(
        &mut c,
        &key,
        Fence::new(2),
        RedisWrite::Hset(&[("a", b"1"), ("b", b"2")]),
    )
    .await
    .unwrap();
    assert!(redis_fenced_set(
        &mut c,
        &key,
        Fence::new(1),
        RedisWrite::Hset(&[("a", b"x")])
    )
    .await
    .is_err());
    let a: String = c.hget(key.data_key(), "a").await.unwrap();
    assert_eq!(a, "1");
    let err = redis_fenced_set(&mut c, &key, Fence::new(3), RedisWrite::Hset(&[]))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Invalid { .. }));
    for bad in ["", "a{b}", &"x".repeat(256)] {
        assert!(
            matches!(FencedKey::new(bad), Err(Error::Invalid { .. })),
            "{bad}"
        );
    }
    let _: () = c.del(&[key.data_key(), key.fence_key()]).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interleaved_writers_never_leave_a_stale_value() {
    use rand::seq::SliceRandom;
    let key = FencedKey::new(&unique("race")).unwrap();
    let mut fences: Vec<u64> = (1..=50).flat_map(|f| [f, f]).collect();
    fences.shuffle(&mut rand::rng());
    let mut tasks = Vec::new();
    for f in fences {
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let mut c = conn().await;
            let value = f.to_string();
            redis_fenced_set(
                &mut c,
                &key,
                Fence::new(f),
                RedisWrite::Set(value.as_bytes()),
            )
            .await
            .is_ok()
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap() as usize;
    }
    assert!(ok >= 1);
    let mut c = conn().await;
    let v: String = c.get(key.data_key()).await.unwrap();
    assert_eq!(v, "50");
    let _: () = c.del(&[key.data_key(), key.fence_key()]).await.unwrap();
}
