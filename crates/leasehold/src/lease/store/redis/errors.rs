//! Reading what Redis answered, into the crate's [`Error`]: which driver errors mean "the store did
//! not answer" (retry later), which are a permanent condition an operator must fix (a command or key
//! the ACL denies, a key under leasehold's names that leasehold did not write), and what the fix is.
//! Any other driver error is [`Error::Store`] with this store's reading of it as its
//! [`StoreFailure`]. Redlock's masters and the fenced write to a value kept in Redis read their
//! errors here too.
//!
//! Promise: a denied command is [`Error::Denied`] naming the command; a key of the wrong type or
//! format is [`Error::Misconfigured`] naming the key when the reply (or the caller) knows it.
//! Limit: a script that runs a denied command is refused by Redis without naming the command; the
//! message then lists the commands leasehold's scripts use.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::RedisError;

use crate::error::{Error, Phase, Result, StoreFailure};
use crate::lease::store::contract::StoreKind;

/// A Redis driver error during `phase` as the crate's error ([`classify`]).
pub(crate) fn redis_error(phase: Phase) -> impl FnOnce(RedisError) -> Error {
    move |e| classify(phase, e)
}

/// A Redis driver error during `phase` as the crate's error ([`classify`]).
pub(crate) fn from_redis(phase: Phase, e: RedisError) -> Error {
    classify(phase, e)
}

/// What `e` means when it is none of the answers read by name ([`classify`]): no answer
/// (unreachable), a slot moving or a cluster reconfiguring (transient: send it again shortly), a
/// server that says it cannot serve now (loading, a failover under way: failing us, exit 69), or
/// any other error reply, which is an answer (rejected).
pub(crate) fn failure_of(e: &RedisError) -> StoreFailure {
    if super::node::is_connection_failure(e) {
        StoreFailure::Unreachable
    } else if e.is_cluster_error() || is_slot_moving(e) {
        StoreFailure::Transient
    } else if did_not_answer(e) {
        StoreFailure::Failing
    } else {
        StoreFailure::Rejected
    }
}

/// A cluster slot is being migrated and the request touches keys on both sides: `TRYAGAIN` (the
/// lease scripts declare a key that never exists so that this comes before they run), or a script
/// that reached a key the node no longer holds ("Script attempted to access a non local key").
/// Send it again shortly.
pub(crate) fn is_slot_moving(e: &RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::TryAgain)
        || e.to_string()
            .contains("attempted to access a non local key")
}

/// `fut` with a time bound; running out of time is [`Error::Timeout`] for `phase`.
pub(super) async fn within<T>(
    phase: Phase,
    limit: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    bounded(limit, fut).await.map_err(|f| f.to_error(phase))
}

/// `fut` bounded by `limit`; a driver error or the bound passing is a [`Failure`] (read later, for
/// the phase it failed in, by [`Failure::to_error`]).
pub(crate) async fn bounded<T>(
    limit: Duration,
    fut: impl Future<Output = redis::RedisResult<T>>,
) -> std::result::Result<T, Failure> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r.map_err(Failure::Redis),
        Err(_) => Err(Failure::Timeout(limit)),
    }
}

/// Whether Redis refused our credentials: AUTH failed (`WRONGPASS`, "invalid username-password
/// pair"), or the server wants a password the URL does not give (`NOAUTH`). Permission errors
/// (`NOPERM`) are not credentials and are read elsewhere.
pub(crate) fn is_credentials_refused(e: &RedisError) -> bool {
    // The connect probe is a pipeline (INFO, TIME): its refusal comes as a pipeline failure whose
    // own code is none of these, so the text is read too.
    let text = e.to_string();
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
        || text.contains("NOAUTH")
        || text.contains("WRONGPASS")
        || text.contains("invalid username-password pair")
}

/// The fix for refused credentials on a plain Redis URL.
const CREDENTIALS_FIX: &str = "give the user and password the server expects in the URL \
    (redis://user:password@host:port, or redis://:password@host:port for the default user)";

/// [`Error::Unauthorized`] for a server at `location` (redacted) that refused our credentials
/// with `source` during `phase`, with `fix` saying which credentials to give.
pub(crate) fn refused_credentials(
    phase: Phase,
    location: &str,
    source: &RedisError,
    fix: &str,
) -> Error {
    Error::Unauthorized {
        phase,
        store: location.to_owned(),
        detail: one_failure(source.clone()).to_string(),
        fix: fix.to_owned(),
    }
}

