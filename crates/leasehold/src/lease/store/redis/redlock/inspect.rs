//! Reading a Redlock without touching it: `status` (inspect) and `list`, from a majority of masters.
//!
//! Promise: nothing is written; an answer needs a majority of masters to answer (else
//! [`Error::NoQuorum`](crate::Error::NoQuorum)); a name is held when a majority has the lock, its
//! holder is the token a majority keeps, its fence the highest any master recorded; a note is the
//! one a majority keeps; `list` is the union of `SCAN` (never `KEYS`) on every master that answers.
//!
//! Limit: masters are asked at once but answer at different moments, so a holder may change
//! between their answers or right after them; a minority may disagree with what is reported.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::node::Node;
use super::RedlockStore;
use crate::error::{Error, Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::{HolderInfo, LeaseInfo};
use crate::lease::store::redis::errors::Failure;
use crate::lease::store::redis::keys::glob_escape;
use crate::lease::store::redis::keys::RedlockKeys;
use crate::lease::Glob;

/// One master's view of one name: the lock's `PTTL`, the recorded fence and the lock's token.
type KeyState = (i64, Option<u64>, Option<String>);

impl RedlockStore {
    /// Too few masters answered a read: `answered` of the majority needed.
    fn no_quorum(&self, answered: usize, first_failure: Option<Failure>) -> Error {
        Error::NoQuorum {
            phase: Phase::Inspect,
            answered,
            needed: self.quorum(),
            nodes: self.n(),
            source: first_failure.map(|f| Box::new(f.to_error(Phase::Inspect))),
        }
    }

    /// The note of `name` that a majority of the masters keep (`None`: none has a majority); every
    /// master is asked, a majority must answer.
    pub(super) async fn read_notes(&self, name: &str) -> Result<Option<Vec<u8>>> {
        let n = self.n();
        let quorum = self.quorum();
        let limit = self.inner.response_timeout;
        let inv = super::scripts::read_note(&self.keys(name));
        let mut notes: Vec<Option<Vec<u8>>> = Vec::with_capacity(n);
        let mut first_failure = None;
        self.fan_out_script(
            0..n,
            inv,
            limit,
            |v| redis::from_redis_value::<Option<Vec<u8>>>(v).map_err(Into::into),
            |_, r| {
                match r {
                    Ok(note) => notes.push(note),
                    Err(f) => {
                        first_failure.get_or_insert(f);
                    }
                }
                false
            },
        )
        .await
        .finish()
        .await;
        if notes.len() < quorum {
            return Err(self.no_quorum(notes.len(), first_failure));
        }
        let mut agreed = None;
        for note in notes.iter().flatten() {
            if notes
                .iter()
                .filter(|other| other.as_ref() == Some(note))
                .count()
                >= quorum
            {
                agreed = Some(note.clone());
                break;
            }
        }
        Ok(agreed)
    }

    /// Reads every master's `PTTL` and fence for `names`; needs a majority to answer.
    pub(super) async fn inspect_keys(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        let keys: Arc<Vec<RedlockKeys>> =
            Arc::new(names.iter().map(|name| self.keys(name)).collect());
        let per_node = self.read_key_states(keys.clone()).await?;
        let answered: Vec<&Vec<KeyState>> = per_node.iter().flatten().collect();
        Ok(names
            .iter()
            .zip(keys.iter())
            .enumerate()
            .map(|(j, (name, k))| majority_view(name, k, &answered, j, self.quorum()))
            .collect())
    }

    /// Each master's state of every key of `keys`, by master (`None`: it did not answer), once a
    /// majority answered.
    async fn read_key_states(
        &self,
        keys: Arc<Vec<RedlockKeys>>,
    ) -> Result<Vec<Option<Vec<KeyState>>>> {
        let n = self.n();
        let limit = self.inner.response_timeout;
        let mut per_node: Vec<Option<Vec<KeyState>>> = vec![None; n];
        let mut first_failure = None;
        self.fan_out(
            0..n,
            |i, inner| {
                let keys = keys.clone();
                async move { key_states(&inner.nodes[i], &keys, limit).await }
            },
            |i, r| {
                match r {
                    Ok(v) => per_node[i] = Some(v),
                    Err(f) => {
                        first_failure.get_or_insert(f);
                    }
                }
                false
            },
        )
        .await;
        let answered = per_node.iter().flatten().count();
        if answered < self.quorum() {
            return Err(self.no_quorum(answered, first_failure));
        }
        Ok(per_node)
    }

    /// `SCAN` on every master that answers (a majority must), the union of the names, then
    /// [`Store::inspect`].
    pub(super) async fn list_names(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        let n = self.n();
        let quorum = self.quorum();
        let limit = self.inner.response_timeout;
        let tag_start = format!("{{{}:", self.inner.prefix);
        // Every key under the prefix: the pattern is matched here ([`Glob`], the matcher of every
        // store), not by the servers' glob.
        let matcher = format!("{}*", glob_escape(&tag_start));
        let (tag_start, matcher): (Arc<str>, Arc<str>) = (tag_start.into(), matcher.into());
        let mut names = BTreeSet::new();
        let mut answered = 0;
        let mut first_failure = None;
        self.fan_out(
            0..n,
            |i, inner| {
                let (tag_start, matcher) = (tag_start.clone(), matcher.clone());
                async move { names_on(&inner.nodes[i], &tag_start, &matcher, limit).await }
            },
            |_, r: std::result::Result<Vec<String>, Failure>| {
                match r {
                    Ok(found) => {
                        answered += 1;
                        names.extend(found);
                    }
                    Err(f) => {
                        first_failure.get_or_insert(f);
                    }
                }
                false
            },
        )
        .await;
        if answered < quorum {
            return Err(self.no_quorum(answered, first_failure));
        }
        let glob = Glob::new(pattern);
        let names: Vec<&str> = names
            .iter()
            .map(String::as_str)
            .filter(|n| glob.matches(n))
            .collect();
        self.inspect_keys(&names).await
    }
}

/// One master's state of each of `keys`: `PTTL`, fence and token, 500 names a pipeline.
async fn key_states(
    node: &Node,
    keys: &[RedlockKeys],
    limit: Duration,
) -> std::result::Result<Vec<KeyState>, Failure> {
    let mut out = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(500) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.cmd("PTTL")
                .arg(&k.lock)
                .cmd("GET")
                .arg(&k.fence)
                .cmd("GET")
                .arg(&k.lock);
        }
        let values: Vec<(i64, Option<String>, Option<String>)> =
            node.query_pipe(&pipe, limit).await?;
        out.extend(
            values
                .into_iter()
                .map(|(pttl, fence, token)| (pttl, fence.and_then(|f| f.parse().ok()), token)),
        );
    }
    Ok(out)
}

