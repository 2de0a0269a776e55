//! Adversarial schedules against three real redis-servers, each client reaching them through proxies
//! of its own so that one client's view of a master can be cut or delayed while others see it.
//!
//! Every fence schedule runs the protocol and a weaker rule on the same faults: the protocol keeps
//! each new fence strictly above the fences before it, and the weaker rule does not, which shows
//! the test can see the bug the protocol prevents.
//!
//! Promise: the tests show that fences grow across differing majorities and across a master
//! restarted empty between two holders (where the weaker rule lets them go back); that a slow
//! master neither delays a grant nor touches the next holder; that renewal and release follow the
//! majority; that a failed attempt is undone where it took the lock; that a waiter is woken on a
//! master where the holder holds the lock; and that a lease is lost at its deadline when no
//! majority renews it.
//!
//! Limit: three masters on one machine, faults made by cutting or delaying proxies and restarting a
//! master; the masters' clocks are never stepped or skewed, and a holder's process is never paused,
//! so what those do is argued in the docs, not shown here.

use std::time::Duration;

use leasehold_testkit::{Proxy, RedisServer};

use super::*;
use crate::lease::options::LeaseOptions;
use crate::lease::store::contract::Settings;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Three private masters.
struct Masters {
    servers: Vec<RedisServer>,
}

/// One client's way to the masters: a proxy in front of each, and the store over them.
struct View {
    proxies: Vec<Proxy>,
    store: RedlockStore,
}

impl Masters {
    fn start() -> Masters {
        Masters {
            servers: (0..3)
                .map(|_| RedisServer::start().expect("start a private redis-server"))
                .collect(),
        }
    }

    async fn view(&self, prefix: &str, rule: FenceRule) -> View {
        let mut proxies = Vec::new();
        for s in &self.servers {
            let addr = format!("127.0.0.1:{}", s.port()).parse().unwrap();
            proxies.push(Proxy::start(addr).await.unwrap());
        }
        let urls: Vec<crate::url::StoreUrl> = proxies
            .iter()
            .map(|p| {
                crate::url::StoreUrl::parse(&format!("redis://127.0.0.1:{}/", p.port())).unwrap()
            })
            .collect();
        let store = RedlockStore::connect_with_rule(
            &urls,
            Settings {
                prefix: prefix.to_owned(),
                response_timeout: ms(300),
                connect_timeout: ms(300),
                ..Settings::default()
            },
            rule,
        )
        .await
        .expect("open the redlock store");
        View { proxies, store }
    }

    fn raw_get(&self, i: usize, key: &str) -> Option<String> {
        let mut con = self.servers[i].connection().unwrap();
        redis::cmd("GET").arg(key).query(&mut con).unwrap()
    }

    /// Waits until no master holds `key`: a release returns once a majority answered, and the
    /// last master's delete may still be on the wire.
    async fn wait_released_everywhere(&self, key: &str) {
        // 5 s: this runs beside the whole suite on a loaded 2-core machine.
        for _ in 0..500 {
            if (0..self.servers.len()).all(|i| self.raw_get(i, key).is_none()) {
                return;
            }
            tokio::time::sleep(ms(10)).await;
        }
        panic!("{key} is still held on some master 5 s after its release");
    }
}

impl View {
    /// Restores the proxy in front of master `i` and waits until this client reaches it again.
    async fn restore(&self, i: usize) {
        self.proxies[i].restore();
        for _ in 0..100 {
            if self.store.inner.nodes[i]
                .identify(ms(300), &self.store.inner.prefix)
                .await
                .is_ok()
            {
                return;
            }
            tokio::time::sleep(ms(20)).await;
        }
        panic!("master {i} did not come back");
    }
}

struct Try<'a> {
    name: &'a str,
    token: String,
    opts: LeaseOptions,
}

impl<'a> Try<'a> {
    fn new(name: &'a str, ttl: Duration) -> Self {
        Try {
            name,
            token: crate::lease::store::contract::new_token(),
            opts: LeaseOptions::builder().ttl(ttl).build().unwrap(),
        }
    }

    fn req(&self) -> Request<'_> {
        Request {
            name: self.name,
            token: &self.token,
            opts: &self.opts,
            wait: Duration::ZERO,
            step: 0,
        }
    }

    fn held(&self) -> Held<'_> {
        Held {
            name: self.name,
            token: &self.token,
            opts: &self.opts,
        }
    }

    async fn grant(&self, store: &RedlockStore) -> Grant {
        match store.acquire(&self.req()).await {
            Ok(Attempt::Taken(g)) => g,
            other => panic!("expected a grant, got {other:?}"),
        }
    }

    async fn release(&self, store: &RedlockStore) -> bool {
        store.release(&[self.held()]).await.unwrap()[0]
            .as_ref()
            .copied()
            .unwrap()
    }
}

