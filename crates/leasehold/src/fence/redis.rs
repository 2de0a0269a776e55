//! Fenced writes to values kept in Redis: one Lua script compares the presented fence with the one
//! stored beside the value and refuses an older writer.
//!
//! Promise: once a writer with fence `n` has set a key, no writer with a fence `< n` sets it; the
//! compare and the write are one script, so no other command runs between them.
//! Limit: the data and its fence live in the same Redis and share its durability: a restart without
//! persistence or a failover that lost the write forgets both (and a stale writer may then write).

use std::sync::LazyLock;

use super::Fence;
use crate::db::check_key;
use crate::{Error, Phase, Result};

static FENCED_SET: LazyLock<redis::Script> =
    LazyLock::new(|| redis::Script::new(include_str!("fenced_set.lua")));

/// A value in Redis together with the fence that guards it: data key `{name}` and fence key
/// `{name}:fence`. The shared hash tag puts both in one Redis Cluster slot, so one script can touch
/// both atomically.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FencedKey {
    /// Where the value (string or hash) lives.
    data: String,
    /// Where the highest accepted fence lives.
    fence: String,
}

impl FencedKey {
    /// Keys for resource `name` (1..=255 bytes, no `{` or `}`: they would change the hash tag).
    pub fn new(name: &str) -> Result<Self> {
        check_key("fenced redis key name", name)?;
        if name.contains(['{', '}']) {
            return Err(Error::invalid(
                "fenced redis key name",
                format!("{name:?} contains `{{` or `}}`; leasehold adds the hash tag itself"),
            ));
        }
        Ok(FencedKey {
            data: format!("{{{name}}}"),
            fence: format!("{{{name}}}:fence"),
        })
    }

    /// The key holding the value: read it with `GET` or `HGETALL`.
    pub fn data_key(&self) -> &str {
        &self.data
    }

    /// The key holding the highest accepted fence.
    pub fn fence_key(&self) -> &str {
        &self.fence
    }
}

/// What a fenced Redis write stores.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub enum RedisWrite<'a> {
    /// `SET data value`.
    Set(&'a [u8]),
    /// `HSET data field value ...` (at least one pair).
    Hset(&'a [(&'a str, &'a [u8])]),
}

/// Writes `write` to `key` only if `fence` is not older than the highest fence the key has accepted,
/// atomically (one Lua script, one round trip). A stale fence fails with [`Error::StaleFence`] and
/// writes nothing; the same fence again is accepted.
///
/// ```no_run
/// # async fn demo(mut conn: redis::aio::MultiplexedConnection, fence: leasehold::Fence) -> leasehold::Result<()> {
/// use leasehold::fence::{redis_fenced_set, FencedKey, RedisWrite};
/// let key = FencedKey::new("report:daily")?;
/// redis_fenced_set(&mut conn, &key, fence, RedisWrite::Set(b"done")).await?;
/// # Ok(()) }
/// ```
///
/// # Cancel safety
///
/// If dropped after the script was sent, the write may or may not have happened (with the fence
/// checked either way: a stale writer's write never lands).
pub async fn redis_fenced_set<C>(
    conn: &mut C,
    key: &FencedKey,
    fence: Fence,
    write: RedisWrite<'_>,
) -> Result<()>
where
    C: redis::aio::ConnectionLike + Send,
{
    let mut invocation = FENCED_SET.key(&key.data);
    invocation.key(&key.fence).arg(fence.get().to_string());
    match write {
        RedisWrite::Set(value) => {
            invocation.arg("set").arg(value);
        }
        RedisWrite::Hset(pairs) => {
            if pairs.is_empty() {
                return Err(Error::invalid(
                    "fenced redis write",
                    "HSET needs at least one field/value pair",
                ));
            }
            invocation.arg("hset");
            for (field, value) in pairs {
                invocation.arg(*field).arg(*value);
            }
        }
    }
    let (written, fence_there): (i64, String) = invocation.invoke_async(conn).await.map_err(
        crate::lease::store::redis::errors::redis_error(Phase::FencedWrite),
    )?;
    crate::db::metrics::fence_check("redis", written == 1);
    if written == 1 {
        Ok(())
    } else {
        Err(Error::StaleFence {
            resource: key.data.clone(),
            presented: fence,
            current: fence_there.parse().unwrap_or(Fence::new(u64::MAX)),
        })
    }
}
