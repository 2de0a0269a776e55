//! Sending to a cluster: one command to its slot's master, a pipeline split into one pipeline per
//! master, `SCRIPT LOAD` to every master; redirects followed, failovers waited out.
//!
//! Promise: a command reaches the master of its key's slot, following `MOVED` and `ASK` (with
//! `ASKING`) and learning the slots again after a failure, within one bound (a connection opened
//! and two replies) and at most 16 sends; a pipeline's replies come back in the pipeline's order
//! whatever masters served them, a command never answered within the bound being an error in its
//! place; `SCRIPT LOAD` reaches every master.
//!
//! Limit: a command is sent again after a redirect or a broken connection, so it may run twice; the
//! lease scripts have the effect of running once when run twice, a command that does not is not
//! safe here. A blocking command is never sent again on its own: its caller asks again.

use std::sync::atomic::Ordering;
use std::time::Duration;

use redis::{Cmd, Pipeline, RedisResult, ServerErrorKind, Value};
use tokio::time::Instant;

use super::super::node::{self, first_key, io_error, is_blocking, is_connection_failure};
use super::routing::Groups;
use super::ClusterConn;

/// First pause before sending again after a failure; doubles each time up to [`MAX_PAUSE`].
const FIRST_PAUSE: Duration = Duration::from_millis(20);
/// Longest pause between two sends of one request.
const MAX_PAUSE: Duration = Duration::from_millis(400);
/// Most sends of one request (the time bound usually ends it first).
const MAX_SENDS: u32 = 16;

/// What a reply asks of the sender.
enum Next {
    /// It is the answer (an error that is not about routing included).
    Done,
    /// Send to this node; `true` with `ASKING` first.
    Redirect(String, bool),
    /// Wait a little, learn the slots again, send again.
    Retry,
}

fn next_step(v: &Value) -> Next {
    let Some(e) = node::server_error(v) else {
        return Next::Done;
    };
    match e.kind() {
        redis::ErrorKind::Server(ServerErrorKind::Moved) => match e.redirect_node() {
            Some((addr, _)) => Next::Redirect(addr.to_owned(), false),
            None => Next::Retry,
        },
        redis::ErrorKind::Server(ServerErrorKind::Ask) => match e.redirect_node() {
            Some((addr, _)) => Next::Redirect(addr.to_owned(), true),
            None => Next::Retry,
        },
        redis::ErrorKind::Server(
            ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => Next::Retry,
        _ if super::super::errors::is_slot_moving(&e) => Next::Retry,
        _ => Next::Done,
    }
}

fn is_script_load(cmd: &Cmd) -> bool {
    let mut args = cmd.args_iter();
    matches!(
        (args.next(), args.next()),
        (Some(redis::Arg::Simple(a)), Some(redis::Arg::Simple(b)))
            if a.eq_ignore_ascii_case(b"SCRIPT") && b.eq_ignore_ascii_case(b"LOAD")
    )
}

fn pause_after(sends: u32) -> Duration {
    FIRST_PAUSE
        .saturating_mul(1 << sends.min(10))
        .min(MAX_PAUSE)
}

/// Where a command without a redirect to follow goes.
enum Route {
    /// The master of its slot (or, for a command without a key, the first master).
    To(String),
    /// Its slot has no known master even after learning the slots again: wait and try again.
    Unknown(redis::RedisError),
    /// It has no key and no master is known: nowhere.
    Nowhere,
}

/// After one send of a command: its answer, or what to keep while sending it again.
enum Outcome {
    Answer(RedisResult<Value>),
    Again {
        /// The reply (or failure) to return if no later send gets further.
        last: RedisResult<Value>,
        /// The node the reply sent us to, `true` with `ASKING` first.
        redirect: Option<(String, bool)>,
    },
}

/// A pipeline being spread over the masters: each command's reply so far, by its place in the
/// pipeline, and which commands are still to be sent.
struct Scatter<'p> {
    cmds: Vec<&'p Cmd>,
    /// Each command's reply; while it is pending, the redirect or failure it last met.
    out: Vec<Option<RedisResult<Value>>>,
    /// Commands that go on their own through [`ClusterConn::send`]: `SCRIPT LOAD` (every master),
    /// those whose slot has no known master, and those sent to a slot being migrated.
    alone: Vec<usize>,
    /// Commands for the next round of one pipeline per master.
    pending: Vec<usize>,
    /// Whether the request the caller counted is still unspent.
    first_request: bool,
}