/// Three holders one after the other, each reaching a different majority of the masters
/// (`{a, c}`, `{a, b}`, `{b, c}`). Returns their fences.
async fn differing_majorities(rule: FenceRule) -> Vec<u64> {
    let m = Masters::start();
    let v = m.view("dm", rule).await;
    let mut fences = Vec::new();
    for cut in [1, 2, 0] {
        v.proxies[cut].cut();
        let t = Try::new("job", ms(5_000));
        fences.push(t.grant(&v.store).await.fence.get());
        assert!(t.release(&v.store).await, "a majority released it");
        v.restore(cut).await;
    }
    fences
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fences_grow_across_differing_majorities() {
    let protocol = differing_majorities(FenceRule::PROTOCOL).await;
    assert!(
        protocol.windows(2).all(|w| w[1] > w[0]),
        "protocol: {protocol:?}"
    );
    // Without the time floor the argument is the intersection alone, and it holds.
    let counter = differing_majorities(FenceRule::COUNTER).await;
    assert_eq!(counter, vec![1, 2, 3], "confirmed counter");
    // Each master counting on its own, the largest one taken, nothing confirmed: the third holder
    // (majority {b, c}) never saw the second's fence, and repeats it.
    let per_master = differing_majorities(FenceRule::PER_MASTER).await;
    assert_eq!(per_master, vec![1, 2, 2], "the unsafe rule repeats a fence");
}

/// Holder 1 takes `{a, b}` (its way to `c` cut), master `b` restarts empty, holder 2 takes `{b, c}`:
/// two holders at once, as Redlock without delayed restarts allows. Returns both fences.
async fn restart_between_holders(rule: FenceRule) -> (u64, u64) {
    let mut m = Masters::start();
    let v1 = m.view("rs", rule).await;
    let v2 = m.view("rs", rule).await;
    // An earlier holder on all three gives every master a fence.
    let t0 = Try::new("job", ms(10_000));
    t0.grant(&v2.store).await;
    assert!(t0.release(&v2.store).await);
    // Holder 1 below reaches only a and b: both must have seen the release, not just a majority.
    m.wait_released_everywhere(&v2.store.keys("job").lock).await;
    v1.proxies[2].cut();
    let t1 = Try::new("job", ms(10_000));
    let f1 = t1.grant(&v1.store).await.fence.get();
    tokio::task::block_in_place(|| m.servers[1].restart()).unwrap();
    // Holder 2's connection to b broke with the restart; let it reconnect first.
    v2.restore(1).await;
    let t2 = Try::new("job", ms(10_000));
    let g2 = t2.grant(&v2.store).await;
    // Both hold it: the lock itself is lost to the restart, whatever the fence rule.
    assert_eq!(
        m.raw_get(0, &v1.store.keys("job").lock),
        Some(t1.token.clone())
    );
    assert_eq!(
        m.raw_get(2, &v2.store.keys("job").lock),
        Some(t2.token.clone())
    );
    (f1, g2.fence.get())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_empty_between_holders_keeps_the_fence_growing() {
    let (f1, f2) = restart_between_holders(FenceRule::PROTOCOL).await;
    assert!(f2 > f1, "protocol: {f2} must exceed {f1}");
    // The bare counter loses what the restarted master knew: the only master the two majorities
    // share forgot it, and the second holder repeats the first one's fence, so a resource that
    // accepts fences >= the last one lets the stale holder write.
    let (c1, c2) = restart_between_holders(FenceRule::COUNTER).await;
    assert!(
        c2 <= c1,
        "the unsafe rule should repeat or go back: {c1} then {c2}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_master_neither_delays_the_grant_nor_touches_the_next_holder() {
    let m = Masters::start();
    let v1 = m.view("sl", FenceRule::PROTOCOL).await;
    let v2 = m.view("sl", FenceRule::PROTOCOL).await;
    // Holder 1's messages to master c take 400 ms each way: longer than its bound per master.
    v1.proxies[2].set_delay(ms(400));
    let t1 = Try::new("job", ms(3_000));
    let started = Instant::now();
    let g1 = t1.grant(&v1.store).await;
    assert!(
        started.elapsed() < ms(700),
        "granted on a and b without waiting for c (800 ms a round trip): {:?}",
        started.elapsed()
    );
    // Released at once: a and b answer; the acquire and the release to c are still on the wire, in
    // that order.
    assert!(t1.release(&v1.store).await);
    let t2 = Try::new("job", ms(3_000));
    let g2 = t2.grant(&v2.store).await;
    assert!(g2.fence > g1.fence);
    // Holder 1's late acquire and late release reach c now: neither may touch holder 2's lock.
    tokio::time::sleep(ms(1_200)).await;
    let key = v2.store.keys("job").lock;
    for i in 0..3 {
        assert_eq!(m.raw_get(i, &key), Some(t2.token.clone()), "master {i}");
    }
    assert!(t2.release(&v2.store).await);

    // Every master slower than the validity: no grant, and nothing held afterwards.
    for p in &v1.proxies {
        p.set_delay(ms(150));
    }
    let t3 = Try::new("late", ms(200));
    let r = v1.store.acquire(&t3.req()).await;
    assert!(
        matches!(r, Err(Error::Timeout { .. }) | Err(Error::NoQuorum { .. })),
        "{r:?}"
    );
    tokio::time::sleep(ms(1_000)).await;
    let key = v1.store.keys("late").lock;
    for i in 0..3 {
        assert_eq!(m.raw_get(i, &key), None, "master {i} kept a lock");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renewal_and_release_follow_the_majority() {
    let m = Masters::start();
    let v = m.view("rn", FenceRule::PROTOCOL).await;
    let t = Try::new("job", ms(5_000));
    t.grant(&v.store).await;
    // One master gone: two renew, the verdict is yes.
    v.proxies[0].cut();
    assert!(v.store.renew(&[t.held()]).await.unwrap()[0]
        .as_ref()
        .copied()
        .unwrap());
    // Two gone: no majority either way, so no verdict (the holder's deadline decides).
    v.proxies[1].cut();
    let r = v.store.renew(&[t.held()]).await.unwrap();
    assert!(matches!(r[0], Err(Error::NoQuorum { .. })), "{r:?}");
    v.restore(0).await;
    v.restore(1).await;
    // Not ours on a majority (an operator forced it): not ours.
    let forced = v.store.force_release("job").await.unwrap();
    assert!(forced.evicted);
    let r = v.store.renew(&[t.held()]).await.unwrap();
    assert!(!r[0].as_ref().copied().unwrap());
    assert!(!t.release(&v.store).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_attempt_is_undone_where_it_took_the_lock() {
    let m = Masters::start();
    let holder = m.view("ud", FenceRule::PROTOCOL).await;
    let other = m.view("ud", FenceRule::PROTOCOL).await;
    // The holder has a and b (c cut for it); the other takes c, sees a and b busy, and gives c back.
    holder.proxies[2].cut();
    let h = Try::new("job", ms(5_000));
    h.grant(&holder.store).await;
    let o = Try::new("job", ms(5_000));
    match other.store.acquire(&o.req()).await {
        Ok(Attempt::Busy { remaining }) => {
            let r = remaining.expect("one holder with a majority: its time left");
            assert!(r <= ms(5_000) && r > ms(3_000), "{r:?}");
        }
        r => panic!("expected busy, got {r:?}"),
    }
    assert_eq!(m.raw_get(2, &other.store.keys("job").lock), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_is_woken_where_the_holder_holds_the_lock() {
    let m = Masters::start();
    let holder = m.view("wk", FenceRule::PROTOCOL).await;
    let waiter = m.view("wk", FenceRule::PROTOCOL).await;
    // The holder lacks the master waiters would block on by default: the waiter's first attempt takes
    // it, finds the other two busy, gives it back, and must block where the holder will push.
    let wake = waiter.store.wake_node().expect("a master is up");
    holder.proxies[wake].cut();
    let h = Try::new("job", ms(20_000));
    h.grant(&holder.store).await;
    let client = crate::LeaseClient::with_store(
        std::sync::Arc::new(waiter.store.clone()),
        "wk".to_owned(),
        ms(300),
    );
    let task = tokio::spawn(async move {
        let started = Instant::now();
        let o = LeaseOptions::builder().ttl(ms(20_000)).build().unwrap();
        let l = client.acquire("job", &o, ms(15_000)).await.unwrap();
        (started.elapsed(), l)
    });
    tokio::time::sleep(ms(300)).await;
    assert!(h.release(&holder.store).await);
    let (waited, l) = task.await.unwrap();
    assert!(
        waited < ms(5_000),
        "woken by the release, not by the 20 s expiry: {waited:?}"
    );
    l.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_is_lost_at_its_deadline_without_a_majority_renewal() {
    let m = Masters::start();
    let v = m.view("dl", FenceRule::PROTOCOL).await;
    let client = crate::LeaseClient::with_store(
        std::sync::Arc::new(v.store.clone()),
        "dl".to_owned(),
        ms(300),
    );
    let o = LeaseOptions::builder().ttl(ms(600)).build().unwrap();
    let lease = client.try_acquire("job", &o).await.unwrap();
    // One master gone: renewals still reach a majority, over several TTLs.
    v.proxies[0].cut();
    tokio::time::sleep(ms(1_500)).await;
    assert!(!lease.is_lost(), "two of three renew it");
    // Two gone: no renewal reaches a majority, and the deadline (sent + TTL - drift) fires.
    v.proxies[1].cut();
    let cut_at = Instant::now();
    let reason = tokio::time::timeout(ms(2_000), lease.lost().fired())
        .await
        .expect("the lost signal fires");
    assert_eq!(reason, crate::LostReason::DeadlinePassed);
    assert!(
        cut_at.elapsed() < ms(1_500),
        "within one TTL of the last renewal, plus scheduling slack"
    );
}