/// A connect-time error caused by the credentials becomes [`Error::Unauthorized`] naming
/// `location` (redacted); any other error passes through.
pub(crate) fn unauthorized_at(location: &str) -> impl FnOnce(Error) -> Error + '_ {
    move |e| match (&e, e.store_source::<RedisError>()) {
        (Error::Store { phase, .. }, Some(source)) if is_credentials_refused(source) => {
            refused_credentials(*phase, location, source, CREDENTIALS_FIX)
        }
        _ => e,
    }
}

/// The fix for a denied command or key: the documented ACL line.
const ACL_FIX: &str = "grant the leasehold user the commands and the key pattern `~{<prefix>:*` that docs/operations.md lists (\"The Redis user leasehold needs\": one `ACL SETUSER` line per topology, with +info and +time among them)";

/// The error code leasehold's scripts answer with when a key under leasehold's names holds
/// something leasehold did not write (`LEASEHOLD-FOREIGN <key>|<what it holds>`).
pub(crate) const FOREIGN: &str = "LEASEHOLD-FOREIGN";

/// A pipeline's failures as one error: the driver reports every command's (a connect probe
/// refused `NOAUTH`, or scripts refused `NOPERM`, repeat one answer up to a dozen times); the first
/// is kept (the driver's own `kind()` is the first's too) and the others, when they differ, are
/// logged. Any other error passes through.
pub(crate) fn one_failure(e: RedisError) -> RedisError {
    if !e.to_string().starts_with("Pipeline failure") {
        return e;
    }
    let Some(items) = e.clone().into_server_errors() else {
        return e;
    };
    let Some((_, first)) = items.first() else {
        return e;
    };
    for (index, other) in items.iter().skip(1) {
        if other.code() != first.code() || other.details() != first.details() {
            tracing::debug!(index, error = %other, "another failure in the same pipeline");
        }
    }
    first.clone().into()
}

/// The crate's error for a driver error during `phase`.
pub(crate) fn classify(phase: Phase, source: RedisError) -> Error {
    let source = one_failure(source);
    if let Some(e) = denied(phase, &source) {
        return e;
    }
    if let Some(e) = foreign(&source) {
        return e;
    }
    if is_wrong_type(&source) {
        return Error::Misconfigured {
            what: "a key under leasehold's names".into(),
            found: "it holds a value of another type than leasehold writes there (WRONGTYPE)"
                .into(),
            fix: wrong_key_fix(),
        };
    }
    let kind = failure_of(&source);
    Error::store(phase, StoreKind::REDIS, kind, source)
}

/// The repair for a key leasehold did not write.
pub(crate) fn wrong_key_fix() -> String {
    "leasehold writes nothing over a key it did not write: use another --prefix (or lease name), or delete the key if nothing else uses it (`leasehold status` names the key)".into()
}

/// `NOPERM` (a command or key the user may not use), or a script refused for the same reason.
fn denied(phase: Phase, e: &RedisError) -> Option<Error> {
    let text = e.to_string();
    let detail = e.detail().unwrap_or(&text).trim().to_owned();
    if e.code() == Some("NOPERM") {
        let what = quoted_command(&detail)
            .map(|c| format!("the `{}` command", c.to_ascii_uppercase()))
            .unwrap_or_else(|| {
                if detail.contains("key") {
                    "a key under the key prefix".to_owned()
                } else if detail.contains("channel") {
                    "a channel".to_owned()
                } else {
                    "a command".to_owned()
                }
            });
        return Some(Error::Denied {
            phase,
            what,
            detail: format!("NOPERM {detail}"),
            fix: ACL_FIX.into(),
        });
    }
    if text.contains("can't run this command or subcommand")
        || text.contains("no permissions to access one of the keys")
    {
        return Some(Error::Denied {
            phase,
            what: format!(
                "a command of a leasehold script (they use {})",
                super::acl::script_commands()
            ),
            detail: detail
                .split(" script: ")
                .next()
                .unwrap_or(&detail)
                .to_owned(),
            fix: ACL_FIX.into(),
        });
    }
    None
}

/// `'time'` in "no permissions to run the 'time' command".
fn quoted_command(detail: &str) -> Option<&str> {
    let start = detail.find("run the '")? + "run the '".len();
    let len = detail[start..].find('\'')?;
    Some(&detail[start..start + len])
}

