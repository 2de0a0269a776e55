//! A Redis Cluster on loopback: three masters and three replicas by default, with real failovers and
//! slot migrations (so MOVED and ASK can be seen).
//!
//! Promise: every node runs on free 127.0.0.1 ports (client and cluster bus, set with
//! `cluster-port`, so neither has to be the other plus 10000) in its own temporary directory, and
//! all are killed and their directories removed when the [`RedisCluster`] is dropped, also when a
//! test panics. Limit: a test process that is itself SIGKILL-ed leaves its servers running.
//!
//! A cluster URL pointing at a standalone node needs no help here: start a
//! [`RedisServer`]; the reverse is [`RedisCluster::node`]`(i).url()`.
//!
//! The helpers block the calling thread (they poll every 20 ms); from an async test use
//! `tokio::task::block_in_place` on a multi-thread runtime or `spawn_blocking`.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::credentials::Credentials;
use crate::daemon::{admin_connection, info_field, poll_until, retry_port_clash};
use crate::{free_port, RedisServer};

/// `cluster-node-timeout`. The Redis default is 15 s; 1 s makes a master's failure detected in
/// about a second and its replica promoted within a few, while staying far above loopback latency
/// on a busy machine so that a healthy node is not failed over by mistake.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1000);

/// The number of hash slots in a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// How long start-up and the helpers' implicit waits may take before they give up. A new master
/// reports `cluster_state:ok` no sooner than 2 s after it started (Redis's writable delay).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The hash slot of `key`, as Redis computes it: CRC16 (XMODEM) of the key, or of its hash tag (the
/// part between the first `{` and the next `}`, if not empty), modulo 16384.
pub fn key_slot(key: impl AsRef<[u8]>) -> u16 {
    let key = key.as_ref();
    let hashed = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .filter(|&close| close > 0)
                .map(|close| &rest[..close])
        })
        .unwrap_or(key);
    crc16(hashed) % SLOTS
}