impl<'p> Scatter<'p> {
    fn new(cmds: Vec<&'p Cmd>) -> Self {
        let (alone, pending) = (0..cmds.len()).partition(|&i| is_script_load(cmds[i]));
        Scatter {
            out: vec![None; cmds.len()],
            cmds,
            alone,
            pending,
            first_request: true,
        }
    }

    /// Reads one master's replies to the commands `idx`: an answer is kept, a command sent to a
    /// slot being migrated goes alone, one redirected or refused for now goes in the next round.
    fn take_replies(&mut self, idx: &[usize], values: Vec<Value>) {
        for (&i, v) in idx.iter().zip(values) {
            match next_step(&v) {
                Next::Done => self.out[i] = Some(Ok(v)),
                Next::Redirect(_, true) => self.alone.push(i),
                Next::Redirect(_, false) | Next::Retry => {
                    self.out[i] = Some(Ok(v));
                    self.pending.push(i);
                }
            }
        }
    }

    /// The connection to the master of `idx` broke: each keeps the failure and goes again.
    fn take_failure(&mut self, idx: &[usize], e: &redis::RedisError) {
        for &i in idx {
            self.out[i] = Some(Err(e.clone()));
        }
        self.pending.extend(idx);
    }

    /// The replies of `count` commands from `offset`, in the pipeline's order; a command never
    /// answered (the time bound ran out) is an error.
    fn replies(self, offset: usize, count: usize) -> RedisResult<Vec<Value>> {
        self.out
            .into_iter()
            .skip(offset)
            .take(count)
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(io_error(
                        "not sent",
                        "the request's time bound ran out".to_owned(),
                    ))
                })
            })
            .collect()
    }
}

impl ClusterConn {
    /// Bound on one request, its resends included: a connection opened and two replies.
    fn request_bound(&self) -> Duration {
        self.inner.connect_timeout + self.inner.response_timeout * 2
    }

    /// Before sending again after the `sends`-th send failed: a pause, then the slots learnt again.
    async fn wait_out(&self, sends: u32) {
        tokio::time::sleep(pause_after(sends)).await;
        let _ = self.learn().await;
    }

    /// Sends one command where it belongs, following redirects and waiting out failovers until the
    /// sends or the time run out.
    pub(super) async fn send(&self, cmd: &Cmd) -> RedisResult<Value> {
        if is_script_load(cmd) {
            return self.on_every_master(cmd).await;
        }
        let key = first_key(cmd);
        let resend = !is_blocking(cmd);
        let started = Instant::now();
        let mut redirect: Option<(String, bool)> = None;
        let mut last: RedisResult<Value> = Err(io_error(
            "nothing was sent",
            "no master to send to".to_owned(),
        ));
        for sends in 0..MAX_SENDS {
            if sends > 0 {
                if !resend || started.elapsed() >= self.request_bound() {
                    break;
                }
                self.inner.count.fetch_add(1, Ordering::Relaxed);
            }
            let (addr, asking) = match redirect.take() {
                Some(r) => r,
                None => match self.route(key.as_deref()).await {
                    Route::To(addr) => (addr, false),
                    Route::Unknown(e) => {
                        last = Err(e);
                        tokio::time::sleep(pause_after(sends)).await;
                        continue;
                    }
                    Route::Nowhere => return last,
                },
            };
            let reply = self.send_to(&addr, asking, cmd).await;
            match self.after_reply(&addr, reply, sends).await {
                Outcome::Answer(answer) => return answer,
                Outcome::Again {
                    last: l,
                    redirect: r,
                } => (last, redirect) = (l, r),
            }
        }
        last
    }

    /// Where a command with first key `key` goes when no redirect says otherwise.
    async fn route(&self, key: Option<&[u8]>) -> Route {
        match key {
            Some(k) => match self.master_for(k).await {
                Ok(addr) => Route::To(addr),
                Err(e) => Route::Unknown(e),
            },
            None => match self.masters().into_iter().next() {
                Some(addr) => Route::To(addr),
                None => Route::Nowhere,
            },
        }
    }

