//! The Redis commands leasehold sends, in one list ([`COMMANDS`]), and the check at connect that the
//! user may run every one its deployment needs, so that a missing permission stops a command line
//! before its command starts, not at the release after it (which would leave the name busy for the
//! whole TTL).
//!
//! The check is one script (`scripts/acl.lua`) that asks Redis's own ACL rules
//! (`redis.acl_check_cmd`, Redis 7.0 and later) about each command in the shape leasehold sends it,
//! with a key under the prefix: it runs none of them and touches nothing, and it needs no
//! permission beyond `EVAL`, which leasehold needs anyway (`ACL DRYRUN` would need `+acl`, which
//! operators rightly do not grant an application).
//!
//! The documented `ACL SETUSER` lines (docs/operations.md, "The Redis user leasehold needs") are
//! checked against this list by a test, so the documentation, the check and the error's list of
//! commands cannot disagree. A command added to leasehold is one entry here (with the deployments
//! that need it), one word in the documented lines.
//!
//! Promise: before anything is run, every data node is asked (with `PING` first, so refused
//! credentials show as such) whether the user may run each command its deployment needs; a user
//! that may not run one gets [`Error::Denied`] naming every refused command (and the key pattern,
//! when every command on a key is refused), with nothing run. [`COMMANDS`] is the one list the
//! check, the error's message and the documented `ACL SETUSER` lines follow.
//!
//! Limit: the check runs at connect, against the user's rules then; rules changed later are met
//! when a command is refused (still [`Error::Denied`], naming it when Redis
//! does). Sentinels themselves are not checked here (their user is another).

use redis::aio::ConnectionLike;

use crate::error::{Error, Phase, Result};

/// A deployment of Redis, for which commands it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Deployment {
    /// One server (`redis://`, `rediss://`).
    OneServer,
    /// A Sentinel-managed primary's data nodes (`redis-sentinel://`).
    Sentinel,
    /// A Redis Cluster's masters (`redis-cluster://`).
    Cluster,
    /// Each Redlock master (a Redlock is opened with several Redis URLs).
    Redlock,
}

impl Deployment {
    const fn bit(self) -> u8 {
        match self {
            Deployment::OneServer => ONE,
            Deployment::Sentinel => SENTINEL,
            Deployment::Cluster => CLUSTER,
            Deployment::Redlock => REDLOCK,
        }
    }
}

const ONE: u8 = 1;
const SENTINEL: u8 = 2;
const CLUSTER: u8 = 4;
const REDLOCK: u8 = 8;
/// The lease store on one server, a Sentinel primary or a cluster.
const LEASES: u8 = ONE | SENTINEL | CLUSTER;
const EVERY: u8 = LEASES | REDLOCK;

/// One command leasehold sends to a data node (or runs inside its scripts).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Command {
    /// Its name as an `ACL SETUSER` rule writes it after `+`: lower case, `|` before a subcommand
    /// (`rename`, `script|load`).
    pub name: &'static str,
    /// Whether leasehold's Lua scripts run it (Redis refuses a script for a denied command without
    /// naming the command; the message then lists these).
    pub in_scripts: bool,
    /// Why leasehold sends it.
    pub why: &'static str,
    /// Which deployments need it ([`Deployment`] bits).
    needed: u8,
    /// The command's words as leasehold sends it; `K` stands for a key under the prefix.
    shape: &'static [&'static str],
}

impl Command {
    /// Whether `deployment` needs this command.
    pub fn needed_by(&self, deployment: Deployment) -> bool {
        self.needed & deployment.bit() != 0
    }
}

/// Shorthand for the table below.
const fn cmd(
    name: &'static str,
    in_scripts: bool,
    needed: u8,
    shape: &'static [&'static str],
    why: &'static str,
) -> Command {
    Command {
        name,
        in_scripts,
        why,
        needed,
        shape,
    }
}

