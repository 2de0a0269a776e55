//! Changes pushed to observers ([`Store::changes`](crate::lease::store::contract::Store::changes)): one
//! pub/sub session per store, subscribed to the change channel of each observed name,
//! `{<prefix>:<name>}:changed` (a channel, not a key; on a Redis Cluster `PUBLISH` reaches every
//! node, so the session may be on any of them).
//!
//! Who publishes: note.lua, in the script that writes a leader's record (a new leader, a new
//! value); this store right after a release of a name whose note it wrote (a resignation) and after
//! a forced release. A notice only makes an observer read again, so a script or a release run twice
//! publishes twice to no harm.
//!
//! Promise: `changes` returns a stream only once its channel is subscribed (else `None`, and the
//! observer reads on its timer); every message on the channel then bumps its observers' notices;
//! when the session drops it is reopened and every observer is told to read again; the channel of a
//! name shares its keys' hash tag. Dropping the last observer of a channel unsubscribes it, without
//! I/O in the drop.
//!
//! Limit: a notice is lost while the session is down (then every observer is told to read again
//! once it is back), or when the user's ACL refuses `PUBLISH` or `SUBSCRIBE` on the channel (then the
//! observer is given no notices and reads on its timer). A lease that lapses is announced by nobody:
//! the observer reads at its known end.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::conn::{Nodes, Shared};
use crate::lease::store::contract::Changes;

/// Names whose note this store wrote and has not released, kept so that their release is announced;
/// past this many the set is emptied (a lease lost without a release stays in it), and a release
/// not announced is seen by observers at their safety interval.
const MAX_NOTED: usize = 10_000;

/// The change channel of a name: its keys' hash tag and `:changed`, as note.lua derives it from the
/// lock key.
pub(super) fn channel_of(lock_key: &str) -> String {
    let base = lock_key.strip_suffix("lock").unwrap_or(lock_key);
    format!("{base}changed")
}

/// The store's pub/sub session and its observers. Shared by the store's clones; the session ends
/// when the last clone is dropped.
pub(super) struct Feed {
    state: Arc<State>,
}

struct State {
    /// Where to open the session (the one server, the primary, any master of a cluster).
    nodes: Arc<Nodes>,
    connect_timeout: Duration,
    response_timeout: Duration,
    /// Requests sent, shared with the store.
    count: Arc<AtomicU64>,
    /// One sender per observed channel; what the session bumps on each message.
    senders: Mutex<HashMap<String, watch::Sender<u64>>>,
    /// The session's command half (`None`: no session, or it is being reopened). Subscribing and
    /// unsubscribing hold this lock, so that they happen in the order the map changed.
    sink: tokio::sync::Mutex<Option<PubSubSink>>,
    /// Names whose note this store wrote and has not released.
    noted: Mutex<HashSet<String>>,
    /// Ends the session's task with the store.
    stop: CancellationToken,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed")
            .field("observed", &lock(&self.state.senders).len())
            .finish_non_exhaustive()
    }
}

impl Drop for Feed {
    fn drop(&mut self) {
        self.state.stop.cancel();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Every change under these locks is one insert, remove or bump: a panic leaves them consistent.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn bump(s: &watch::Sender<u64>) {
    s.send_modify(|n| *n = n.wrapping_add(1));
}

impl Feed {
    pub(super) fn new(
        nodes: Arc<Nodes>,
        connect_timeout: Duration,
        response_timeout: Duration,
        count: Arc<AtomicU64>,
    ) -> Self {
        Feed {
            state: Arc::new(State {
                nodes,
                connect_timeout,
                response_timeout,
                count,
                senders: Mutex::default(),
                sink: tokio::sync::Mutex::new(None),
                noted: Mutex::default(),
                stop: CancellationToken::new(),
            }),
        }
    }

    /// Notices on `channel`, subscribed before this returns; `None` when the session cannot be
    /// opened or the subscription is refused (an ACL without the channel).
    pub(super) async fn changes(&self, channel: String) -> Option<Changes> {
        let state = &self.state;
        let rx = lock(&state.senders)
            .entry(channel.clone())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe();
        let guard = Unsubscribe {
            state: Arc::downgrade(state),
            channel: channel.clone(),
        };
        let mut sink = state.sink.lock().await;
        match sink.as_mut() {
            Some(s) => {
                match tokio::time::timeout(state.response_timeout, s.subscribe(&channel)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::debug!(error = %e, "SUBSCRIBE refused; observers read on their timer");
                        return None;
                    }
                    Err(_) => return None,
                }
            }
            None => {
                // `open` subscribes every observed channel, this one included.
                let (s, stream) = open(state).await?;
                *sink = Some(s);
                tokio::spawn(run(state.clone(), stream));
            }
        }
        Some(Changes::new(rx, guard))
    }

    /// A note of `name` was written by this store: its release will be announced.
    pub(super) fn noted(&self, name: &str) {
        let mut noted = lock(&self.state.noted);
        if noted.len() >= MAX_NOTED {
            noted.clear();
        }
        noted.insert(name.to_owned());
    }

    /// Which of `released` had a note written by this store (forgotten now: released).
    pub(super) fn take_noted<'a>(&self, released: impl Iterator<Item = &'a str>) -> Vec<String> {
        let mut noted = lock(&self.state.noted);
        if noted.is_empty() {
            return Vec::new();
        }
        released
            .filter_map(|n| noted.take(n))
            .collect::<Vec<String>>()
    }

