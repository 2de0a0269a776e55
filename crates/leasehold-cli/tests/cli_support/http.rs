//! HTTP probes for the `--health` endpoints, as Kubernetes sends them: one `GET`, a 1 s timeout.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

/// A free loopback address to serve on.
pub(crate) fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// `GET path` on `addr` with a 1 s timeout: the status (0 when nothing answers), the body, and how
/// long the answer took.
pub(crate) fn probe(addr: &str, path: &str) -> (u16, String, Duration) {
    let started = Instant::now();
    let Ok(mut s) = std::net::TcpStream::connect(addr) else {
        return (0, String::new(), started.elapsed());
    };
    s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let _ = write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    );
    let mut text = String::new();
    let _ = s.read_to_string(&mut text);
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body, started.elapsed())
}

/// `GET path`: the status and the body.
pub(crate) fn get(addr: &str, path: &str) -> (u16, String) {
    let (status, body, _) = probe(addr, path);
    (status, body)
}
