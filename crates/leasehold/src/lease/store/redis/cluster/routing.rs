//! Which master serves which slot: the slot map as `CLUSTER SLOTS` gave it, and a pipeline's
//! commands grouped by the master of each one's slot.
//!
//! Promise: each slot is looked up to the master `CLUSTER SLOTS` named for it (an empty host read
//! as the node asked); a pipeline is split into one group per master keeping the commands' order
//! within it, a command without a key going with the one before it, and the commands whose slot has
//! no known master are handed back rather than sent anywhere.
//!
//! Limit: the map is what a node said when asked; a slot that moved since is found out by the
//! redirect its master answers with, not here.

use redis::{Cmd, RedisError, RedisResult, Value};

use super::super::node::{self, first_key, key_slot};

/// Slot ranges and the address of the master serving each, sorted by first slot.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct SlotMap {
    pub(super) ranges: Vec<(u16, u16, String)>,
}

/// Commands of a pipeline (indexes into it) grouped by master, in order, each group one pipeline.
pub(super) type Groups = Vec<(String, Vec<usize>)>;

impl SlotMap {
    pub(super) fn master_of(&self, slot: u16) -> Option<&str> {
        let i = self.ranges.partition_point(|(start, _, _)| *start <= slot);
        let (start, end, addr) = self.ranges.get(i.checked_sub(1)?)?;
        (*start..=*end).contains(&slot).then_some(addr.as_str())
    }

    pub(super) fn masters(&self) -> Vec<String> {
        let mut masters: Vec<String> = self.ranges.iter().map(|(_, _, a)| a.clone()).collect();
        masters.sort();
        masters.dedup();
        masters
    }

    pub(super) fn covered(&self) -> usize {
        self.ranges
            .iter()
            .map(|(s, e, _)| usize::from(*e - *s) + 1)
            .sum()
    }

    /// `pending` (indexes into `cmds`) grouped by the master of each command's slot, in order; and
    /// those whose slot has no known master. A command without a key goes with the one before it.
    pub(super) fn group_by_master(&self, cmds: &[&Cmd], pending: &[usize]) -> (Groups, Vec<usize>) {
        let mut groups: Groups = Vec::new();
        let mut unrouted = Vec::new();
        let mut previous: Option<String> = None;
        for &i in pending {
            let addr = match first_key(cmds[i]) {
                Some(k) => self.master_of(key_slot(&k)).map(str::to_owned),
                None => previous.clone(),
            };
            match addr {
                Some(a) => {
                    match groups.iter_mut().find(|(g, _)| *g == a) {
                        Some((_, idx)) => idx.push(i),
                        None => groups.push((a.clone(), vec![i])),
                    }
                    previous = Some(a);
                }
                None => unrouted.push(i),
            }
        }
        (groups, unrouted)
    }
}

/// `CLUSTER SLOTS`: `[[start, end, [host, port, id, …], replicas…], …]`; an empty host means "the
/// node you asked".
pub(super) fn parse_slots(reply: Value, asked_host: &str) -> RedisResult<SlotMap> {
    let Value::Array(entries) = reply else {
        return Err(bad("not an array"));
    };
    let mut ranges = Vec::with_capacity(entries.len());
    for entry in entries {
        let Value::Array(fields) = entry else {
            return Err(bad("an entry is not an array"));
        };
        let mut fields = fields.into_iter();
        let start: u16 = next_as(&mut fields, "no start", "start slot")?;
        let end: u16 = next_as(&mut fields, "no end", "end slot")?;
        let Some(Value::Array(master)) = fields.next() else {
            return Err(bad("no master"));
        };
        let mut master = master.into_iter();
        let host: String = next_as(&mut master, "no host", "host")?;
        let port: u16 = next_as(&mut master, "no port", "port")?;
        let host = if host.is_empty() || host == "?" {
            asked_host.to_owned()
        } else {
            host
        };
        ranges.push((start, end, node::addr(&host, port)));
    }
    ranges.sort();
    Ok(SlotMap { ranges })
}

/// A `CLUSTER SLOTS` reply that is not one, saying `what` is wrong.
fn bad(what: &str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected CLUSTER SLOTS reply",
        what.to_owned(),
    ))
}

/// The next of `fields` as a `T`: `missing` when there is none, `wrong` when it is not a `T`.
fn next_as<T: redis::FromRedisValue>(
    fields: &mut impl Iterator<Item = Value>,
    missing: &str,
    wrong: &str,
) -> RedisResult<T> {
    redis::from_redis_value(fields.next().ok_or_else(|| bad(missing))?).map_err(|_| bad(wrong))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_slot_map_finds_each_slots_master() {
        let map = SlotMap {
            ranges: vec![
                (0, 5460, "a:1".into()),
                (5461, 10922, "b:1".into()),
                (10923, 16383, "c:1".into()),
            ],
        };
        assert_eq!(map.master_of(0), Some("a:1"));
        assert_eq!(map.master_of(5460), Some("a:1"));
        assert_eq!(map.master_of(5461), Some("b:1"));
        assert_eq!(map.master_of(16383), Some("c:1"));
        assert_eq!(map.covered(), 16384);
        assert_eq!(map.masters(), ["a:1", "b:1", "c:1"]);
        let holes = SlotMap {
            ranges: vec![(10, 20, "a:1".into())],
        };
        assert_eq!(holes.master_of(9), None);
        assert_eq!(holes.master_of(21), None);
        assert_eq!(holes.master_of(15), Some("a:1"));
    }

    #[test]
    fn cluster_slots_replies_are_read() {
        let entry = |s: i64, e: i64, host: &str, port: i64| {
            Value::Array(vec![
                Value::Int(s),
                Value::Int(e),
                Value::Array(vec![
                    Value::BulkString(host.as_bytes().to_vec()),
                    Value::Int(port),
                    Value::BulkString(b"id".to_vec()),
                ]),
                Value::Array(vec![Value::BulkString(b"10.0.0.9".to_vec()), Value::Int(1)]),
            ])
        };
        let map = parse_slots(
            Value::Array(vec![
                entry(100, 200, "", 7001),
                entry(0, 99, "10.0.0.1", 7000),
            ]),
            "seed",
        )
        .unwrap();
        assert_eq!(
            map.ranges,
            [
                (0, 99, "10.0.0.1:7000".into()),
                (100, 200, "seed:7001".into())
            ]
        );
        assert!(parse_slots(Value::Int(1), "x").is_err());
    }
}