fn crc16(data: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// Settings for a [`RedisCluster`].
#[derive(Debug, Clone)]
#[must_use]
pub struct RedisClusterBuilder {
    /// Masters, each given an equal share of the slots.
    masters: usize,
    /// Replicas per master.
    replicas_per_master: usize,
    /// Required by every node (and used by replicas to sync and by `MIGRATE`).
    auth: Option<Credentials>,
}

impl Default for RedisClusterBuilder {
    fn default() -> Self {
        Self {
            masters: 3,
            replicas_per_master: 1,
            auth: None,
        }
    }
}

impl RedisClusterBuilder {
    /// The number of masters (default 3; at least 3 so that a failover has a majority of masters
    /// left to authorise it).
    pub fn masters(mut self, masters: usize) -> Self {
        self.masters = masters;
        self
    }

    /// Replicas per master (default 1).
    pub fn replicas_per_master(mut self, replicas: usize) -> Self {
        self.replicas_per_master = replicas;
        self
    }

    /// Credentials every node requires (`requirepass`, or an ACL user), with `masterauth`
    /// (`masteruser`) so that replicas can sync.
    pub fn credentials(mut self, credentials: Credentials) -> Self {
        self.auth = Some(credentials);
        self
    }

    /// Starts the nodes, assigns the slots evenly to the masters (in node order), joins them
    /// (`CLUSTER MEET`), attaches the replicas (`CLUSTER REPLICATE`), and returns once every node
    /// reports `cluster_state:ok`, all agree on who owns which slot and who replicates whom, and
    /// every replica has synced.
    ///
    /// # Errors
    /// Fewer than 3 masters, a process exits at start, or the cluster does not settle within 30 s.
    pub fn start(self) -> io::Result<RedisCluster> {
        if self.masters < 3 {
            return Err(io::Error::other(format!(
                "a cluster needs at least 3 masters for failovers to be authorised, not {}",
                self.masters
            )));
        }
        let total = self.masters * (1 + self.replicas_per_master);
        let mut nodes = Vec::with_capacity(total);
        for _ in 0..total {
            nodes.push(retry_port_clash(|| self.node().port(free_port()).start())?);
        }
        let mut cluster = RedisCluster {
            builder: self,
            ids: Vec::with_capacity(total),
            nodes,
        };
        cluster.form()?;
        Ok(cluster)
    }

    fn node(&self) -> crate::RedisServerBuilder {
        // The default 5 s diskless-sync delay would make every replica's initial sync wait 5 s.
        let mut b = RedisServer::builder()
            .arg("--cluster-enabled")
            .arg("yes")
            .arg("--cluster-config-file")
            .arg("nodes.conf")
            .arg("--cluster-node-timeout")
            .arg(NODE_TIMEOUT.as_millis().to_string())
            .arg("--cluster-port")
            .arg(free_port().to_string())
            .arg("--repl-diskless-sync-delay")
            .arg("0");
        if let Some(auth) = &self.auth {
            b = auth.apply(b);
            for a in auth.replication_args() {
                b = b.arg(a);
            }
        }
        b
    }
}

/// A Redis Cluster on loopback (3 masters and 3 replicas by default), torn down on drop.
///
/// Nodes `0..masters` start as masters owning equal slot ranges in order (node 0 owns slot 0);
/// node `masters + k` starts as a replica of master `k % masters`. Failovers and migrations change
/// that, so ask [`master_of_slot`](Self::master_of_slot) rather than assuming. Timing:
/// [`NODE_TIMEOUT`] (1 s). Measured on a 2-core machine: a cluster starts in about 2.1 s (Redis keeps a
/// new master out of `cluster_state:ok` for its first 2 s), a killed master's replica serves its
/// slots about 2.4 s later, and a slot migration takes about 10 ms; give failovers 30 s in tests.
#[derive(Debug)]
pub struct RedisCluster {
    /// The settings, kept for URLs and `MIGRATE` credentials.
    builder: RedisClusterBuilder,
    /// Every node's cluster id, by index (kept across restarts in the node's `nodes.conf`).
    ids: Vec<String>,
    /// The nodes, masters first.
    nodes: Vec<RedisServer>,
}

/// A slot being moved from one master to another, between
/// [`RedisCluster::begin_slot_migration`] and [`RedisCluster::finish_slot_migration`]. While it
/// lasts, the source answers `ASK` for keys of the slot it no longer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlotMigration {
    /// The slot.
    pub slot: u16,
    /// The node it is moving from (`MIGRATING`).
    pub from: usize,
    /// The node it is moving to (`IMPORTING`).
    pub to: usize,
}

/// What one node believes about the cluster, reduced to what every node must agree on.
#[derive(Debug, PartialEq, Eq)]
struct View {
    /// Slot ranges and the id of the node serving each.
    slots: Vec<(u16, u16, String)>,
    /// For each node id: `None` for a master, `Some(master id)` for a replica.
    roles: BTreeMap<String, Option<String>>,
}

impl RedisCluster {
    /// Starts a cluster of 3 masters and 3 replicas, without credentials.
    ///
    /// # Errors
    /// As [`RedisClusterBuilder::start`].
    pub fn start() -> io::Result<Self> {
        Self::builder().start()
    }

    /// A builder for other sizes or credentials.
    pub fn builder() -> RedisClusterBuilder {
        RedisClusterBuilder::default()
    }

    /// `redis-cluster://[user:password@]127.0.0.1:a,127.0.0.1:b,…`: every node as a seed.
    pub fn seed_url(&self) -> String {
        let userinfo = self
            .builder
            .auth
            .as_ref()
            .map(|a| format!("{}@", a.userinfo()))
            .unwrap_or_default();
        let hosts: Vec<String> = self.nodes.iter().map(|n| addr_of(n).to_string()).collect();
        format!("redis-cluster://{userinfo}{}", hosts.join(","))
    }

    /// The credentials every node requires, if any.
    pub fn credentials(&self) -> Option<&Credentials> {
        self.builder.auth.as_ref()
    }

    /// The nodes.
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Node `i`: its [`url`](RedisServer::url) is a plain `redis://` URL to that one node.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Node `i`, to pause, resume or kill by hand (restart with
    /// [`restart_node`](Self::restart_node), which waits for it to rejoin).
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// Node `i`'s address.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn addr(&self, i: usize) -> SocketAddr {
        addr_of(&self.nodes[i])
    }