/// Every command leasehold sends to a data node, with the deployments that need it: the one list
/// the connect check, the error messages and the documented ACL lines follow.
///
/// A new command is one line here (its ACL name, whether a script runs it, the deployments, the
/// words leasehold sends with `K` for a key) and `+name` in each documented `ACL SETUSER` line of
/// the deployments that need it (the test that reads docs/operations.md says which are missing).
/// A command on a channel (`PUBLISH`, `SUBSCRIBE`) is checked against the user's channel rules
/// the same way once its shape names a channel under the prefix; the documented lines then need
/// that channel pattern in place of `resetchannels`.
pub const COMMANDS: &[Command] = &[
    cmd(
        "info",
        false,
        EVERY,
        &["INFO"],
        "the node's role and memory policy",
    ),
    cmd(
        "time",
        true,
        EVERY,
        &["TIME"],
        "the server's clock, in every acquisition",
    ),
    cmd(
        "role",
        false,
        SENTINEL | REDLOCK,
        &["ROLE"],
        "a primary, not a replica",
    ),
    cmd(
        "evalsha",
        false,
        EVERY,
        &[
            "EVALSHA",
            "0000000000000000000000000000000000000000",
            "1",
            "K",
        ],
        "every lease operation",
    ),
    cmd(
        "eval",
        false,
        EVERY,
        &["EVAL", "return 1", "1", "K"],
        "this check, and a script the server forgot",
    ),
    cmd(
        "script|load",
        false,
        EVERY,
        &["SCRIPT", "LOAD", "return 1"],
        "loading the scripts",
    ),
    cmd("get", true, EVERY, &["GET", "K"], "reading a lock"),
    cmd("set", true, EVERY, &["SET", "K", "1"], "taking a lock"),
    cmd("del", true, EVERY, &["DEL", "K"], "releasing"),
    cmd(
        "rename",
        true,
        LEASES,
        &["RENAME", "K", "K"],
        "the release: delete and leave the marker a retry finds",
    ),
    cmd("exists", true, EVERY, &["EXISTS", "K"], "the waiter queue"),
    cmd("pexpire", true, EVERY, &["PEXPIRE", "K", "1"], "renewing"),
    cmd("pttl", true, EVERY, &["PTTL", "K"], "a holder's time left"),
    cmd(
        "type",
        true,
        EVERY,
        &["TYPE", "K"],
        "refusing keys leasehold did not write",
    ),
    cmd(
        "zadd",
        true,
        LEASES,
        &["ZADD", "K", "1", "m"],
        "the waiter queue, a semaphore's holders",
    ),
    cmd(
        "zrem",
        true,
        LEASES,
        &["ZREM", "K", "m"],
        "the waiter queue, a semaphore's holders",
    ),
    cmd(
        "zscore",
        true,
        LEASES,
        &["ZSCORE", "K", "m"],
        "the waiter queue, a semaphore's holders",
    ),
    cmd(
        "zcard",
        true,
        LEASES,
        &["ZCARD", "K"],
        "the waiter queue, status",
    ),
    cmd(
        "zpopmin",
        true,
        LEASES,
        &["ZPOPMIN", "K"],
        "the hand-over to the next waiter",
    ),
    cmd(
        "zrange",
        true,
        LEASES,
        &["ZRANGE", "K", "0", "-1"],
        "a semaphore's holders",
    ),
    cmd(
        "zrangebyscore",
        true,
        LEASES,
        &["ZRANGEBYSCORE", "K", "0", "1"],
        "a semaphore's live permits",
    ),
    cmd(
        "zremrangebyscore",
        true,
        LEASES,
        &["ZREMRANGEBYSCORE", "K", "0", "1"],
        "expired waiters and permits",
    ),
    cmd(
        "hget",
        true,
        LEASES,
        &["HGET", "K", "f"],
        "a semaphore's fences",
    ),
    cmd(
        "hset",
        true,
        LEASES,
        &["HSET", "K", "f", "1"],
        "a semaphore's fences",
    ),
    cmd(
        "hdel",
        true,
        LEASES,
        &["HDEL", "K", "f"],
        "a semaphore's fences",
    ),
    cmd(
        "hgetall",
        false,
        LEASES,
        &["HGETALL", "K"],
        "status of a semaphore",
    ),
    cmd(
        "lpush",
        true,
        EVERY,
        &["LPUSH", "K", "1"],
        "waking a waiter",
    ),
    cmd(
        "ltrim",
        true,
        REDLOCK,
        &["LTRIM", "K", "0", "-1"],
        "a master's wake list",
    ),
    cmd(
        "blpop",
        false,
        EVERY,
        &["BLPOP", "K", "1"],
        "waiting for a turn",
    ),
    cmd(
        "wait",
        false,
        LEASES,
        &["WAIT", "0", "0"],
        "replica acknowledgements (ReplicaPolicy)",
    ),
    cmd("scan", false, EVERY, &["SCAN", "0"], "list"),
    cmd(
        "cluster|slots",
        false,
        CLUSTER,
        &["CLUSTER", "SLOTS"],
        "the cluster's slot map",
    ),
    cmd(
        "cluster|shards",
        false,
        CLUSTER,
        &["CLUSTER", "SHARDS"],
        "the cluster's slot map",
    ),
    cmd(
        "asking",
        false,
        CLUSTER,
        &["ASKING"],
        "following a slot being moved",
    ),
];