/// The `j`-th name as a majority of the masters that `answered` see it: held when a majority has
/// the lock (its TTL the one a majority still has), the holder the token a majority keeps, the
/// fence the highest any recorded.
fn majority_view(
    name: &str,
    k: &RedlockKeys,
    answered: &[&Vec<KeyState>],
    j: usize,
    quorum: usize,
) -> LeaseInfo {
    let mut pttls: Vec<i64> = answered
        .iter()
        .map(|v| v[j].0)
        .filter(|&p| p != -2)
        .collect();
    pttls.sort_unstable_by(|a, b| b.cmp(a));
    let held = pttls.len() >= quorum;
    let ttl_ms = if held {
        u64::try_from(pttls[quorum - 1]).ok()
    } else {
        None
    };
    // The holder: the token a majority of the masters keep in the lock.
    let tokens: Vec<&str> = answered.iter().filter_map(|v| v[j].2.as_deref()).collect();
    let holders = tokens
        .iter()
        .find(|t| tokens.iter().filter(|o| o == t).count() >= quorum)
        .map(|t| HolderInfo::new((*t).to_owned(), ttl_ms, None))
        .into_iter()
        .collect();
    LeaseInfo {
        name: name.to_owned(),
        key: k.lock.clone(),
        held,
        ttl_ms,
        fence: answered.iter().filter_map(|v| v[j].1).max().map(Fence::new),
        holders,
        ..LeaseInfo::free(name, String::new())
    }
}

/// `SCAN` of one master for the keys matching `matcher`: the valid names they belong to (a lock or
/// a fence key names one; `tag_start` is the hash tag's opening, `{<prefix>:`).
async fn names_on(
    node: &Node,
    tag_start: &str,
    matcher: &str,
    limit: Duration,
) -> std::result::Result<Vec<String>, Failure> {
    let mut found = Vec::new();
    let mut cursor: u64 = 0;
    loop {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(matcher)
            .arg("COUNT")
            .arg(1000);
        let (next, keys): (u64, Vec<String>) = node.query(&cmd, limit).await?;
        for key in keys {
            let Some(rest) = key.strip_prefix(tag_start) else {
                continue;
            };
            let name = rest
                .strip_suffix("}:lock")
                .or_else(|| rest.strip_suffix("}:rl-fence"));
            if let Some(name) = name.filter(|n| crate::lease::names::validate_name(n).is_ok()) {
                found.push(name.to_owned());
            }
        }
        cursor = next;
        if cursor == 0 {
            return Ok(found);
        }
    }
}