    /// Publishes a change of each of `channels`, in one pipeline; a failure is only logged (the
    /// observers see the change at their safety interval).
    pub(super) async fn publish(&self, shared: &Shared, channels: &[String]) {
        if channels.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for c in channels {
            pipe.cmd("PUBLISH").arg(c).arg("changed").ignore();
        }
        let mut con = shared.clone();
        let sent = pipe.query_async::<()>(&mut con);
        match tokio::time::timeout(self.state.response_timeout, sent).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::debug!(error = %e, "PUBLISH of a change failed"),
            Err(_) => tracing::debug!("PUBLISH of a change timed out"),
        }
    }
}

/// Opens a session and subscribes every observed channel.
async fn open(state: &State) -> Option<(PubSubSink, PubSubStream)> {
    let opened = async {
        let client = state.nodes.client_for_any().await?;
        state.count.fetch_add(1, Ordering::Relaxed);
        let (mut sink, stream) = client.get_async_pubsub().await?.split();
        let channels: Vec<String> = lock(&state.senders).keys().cloned().collect();
        if !channels.is_empty() {
            state.count.fetch_add(1, Ordering::Relaxed);
            sink.subscribe(channels).await?;
        }
        redis::RedisResult::Ok((sink, stream))
    };
    match tokio::time::timeout(state.connect_timeout + state.response_timeout, opened).await {
        Ok(Ok(opened)) => Some(opened),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "no pub/sub session; observers read on their timer");
            None
        }
        Err(_) => None,
    }
}

/// Bumps the observers of each message's channel until the store is dropped; reopens the session
/// when it drops, and tells every observer to read again then (what was published meanwhile is
/// lost). Ends when nobody observes any more: the next observer opens a new session.
async fn run(state: Arc<State>, mut stream: PubSubStream) {
    loop {
        let msg = tokio::select! {
            () = state.stop.cancelled() => return,
            msg = stream.next() => msg,
        };
        if let Some(msg) = msg {
            if let Some(s) = lock(&state.senders).get(msg.get_channel_name()) {
                bump(s);
            }
            continue;
        }
        let mut sink = state.sink.lock().await;
        *sink = None;
        loop {
            {
                let mut senders = lock(&state.senders);
                senders.retain(|_, s| s.receiver_count() > 0);
                if senders.is_empty() {
                    return;
                }
            }
            let pause = Duration::from_millis(rand::random_range(100..=500));
            tokio::select! {
                () = state.stop.cancelled() => return,
                () = tokio::time::sleep(pause) => {}
            }
            if let Some((s, reopened)) = open(&state).await {
                *sink = Some(s);
                stream = reopened;
                lock(&state.senders).values().for_each(bump);
                break;
            }
        }
    }
}

/// Ends the subscription of a channel when its last observer is dropped. Does no I/O in place: the
/// `UNSUBSCRIBE` goes out from a task.
struct Unsubscribe {
    state: Weak<State>,
    channel: String,
}

impl Drop for Unsubscribe {
    fn drop(&mut self) {
        let Some(state) = self.state.upgrade() else {
            return;
        };
        {
            let mut senders = lock(&state.senders);
            match senders.get(&self.channel) {
                Some(s) if s.receiver_count() == 0 => {
                    senders.remove(&self.channel);
                }
                _ => return,
            }
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let channel = std::mem::take(&mut self.channel);
        runtime.spawn(async move {
            let mut sink = state.sink.lock().await;
            // Observed again meanwhile: that observer's SUBSCRIBE came after the map changed.
            if lock(&state.senders).contains_key(&channel) {
                return;
            }
            if let Some(s) = sink.as_mut() {
                let _ = tokio::time::timeout(state.response_timeout, s.unsubscribe(&channel)).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_channel_shares_the_hash_tag() {
        assert_eq!(
            channel_of("{leasehold:orders}:lock"),
            "{leasehold:orders}:changed"
        );
    }
}