/// The commands `deployment` needs, in the table's order.
pub fn commands(deployment: Deployment) -> impl Iterator<Item = &'static Command> {
    COMMANDS.iter().filter(move |c| c.needed_by(deployment))
}

/// The commands leasehold's scripts run, upper case, for a message about a refused script.
pub(crate) fn script_commands() -> String {
    let names: Vec<String> = COMMANDS
        .iter()
        .filter(|c| c.in_scripts)
        .map(|c| c.name.to_ascii_uppercase())
        .collect();
    names.join(" ")
}

/// The check script's arguments for `deployment`, with `key` for `K`.
fn check_args(deployment: Deployment, key: &str) -> Vec<&str> {
    let mut args = Vec::new();
    for c in commands(deployment) {
        args.push(shape_len(c));
        args.push(c.name);
        args.extend(c.shape.iter().map(|w| if *w == "K" { key } else { w }));
    }
    args
}

/// The number of words of `c`'s shape, as the script's argument (shapes have at most 4 words).
fn shape_len(c: &Command) -> &'static str {
    ["0", "1", "2", "3", "4", "5"][c.shape.len()]
}

/// Asks `con` (a data node called `node` in messages) whether the user may run every command
/// `deployment` needs, on keys under `prefix`. [`Error::Denied`] naming each one it may not (and
/// the key pattern, when no command on a key is allowed); a refused `EVAL` is named by Redis.
pub(crate) async fn check<C: ConnectionLike + Send>(
    con: &mut C,
    node: &str,
    deployment: Deployment,
    prefix: &str,
) -> std::result::Result<Result<()>, redis::RedisError> {
    // PING alone first: a server closes the connection of a client not yet authenticated that
    // sends a command of more than 10 words, where PING is answered NOAUTH (refused credentials).
    let () = redis::cmd("PING").query_async(con).await?;
    let mut pipe = redis::pipe();
    add_check(&mut pipe, deployment, prefix);
    let (refused,): (Vec<String>,) = pipe.query_async(con).await?;
    Ok(refused_error(node, deployment, prefix, &refused))
}

/// The check as one command of `pipe` (its reply: the names of the refused commands). `EVAL`, not
/// `EVALSHA` first: it is the first script a connection runs, and a server that never saw it would
/// answer `NOSCRIPT`.
pub(crate) fn add_check(pipe: &mut redis::Pipeline, deployment: Deployment, prefix: &str) {
    // A key of no lease (names are never empty) that the documented pattern `~{prefix:*` covers.
    let key = format!("{{{prefix}:}}:acl-check");
    pipe.cmd("EVAL")
        .arg(include_str!("scripts/acl.lua"))
        .arg(0)
        .arg(check_args(deployment, &key));
}