    /// Node `i`'s cluster id.
    ///
    /// # Panics
    /// If `i` is out of range.
    pub fn node_id(&self, i: usize) -> &str {
        &self.ids[i]
    }

    /// The index of the node at `addr`, if it is one of this cluster's.
    pub fn index_of(&self, addr: SocketAddr) -> Option<usize> {
        self.nodes.iter().position(|n| addr_of(n) == addr)
    }

    /// The masters that serve slots, as the first live node sees them, in index order.
    ///
    /// # Errors
    /// No node is running and answering.
    pub fn masters(&self) -> io::Result<Vec<usize>> {
        let view = self.any_view()?;
        let mut masters: Vec<usize> = view
            .slots
            .iter()
            .filter_map(|(_, _, id)| self.index_of_id(id))
            .collect();
        masters.sort_unstable();
        masters.dedup();
        Ok(masters)
    }

    /// The replicas of node `master`, as the first live node sees them.
    ///
    /// # Errors
    /// No node is running and answering.
    pub fn replicas_of(&self, master: usize) -> io::Result<Vec<usize>> {
        let view = self.any_view()?;
        let id = &self.ids[master];
        Ok(view
            .roles
            .iter()
            .filter(|(_, m)| m.as_deref() == Some(id.as_str()))
            .filter_map(|(r, _)| self.index_of_id(r))
            .collect())
    }

    /// The node serving `slot`, as the first live node sees it.
    ///
    /// # Errors
    /// No node is running and answering, or no node serves the slot.
    pub fn master_of_slot(&self, slot: u16) -> io::Result<usize> {
        let view = self.any_view()?;
        view.slots
            .iter()
            .find(|(start, end, _)| (*start..=*end).contains(&slot))
            .and_then(|(_, _, id)| self.index_of_id(id))
            .ok_or_else(|| io::Error::other(format!("no node serves slot {slot}")))
    }

    /// The node serving `key`'s slot ([`key_slot`]).
    ///
    /// # Errors
    /// As [`master_of_slot`](Self::master_of_slot).
    pub fn master_of_key(&self, key: impl AsRef<[u8]>) -> io::Result<usize> {
        self.master_of_slot(key_slot(key))
    }

    /// SIGKILLs the master serving `slot` and waits until one of its replicas serves it and the
    /// cluster is whole again ([`wait_until_ok`](Self::wait_until_ok)); returns the new master.
    ///
    /// # Errors
    /// The master has no replica, or the failover does not finish within `timeout`.
    pub fn kill_master_of_slot(&mut self, slot: u16, timeout: Duration) -> io::Result<usize> {
        let old = self.master_of_slot(slot)?;
        if self.replicas_of(old)?.is_empty() {
            return Err(io::Error::other(format!(
                "node {old} serves slot {slot} but has no replica to promote"
            )));
        }
        self.nodes[old].kill()?;
        self.wait_until_ok(timeout)?;
        let new = self.master_of_slot(slot)?;
        if new == old {
            return Err(io::Error::other(format!(
                "slot {slot} is still served by the killed node {old}"
            )));
        }
        Ok(new)
    }

    /// Starts moving `slot` from its master to master `to`: `CLUSTER SETSLOT … IMPORTING` on the
    /// target, then `MIGRATING` on the source. Keys stay where they are until
    /// [`move_slot_keys`](Self::move_slot_keys) or [`move_keys`](Self::move_keys); meanwhile the
    /// source answers `ASK` for keys of the slot it does not hold.
    ///
    /// # Errors
    /// `to` is not a master, already serves the slot, or a node refuses the command.
    pub fn begin_slot_migration(&self, slot: u16, to: usize) -> io::Result<SlotMigration> {
        let from = self.master_of_slot(slot)?;
        if from == to {
            return Err(io::Error::other(format!(
                "node {to} already serves slot {slot}"
            )));
        }
        if !self.masters()?.contains(&to) {
            return Err(io::Error::other(format!(
                "node {to} is not a master serving slots"
            )));
        }
        let m = SlotMigration { slot, from, to };
        self.setslot(to, slot, &["IMPORTING", &self.ids[from]])?;
        self.setslot(from, slot, &["MIGRATING", &self.ids[to]])?;
        Ok(m)
    }

