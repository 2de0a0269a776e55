//! A TCP proxy the test harness controls: it can delay traffic, cut every connection, swallow all
//! traffic without closing anything (a blackhole), and switch to another upstream (a failover). It
//! runs on the caller's Tokio runtime.
//!
//! Two kinds of partition, because clients meet them differently:
//! * [`cut`](Proxy::cut) closes connections and refuses new ones: the client sees a reset or EOF at
//!   once, the gentle half of a partition.
//! * [`blackhole`](Proxy::blackhole) keeps every connection open and delivers nothing either way: the
//!   client sees only silence, and learns of the partition from its own timeouts, if it has any.
//!
//! Limit, and what the blackhole does with the bytes: a real blackhole drops IP packets, and TCP
//! retransmits them, so once the path is back the byte stream resumes intact (unless an endpoint gave
//! up and closed first). The proxy does the same at the stream level: bytes sent during the window are
//! held, not discarded, and delivered in order when it ends, on the same connections. Discarding them
//! would hand the peers a stream with a hole in it, which TCP never does. What differs from a real
//! blackhole: a connection opened during the window is accepted by the proxy's kernel (nothing here can
//! ignore a SYN), so the client's `connect` succeeds and only then hears nothing; and delivery resumes
//! as soon as the window ends rather than at the sender's next retransmission.

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// What every connection of the proxy consults: the upstream, the delay, and whether it is cut.
#[derive(Debug)]
struct Control {
    /// Where new connections go (changed by [`Proxy::set_upstream`], e.g. after a failover).
    upstream: Mutex<SocketAddr>,
    /// One-way delay added to every chunk in both directions.
    delay: Mutex<Duration>,
    /// Bumped on every cut or reset: connections opened under an older epoch close themselves.
    epoch: watch::Sender<u64>,
    /// While true, new connections are accepted and closed at once.
    refusing: Mutex<bool>,
    /// While true, nothing is forwarded in either direction and new connections wait.
    blackhole: watch::Sender<bool>,
}

/// A fault-injecting TCP proxy on a free 127.0.0.1 port, stopped on drop.
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    control: Arc<Control>,
    acceptor: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy in front of `upstream` (e.g. `127.0.0.1:6379`). Needs a Tokio runtime.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let (epoch, _) = watch::channel(0u64);
        let (blackhole, _) = watch::channel(false);
        let control = Arc::new(Control {
            upstream: Mutex::new(upstream),
            delay: Mutex::new(Duration::ZERO),
            epoch,
            refusing: Mutex::new(false),
            blackhole,
        });
        let acceptor = tokio::spawn(accept_loop(listener, control.clone()));
        Ok(Self {
            addr,
            control,
            acceptor,
        })
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The port clients should connect to.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Adds `delay` to every chunk forwarded in either direction, on open and new connections
    /// (`Duration::ZERO` removes it). Order within a connection is kept.
    pub fn set_delay(&self, delay: Duration) {
        *lock(&self.control.delay) = delay;
    }

    /// The delay now in force.
    pub fn delay(&self) -> Duration {
        *lock(&self.control.delay)
    }

    /// Closes every open connection and refuses new ones until [`restore`](Self::restore).
    pub fn cut(&self) {
        *lock(&self.control.refusing) = true;
        self.control.epoch.send_modify(|e| *e += 1);
    }

    /// Keeps every connection open and forwards nothing in either direction until
    /// [`restore`](Self::restore); new connections are accepted but hear nothing either. What is sent
    /// meanwhile is held and delivered in order when the window ends (see the module docs for why).
    pub fn blackhole(&self) {
        self.control.blackhole.send_replace(true);
    }

    /// Ends a [`cut`](Self::cut) (connections are accepted again) or a
    /// [`blackhole`](Self::blackhole) (traffic flows again, the held bytes first).
    pub fn restore(&self) {
        *lock(&self.control.refusing) = false;
        self.control.blackhole.send_replace(false);
    }

    /// Whether the proxy is cut.
    pub fn is_cut(&self) -> bool {
        *lock(&self.control.refusing)
    }

    /// Whether the proxy is swallowing traffic.
    pub fn is_blackholed(&self) -> bool {
        *self.control.blackhole.borrow()
    }

    /// Closes every open connection but keeps accepting new ones (clients reconnect).
    pub fn reset_connections(&self) {
        self.control.epoch.send_modify(|e| *e += 1);
    }

    /// Sends new connections to `upstream` from now on (open ones keep their old upstream until reset).
    pub fn set_upstream(&self, upstream: SocketAddr) {
        *lock(&self.control.upstream) = upstream;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.acceptor.abort();
        self.control.epoch.send_modify(|e| *e += 1);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these plain-value locks cannot leave a torn value.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn accept_loop(listener: TcpListener, control: Arc<Control>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        if *lock(&control.refusing) {
            drop(client);
            continue;
        }
        let control = control.clone();
        tokio::spawn(async move {
            let mut epoch = control.epoch.subscribe();
            epoch.borrow_and_update();
            let control2 = control.clone();
            let connected = async move {
                let control = control2;
                // In a blackhole the upstream is not reached yet: the client's bytes wait in its
                // socket, as its SYN would wait for a retransmission.
                passable(&control).await;
                let upstream_addr = *lock(&control.upstream);
                let upstream = TcpStream::connect(upstream_addr).await.ok()?;
                let _ = client.set_nodelay(true);
                let _ = upstream.set_nodelay(true);
                let (cr, cw) = client.into_split();
                let (ur, uw) = upstream.into_split();
                let up = pump(cr, uw, control.clone());
                let down = pump(ur, cw, control.clone());
                tokio::select! {
                    _ = up => {}
                    _ = down => {}
                }
                Some(())
            };
            tokio::select! {
                _ = connected => {}
                _ = epoch.changed() => {}
            }
        });
    }
}

