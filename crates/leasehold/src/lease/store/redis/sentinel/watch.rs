//! Following `+switch-master`: one sentinel listened to at a time, the next one when it goes silent;
//! the primary in use is dropped when the master it serves switched.
//!
//! Promise: while some sentinel answers, a `+switch-master` for our master drops the primary in
//! use, so the next request finds the new one; a sentinel that stops answering pings (each second)
//! is left for the next; every new subscription after the first looks the primary up again, so a
//! switch missed between subscriptions is caught then. The watch ends when the last handle on the
//! connection goes.
//!
//! Limit: a switch announced while no sentinel is listened to is not heard; each new subscription
//! after the first looks the primary up again instead.

use std::ops::ControlFlow;
use std::sync::Weak;
use std::time::Duration;

use futures::stream::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use redis::{RedisResult, Value};
use tokio_util::sync::CancellationToken;

use super::super::node;
use super::{Inner, SentinelConn};

/// How often the `+switch-master` subscription is checked for life.
const PING_EVERY: Duration = Duration::from_secs(1);
/// Pause before subscribing again after the subscription broke.
const RESUBSCRIBE_PAUSE: Duration = Duration::from_millis(200);

/// One sentinel's `+switch-master` announcements, and what reading them needs.
struct Subscription {
    /// Pings the sentinel, to notice it went silent.
    sink: PubSubSink,
    stream: PubSubStream,
    /// The master name whose switches concern us.
    master: String,
    /// Bound on the answer to a ping.
    response_timeout: Duration,
}

/// Listens for `+switch-master` on one sentinel after another (the next when one goes silent), and
/// drops the primary when the master it follows switched. Ends when the last handle goes.
pub(super) async fn watch(inner: Weak<Inner>, stop: CancellationToken) {
    let mut next = 0usize;
    let mut subscribed_before = false;
    loop {
        let Some(conn) = upgrade(&inner) else {
            return;
        };
        let sentinels = &conn.inner.url.sentinels;
        let sentinel = sentinels[next % sentinels.len()].clone();
        next += 1;
        let subscription = subscribe_in_time(&conn, &sentinel).await;
        if subscription.is_some() {
            if subscribed_before {
                look_again(&conn).await;
            }
            subscribed_before = true;
        }
        // The handle must not outlive this turn: the watch ends when the last other one goes.
        drop(conn);
        if let Some(subscription) = subscription {
            if listen(&inner, &stop, &sentinel, subscription)
                .await
                .is_break()
            {
                return;
            }
        }
        if pause(&stop).await {
            return;
        }
    }
}

/// A handle on the connection, while one is left.
fn upgrade(inner: &Weak<Inner>) -> Option<SentinelConn> {
    inner.upgrade().map(|inner| SentinelConn { inner })
}

/// A subscription to `sentinel`, bounded in time; `None` (logged when the sentinel refused) when
/// there is none.
async fn subscribe_in_time(conn: &SentinelConn, sentinel: &str) -> Option<Subscription> {
    let subscription = tokio::time::timeout(
        conn.inner.connect_timeout + conn.inner.response_timeout,
        subscribe(conn, sentinel),
    )
    .await;
    match subscription {
        Ok(Ok((sink, stream))) => Some(Subscription {
            sink,
            stream,
            master: conn.inner.url.master.clone(),
            response_timeout: conn.inner.response_timeout,
        }),
        Ok(Err(e)) => {
            tracing::debug!(sentinel, error = %e, "cannot subscribe to +switch-master");
            None
        }
        Err(_) => None,
    }
}

/// A switch announced while no sentinel was listened to would go unseen: look the primary up again,
/// and drop the one in use if the sentinels name another.
async fn look_again(conn: &SentinelConn) {
    let before = conn.current().map(|p| p.addr);
    if let Ok(found) = conn.lookup().await {
        if before.as_deref() != Some(&*found.addr) {
            if let Some(old) = before {
                conn.forget_addr(&old, "the sentinels name another primary");
            }
        }
    }
}

/// Reads the announcements of one subscription until the sentinel goes silent or the subscription
/// ends (`Continue`: subscribe to the next one), or the watch must end (`Break`).
async fn listen(
    inner: &Weak<Inner>,
    stop: &CancellationToken,
    sentinel: &str,
    subscription: Subscription,
) -> ControlFlow<()> {
    let Subscription {
        mut sink,
        mut stream,
        master,
        response_timeout,
    } = subscription;
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return ControlFlow::Break(()),
            msg = stream.next() => {
                let Some(msg) = msg else { return ControlFlow::Continue(()) };
                let Ok(payload) = msg.get_payload::<String>() else { continue };
                on_switch(inner, &master, &payload)?;
            }
            _ = ping.tick() => {
                let alive = tokio::time::timeout(response_timeout, sink.ping::<Value>()).await;
                if !matches!(alive, Ok(Ok(_))) {
                    tracing::debug!(sentinel, "the sentinel went silent; listening to the next one");
                    return ControlFlow::Continue(());
                }
            }
        }
    }
}

/// One announcement, `<master name> <old ip> <old port> <new ip> <new port>`: when it is about our
/// master, the old primary, and whatever we use if it is not the new one, must go. `Break` when the
/// last handle went.
fn on_switch(inner: &Weak<Inner>, master: &str, payload: &str) -> ControlFlow<()> {
    let parts: Vec<&str> = payload.split(' ').collect();
    let [name, old_ip, old_port, new_ip, new_port] = parts[..] else {
        return ControlFlow::Continue(());
    };
    if name != master {
        return ControlFlow::Continue(());
    }
    let Some(conn) = upgrade(inner) else {
        return ControlFlow::Break(());
    };
    tracing::info!(master = name, from = %format!("{old_ip}:{old_port}"), to = %format!("{new_ip}:{new_port}"), "sentinels switched the primary");
    if let Ok(port) = old_port.parse::<u16>() {
        conn.forget_addr(&node::addr(old_ip, port), "+switch-master");
    }
    if let (Some(p), Ok(port)) = (conn.current(), new_port.parse::<u16>()) {
        if *p.addr != node::addr(new_ip, port) {
            conn.forget(p.generation, "+switch-master");
        }
    }
    ControlFlow::Continue(())
}

/// A pub/sub connection to `sentinel`, subscribed to `+switch-master`.
async fn subscribe(conn: &SentinelConn, sentinel: &str) -> RedisResult<(PubSubSink, PubSubStream)> {
    let client = conn.inner.url.sentinel.client(sentinel)?;
    let mut pubsub = client.get_async_pubsub().await?;
    pubsub.subscribe("+switch-master").await?;
    Ok(pubsub.split())
}

/// Waits before the next subscription attempt; `true` when told to stop meanwhile.
async fn pause(stop: &CancellationToken) -> bool {
    tokio::select! {
        _ = stop.cancelled() => true,
        _ = tokio::time::sleep(RESUBSCRIBE_PAUSE) => false,
    }
}