    /// One send of `cmd` to the node at `addr`, after `ASKING` when a migrating slot's master sent
    /// it there.
    async fn send_to(&self, addr: &str, asking: bool, cmd: &Cmd) -> RedisResult<Value> {
        let mut con = self.node(addr).await?;
        if !asking {
            return con.send_packed_command(cmd).await;
        }
        let mut pipe = redis::pipe();
        pipe.cmd("ASKING").add_command(cmd.clone());
        con.send_packed_commands(&pipe, 0, 2)
            .await
            .map(|mut v| v.pop().unwrap_or(Value::Nil))
    }

    /// Reads `addr`'s reply to the `sends`-th send: the answer, a redirect to follow, or a changing
    /// cluster to wait out (a broken connection is forgotten first).
    async fn after_reply(&self, addr: &str, reply: RedisResult<Value>, sends: u32) -> Outcome {
        match reply {
            Ok(v) => match next_step(&v) {
                Next::Done => Outcome::Answer(Ok(v)),
                Next::Redirect(to, asking) => {
                    if !asking {
                        self.note_failure(addr, false);
                    }
                    Outcome::Again {
                        last: Ok(v),
                        redirect: Some((to, asking)),
                    }
                }
                Next::Retry => {
                    self.wait_out(sends).await;
                    Outcome::Again {
                        last: Ok(v),
                        redirect: None,
                    }
                }
            },
            Err(e) if is_connection_failure(&e) => {
                self.forget_node(addr);
                self.wait_out(sends).await;
                Outcome::Again {
                    last: Err(e),
                    redirect: None,
                }
            }
            Err(e) => Outcome::Answer(Err(e)),
        }
    }

    /// `SCRIPT LOAD` (and the like) on every master: a script must be known wherever a key may be.
    async fn on_every_master(&self, cmd: &Cmd) -> RedisResult<Value> {
        let masters = self.masters();
        let replies = futures::future::join_all(masters.iter().map(|addr| async move {
            let mut con = self.node(addr).await?;
            con.send_packed_command(cmd).await
        }))
        .await;
        self.inner
            .count
            .fetch_add(masters.len().saturating_sub(1) as u64, Ordering::Relaxed);
        let mut first = None;
        for r in replies {
            let v = r?;
            if let Some(e) = node::server_error(&v) {
                return Err(e);
            }
            first.get_or_insert(v);
        }
        Ok(first.unwrap_or(Value::Nil))
    }

    /// One pipeline per master, at once. Commands a master sent elsewhere (`MOVED`), could not run
    /// yet (`TRYAGAIN`, `CLUSTERDOWN`) or lost with a broken connection go out again, grouped by
    /// master after the slots are learnt again, until the sends or the time run out; a command sent
    /// to a slot being migrated (`ASK`) goes on its own, with `ASKING`. Replies in the pipeline's
    /// order.
    pub(super) async fn send_pipeline(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        if pipeline.is_transaction() {
            return self.send_transaction(pipeline, offset, count).await;
        }
        let mut run = Scatter::new(pipeline.cmd_iter().collect());
        self.send_grouped(&mut run).await?;
        self.send_alone(&mut run).await;
        run.replies(offset, count)
    }

