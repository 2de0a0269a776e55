//! Direct connections for one server's single requests: the calling task writes its command and
//! reads the reply itself, with no connection task between them. A multiplexed connection hands
//! each request to its task and the reply back (two wake-ups of other tasks, often on other
//! threads, per request); on an uncontended acquire + release that hand-off is most of the client's
//! time. Direct connections are kept in a small pool: a request takes an idle one, or opens one while
//! fewer than [`MAX_DIRECT`] are open, or else goes on the multiplexed connection, as does every
//! pipeline and every request when a direct connection cannot be opened.
//!
//! The waits' dedicated connections to one server are direct too ([`Target::connect`], kept by
//! `conn::BlockingPool`): the waiter sends its acquire + `BLPOP` pipeline and reads the hand-over's
//! reply itself ([`DirectConn::pipeline`]), with no bound of their own (the caller bounds each).
//!
//! Promise: the same replies and errors as the multiplexed connection for a single command (a
//! server error is a `Value::ServerError`; a broken connection an I/O error; a reply later than the
//! response timeout the same timed-out I/O error). A connection goes back to the pool only after its
//! reply was read whole: one whose request timed out, failed or was cancelled is dropped, as a
//! dedicated connection is, since a reply may still be due.
//!
//! An idle connection the server closed (its idle `timeout`, a restart) is seen when it is taken
//! from the pool and dropped there, before a request is sent on it.
//!
//! Opening a connection (and its `AUTH`/`SELECT`) is not counted as a request, as the multiplexed
//! connection's reconnects are not.
//!
//! Limit: plain TCP and RESP2 only (TLS, a Unix socket or RESP3 use the multiplexed connection for
//! everything); the setup is `AUTH` and `SELECT` as the URL asks, nothing else (no client name). At
//! most [`MAX_DIRECT`] connections per client for single requests, on top of the multiplexed one
//! and the waits' dedicated ones.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{Cmd, ConnectionAddr, ProtocolVersion, RedisError, RedisResult, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Most direct connections open at once per client (idle or in use). Past it a request goes on the
/// multiplexed connection, which pipelines any number.
pub(crate) const MAX_DIRECT: usize = 8;

/// Where direct connections go and how they are set up: one server's address, and what a new
/// connection sends first.
#[derive(Debug)]
pub(crate) struct Target {
    /// `host:port`.
    addr: String,
    /// What a new connection sends first (`AUTH`, `SELECT`), one command after the other.
    setup: Vec<Cmd>,
    /// The database `setup` selects.
    db: i64,
    connect_timeout: Duration,
}

/// The direct connections of one client to one server.
pub(crate) struct DirectPool {
    /// The server.
    target: Arc<Target>,
    response_timeout: Duration,
    /// Idle connections, most recently used last.
    idle: Mutex<Vec<DirectConn>>,
    /// Connections open (idle, in use, or being opened).
    open: Arc<AtomicUsize>,
}