/// The error for the commands `refused` (ACL names) on `node`, if any.
pub(crate) fn refused_error(
    node: &str,
    deployment: Deployment,
    prefix: &str,
    refused: &[String],
) -> Result<()> {
    if refused.is_empty() {
        return Ok(());
    }
    let keyed = |c: &&Command| c.shape.contains(&"K");
    let all_keyed_refused = commands(deployment)
        .filter(keyed)
        .all(|c| refused.iter().any(|r| r == c.name));
    let names: Vec<String> = refused.iter().map(|r| r.to_ascii_uppercase()).collect();
    let plural = if names.len() == 1 {
        "command"
    } else {
        "commands"
    };
    let mut what = format!("the {plural} {} on {node}", names.join(", "));
    if all_keyed_refused {
        what.push_str(&format!(
            " (every command on a key is refused: the key pattern must cover `{{{prefix}:*`)"
        ));
    }
    let adds: Vec<String> = refused.iter().map(|r| format!("+{r}")).collect();
    Err(Error::Denied {
        phase: Phase::Connect,
        what,
        detail: format!(
            "the user's ACL does not allow {}; nothing was run",
            if names.len() == 1 { "it" } else { "them" }
        ),
        fix: format!(
            "add {} to the user's ACL (docs/operations.md, \"The Redis user leasehold needs\", \
             has the whole `ACL SETUSER` line for each deployment, with the key pattern `~{{{prefix}:*`)",
            adds.join(" ")
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    /// The `ACL SETUSER` lines of docs/operations.md: one server, Redis Cluster, Redlock.
    fn documented() -> Vec<String> {
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/operations.md"
        ))
        .expect("docs/operations.md beside the crate");
        doc.lines()
            .filter(|l| l.starts_with("ACL SETUSER leasehold "))
            .map(str::to_owned)
            .collect()
    }

    /// The commands a line grants (`+name`), categories (`+@connection`) left out.
    fn granted(line: &str) -> BTreeSet<String> {
        line.split_whitespace()
            .filter_map(|w| w.strip_prefix('+'))
            .filter(|w| !w.starts_with('@'))
            .map(str::to_owned)
            .collect()
    }

    fn listed(d: Deployment) -> BTreeSet<String> {
        commands(d).map(|c| c.name.to_owned()).collect()
    }

    #[test]
    fn the_documented_acl_lines_grant_exactly_the_listed_commands() {
        let lines = documented();
        assert_eq!(lines.len(), 3, "one server, Cluster, Redlock: {lines:?}");
        for (line, d) in lines.iter().zip([
            Deployment::OneServer,
            Deployment::Cluster,
            Deployment::Redlock,
        ]) {
            assert_eq!(granted(line), listed(d), "{d:?}: {line}");
            assert!(line.contains("~{leasehold:*"), "{line}");
        }
        // Sentinel's data nodes: the first line and ROLE, as the text beside the lines says.
        let mut sentinel = granted(&lines[0]);
        sentinel.insert("role".to_owned());
        assert_eq!(sentinel, listed(Deployment::Sentinel));
        let doc = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/operations.md"
        ))
        .unwrap();
        assert!(doc.contains("the data nodes take the first line plus `+role`"));
    }

    #[test]
    fn every_shape_fits_the_script_and_names_a_real_command() {
        for c in COMMANDS {
            assert!(!c.shape.is_empty() && c.shape.len() <= 5, "{}", c.name);
            let head = c.shape[0].to_ascii_lowercase();
            let expect = match c.name.split_once('|') {
                Some((cmd, sub)) => {
                    assert_eq!(c.shape[1].to_ascii_lowercase(), sub, "{}", c.name);
                    cmd.to_owned()
                }
                None => c.name.to_owned(),
            };
            assert_eq!(head, expect);
        }
        assert!(script_commands().contains("RENAME"));
    }

    #[test]
    fn a_refusal_names_each_command_and_the_fix() {
        let e = refused_error(
            "redis://127.0.0.1:6379",
            Deployment::OneServer,
            "jobs",
            &["rename".to_owned(), "zadd".to_owned()],
        )
        .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("RENAME, ZADD"), "{msg}");
        assert!(msg.contains("+rename +zadd"), "{msg}");
        assert!(!msg.contains("key pattern must"), "{msg}");
        let every_keyed: Vec<String> = commands(Deployment::OneServer)
            .filter(|c| c.shape.contains(&"K"))
            .map(|c| c.name.to_owned())
            .collect();
        let e = refused_error("n", Deployment::OneServer, "jobs", &every_keyed).unwrap_err();
        assert!(e.to_string().contains("`{jobs:*`"), "{e}");
    }
}
