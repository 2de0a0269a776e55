//! `leasehold run NAME -- COMMAND`: the command runs only while this process holds the lease, and is
//! stopped when the lease is lost or when this process dies.
//!
//! Promise: the command is started only after the lease was acquired (and, for a lease handed
//! over with a short first TTL, renewed once). It is stopped before anyone else can hold the name:
//! when renewals fail, the command (its whole process group when stdin is not a terminal, and every
//! process descended from it) gets SIGTERM `--grace` before [`leasehold::Lease::stop_by`] (the
//! holder's conservative estimate of the store's earliest hand-over, less the drift allowance and
//! 100 ms) and SIGKILL at that instant, and `run` exits 76; `--grace` must fit inside the lease
//! ([`leasehold::LeaseOptions::check_shutdown`], else exit 2). A lease lost otherwise (`--max-hold`
//! reached, an operator's forced release) stops the command at once the same way, SIGKILL at the
//! earlier of `--grace` and the stop instant. A lease that becomes suspect (at risk: renewals
//! failing, or the store's clock running fast) is said once on stderr (`--on-suspect warn`, the
//! default) or stops the command the same way, exit 76 too (`--on-suspect stop`). The command's
//! parent is a small watcher process ([`crate::watcher`]): if `run` itself dies, SIGKILL and OOM
//! killer included, the watcher stops the command at once, and nothing renews the lease, which
//! lapses within its TTL. When the command exits, whatever it left running is stopped the same way
//! before the lease is released.
//!
//! Limit: the stop is ordered by this process: if `run` itself is paused past the stop instant, a
//! paused `run` is alive, so its watcher waits, and the command runs on beside the next holder.
//! Work that must not overlap has to present `LEASEHOLD_FENCE` to a fenced resource. A `kill -9`
//! aimed at both `run` and its watcher leaves the command running.

use std::time::Duration;

use leasehold::{Error, Lease, LeaseClient, LeaseOptions};

use crate::cli::RunArgs;
use crate::command::{aborted, aborted_settled, supervise, Signals};
use crate::duration::show;
use crate::exit;
use crate::inspect::{check_name, connect};

/// Runs `leasehold run`; returns the exit code.
pub(crate) async fn run(mut args: RunArgs) -> i32 {
    if let Err(code) = check_name(&args.store, &args.name) {
        return code;
    }
    let holder = args
        .holder
        .clone()
        .unwrap_or_else(leasehold::lease::holder::default_label);
    if let Err(e) = leasehold::lease::holder::check_label(&holder) {
        return crate::inspect::fail(&e);
    }
    let (opts, mut signals) = match prepare(&mut args) {
        Ok(ready) => ready,
        Err(code) => return code,
    };

    let mut store = args.store.clone();
    if let Some(period) = args.once_per {
        // The period's own limits first, reported as the period's.
        if let Err(e) = leasehold::schedule::Schedule::every(period) {
            return crate::inspect::fail(&e);
        }
        // A slot's record must outlive the slot: at least two periods (within the longest
        // retention, which is two of the longest periods).
        store.retention = store
            .retention
            .max(period.saturating_mul(2))
            .min(leasehold::lease::client::MAX_RETENTION.max(store.retention));
    }
    let client = tokio::select! {
        c = connect(&store) => match c { Ok(c) => c, Err(code) => return code },
        sig = signals.recv() => return aborted(sig, "nothing held"),
    };
    let health = match serve_health(&args.supervise, &client, &args.name).await {
        Ok(h) => h,
        Err(code) => return code,
    };
    if args.once_per.is_some() {
        return crate::once::run(&args, &client, &opts, &mut signals).await;
    }
    let lease = tokio::select! {
        l = acquire(&client, &args, &opts) => match l { Ok(l) => l, Err(code) => return code },
        sig = signals.recv() => return aborted_settled(
            &client,
            sig,
            "withdrawn from the wait (a lease taken meanwhile is released)",
        ).await,
    };
    if args.verbose {
        let permit = if args.permits > 1 {
            format!("one of {} permits of ", args.permits)
        } else {
            String::new()
        };
        eprintln!(
            "leasehold: acquired {permit}`{}` (fence {}, ttl {})",
            args.name,
            lease.fence(),
            show(args.supervise.ttl)
        );
    }
    if args.permits == 1 {
        // Who holds it, for `status` and `list`: one round trip; a failure costs only the label.
        if let Err(e) = lease.announce(&holder).await {
            eprintln!(
                "leasehold: warning: could not write the holder label of `{}`: {}; the command runs on",
                args.name,
                exit::describe(&e)
            );
        }
    }
    if let Some(h) = &health {
        h.holding(Some((lease.health(), lease.fence())));
    }
    supervise(&args, lease, &mut signals, Vec::new()).await
}