    /// Moves every key of the migrating slot from the source to the target (`CLUSTER
    /// GETKEYSINSLOT` and `MIGRATE … KEYS`, 100 at a time); returns how many moved.
    ///
    /// # Errors
    /// A node refuses a command.
    pub fn move_slot_keys(&self, m: &SlotMigration) -> io::Result<usize> {
        let mut con = admin_connection(&self.nodes[m.from].url())?;
        let mut moved = 0;
        loop {
            let keys: Vec<Vec<u8>> = redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(m.slot)
                .arg(100)
                .query(&mut con)
                .map_err(io::Error::other)?;
            if keys.is_empty() {
                return Ok(moved);
            }
            self.migrate(m, &keys)?;
            moved += keys.len();
        }
    }

    /// Moves just these keys (which must be in the migrating slot) to the target, leaving the
    /// slot's other keys on the source: requests for a moved key then get `ASK` from the source.
    ///
    /// # Errors
    /// A key is in another slot, or a node refuses the command.
    pub fn move_keys(&self, m: &SlotMigration, keys: &[&[u8]]) -> io::Result<()> {
        if let Some(k) = keys.iter().find(|k| key_slot(k) != m.slot) {
            return Err(io::Error::other(format!(
                "key {:?} is in slot {}, not in the migrating slot {}",
                String::from_utf8_lossy(k),
                key_slot(k),
                m.slot
            )));
        }
        let keys: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
        self.migrate(m, &keys)
    }

    /// Moves any keys left, then gives the slot to the target on every master (`CLUSTER SETSLOT …
    /// NODE` on the target, the source, then the others) and waits until every node agrees.
    ///
    /// # Errors
    /// A node refuses a command, or the nodes do not agree within 30 s.
    pub fn finish_slot_migration(&self, m: SlotMigration) -> io::Result<()> {
        self.move_slot_keys(&m)?;
        let target = self.ids[m.to].clone();
        self.setslot(m.to, m.slot, &["NODE", &target])?;
        self.setslot(m.from, m.slot, &["NODE", &target])?;
        for other in self.masters()? {
            if other != m.to && other != m.from && self.is_live(other) {
                self.setslot(other, m.slot, &["NODE", &target])?;
            }
        }
        self.wait_until_ok(SETTLE_TIMEOUT)
    }

    /// Moves `slot`, with its keys, from its master to master `to` in one go.
    ///
    /// # Errors
    /// As [`begin_slot_migration`](Self::begin_slot_migration) and
    /// [`finish_slot_migration`](Self::finish_slot_migration).
    pub fn migrate_slot(&self, slot: u16, to: usize) -> io::Result<()> {
        let m = self.begin_slot_migration(slot, to)?;
        self.finish_slot_migration(m)
    }

    /// Restarts node `i` on its ports, empty (no persistence) but with its cluster identity
    /// (`nodes.conf`), and waits until it has rejoined: a master that was failed over comes back
    /// as a replica of its successor.
    ///
    /// # Errors
    /// It does not start, or the cluster does not settle within 30 s.
    pub fn restart_node(&mut self, i: usize) -> io::Result<()> {
        self.nodes[i].restart()?;
        self.wait_until_ok(SETTLE_TIMEOUT)
    }

    /// Waits until every running, unpaused node reports `cluster_state:ok`, all agree on the slot
    /// owners and the replica links among running nodes, every slot is served by a running node,
    /// and every running replica has its link to its master up.
    ///
    /// # Errors
    /// Not so within `timeout` (the error says what was missing).
    pub fn wait_until_ok(&self, timeout: Duration) -> io::Result<()> {
        poll_until(timeout, "cluster to settle", || self.check_ok())
    }

