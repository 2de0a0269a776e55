//! What an etcd client error means: its full text, whether trying again may help, whether the other
//! end is not etcd at all, and whether the request never left; and the crate's [`Error::Store`] it
//! becomes.
//!
//! Promise: a request that provably never reached a member (its connection could not be opened) is
//! told apart from one that may have; a member down, a leader election or a broken stream is
//! transient and becomes a retryable [`Error::Store`]; an answer that is not etcd's, and refused
//! credentials, are recognised so that connect can report a wrong URL or a refused login; the
//! error's text keeps the transport's causes and drops the gRPC metadata.
//!
//! Limit: gRPC status codes are read as etcd documents them; a proxy that rewrites them misleads it.

use crate::error::{Error, Phase, StoreFailure};
use crate::lease::store::contract::StoreKind;

/// An etcd client error as the source of an [`Error::Store`]: shown with [`describe`] (the causes a
/// transport error hides in its source chain, without the gRPC metadata).
#[derive(Debug)]
pub(crate) struct EtcdError(pub(crate) etcd_client::Error);

impl std::fmt::Display for EtcdError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&describe(&self.0))
    }
}

impl std::error::Error for EtcdError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

/// An etcd client error during `phase` as the crate's error: a request that never left or a member
/// that is down is unreachable, a leader election or a broken stream transient (both retryable, the
/// store unavailable), anything else the store failing us.
pub(crate) fn from_etcd(phase: Phase, e: etcd_client::Error) -> Error {
    let kind = if is_transient(&e) && never_sent(&e) {
        StoreFailure::Unreachable
    } else if is_transient(&e) {
        StoreFailure::Transient
    } else {
        StoreFailure::Failing
    };
    Error::store(phase, StoreKind::ETCD, kind, EtcdError(e))
}

/// The etcd client error inside a store error, if it is one.
pub(crate) fn driver(e: &Error) -> Option<&etcd_client::Error> {
    e.store_source::<EtcdError>().map(|e| &e.0)
}

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

/// Whether etcd refused our credentials: a wrong user or password ("authentication failed"), a
/// cluster with authentication on and no user in the URL ("user name is empty"), or a status of
/// `Unauthenticated`. A permission the user lacks is not this.
pub(crate) fn is_credentials_refused(e: &etcd_client::Error) -> bool {
    let etcd_client::Error::GRpcStatus(s) = e else {
        return false;
    };
    s.code() == tonic::Code::Unauthenticated
        || [
            "authentication failed",
            "user name is empty",
            "invalid auth token",
        ]
        .iter()
        .any(|m| s.message().contains(m))
}
