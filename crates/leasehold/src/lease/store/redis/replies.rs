//! What an acquire asks the scripts for and how the store reads their replies into the contract's
//! terms: a TTL in milliseconds, the TTL granted, a semaphore's permits in use, a given-up token.
//!
//! Promise: one reading of each reply for every path that acquires (the try, the queue step, the
//! replica wait). Limit: only the shapes the scripts answer; a reply of another shape is refused
//! where it is parsed (`scripts`).

use std::time::Duration;

use super::errors::redis_error;
use super::scripts::{self, Ask};
use crate::error::{Error, Phase};
use crate::lease::store::contract::Request;

pub(super) fn ms_reply(pttl_ms: i64) -> Option<Duration> {
    u64::try_from(pttl_ms).ok().map(Duration::from_millis)
}

/// The TTL a taken lock has, as acquire.lua reported it (a lock set without expiry by someone else's
/// hand counts as the TTL asked for).
pub(super) fn granted_ttl(ttl_ms: i64, req: &Request<'_>) -> Duration {
    ms_reply(ttl_ms).unwrap_or(req.opts.ttl)
}

/// What the acquire scripts are asked for.
pub(super) fn ask(req: &Request<'_>) -> Ask {
    Ask {
        ttl: req.opts.ttl,
        first_ttl: req.opts.handoff_ttl,
        permits: req.opts.permits,
    }
}

pub(super) fn permits_in_use(req: &Request<'_>, in_use: u32) -> Error {
    Error::PermitsInUse {
        name: req.name.to_owned(),
        asked: req.opts.permits,
        in_use,
    }
}

/// acquire.lua says the caller gave up on this token: it abandoned the request and then went on with
/// it, which the client never does.
pub(super) fn given_up() -> Error {
    redis_error(Phase::Acquire)(scripts::bad_reply(
        "acquire",
        "this acquire was already given up (abandoned); start a new one",
    ))
}