    fn check_ok(&self) -> io::Result<Option<()>> {
        let live: Vec<usize> = (0..self.nodes.len()).filter(|&i| self.is_live(i)).collect();
        let mut first: Option<(usize, View)> = None;
        for &i in &live {
            let mut con = admin_connection(&self.nodes[i].url())?;
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query(&mut con)
                .map_err(io::Error::other)?;
            if info_field(&info, "cluster_state") != Some("ok") {
                return Err(io::Error::other(format!(
                    "node {i} is not cluster_state:ok"
                )));
            }
            let view = self.view(i)?;
            match &first {
                None => first = Some((i, view)),
                Some((j, v)) if *v != view => {
                    return Err(io::Error::other(format!(
                        "nodes {j} and {i} disagree: {v:?} / {view:?}"
                    )))
                }
                Some(_) => {}
            }
        }
        let Some((_, view)) = first else {
            return Err(io::Error::other("no node is running and unpaused"));
        };
        for (start, _, id) in &view.slots {
            match self.index_of_id(id) {
                Some(i) if self.nodes[i].pid().is_some() => {}
                _ => {
                    return Err(io::Error::other(format!(
                        "slot {start} is still served by a node that is down ({id})"
                    )))
                }
            }
        }
        for (id, master) in &view.roles {
            let (Some(r), Some(_)) = (self.index_of_id(id), master) else {
                continue;
            };
            if !live.contains(&r) {
                continue;
            }
            let mut con = admin_connection(&self.nodes[r].url())?;
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query(&mut con)
                .map_err(io::Error::other)?;
            if info_field(&info, "master_link_status") != Some("up") {
                return Err(io::Error::other(format!(
                    "replica {r} has not synced with its master yet"
                )));
            }
        }
        Ok(Some(()))
    }

