//! What a Redlock master's failure means for a lease: Redis driver errors are read by the Redis
//! store's rules (`super::super::redis::errors`); a majority that did not answer is
//! [`Error::NoQuorum`](crate::Error::NoQuorum).
//!
//! Limit: a master's error reply is taken at its word.

use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Phase};
use crate::lease::store::redis::errors::from_redis;

/// Why one master gave no answer, kept cheap to copy into every item of a batch it failed.
#[derive(Debug, Clone)]
pub(crate) enum Failure {
    /// The driver or the server failed.
    Redis(redis::RedisError),
    /// No answer within the bound.
    Timeout(Duration),
    /// Not usable: never reached since the store opened, or refused (replica, duplicate).
    Unusable(Arc<str>),
}

impl Failure {
    /// The crate error for this failure during `phase`.
    pub(crate) fn to_error(&self, phase: Phase) -> Error {
        match self {
            Failure::Redis(e) => from_redis(phase, e.clone()),
            Failure::Timeout(after) => Error::Timeout {
                phase,
                after: *after,
            },
            Failure::Unusable(why) => from_redis(
                phase,
                redis::RedisError::from((
                    redis::ErrorKind::Io,
                    "redlock master not usable",
                    why.to_string(),
                )),
            ),
        }
    }

    /// Whether the connection to the master itself failed (as opposed to the master answering an
    /// error for one request).
    pub(super) fn is_transport(&self) -> bool {
        match self {
            Failure::Redis(e) => {
                e.is_io_error()
                    || e.is_connection_dropped()
                    || e.is_connection_refusal()
                    || e.is_timeout()
            }
            Failure::Timeout(_) | Failure::Unusable(_) => true,
        }
    }
}