/// `--health ADDR`: the endpoints, serving from now on; a bad or busy address is exit 2.
pub(crate) async fn serve_health(
    s: &crate::cli::SuperviseArgs,
    client: &LeaseClient,
    name: &str,
) -> Result<Option<crate::health::Health>, i32> {
    let Some(addr) = s.health else {
        return Ok(None);
    };
    crate::health::Health::serve(addr, client, name)
        .await
        .map(Some)
        .map_err(|e| {
            eprintln!("leasehold: cannot serve --health on {addr}: {e}; pick a free address");
            exit::USAGE
        })
}

/// What `run` and `elect` do before connecting: the lease options, the grace that fits them, the
/// signal handlers (before anything else, so that a Ctrl-C while waiting aborts cleanly), the
/// metrics listener. Bad input is exit 2.
pub(crate) fn prepare(args: &mut RunArgs) -> Result<(LeaseOptions, Signals), i32> {
    let opts = match lease_options(args).and_then(|o| {
        let grace = args
            .supervise
            .grace_given
            .unwrap_or_else(|| o.default_shutdown());
        o.check_shutdown(grace).map(|()| (o, grace))
    }) {
        Ok((o, grace)) => {
            args.supervise.grace = grace;
            o
        }
        Err(e) => {
            eprintln!("leasehold: {e}");
            return Err(exit::USAGE);
        }
    };
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("leasehold: cannot install signal handlers: {e}");
            return Err(exit::SOFTWARE);
        }
    };
    if let Some(addr) = args.supervise.metrics_addr {
        if let Err(e) = metrics_exporter_prometheus::PrometheusBuilder::new()
            .with_http_listener(addr)
            .install()
        {
            eprintln!("leasehold: cannot serve metrics on {addr}: {e}; pick a free address for --metrics-addr");
            return Err(exit::USAGE);
        }
    }
    Ok((opts, signals))
}

fn lease_options(args: &RunArgs) -> leasehold::Result<LeaseOptions> {
    let mut b = LeaseOptions::builder()
        .ttl(args.supervise.ttl)
        .permits(args.permits);
    if let Some(max) = args.max_hold {
        b = b.max_hold(max);
    }
    b.build()
}

async fn acquire(client: &LeaseClient, args: &RunArgs, opts: &LeaseOptions) -> Result<Lease, i32> {
    let result = if args.wait.is_zero() {
        client.try_acquire(&args.name, opts).await
    } else {
        client.acquire(&args.name, opts, args.wait).await
    };
    match result {
        Ok(lease) => Ok(lease),
        Err(Error::Busy { remaining, .. }) => {
            eprintln!(
                "leasehold: `{}` is busy{}; command not run",
                args.name,
                held_for(remaining)
            );
            Err(args.supervise.busy_exit_code)
        }
        Err(Error::WaitTimeout { waited, .. }) => {
            // Ask once more how long it stays held, for the operator's next move.
            let remaining = client
                .inspect(&args.name)
                .await
                .ok()
                .and_then(|i| i.ttl_ms)
                .map(Duration::from_millis);
            eprintln!(
                "leasehold: `{}` is still busy after waiting {}{}; command not run",
                args.name,
                show(waited),
                held_for(remaining)
            );
            Err(args.supervise.busy_exit_code)
        }
        Err(e) => Err(crate::inspect::fail(&e)),
    }
}

fn held_for(remaining: Option<Duration>) -> String {
    remaining
        .map(|d| format!(" (held by another process for about {} more)", show(d)))
        .unwrap_or_default()
}