/// Returns once the proxy is not blackholed.
async fn passable(control: &Control) {
    let mut blackhole = control.blackhole.subscribe();
    // `wait_for` fails only if the sender is gone, and the sender lives in `control`.
    let _ = blackhole.wait_for(|on| !*on).await;
}

/// Copies `from` to `to`, holding each chunk for the delay in force when it was read, and holding
/// everything while the proxy is blackholed.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    control: Arc<Control>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let gate = control.clone();
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            if due > Instant::now() {
                tokio::time::sleep_until(due).await;
            }
            passable(&gate).await;
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    };
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    let due = Instant::now() + *lock(&control.delay);
                    if tx.send((due, buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    };
    // The writer ends after the reader dropped the sender and the queue drained.
    tokio::join!(reader, writer);
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn echo_server() -> SocketAddr {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if s.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        addr
    }

    async fn round_trip(addr: SocketAddr) -> io::Result<Duration> {
        let mut s = TcpStream::connect(addr).await?;
        let start = std::time::Instant::now();
        s.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await?;
        assert_eq!(&buf, b"ping");
        Ok(start.elapsed())
    }

    #[tokio::test]
    async fn forwards_delays_cuts_and_restores() {
        let upstream = echo_server().await;
        let proxy = Proxy::start(upstream).await.unwrap();
        round_trip(proxy.addr()).await.unwrap();

        proxy.set_delay(Duration::from_millis(150));
        let rtt = round_trip(proxy.addr()).await.unwrap();
        assert!(
            rtt >= Duration::from_millis(290),
            "delay not applied: {rtt:?}"
        );
        proxy.set_delay(Duration::ZERO);

        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        open.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        open.read_exact(&mut one).await.unwrap();
        proxy.cut();
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(5), open.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "an open connection must be closed by a cut");
        assert!(
            round_trip(proxy.addr()).await.is_err(),
            "a cut proxy must refuse"
        );

        proxy.restore();
        round_trip(proxy.addr()).await.unwrap();
    }

    /// An upstream that answers nothing and records what reached it.
    async fn recording_server() -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let record = seen.clone();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = l.accept().await.unwrap();
                let record = record.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    while let Ok(n @ 1..) = s.read(&mut buf).await {
                        lock(&record).extend_from_slice(&buf[..n]);
                    }
                });
            }
        });
        (addr, seen)
    }

    /// Reads one byte with a short bound: `None` on silence, `Some(Err)` or `Some(Ok(0))` when the
    /// connection was closed.
    async fn read_briefly(s: &mut TcpStream) -> Option<io::Result<usize>> {
        let mut one = [0u8; 1];
        tokio::time::timeout(Duration::from_millis(300), s.read(&mut one))
            .await
            .ok()
    }

    #[tokio::test]
    async fn blackhole_keeps_connections_open_and_silent_then_delivers_in_order() {
        let upstream = echo_server().await;
        let proxy = Proxy::start(upstream).await.unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        open.write_all(b"a").await.unwrap();
        let mut one = [0u8; 1];
        open.read_exact(&mut one).await.unwrap();

        proxy.blackhole();
        assert!(proxy.is_blackholed());
        // The client's write succeeds and nothing comes back: no reply, no EOF, no reset.
        open.write_all(b"bc").await.unwrap();
        assert!(
            read_briefly(&mut open).await.is_none(),
            "a blackholed connection must be silent, not answered or closed"
        );
        // A connection opened in the window is accepted but hears nothing either.
        let mut late = TcpStream::connect(proxy.addr()).await.unwrap();
        late.write_all(b"d").await.unwrap();
        assert!(read_briefly(&mut late).await.is_none());

        proxy.restore();
        // The same connections carry on, with what was sent during the window, in order.
        let mut two = [0u8; 2];
        open.read_exact(&mut two).await.unwrap();
        assert_eq!(&two, b"bc");
        late.read_exact(&mut one).await.unwrap();
        assert_eq!(&one, b"d");
        round_trip(proxy.addr()).await.unwrap();
    }

    #[tokio::test]
    async fn blackhole_reaches_neither_side() {
        let (upstream, seen) = recording_server().await;
        let proxy = Proxy::start(upstream).await.unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        open.write_all(b"before").await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while lock(&seen).len() < 6 {
            assert!(
                Instant::now() < deadline,
                "the upstream never got the bytes"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.blackhole();
        open.write_all(b"during").await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            lock(&seen).as_slice(),
            b"before",
            "nothing may reach the upstream while blackholed"
        );
        proxy.restore();
        while lock(&seen).len() < 12 {
            assert!(
                Instant::now() < deadline,
                "the held bytes were never delivered"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(lock(&seen).as_slice(), b"beforeduring");
    }

    #[tokio::test]
    async fn a_cut_closes_blackholed_connections_too() {
        let upstream = echo_server().await;
        let proxy = Proxy::start(upstream).await.unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        proxy.blackhole();
        proxy.cut();
        let mut rest = Vec::new();
        let closed =
            tokio::time::timeout(Duration::from_secs(5), open.read_to_end(&mut rest)).await;
        assert!(closed.is_ok(), "a cut must close a blackholed connection");
    }

    #[tokio::test]
    async fn switches_upstream() {
        let a = echo_server().await;
        let b = echo_server().await;
        let proxy = Proxy::start(a).await.unwrap();
        proxy.set_upstream(b);
        proxy.reset_connections();
        round_trip(proxy.addr()).await.unwrap();
    }
}
