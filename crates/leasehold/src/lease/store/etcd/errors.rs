//! What an etcd client error means: its full text, whether trying again may help, whether the other
//! end is not etcd at all, and whether the request never left. A leaf: `crate::error` asks it too.

/// The message of an etcd error, without the gRPC metadata the driver's own message carries, with
/// the causes a transport error hides in its source chain.
pub(crate) fn describe(e: &etcd_client::Error) -> String {
    let mut out = match e {
        etcd_client::Error::GRpcStatus(s) => {
            format!("{} (gRPC status {:?})", s.message(), s.code())
        }
        other => other.to_string(),
    };
    let mut source = std::error::Error::source(e);
    if let etcd_client::Error::GRpcStatus(s) = e {
        source = std::error::Error::source(s);
    }
    while let Some(s) = source {
        let s_text = s.to_string();
        if !out.contains(&s_text) {
            out.push_str(": ");
            out.push_str(&s_text);
        }
        source = s.source();
    }
    out
}

/// Whether another attempt may not meet this failure: a member down or cut off, a leader election,
/// a stream that broke, a request that timed out inside etcd.
pub(crate) fn is_transient(e: &etcd_client::Error) -> bool {
    use tonic::Code;
    match e {
        etcd_client::Error::TransportError(_)
        | etcd_client::Error::IoError(_)
        | etcd_client::Error::LeaseKeepAliveError(_)
        | etcd_client::Error::WatchError(_) => true,
        etcd_client::Error::GRpcStatus(s) => {
            not_etcd(e).is_none()
                && matches!(
                    s.code(),
                    Code::Unavailable
                        | Code::DeadlineExceeded
                        | Code::Aborted
                        | Code::Cancelled
                        | Code::ResourceExhausted
                        | Code::Unknown
                )
        }
        _ => false,
    }
}

/// Whether the request provably never reached a member: the connection to it could not be opened.
pub(crate) fn never_sent(e: &etcd_client::Error) -> bool {
    let text = describe(e).to_ascii_lowercase();
    ["tcp connect error", "connection refused", "dns error"]
        .iter()
        .any(|s| text.contains(s))
}

/// What shows that the other end is not an etcd client port (or speaks TLS where we do not, or
/// the reverse): the reason, or `None` when the error says nothing of the kind.
pub(crate) fn not_etcd(e: &etcd_client::Error) -> Option<String> {
    let text = describe(e).to_ascii_lowercase();
    const SIGNS: &[&str] = &[
        "h2 protocol error",
        "http2 error",
        "frame with invalid size",
        "invalid http version",
        "received http2 header with status",
        "invalid content-type",
        "invalidcontenttype",
        "corrupt message",
        "unimplemented",
        "unknown service",
        "wrong version number",
        "tls handshake eof",
    ];
    SIGNS
        .iter()
        .find(|s| text.contains(**s))
        .map(|_| describe(e))
}
