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
use crate::command::{aborted, aborted_settled, supervise};
use crate::duration::show;
use crate::exit;
use crate::inspect::{check_name, connect};
use crate::setup::{prepare, serve_health, Prepared};

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
    let opts = lease_options(&args);
    let Prepared {
        opts,
        mut signals,
        listener,
    } = match prepare(&mut args.supervise, opts) {
        Ok(ready) => ready,
        Err(code) => return code,
    };

    let store = match store_for(&args) {
        Ok(store) => store,
        Err(code) => return code,
    };
    let client = tokio::select! {
        c = connect(&store) => match c { Ok(c) => c, Err(code) => return code },
        sig = signals.recv() => return aborted(sig, "nothing held"),
    };
    let health = match serve_health(listener, &client, &args.name).await {
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
        say_acquired(&args, &lease);
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

/// The store settings: `--once-per` keeps a slot's record at least two periods.
fn store_for(args: &RunArgs) -> Result<crate::cli::StoreArgs, i32> {
    let mut store = args.store.clone();
    if let Some(period) = args.once_per {
        // The period's own limits first, reported as the period's.
        if let Err(e) = leasehold::schedule::Schedule::every(period) {
            return Err(crate::inspect::fail(&e));
        }
        // A slot's record must outlive the slot: at least two periods (within the longest
        // retention, which is two of the longest periods).
        store.retention = store
            .retention
            .max(period.saturating_mul(2))
            .min(leasehold::lease::client::MAX_RETENTION.max(store.retention));
    }
    Ok(store)
}

fn say_acquired(args: &RunArgs, lease: &Lease) {
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
    let result = if args.wait().is_zero() {
        client.try_acquire(&args.name, opts).await
    } else {
        client.acquire(&args.name, opts, args.wait()).await
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
        Err(Error::WaitTimeout { .. }) => {
            // Ask once more how long it stays held, for the operator's next move.
            let remaining = client
                .inspect(&args.name)
                .await
                .ok()
                .and_then(|i| i.ttl_ms)
                .map(Duration::from_millis);
            eprintln!(
                "leasehold: `{}` is still busy after waiting {} (--wait){}; command not run",
                args.name,
                show(args.wait()),
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
