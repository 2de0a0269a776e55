//! A Sentinel-managed Redis on loopback: one primary, one replica and three sentinels, with real
//! failovers, including the lossy one the seeds describe.
//!
//! Promise: every process runs on a free 127.0.0.1 port in its own temporary directory, and all of
//! them are killed (continued first if paused) and their directories removed when the [`SentinelSet`]
//! is dropped, also when a test panics. Limit: a test process that is itself SIGKILL-ed cannot run
//! destructors, so its servers outlive it (they keep nothing on disk but their temporary directory).
//!
//! The helpers block the calling thread (they poll every 20 ms). From an async test that must keep
//! other tasks running meanwhile (a lease's watchdog, say), call them on a multi-thread runtime
//! inside `tokio::task::block_in_place`, or move the set into `spawn_blocking`.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::credentials::Credentials;
use crate::daemon::{
    admin_connection, fatal, info_field, poll_until, redis_server_binary, retry_port_clash, Daemon,
};
use crate::{free_port, RedisServer};

/// The master name used when the caller does not choose one.
pub const DEFAULT_MASTER_NAME: &str = "leasehold";

/// How long a sentinel waits without a valid reply before it calls an instance down. The Redis
/// default is 30 s; 1 s makes a failover take a few seconds, and is still far above the latency of
/// a loopback round trip on a busy machine, so a healthy instance is not called down by mistake.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// Sentinel `failover-timeout`. A sentinel does not retry a failover of the same master within twice
/// this, so a failed election costs 4 s instead of the default 6 minutes; promoting a replica on
/// loopback takes milliseconds, well inside it.
pub const FAILOVER_TIMEOUT: Duration = Duration::from_millis(2000);

/// How long start-up and the helpers' implicit waits may take before they give up with an error.
/// Sentinels find each other through hello messages sent every 2 s, so start-up takes 2 to 3 s.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(20);

/// Settings for a [`SentinelSet`].
#[derive(Debug, Clone)]
#[must_use]
pub struct SentinelSetBuilder {
    /// The name sentinels monitor the primary under (the `#master` of a sentinel URL).
    master_name: String,
    /// Required by the primary and the replica (and used by the replica and the sentinels to reach
    /// them), independent of the sentinels' own.
    data_auth: Option<Credentials>,
    /// Required by the sentinels themselves (and used between sentinels).
    sentinel_auth: Option<Credentials>,
}

impl Default for SentinelSetBuilder {
    fn default() -> Self {
        Self {
            master_name: DEFAULT_MASTER_NAME.to_owned(),
            data_auth: None,
            sentinel_auth: None,
        }
    }
}

impl SentinelSetBuilder {
    /// The master name the sentinels monitor (default [`DEFAULT_MASTER_NAME`]).
    pub fn master_name(mut self, name: &str) -> Self {
        self.master_name = name.to_owned();
        self
    }

    /// Credentials the data nodes (primary and replica) require: `requirepass`/`masterauth`, or an
    /// ACL user with `masteruser`; the sentinels get `sentinel auth-pass` (and `auth-user`).
    pub fn data_credentials(mut self, credentials: Credentials) -> Self {
        self.data_auth = Some(credentials);
        self
    }

    /// Credentials the sentinels require (`requirepass`, or an ACL user), also used between
    /// sentinels (`sentinel sentinel-pass`/`sentinel-user`). Independent of the data nodes'.
    pub fn sentinel_credentials(mut self, credentials: Credentials) -> Self {
        self.sentinel_auth = Some(credentials);
        self
    }