/// A script's `LEASEHOLD-FOREIGN <key>|<found>` reply.
fn foreign(e: &RedisError) -> Option<Error> {
    if e.code() != Some(FOREIGN) {
        return None;
    }
    let detail = e.detail().unwrap_or("").trim();
    let detail = detail.split(" script: ").next().unwrap_or(detail);
    let (key, found) = detail
        .split_once('|')
        .unwrap_or((detail, "a value leasehold did not write"));
    Some(foreign_key(key, found))
}

/// Whether Redis did not answer (the connection failed or timed out), or answered that it cannot
/// serve right now (loading, a failover or slot move under way, a script running too long): the
/// "store unavailable, retry later" class (CLI exit 69). Any other error reply is an answer.
pub(crate) fn did_not_answer(e: &RedisError) -> bool {
    use redis::ServerErrorKind as K;
    super::node::is_connection_failure(e)
        || e.is_cluster_error()
        || is_slot_moving(e)
        || matches!(
            e.kind(),
            redis::ErrorKind::Server(
                K::BusyLoading | K::ClusterDown | K::MasterDown | K::ReadOnly | K::TryAgain
            )
        )
        || e.code() == Some("BUSY")
}

/// Redis refused a command for the type of a key it touched.
pub(crate) fn is_wrong_type(e: &RedisError) -> bool {
    e.code() == Some("WRONGTYPE") || e.to_string().contains("WRONGTYPE")
}

/// Whether `e` came from a key of the wrong type that the reply did not name (so that a look at
/// the name's keys can say which).
pub(crate) fn is_unnamed_foreign_key(e: &Error) -> bool {
    matches!(e, Error::Misconfigured { what, .. } if what == "a key under leasehold's names")
}

/// The error for `key` holding `found`.
pub(crate) fn foreign_key(key: &str, found: &str) -> Error {
    Error::Misconfigured {
        what: format!("key `{key}`"),
        found: found.to_owned(),
        fix: wrong_key_fix(),
    }
}

/// Why one Redlock master gave no answer (a majority that did not answer is
/// [`Error::NoQuorum`](crate::Error::NoQuorum)), kept cheap to copy into every item of a batch it failed.
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
    pub(crate) fn is_transport(&self) -> bool {
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

impl super::RedisStore {
    /// `r`, with a key of the wrong type that Redis did not name (`WRONGTYPE`) named.
    pub(super) async fn named<T>(&self, name: &str, r: Result<T>) -> Result<T> {
        match r {
            Ok(v) => Ok(v),
            Err(e) => Err(self.explain(name, e).await),
        }
    }

    /// For a `WRONGTYPE` error: asks check.lua which key of `name` is not leasehold's (a read, only
    /// after such an error) and names it; any other error as it is.
    pub(super) async fn explain(&self, name: &str, e: Error) -> Error {
        if !is_unnamed_foreign_key(&e) {
            return e;
        }
        let mut con = self.shared.clone();
        let inv = super::scripts::check(&self.lock_key(name));
        match within(
            Phase::Inspect,
            self.limit(),
            super::scripts::invoke(&mut con, &inv),
        )
        .await
        {
            Ok(v) => match super::scripts::foreign_of(v) {
                Ok(Some((key, found))) => foreign_key(&key, &found),
                _ => e,
            },
            Err(_) => e,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pipeline_refused_whole_is_one_line() {
        let srv = leasehold_testkit::RedisServer::start().unwrap();
        let mut admin = srv.connection().unwrap();
        let _: () = redis::cmd("ACL")
            .arg(&["SETUSER", "bare", "on", ">pw", "-@all", "+@connection"][..])
            .query(&mut admin)
            .unwrap();
        let url = format!("redis://bare:pw@127.0.0.1:{}/", srv.port());
        let mut con = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let mut pipe = redis::pipe();
        for _ in 0..11 {
            pipe.cmd("TIME");
        }
        let e = pipe
            .query_async::<redis::Value>(&mut con)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("Pipeline failures"), "{e}");
        let msg = classify(Phase::Connect, e).to_string();
        assert_eq!(msg.matches("NOPERM").count(), 1, "{msg}");
        assert!(msg.contains("`TIME`"), "{msg}");
        assert!(!msg.contains("Index"), "{msg}");
    }

    #[test]
    fn a_denied_command_is_named() {
        assert_eq!(
            quoted_command("this user has no permissions to run the 'time' command"),
            Some("time")
        );
        assert_eq!(quoted_command("no permissions to access a key"), None);
    }
}