    /// Joins freshly started nodes into a cluster, as `redis-cli --cluster create` would, without
    /// needing `redis-cli` and without its fixed sleeps.
    fn form(&mut self) -> io::Result<()> {
        for node in &self.nodes {
            let mut con = admin_connection(&node.url())?;
            let id: String = redis::cmd("CLUSTER")
                .arg("MYID")
                .query(&mut con)
                .map_err(io::Error::other)?;
            self.ids.push(id);
        }
        let masters = self.builder.masters;
        for (i, node) in self.nodes.iter().enumerate() {
            let mut con = admin_connection(&node.url())?;
            // Distinct epochs up front spare the cluster the epoch-collision round that would
            // otherwise delay the first consistent view.
            redis::cmd("CLUSTER")
                .arg("SET-CONFIG-EPOCH")
                .arg(i + 1)
                .query::<()>(&mut con)
                .map_err(io::Error::other)?;
            if i < masters {
                let start = i * usize::from(SLOTS) / masters;
                let end = (i + 1) * usize::from(SLOTS) / masters - 1;
                redis::cmd("CLUSTER")
                    .arg("ADDSLOTSRANGE")
                    .arg(start)
                    .arg(end)
                    .query::<()>(&mut con)
                    .map_err(io::Error::other)?;
            }
        }
        let mut con = admin_connection(&self.nodes[0].url())?;
        for node in &self.nodes[1..] {
            let bus = bus_port(node)?;
            redis::cmd("CLUSTER")
                .arg("MEET")
                .arg("127.0.0.1")
                .arg(node.port())
                .arg(bus)
                .query::<()>(&mut con)
                .map_err(io::Error::other)?;
        }
        let total = self.nodes.len();
        poll_until(SETTLE_TIMEOUT, "nodes to meet", || {
            for i in 0..total {
                let text = self.cluster_nodes(i)?;
                let known = text.lines().filter(|l| !l.trim().is_empty()).count();
                if known != total || text.contains("handshake") || text.contains("noaddr") {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })?;
        for r in masters..total {
            let master = &self.ids[(r - masters) % masters];
            let mut con = admin_connection(&self.nodes[r].url())?;
            redis::cmd("CLUSTER")
                .arg("REPLICATE")
                .arg(master)
                .query::<()>(&mut con)
                .map_err(io::Error::other)?;
        }
        self.wait_until_ok(SETTLE_TIMEOUT)
    }

    fn migrate(&self, m: &SlotMigration, keys: &[Vec<u8>]) -> io::Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let mut con = admin_connection(&self.nodes[m.from].url())?;
        let mut cmd = redis::cmd("MIGRATE");
        cmd.arg("127.0.0.1")
            .arg(self.nodes[m.to].port())
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("REPLACE");
        if let Some(auth) = &self.builder.auth {
            match auth.user_name() {
                Some(user) => cmd.arg("AUTH2").arg(user).arg(auth.secret()),
                None => cmd.arg("AUTH").arg(auth.secret()),
            };
        }
        cmd.arg("KEYS").arg(keys);
        cmd.query::<String>(&mut con)
            .map(drop)
            .map_err(|e| io::Error::other(format!("MIGRATE of slot {}: {e}", m.slot)))
    }

    fn setslot(&self, node: usize, slot: u16, args: &[&str]) -> io::Result<()> {
        let mut con = admin_connection(&self.nodes[node].url())?;
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(args)
            .query::<()>(&mut con)
            .map_err(|e| {
                io::Error::other(format!(
                    "CLUSTER SETSLOT {slot} {args:?} on node {node}: {e}"
                ))
            })
    }

    fn cluster_nodes(&self, i: usize) -> io::Result<String> {
        let mut con = admin_connection(&self.nodes[i].url())?;
        redis::cmd("CLUSTER")
            .arg("NODES")
            .query(&mut con)
            .map_err(io::Error::other)
    }

    /// Node `i`'s view: slot owners and replica links among running nodes.
    fn view(&self, i: usize) -> io::Result<View> {
        let text = self.cluster_nodes(i)?;
        let mut slots = Vec::new();
        let mut roles = BTreeMap::new();
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return Err(io::Error::other(format!(
                    "unexpected CLUSTER NODES line: {line}"
                )));
            }
            let id = fields[0].to_owned();
            for range in &fields[8..] {
                // `[slot->-id]` and `[slot-<-id]` mark migrations in progress, not ownership.
                if range.starts_with('[') {
                    continue;
                }
                let (start, end) = match range.split_once('-') {
                    Some((a, b)) => (parse_slot(a)?, parse_slot(b)?),
                    None => (parse_slot(range)?, parse_slot(range)?),
                };
                slots.push((start, end, id.clone()));
            }
            let running = self
                .index_of_id(&id)
                .is_some_and(|n| self.nodes[n].pid().is_some());
            if running {
                let master = (fields[3] != "-").then(|| fields[3].to_owned());
                roles.insert(id, master);
            }
        }
        slots.sort();
        Ok(View { slots, roles })
    }

    fn any_view(&self) -> io::Result<View> {
        let mut last = io::Error::other("no node is running and unpaused");
        for i in (0..self.nodes.len()).filter(|&i| self.is_live(i)) {
            match self.view(i) {
                Ok(v) => return Ok(v),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    fn is_live(&self, i: usize) -> bool {
        self.nodes[i].pid().is_some() && !self.nodes[i].is_paused()
    }

    fn index_of_id(&self, id: &str) -> Option<usize> {
        self.ids.iter().position(|x| x == id)
    }
}

fn parse_slot(s: &str) -> io::Result<u16> {
    s.parse()
        .map_err(|e| io::Error::other(format!("bad slot {s:?} in CLUSTER NODES: {e}")))
}

/// The node's cluster bus port, from its own `CONFIG GET cluster-port`.
fn bus_port(node: &RedisServer) -> io::Result<u16> {
    let mut con = admin_connection(&node.url())?;
    let (_, port): (String, u16) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("cluster-port")
        .query(&mut con)
        .map_err(io::Error::other)?;
    Ok(port)
}

fn addr_of(node: &RedisServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], node.port()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_slot_matches_the_redis_cluster_specification() {
        // Values from the Redis Cluster specification and `CLUSTER KEYSLOT`.
        assert_eq!(crc16(b"123456789"), 0x31C3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
        assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}".as_bytes()));
        assert_ne!(
            key_slot("foo{}{bar}"),
            key_slot("bar"),
            "an empty tag hashes the whole key"
        );
        assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
    }
}