    /// Starts the primary, the replica (waiting for its initial sync) and three sentinels, and
    /// returns once every sentinel knows the other two and sees the replica as healthy, so a
    /// failover can start at once.
    ///
    /// # Errors
    /// A binary is missing, a process exits at start, or the set does not settle within 20 s.
    pub fn start(self) -> io::Result<SentinelSet> {
        let primary = retry_port_clash(|| self.data_node(None).port(free_port()).start())?;
        let replica = retry_port_clash(|| {
            self.data_node(Some(primary.port()))
                .port(free_port())
                .start()
        })?;
        replica.wait_until_synced()?;
        let mut sentinels = Vec::with_capacity(3);
        for _ in 0..3 {
            sentinels.push(retry_port_clash(|| {
                SentinelServer::start(self.sentinel_auth.clone(), |port, dir| {
                    self.sentinel_conf(port, dir, primary.port())
                })
            })?);
        }
        let set = SentinelSet {
            builder: self,
            nodes: vec![primary, replica],
            sentinels,
            primary: 0,
            isolated: Vec::new(),
        };
        set.wait_until_monitored(SETTLE_TIMEOUT)?;
        Ok(set)
    }

    fn data_node(&self, replica_of: Option<u16>) -> crate::RedisServerBuilder {
        // The default 5 s diskless-sync delay would make every initial sync (start-up, a restarted
        // node rejoining) wait 5 s for other replicas that will never come.
        let mut b = RedisServer::builder()
            .arg("--repl-diskless-sync-delay")
            .arg("0");
        if let Some(auth) = &self.data_auth {
            b = auth.apply(b);
            for a in auth.replication_args() {
                b = b.arg(a);
            }
        }
        if let Some(port) = replica_of {
            b = b.replica_of(port);
        }
        b
    }

    fn sentinel_conf(&self, port: u16, dir: &Path, primary_port: u16) -> String {
        let name = &self.master_name;
        let dir = dir.display();
        let mut conf = format!(
            "port {port}\nbind 127.0.0.1\ndaemonize no\ndir \"{dir}\"\nlogfile \"{dir}/sentinel.log\"\n\
             sentinel monitor {name} 127.0.0.1 {primary_port} 2\n\
             sentinel down-after-milliseconds {name} {}\n\
             sentinel failover-timeout {name} {}\n\
             sentinel parallel-syncs {name} 1\n",
            DOWN_AFTER.as_millis(),
            FAILOVER_TIMEOUT.as_millis(),
        );
        if let Some(auth) = &self.data_auth {
            if let Some(user) = auth.user_name() {
                conf.push_str(&format!("sentinel auth-user {name} {user}\n"));
            }
            conf.push_str(&format!("sentinel auth-pass {name} {}\n", auth.secret()));
        }
        if let Some(auth) = &self.sentinel_auth {
            match auth.user_name() {
                Some(user) => {
                    conf.push_str(&format!(
                        "user {user} on >{} ~* &* +@all\nuser default off\nsentinel sentinel-user {user}\n",
                        auth.secret()
                    ));
                }
                None => conf.push_str(&format!("requirepass {}\n", auth.secret())),
            }
            conf.push_str(&format!("sentinel sentinel-pass {}\n", auth.secret()));
        }
        conf
    }
}

/// One primary, one replica and three sentinels (quorum 2) on loopback, all torn down on drop.
///
/// Node 0 starts as the primary and node 1 as its replica; after a failover the roles swap, so ask
/// [`primary_index`](Self::primary_index) rather than assuming. Timings: [`DOWN_AFTER`] (1 s) and
/// [`FAILOVER_TIMEOUT`] (2 s), `parallel-syncs 1`. Measured on a 2-core machine, loaded or not: a
/// set starts in about 2.3 s, a failover completes about 2.3 s (1.9 to 3 s) after the primary dies,
/// and a restarted node is a healthy replica again in about 1.1 s; a split sentinel election adds
/// 4 s, so give [`wait_for_failover`](Self::wait_for_failover) 30 s in tests.
#[derive(Debug)]
pub struct SentinelSet {
    /// The settings, kept for URLs and restarts.
    builder: SentinelSetBuilder,
    /// The data nodes: index 0 started as primary, 1 as replica.
    nodes: Vec<RedisServer>,
    /// The three sentinels.
    sentinels: Vec<SentinelServer>,
    /// The node the sentinels last reported as primary: the one a failover moves away from.
    primary: usize,
    /// Replicas paused by [`begin_lossy_failover`](Self::begin_lossy_failover), to be continued by
    /// [`finish_lossy_failover`](Self::finish_lossy_failover).
    isolated: Vec<usize>,
}