    /// MULTI/EXEC must go to one node as it is (the lease store sends none): to the master of its
    /// first key's slot.
    async fn send_transaction(
        &self,
        pipeline: &Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisResult<Vec<Value>> {
        let addr =
            match pipeline.cmd_iter().find_map(first_key) {
                Some(k) => self.master_for(&k).await?,
                None => self.masters().into_iter().next().ok_or_else(|| {
                    io_error("no master known", "the slot map is empty".to_owned())
                })?,
            };
        let mut con = self.node(&addr).await?;
        con.send_packed_commands(pipeline, offset, count).await
    }

    /// Rounds of one pipeline per master until no command is pending or the sends or the time run
    /// out; before each round after the first, a pause and the slots learnt again.
    async fn send_grouped(&self, run: &mut Scatter<'_>) -> RedisResult<()> {
        let started = Instant::now();
        let mut rounds = 0u32;
        while !run.pending.is_empty() {
            if rounds > 0 {
                if rounds >= MAX_SENDS || started.elapsed() >= self.request_bound() {
                    break;
                }
                self.wait_out(rounds - 1).await;
            }
            rounds += 1;
            self.send_round(run).await?;
        }
        Ok(())
    }

    /// One round: the pending commands grouped by master, one pipeline to each, at once.
    async fn send_round(&self, run: &mut Scatter<'_>) -> RedisResult<()> {
        let (groups, unrouted) = self
            .inner
            .map
            .read()
            .expect("slot map lock")
            .group_by_master(&run.cmds, &run.pending);
        run.alone.extend(unrouted);
        let requests = groups.len() as u64;
        // The caller counted one request.
        self.inner.count.fetch_add(
            requests.saturating_sub(u64::from(run.first_request)),
            Ordering::Relaxed,
        );
        run.first_request &= requests == 0;
        let sent = self.send_groups(&run.cmds, &groups).await;
        run.pending.clear();
        for ((addr, idx), reply) in groups.iter().zip(sent) {
            match reply {
                Ok(values) if values.len() == idx.len() => run.take_replies(idx, values),
                Ok(_) => run.pending.extend(idx),
                Err(e) if is_connection_failure(&e) => {
                    self.forget_node(addr);
                    run.take_failure(idx, &e);
                }
                Err(e) => return Err(e),
            }
        }
        run.pending.sort_unstable();
        Ok(())
    }

    /// Each group's commands as one pipeline to its master, all at once; the replies by group.
    async fn send_groups(&self, cmds: &[&Cmd], groups: &Groups) -> Vec<RedisResult<Vec<Value>>> {
        futures::future::join_all(groups.iter().map(|(addr, idx)| async move {
            let mut sub = redis::pipe();
            for &i in idx {
                sub.add_command(cmds[i].clone());
            }
            match self.node(addr).await {
                Ok(mut con) => con.send_packed_commands(&sub, 0, idx.len()).await,
                Err(e) => Err(e),
            }
        }))
        .await
    }

    /// The commands that go alone, each through [`ClusterConn::send`], which follows them wherever
    /// they must go.
    async fn send_alone(&self, run: &mut Scatter<'_>) {
        self.inner.count.fetch_add(
            (run.alone.len() as u64).saturating_sub(u64::from(run.first_request)),
            Ordering::Relaxed,
        );
        let cmds = &run.cmds;
        let resent = futures::future::join_all(run.alone.iter().map(|&i| self.send(cmds[i]))).await;
        for (&i, reply) in run.alone.iter().zip(resent) {
            run.out[i] = Some(reply);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(resp: &str) -> Value {
        redis::parse_redis_value(resp.as_bytes()).unwrap()
    }

    fn get(key: &str) -> Cmd {
        redis::cmd("GET").arg(key).clone()
    }

    #[test]
    fn each_reply_is_kept_sent_again_or_sent_alone() {
        let gets: Vec<Cmd> = ["a", "b", "c", "d", "e"].map(get).into();
        let load = redis::cmd("SCRIPT").arg("LOAD").arg("return 1").clone();
        let mut run = Scatter::new(gets.iter().chain([&load]).collect());
        assert_eq!(
            (&run.alone[..], &run.pending[..]),
            (&[5][..], &[0, 1, 2, 3, 4][..])
        );
        run.pending.clear();
        let replies = [
            "$1\r\nx\r\n",
            "-MOVED 15495 127.0.0.1:7002\r\n",
            "-ASK 3999 127.0.0.1:7001\r\n",
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n",
        ];
        run.take_replies(&[0, 1, 2, 3], replies.map(reply).into());
        run.take_failure(&[4], &io_error("broken", "connection reset".to_owned()));
        assert_eq!(
            run.pending,
            [1, 3, 4],
            "redirected, refused for now, broken"
        );
        assert_eq!(run.alone, [5, 2], "ASK goes on its own, with ASKING");
        assert!(matches!(run.out[1], Some(Ok(Value::ServerError(_)))));
        assert!(matches!(run.out[4], Some(Err(_))));
        assert!(run.out[2].is_none() && run.out[5].is_none());
        assert_eq!(run.replies(0, 1).unwrap(), [reply("$1\r\nx\r\n")]);
    }

    #[test]
    fn a_command_never_answered_is_an_error() {
        let gets: Vec<Cmd> = ["a", "b"].map(get).into();
        let mut run = Scatter::new(gets.iter().collect());
        run.take_replies(&[0], vec![Value::Okay]);
        assert_eq!(run.replies(0, 1).unwrap(), [Value::Okay]);
        let run = Scatter::new(gets.iter().collect());
        let unanswered = run.replies(0, 2).unwrap_err();
        assert!(
            unanswered.to_string().contains("time bound"),
            "{unanswered}"
        );
    }
}
