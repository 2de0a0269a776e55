//! Listen addresses on the command line (`--health`, `--metrics-addr`): `127.0.0.1:9464`,
//! `[::1]:9464`, `localhost:9464`, or `:9464` for every interface (as Go programs, Prometheus's
//! exporters among them, write it). Promise: a value is refused at parse time, with the reason, unless
//! it is a host (an IP address or a name) and a port from 0 to 65535; it is shown as written. Limit:
//! a host name is looked up only when the listener is bound; a name that does not resolve is refused
//! then (exit 2 too).

use std::fmt;
use std::net::{IpAddr, SocketAddr, TcpListener};

/// Where to listen, as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListenAddr {
    /// The host as written, without brackets; empty for every interface (`:PORT`).
    host: String,
    port: u16,
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

const FORM: &str =
    "write HOST:PORT (127.0.0.1:9464, localhost:9464, [::1]:9464) or :PORT for every interface";

/// Parses a listen address for clap.
pub(crate) fn parse(s: &str) -> Result<ListenAddr, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err(format!("empty address; {FORM}"));
    }
    if let Ok(addr) = t.parse::<SocketAddr>() {
        return Ok(ListenAddr {
            host: addr.ip().to_string(),
            port: addr.port(),
        });
    }
    let Some((host, port)) = t.rsplit_once(':') else {
        return Err(format!("`{t}` has no port; {FORM}"));
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("`{port}` in `{t}` is not a port (0 to 65535); {FORM}"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.parse::<IpAddr>().is_err() && !is_host_name(host) && !host.is_empty() {
        return Err(format!(
            "`{host}` in `{t}` is not a host name or an IP address; {FORM}"
        ));
    }
    Ok(ListenAddr {
        host: host.to_owned(),
        port,
    })
}

/// A DNS name as RFC 1123 allows one: labels of letters, digits and hyphens, at most 253 bytes.
fn is_host_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        })
}

impl ListenAddr {
    /// Binds a listener (non-blocking, for tokio): every interface for `:PORT`, else each address
    /// the host resolves to in turn until one binds.
    pub(crate) fn bind(&self) -> std::io::Result<TcpListener> {
        let listener = if self.host.is_empty() {
            TcpListener::bind(("0.0.0.0", self.port))?
        } else {
            TcpListener::bind((self.host.as_str(), self.port))?
        };
        listener.set_nonblocking(true)?;
        Ok(listener)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ips_names_and_a_bare_port_and_shows_them_as_written() {
        for (given, shown) in [
            ("127.0.0.1:9464", "127.0.0.1:9464"),
            ("[::1]:9464", "[::1]:9464"),
            (":9464", ":9464"),
            ("localhost:9464", "localhost:9464"),
            ("metrics.internal:80", "metrics.internal:80"),
            ("0.0.0.0:0", "0.0.0.0:0"),
        ] {
            assert_eq!(parse(given).map(|a| a.to_string()), Ok(shown.to_owned()));
        }
    }

    #[test]
    fn refuses_garbage_naming_what_is_wrong() {
        for (bad, says) in [
            ("", "empty"),
            ("9464", "no port"),
            (":99999", "`99999`"),
            (":http", "`http`"),
            ("host name:80", "`host name`"),
            ("-bad-:80", "`-bad-`"),
            ("nowhere", "no port"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says) && e.contains(":PORT"), "{bad:?}: {e}");
        }
    }

    #[test]
    fn binds_a_bare_port_and_a_host_name() {
        let any = parse(":0").unwrap().bind().unwrap();
        assert!(any.local_addr().unwrap().ip().is_unspecified());
        let local = parse("localhost:0").unwrap().bind().unwrap();
        assert!(local.local_addr().unwrap().ip().is_loopback());
    }
}