impl SentinelSet {
    /// Starts a set with default settings (master name [`DEFAULT_MASTER_NAME`], no passwords).
    ///
    /// # Errors
    /// As [`SentinelSetBuilder::start`].
    pub fn start() -> io::Result<Self> {
        Self::builder().start()
    }

    /// A builder for a master name or credentials.
    pub fn builder() -> SentinelSetBuilder {
        SentinelSetBuilder::default()
    }

    /// The master name the sentinels monitor.
    pub fn master_name(&self) -> &str {
        &self.builder.master_name
    }

    /// The credentials the data nodes require, if any.
    pub fn data_credentials(&self) -> Option<&Credentials> {
        self.builder.data_auth.as_ref()
    }

    /// The credentials the sentinels require, if any.
    pub fn sentinel_credentials(&self) -> Option<&Credentials> {
        self.builder.sentinel_auth.as_ref()
    }

    /// The sentinels' addresses.
    pub fn sentinel_addrs(&self) -> Vec<SocketAddr> {
        self.sentinels.iter().map(SentinelServer::addr).collect()
    }

    /// `127.0.0.1:a,127.0.0.1:b,127.0.0.1:c`: the sentinels as a URL's host list.
    pub fn sentinel_hosts(&self) -> String {
        self.sentinel_addrs()
            .iter()
            .map(SocketAddr::to_string)
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `redis-sentinel://[user:password@]127.0.0.1:a,127.0.0.1:b,127.0.0.1:c#master` in the Lettuce
    /// form, with the data nodes' credentials (if any) as user-info. The sentinels' own credentials
    /// are not in it: see [`sentinel_credentials`](Self::sentinel_credentials).
    pub fn sentinel_url(&self) -> String {
        self.sentinel_url_for_master(self.master_name())
    }

    /// [`sentinel_url`](Self::sentinel_url) naming another master, e.g. one the sentinels do not
    /// monitor (the "unknown master name" case).
    pub fn sentinel_url_for_master(&self, master_name: &str) -> String {
        let userinfo = self
            .builder
            .data_auth
            .as_ref()
            .map(|a| format!("{}@", a.userinfo()))
            .unwrap_or_default();
        format!(
            "redis-sentinel://{userinfo}{}#{master_name}",
            self.sentinel_hosts()
        )
    }

    /// The data nodes (0 started as primary, 1 as replica).
    pub fn nodes(&self) -> &[RedisServer] {
        &self.nodes
    }

    /// Data node `i`, to read its URL or connect.
    ///
    /// # Panics
    /// If `i` is not 0 or 1.
    pub fn node(&self, i: usize) -> &RedisServer {
        &self.nodes[i]
    }

    /// Data node `i`, to pause, resume or kill it by hand. After a restart use
    /// [`restart_node`](Self::restart_node), which also puts the node back in its role.
    ///
    /// # Panics
    /// If `i` is not 0 or 1.
    pub fn node_mut(&mut self, i: usize) -> &mut RedisServer {
        &mut self.nodes[i]
    }

    /// The sentinels.
    pub fn sentinels(&self) -> &[SentinelServer] {
        &self.sentinels
    }

    /// Sentinel `i` (0 to 2), to pause, resume, kill or restart it.
    ///
    /// # Panics
    /// If `i` is greater than 2.
    pub fn sentinel_mut(&mut self, i: usize) -> &mut SentinelServer {
        &mut self.sentinels[i]
    }

    /// SIGSTOP every sentinel: clients asking them time out (the "sentinels unreachable, hanging"
    /// case).
    ///
    /// # Errors
    /// A sentinel is not running.
    pub fn pause_sentinels(&mut self) -> io::Result<()> {
        self.sentinels
            .iter_mut()
            .try_for_each(SentinelServer::pause)
    }

    /// SIGCONT every paused sentinel.
    ///
    /// # Errors
    /// Sending the signal failed.
    pub fn resume_sentinels(&mut self) -> io::Result<()> {
        self.sentinels
            .iter_mut()
            .filter(|s| s.is_paused())
            .try_for_each(SentinelServer::resume)
    }

    /// SIGKILL every sentinel: clients get "connection refused" (the "sentinels unreachable"
    /// case). [`restart_sentinels`](Self::restart_sentinels) brings them back with the state they
    /// had written to their configuration files.
    ///
    /// # Errors
    /// Reaping a process failed.
    pub fn kill_sentinels(&mut self) -> io::Result<()> {
        self.sentinels.iter_mut().try_for_each(SentinelServer::kill)
    }

    /// Restarts every sentinel on its port and waits until the set is monitored again.
    ///
    /// # Errors
    /// A sentinel does not start, or the set does not settle within 20 s.
    pub fn restart_sentinels(&mut self) -> io::Result<()> {
        self.sentinels
            .iter_mut()
            .try_for_each(SentinelServer::restart)?;
        self.wait_until_monitored(SETTLE_TIMEOUT)
    }

    /// The primary's address, as the first sentinel that answers reports it.
    ///
    /// # Errors
    /// No sentinel is running, unpaused and answering.
    pub fn primary_addr(&self) -> io::Result<SocketAddr> {
        let mut last = io::Error::other("no sentinel is running and unpaused");
        for s in self.live_sentinels() {
            match s.master_addr(self.master_name()) {
                Ok(Some(addr)) => return Ok(addr),
                Ok(None) => {
                    last = io::Error::other(format!(
                        "sentinel {} does not know master {:?}",
                        s.addr(),
                        self.master_name()
                    ))
                }
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// The index of the node the sentinels report as primary.
    ///
    /// # Errors
    /// As [`primary_addr`](Self::primary_addr), or the address is not one of the nodes.
    pub fn primary_index(&self) -> io::Result<usize> {
        let addr = self.primary_addr()?;
        self.index_of(addr)
    }

    /// SIGKILLs the primary the sentinels report (nothing it has not replicated survives) and
    /// returns its address. Follow with [`wait_for_failover`](Self::wait_for_failover).
    ///
    /// # Errors
    /// The primary cannot be found or reaped.
    pub fn kill_primary(&mut self) -> io::Result<SocketAddr> {
        let p = self.primary_index()?;
        self.primary = p;
        self.nodes[p].kill()?;
        Ok(addr_of(&self.nodes[p]))
    }

    /// Waits until every running, unpaused sentinel reports a primary other than the one before
    /// the failover, and that node itself says `role:master`; returns its address.
    ///
    /// # Errors
    /// No failover within `timeout` (the error says what the sentinels last reported).
    pub fn wait_for_failover(&mut self, timeout: Duration) -> io::Result<SocketAddr> {
        let old = addr_of(&self.nodes[self.primary]);
        let new = poll_until(timeout, "sentinel failover", || {
            let Some(addr) = self.agreed_primary()? else {
                return Ok(None);
            };
            if addr == old {
                return Err(io::Error::other(format!("sentinels still report {old}")));
            }
            let i = self.index_of(addr)?;
            if role(&self.nodes[i])? != "master" {
                return Err(io::Error::other(format!(
                    "sentinels report {addr} but it is not master yet"
                )));
            }
            Ok(Some(i))
        })?;
        self.primary = new;
        Ok(addr_of(&self.nodes[new]))
    }

    /// First half of the lossy failover the seeds describe: makes sure the replica has everything
    /// written so far (`WAIT`), then SIGSTOPs it and closes its replication link on the primary, so
    /// nothing written from now on can reach it. Returns the primary's address: write there (a
    /// lease acquire, say), then call [`finish_lossy_failover`](Self::finish_lossy_failover).
    ///
    /// A proxy between replica and primary would not do: sentinels rewrite a replica's primary
    /// address to the real one.
    ///
    /// # Errors
    /// No replica is running, or it has not acknowledged the primary's writes within 2 s.
    pub fn begin_lossy_failover(&mut self) -> io::Result<SocketAddr> {
        let p = self.primary_index()?;
        self.primary = p;
        let replicas: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| i != p && self.nodes[i].pid().is_some() && !self.nodes[i].is_paused())
            .collect();
        if replicas.is_empty() {
            return Err(io::Error::other(
                "no running replica to isolate; restart_node() the old primary first",
            ));
        }
        let mut con = admin_connection(&self.nodes[p].url())?;
        let acked: usize = redis::cmd("WAIT")
            .arg(replicas.len())
            .arg(2000)
            .query(&mut con)
            .map_err(io::Error::other)?;
        if acked < replicas.len() {
            return Err(io::Error::other(format!(
                "only {acked} of {} replicas acknowledged the primary's writes",
                replicas.len()
            )));
        }
        for &r in &replicas {
            self.nodes[r].pause()?;
            self.isolated.push(r);
        }
        // A stopped process still receives into its socket buffer, and would apply on resume what
        // the primary sent meanwhile; closing the link from the primary's side is what loses it.
        redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("replica")
            .query::<i64>(&mut con)
            .map_err(io::Error::other)?;
        Ok(addr_of(&self.nodes[p]))
    }

    /// Second half of the lossy failover: SIGKILLs the primary (with the writes only it had),
    /// continues the isolated replica and waits for the sentinels to promote it. Returns the new
    /// primary's address. Whatever was written since [`begin_lossy_failover`] is gone; whatever was
    /// written before it is on the new primary.
    ///
    /// [`begin_lossy_failover`]: Self::begin_lossy_failover
    ///
    /// # Errors
    /// `begin_lossy_failover` was not called, or no failover within `timeout`.
    pub fn finish_lossy_failover(&mut self, timeout: Duration) -> io::Result<SocketAddr> {
        if self.isolated.is_empty() {
            return Err(io::Error::other(
                "finish_lossy_failover() needs begin_lossy_failover() first",
            ));
        }
        let p = self.primary;
        self.nodes[p].kill()?;
        for r in std::mem::take(&mut self.isolated) {
            self.nodes[r].resume()?;
        }
        self.wait_for_failover(timeout)
    }

    /// Restarts node `i` on its port, empty (no persistence), in the role the sentinels give it:
    /// if it is the primary they report, it comes back as an empty primary (a restart without
    /// failover); otherwise it is made a replica of that primary, and this waits until it has
    /// synced and every sentinel sees it as a healthy replica, so a next failover can use it.
    ///
    /// # Errors
    /// The node does not start, or does not sync or settle within 20 s.
    pub fn restart_node(&mut self, i: usize) -> io::Result<()> {
        let p = self.primary_index()?;
        // Started directly in its role: a node that came up as a primary and was turned into a
        // replica a moment later could be seen as a primary by a sentinel, which would then not
        // look at it again for 10 s.
        let primary_port = (i != p).then(|| self.nodes[p].port());
        self.nodes[i].set_replica_of_on_restart(primary_port);
        self.nodes[i].restart()?;
        if primary_port.is_some() {
            self.nodes[i].wait_until_synced()?;
        }
        self.wait_until_monitored(SETTLE_TIMEOUT)
    }

    /// Waits until every running, unpaused sentinel agrees on the primary, knows the other two
    /// sentinels, and sees every other running data node as a replica with its link up.
    ///
    /// # Errors
    /// Not so within `timeout` (the error says what was missing).
    pub fn wait_until_monitored(&self, timeout: Duration) -> io::Result<()> {
        let name = self.master_name().to_owned();
        poll_until(timeout, "sentinel set to settle", || {
            let Some(primary) = self.agreed_primary()? else {
                return Ok(None);
            };
            let p = self.index_of(primary)?;
            let expected_replicas: Vec<String> = (0..self.nodes.len())
                .filter(|&i| i != p && self.nodes[i].pid().is_some() && !self.nodes[i].is_paused())
                .map(|i| addr_of(&self.nodes[i]).to_string())
                .collect();
            for s in self.live_sentinels() {
                let mut con = s.connection()?;
                let master: HashMap<String, String> = redis::cmd("SENTINEL")
                    .arg("MASTER")
                    .arg(&name)
                    .query(&mut con)
                    .map_err(io::Error::other)?;
                let others = master.get("num-other-sentinels").map(String::as_str);
                if others != Some("2") {
                    return Err(io::Error::other(format!(
                        "sentinel {} knows {:?} other sentinels, not 2",
                        s.addr(),
                        others
                    )));
                }
                let replicas: Vec<HashMap<String, String>> = redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg(&name)
                    .query(&mut con)
                    .map_err(io::Error::other)?;
                for want in &expected_replicas {
                    let healthy = replicas.iter().any(|r| {
                        r.get("name") == Some(want)
                            && r.get("flags").map(String::as_str) == Some("slave")
                            && r.get("master-link-status").map(String::as_str) == Some("ok")
                            && r.get("master-port") == Some(&primary.port().to_string())
                    });
                    if !healthy {
                        return Err(io::Error::other(format!(
                            "sentinel {} does not yet see {want} as a healthy replica of {primary}",
                            s.addr()
                        )));
                    }
                }
            }
            Ok(Some(()))
        })
    }

    /// The primary every running, unpaused sentinel reports, if they agree.
    fn agreed_primary(&self) -> io::Result<Option<SocketAddr>> {
        let mut agreed = None;
        let mut asked = 0;
        for s in self.live_sentinels() {
            asked += 1;
            let addr = s.master_addr(self.master_name())?;
            match (agreed, addr) {
                (_, None) => return Ok(None),
                (None, Some(a)) => agreed = Some(a),
                (Some(a), Some(b)) if a != b => {
                    return Err(io::Error::other(format!(
                        "sentinels disagree on the primary: {a} and {b}"
                    )))
                }
                _ => {}
            }
        }
        if asked == 0 {
            return Err(io::Error::other("no sentinel is running and unpaused"));
        }
        Ok(agreed)
    }

    fn live_sentinels(&self) -> impl Iterator<Item = &SentinelServer> {
        self.sentinels
            .iter()
            .filter(|s| s.is_running() && !s.is_paused())
    }

    fn index_of(&self, addr: SocketAddr) -> io::Result<usize> {
        self.nodes
            .iter()
            .position(|n| addr_of(n) == addr)
            .ok_or_else(|| io::Error::other(format!("{addr} is not a node of this set")))
    }
}

/// A `redis-server --sentinel` on a free loopback port, in its own temporary directory (with its
/// configuration file, which it rewrites, and `sentinel.log`); killed on drop.
#[derive(Debug)]
pub struct SentinelServer {
    /// The port it listens on.
    port: u16,
    /// Holds `sentinel.conf` and `sentinel.log`; removed on drop.
    dir: tempfile::TempDir,
    /// What clients must present, if anything.
    auth: Option<Credentials>,
    /// The process.
    daemon: Daemon,
}

impl SentinelServer {
    fn start(
        auth: Option<Credentials>,
        conf: impl FnOnce(u16, &Path) -> String,
    ) -> io::Result<Self> {
        let dir = tempfile::Builder::new()
            .prefix("leasehold-sentinel-")
            .tempdir()?;
        crate::reaper::remove_at_exit(dir.path());
        let port = free_port();
        std::fs::write(dir.path().join("sentinel.conf"), conf(port, dir.path()))?;
        let mut s = Self {
            port,
            dir,
            auth,
            daemon: Daemon::default(),
        };
        s.spawn()?;
        Ok(s)
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `redis://[user:password@]127.0.0.1:<port>/`: a plain connection to the sentinel itself.
    pub fn url(&self) -> String {
        let userinfo = self
            .auth
            .as_ref()
            .map(|a| format!("{}@", a.userinfo()))
            .unwrap_or_default();
        format!("redis://{userinfo}127.0.0.1:{}/", self.port)
    }

    /// Its directory (`sentinel.conf`, `sentinel.log`).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.pid()
    }

    /// Whether the process is running (possibly paused).
    pub fn is_running(&self) -> bool {
        self.daemon.is_running()
    }

    /// Whether it is stopped by [`pause`](Self::pause).
    pub fn is_paused(&self) -> bool {
        self.daemon.is_paused()
    }

    /// SIGSTOP: it stops answering (clients and other sentinels time out).
    ///
    /// # Errors
    /// It is not running.
    pub fn pause(&mut self) -> io::Result<()> {
        self.daemon.pause()
    }

    /// SIGCONT after [`pause`](Self::pause).
    ///
    /// # Errors
    /// It is not running.
    pub fn resume(&mut self) -> io::Result<()> {
        self.daemon.resume()
    }

    /// SIGKILL and reap.
    ///
    /// # Errors
    /// Reaping failed.
    pub fn kill(&mut self) -> io::Result<()> {
        self.daemon.kill()
    }

    /// Kills it and starts it again on the same port with the configuration it last wrote (known
    /// sentinels, replicas and epoch), as a restarted sentinel does.
    ///
    /// # Errors
    /// It does not answer within 10 s.
    pub fn restart(&mut self) -> io::Result<()> {
        self.daemon.kill()?;
        self.spawn()
    }

    /// A connection to the sentinel, with 2 s read and write timeouts.
    ///
    /// # Errors
    /// It does not accept the connection within 1 s.
    pub fn connection(&self) -> io::Result<redis::Connection> {
        admin_connection(&self.url())
    }

    /// `SENTINEL GET-MASTER-ADDR-BY-NAME`: `None` if it does not know the name.
    fn master_addr(&self, name: &str) -> io::Result<Option<SocketAddr>> {
        let mut con = self.connection()?;
        let reply: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(name)
            .query(&mut con)
            .map_err(io::Error::other)?;
        reply
            .map(|(host, port)| {
                format!("{host}:{port}")
                    .parse()
                    .map_err(|e| io::Error::other(format!("sentinel reported {host}:{port}: {e}")))
            })
            .transpose()
    }

    fn spawn(&mut self) -> io::Result<()> {
        let mut cmd = Command::new(redis_server_binary());
        cmd.arg(self.dir.path().join("sentinel.conf"))
            .arg("--sentinel")
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        self.daemon.spawn(&mut cmd).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("could not start redis-server --sentinel: {e}; install redis-server or set REDIS_SERVER_BIN"),
            )
        })?;
        poll_until(Duration::from_secs(10), "sentinel to answer PING", || {
            if let Some(status) = self.daemon.exited()? {
                let log = std::fs::read_to_string(self.dir.path().join("sentinel.log"))
                    .unwrap_or_default();
                return Err(fatal(format!(
                    "sentinel on port {} exited at start ({status}): {log}",
                    self.port
                )));
            }
            let mut con = match self.connection() {
                Ok(c) => c,
                Err(_) => return Ok(None),
            };
            Ok(redis::cmd("PING").query::<String>(&mut con).ok().map(drop))
        })
    }
}

/// `role` from `INFO replication`.
fn role(node: &RedisServer) -> io::Result<String> {
    let mut con = admin_connection(&node.url())?;
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(&mut con)
        .map_err(io::Error::other)?;
    Ok(info_field(&info, "role").unwrap_or_default().to_owned())
}

fn addr_of(node: &RedisServer) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], node.port()))
}