impl std::fmt::Debug for DirectPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirectPool")
            .field("open", &self.open.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// One direct connection. Dropping it closes it and frees its place in the pool.
pub(crate) struct DirectConn {
    stream: TcpStream,
    /// The request being written.
    out: Vec<u8>,
    /// The reply read so far.
    input: Vec<u8>,
    /// The driver's parser, given one whole reply at a time.
    parser: redis::Parser,
    /// The database it selected.
    db: i64,
    open: Arc<AtomicUsize>,
}

impl Drop for DirectConn {
    fn drop(&mut self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Target {
    /// `client`'s server, or `None` when its connections cannot be direct (TLS, a Unix socket,
    /// RESP3).
    pub(crate) fn for_client(client: &redis::Client, connect_timeout: Duration) -> Option<Self> {
        let info = client.get_connection_info();
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return None;
        };
        let settings = info.redis_settings();
        if settings.protocol() != ProtocolVersion::RESP2 {
            return None;
        }
        let mut setup = Vec::new();
        if let Some(password) = settings.password() {
            let mut auth = redis::cmd("AUTH");
            if let Some(user) = settings.username() {
                auth.arg(user);
            }
            auth.arg(password);
            setup.push(auth);
        }
        if settings.db() != 0 {
            let mut select = redis::cmd("SELECT");
            select.arg(settings.db());
            setup.push(select);
        }
        let addr = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Some(Target {
            addr,
            setup,
            db: settings.db(),
            connect_timeout,
        })
    }

    /// Opens a connection, counted in `open` (its drop uncounts it), within the connect timeout
    /// (the setup's replies within it too). A failure or a cancellation uncounts it.
    pub(crate) async fn connect(&self, open: Arc<AtomicUsize>) -> RedisResult<DirectConn> {
        open.fetch_add(1, Ordering::AcqRel);
        self.connect_in(Reserved(open)).await
    }

    async fn connect_in(&self, reserved: Reserved) -> RedisResult<DirectConn> {
        tokio::time::timeout(self.connect_timeout, async {
            let stream = TcpStream::connect(&self.addr).await?;
            stream.set_nodelay(true)?;
            // The connection holds the place from here (its drop frees it).
            let open = reserved.0.clone();
            std::mem::forget(reserved);
            let mut con = DirectConn {
                stream,
                out: Vec::with_capacity(256),
                input: Vec::with_capacity(256),
                parser: redis::Parser::new(),
                db: self.db,
                open,
            };
            for cmd in &self.setup {
                if let Value::ServerError(e) = con.request(cmd).await? {
                    return Err(e.into());
                }
            }
            Ok(con)
        })
        .await
        .map_err(|_| timed_out())?
    }
}

impl DirectPool {
    /// A pool of connections to `target`, each request bounded by `response_timeout`.
    pub(crate) fn new(target: Arc<Target>, response_timeout: Duration) -> Self {
        DirectPool {
            target,
            response_timeout,
            idle: Mutex::new(Vec::new()),
            open: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// An idle connection, else a place reserved to open one, else [`Take::Full`].
    pub(crate) fn take(&self) -> Take {
        loop {
            let Some(con) = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop() else {
                break;
            };
            if con.still_open() {
                return Take::Idle(con);
            }
        }
        let mut n = self.open.load(Ordering::Acquire);
        while n < MAX_DIRECT {
            match self
                .open
                .compare_exchange_weak(n, n + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Take::Open(Reserved(self.open.clone())),
                Err(now) => n = now,
            }
        }
        Take::Full
    }

    /// Opens a connection in the place [`take`](Self::take) reserved; a failure (or a cancellation)
    /// frees the place.
    pub(crate) async fn open(&self, reserved: Reserved) -> RedisResult<DirectConn> {
        self.target.connect_in(reserved).await
    }

    /// Sends `cmd` on `con` and reads its reply within the response timeout; `con` goes back to the
    /// pool only when the reply was read whole.
    pub(crate) async fn request(&self, mut con: DirectConn, cmd: &Cmd) -> RedisResult<Value> {
        let reply = tokio::time::timeout(self.response_timeout, con.request(cmd))
            .await
            .map_err(|_| timed_out())??;
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(con);
        Ok(reply)
    }

    /// Drops every idle connection (the server may have restarted).
    pub(crate) fn clear(&self) {
        self.idle.lock().unwrap_or_else(|p| p.into_inner()).clear();
    }
}

/// What [`DirectPool::take`] found.
pub(crate) enum Take {
    /// An idle connection.
    Idle(DirectConn),
    /// None idle, and a place reserved to open one ([`DirectPool::open`]).
    Open(Reserved),
    /// None idle and no place: use the multiplexed connection.
    Full,
}

/// A place reserved in the pool's count, freed when dropped before a connection takes it over.
pub(crate) struct Reserved(Arc<AtomicUsize>);

impl Drop for Reserved {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn timed_out() -> RedisError {
    std::io::Error::from(std::io::ErrorKind::TimedOut).into()
}

impl DirectConn {
    /// Whether the server has not closed this idle connection (a server with an idle `timeout`
    /// closes it; so does a restart). Nothing is due on an idle connection, so anything readable is
    /// the close (or garbage): either way it is dropped. Costs nothing while the socket has not
    /// become readable.
    pub(crate) fn still_open(&self) -> bool {
        let mut byte = [0u8; 1];
        matches!(self.stream.try_read(&mut byte), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
    }

    /// The database it selected.
    pub(crate) fn db(&self) -> i64 {
        self.db
    }

    /// Sends `cmd` and reads its reply, with no bound of its own (the caller bounds it, and drops
    /// the connection if the bound passes).
    pub(crate) async fn request(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        self.out.clear();
        cmd.write_packed_command(&mut self.out);
        self.stream.write_all(&self.out).await?;
        self.read_reply().await
    }

    /// Sends `pipeline` whole and reads a reply per command sent (a transaction's `MULTI` and
    /// `EXEC` included: `offset + count`), returning `count` of them from `offset`, as the
    /// multiplexed connection does; server errors stay values. No bound of its own, as
    /// [`request`](Self::request).
    pub(crate) async fn pipeline(
        &mut self,
        pipeline: &redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        self.stream
            .write_all(&pipeline.get_packed_pipeline())
            .await?;
        let total = offset + count;
        self.input.clear();
        let mut ends = Vec::with_capacity(total);
        let mut at = 0;
        while ends.len() < total {
            match reply_end(&self.input, at) {
                Some(end) => {
                    ends.push(end);
                    at = end;
                }
                None => self.read_more().await?,
            }
        }
        if at != self.input.len() {
            return Err(bytes_past());
        }
        let mut out = Vec::with_capacity(count);
        let mut start = 0;
        for (i, end) in ends.into_iter().enumerate() {
            if i >= offset {
                out.push(self.value(start, end)?);
            }
            start = end;
        }
        Ok(out)
    }

    /// Reads what has arrived onto the input; the server closing the connection is an error.
    async fn read_more(&mut self) -> RedisResult<()> {
        self.input.reserve(256);
        if self.stream.read_buf(&mut self.input).await? == 0 {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        Ok(())
    }

    /// The whole reply framed at `start..end` of the input.
    fn value(&mut self, start: usize, end: usize) -> RedisResult<Value> {
        let mut at = start;
        if let Some(v) = plain_value(&self.input[..end], &mut at).filter(|_| at == end) {
            return Ok(v);
        }
        // An error reply, or anything unusual: the driver's parser, which builds its errors.
        self.parser.parse_value(&self.input[start..end])
    }

    /// Reads one whole reply (one request is in flight at a time, and on RESP2 without
    /// subscriptions the server sends nothing it was not asked for: bytes past the reply are an
    /// error, and the connection is dropped).
    async fn read_reply(&mut self) -> RedisResult<Value> {
        self.input.clear();
        loop {
            self.read_more().await?;
            let Some(end) = reply_end(&self.input, 0) else {
                continue;
            };
            if end != self.input.len() {
                return Err(bytes_past());
            }
            return self.value(0, end);
        }
    }
}

fn bytes_past() -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        "bytes past the reply on a direct connection",
    ))
}

/// Where the RESP2 reply that starts at `at` ends (one past its last byte), or `None` when `buf`
/// does not hold all of it yet. It only frames: a line it cannot read ends the reply there, and the
/// parser then says what is wrong with it.
fn reply_end(buf: &[u8], at: usize) -> Option<usize> {
    reply_end_at_depth(buf, at, 0)
}

/// Arrays nested deeper than this are not followed (the framing ends at their line, and the reply
/// is refused as bytes past it); the scripts' replies are at most two deep.
const MAX_DEPTH: usize = 16;

fn reply_end_at_depth(buf: &[u8], at: usize, depth: usize) -> Option<usize> {
    let line = at + buf.get(at..)?.windows(2).position(|w| w == b"\r\n")?;
    let after = line + 2;
    let number = || -> Option<i64> { std::str::from_utf8(&buf[at + 1..line]).ok()?.parse().ok() };
    match buf[at] {
        b'$' => match number() {
            Some(len) if len >= 0 => {
                let end = after + usize::try_from(len).ok()? + 2;
                (buf.len() >= end).then_some(end)
            }
            _ => Some(after),
        },
        b'*' => match number() {
            Some(count) if count > 0 && depth < MAX_DEPTH => {
                let mut end = after;
                for _ in 0..count {
                    end = reply_end_at_depth(buf, end, depth + 1)?;
                }
                Some(end)
            }
            _ => Some(after),
        },
        _ => Some(after),
    }
}

/// The common replies (`+`, `:`, `$`, `*` of those) as the driver's parser reads them, without its
/// set-up (which zeroes an 8 KiB buffer per reply); `None` for anything else (an error reply, a
/// malformed one), which the driver's parser then reads. `buf` holds one whole reply.
fn plain_value(buf: &[u8], at: &mut usize) -> Option<Value> {
    plain_value_at_depth(buf, at, 0)
}

fn plain_value_at_depth(buf: &[u8], at: &mut usize, depth: usize) -> Option<Value> {
    let kind = *buf.get(*at)?;
    let line_end = *at + buf[*at..].windows(2).position(|w| w == b"\r\n")?;
    let line = std::str::from_utf8(&buf[*at + 1..line_end]).ok()?;
    *at = line_end + 2;
    match kind {
        b'+' if line == "OK" => Some(Value::Okay),
        b'+' => Some(Value::SimpleString(line.to_owned())),
        b':' => line.trim().parse().ok().map(Value::Int),
        b'$' => {
            let len: i64 = line.trim().parse().ok()?;
            let Ok(len) = usize::try_from(len) else {
                return Some(Value::Nil);
            };
            let bytes = buf.get(*at..*at + len)?.to_vec();
            if buf.get(*at + len..*at + len + 2)? != b"\r\n" {
                return None;
            }
            *at += len + 2;
            Some(Value::BulkString(bytes))
        }
        b'*' if depth < MAX_DEPTH => {
            let count: i64 = line.trim().parse().ok()?;
            let Ok(count) = usize::try_from(count) else {
                return Some(Value::Nil);
            };
            let mut items = Vec::with_capacity(count.min(64));
            for _ in 0..count {
                items.push(plain_value_at_depth(buf, at, depth + 1)?);
            }
            Some(Value::Array(items))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{plain_value, reply_end, Target};
    use redis::Value;
    use std::sync::Arc;
    use std::time::Duration;

    /// A pipeline on a direct connection gives, item for item, what the multiplexed connection
    /// gives for it: plain replies, a server error in the middle, a `BLPOP` that timed out (nil)
    /// and one that popped, and a transaction (its `EXEC` reply only); a reply split over many
    /// reads (a value larger than one read) is framed whole.
    #[tokio::test]
    async fn pipelines_read_as_the_multiplexed_connection_reads_them() {
        let srv = leasehold_testkit::RedisServer::start().expect("a private redis-server");
        let client = redis::Client::open(srv.url()).unwrap();
        let mut multiplexed = client.get_multiplexed_async_connection().await.unwrap();
        let target = Target::for_client(&client, Duration::from_secs(1)).unwrap();
        let open = Arc::default();
        let mut direct = target.connect(Arc::clone(&open)).await.unwrap();
        assert_eq!(open.load(std::sync::atomic::Ordering::Relaxed), 1);

        let big = "x".repeat(200_000);
        let mut plain = redis::pipe();
        plain
            .cmd("SET")
            .arg("k")
            .arg(&big)
            .cmd("GET")
            .arg("k")
            .cmd("INCR")
            .arg("k")
            .cmd("RPUSH")
            .arg("list")
            .arg("a")
            .cmd("BLPOP")
            .arg("empty")
            .arg("0.05")
            .cmd("BLPOP")
            .arg("list")
            .arg("0.05")
            .cmd("HGETALL")
            .arg("nothing");
        let mut atomic = redis::pipe();
        atomic
            .atomic()
            .cmd("SET")
            .arg("t")
            .arg(1)
            .cmd("INCR")
            .arg("t");
        for (pipe, offset, count) in [(&plain, 0, plain.len()), (&atomic, atomic.len() + 1, 1)] {
            let d = direct.pipeline(pipe, offset, count).await.unwrap();
            let m = multiplexed
                .send_packed_commands(pipe, offset, count)
                .await
                .unwrap();
            assert_eq!(d.len(), count);
            assert_eq!(format!("{d:?}"), format!("{m:?}"));
        }
        // The error reply is the parser's, as the multiplexed connection's is.
        let d = direct.pipeline(&plain, 0, plain.len()).await.unwrap();
        assert!(matches!(&d[2], Value::ServerError(_)), "{:?}", d[2]);
        assert_eq!(d[4], Value::Nil);
        // Still in step: a single request after the pipelines reads its own reply.
        let pong = direct.request(&redis::cmd("PING")).await.unwrap();
        assert_eq!(pong, Value::SimpleString("PONG".into()));
        drop(direct);
        assert_eq!(open.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    /// The plain reader gives what the driver's parser gives, or leaves the reply to it.
    #[test]
    fn plain_replies_read_as_the_driver_reads_them() {
        let replies: [&[u8]; 12] = [
            b"+OK\r\n",
            b"+QUEUED\r\n",
            b":-7\r\n",
            b"$-1\r\n",
            b"$0\r\n\r\n",
            b"$4\r\na\r\nb\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*5\r\n:1\r\n$2\r\nab\r\n*1\r\n+x\r\n$-1\r\n+OK\r\n",
            b"-NOSCRIPT No matching script\r\n",
            b"*2\r\n:1\r\n-ERR inside\r\n",
            b"$2\r\nabXY",
        ];
        for reply in replies {
            let mut at = 0;
            let plain = plain_value(reply, &mut at).filter(|_| at == reply.len());
            let driver = redis::Parser::new().parse_value(reply);
            match plain {
                Some(v) => assert_eq!(Ok(v), driver.map_err(|e| e.to_string()), "{reply:?}"),
                None => assert!(
                    reply.contains(&b'-') || driver.is_err(),
                    "left to the driver: {reply:?}"
                ),
            }
        }
    }

    #[test]
    fn frames_whole_replies_and_waits_for_the_rest() {
        let whole: [&[u8]; 8] = [
            b"+OK\r\n",
            b"-ERR wrong\r\n",
            b":42\r\n",
            b"$-1\r\n",
            b"$4\r\na\r\nb\r\n",
            b"*-1\r\n",
            b"*0\r\n",
            b"*3\r\n:1\r\n$2\r\nab\r\n*1\r\n+x\r\n",
        ];
        for reply in whole {
            assert_eq!(reply_end(reply, 0), Some(reply.len()), "{reply:?}");
            // Every strict prefix is incomplete (a bulk string may hold CRLF).
            for cut in 0..reply.len() {
                assert_eq!(reply_end(&reply[..cut], 0), None, "{:?}", &reply[..cut]);
            }
            // A reply followed by more: the end of the first.
            let mut two = reply.to_vec();
            two.extend_from_slice(b"+OK\r\n");
            assert_eq!(reply_end(&two, 0), Some(reply.len()));
        }
    }

    #[test]
    fn deep_nesting_is_refused_not_followed() {
        let deep = b"*1\r\n".repeat(100_000);
        // Framing stops at the bound; the reply is then "bytes past the reply".
        assert_eq!(reply_end(&deep, 0), Some(4 * (super::MAX_DEPTH + 1)));
        let mut at = 0;
        assert_eq!(plain_value(&deep, &mut at), None);
    }

    #[test]
    fn garbage_ends_at_its_line_and_the_parser_refuses_it() {
        for garbage in [
            &b"$abc\r\n"[..],
            b"?what\r\n",
            b"*x\r\n",
            b"$99999999999999999999\r\n",
        ] {
            let end = reply_end(garbage, 0).expect("framed at the line");
            assert_eq!(end, garbage.len());
            assert!(
                redis::Parser::new().parse_value(&garbage[..end]).is_err(),
                "{garbage:?}"
            );
        }
    }
}
