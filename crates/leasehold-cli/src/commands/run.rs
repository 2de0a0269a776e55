//! `leasehold run NAME -- COMMAND`: the command runs only while this process holds the lease, and is
//! stopped when the lease is lost or when this process dies.
//!
//! Promise: the lease is acquired (trying once, or waiting up to `--wait` in the store's queue),
//! its holder label written, and the command run under it as [`crate::supervise`] promises; a
//! lease busy past the wait is `--busy-exit-code` and the command is not run. `--once-per` hands
//! the connected client over to [`super::once`]. Limit: as the supervision's.

use std::time::Duration;

use leasehold::{Error, Lease, LeaseClient, LeaseOptions};

use crate::cli::{RunArgs, StoreArgs};
use crate::duration::show;
use crate::exit;
use crate::store::{check_name, connect, fail};
use crate::supervise::setup::{prepare, serve_health, Prepared};
use crate::supervise::{aborted, aborted_settled, supervise, Supervised};

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
        return fail(&e);
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
    let supervised = supervised(&args);
    if args.once_per.is_some() {
        return super::once::run(&args, &supervised, &client, &opts, &mut signals).await;
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
    supervise(&supervised, lease, &mut signals, Vec::new()).await
}

/// How the command is supervised: `run`'s options, its `--min-hold` too.
fn supervised(args: &RunArgs) -> Supervised<'_> {
    Supervised {
        min_hold: args.min_hold,
        ..Supervised::new(&args.name, &args.command, &args.supervise, args.verbose)
    }
}

/// The store settings: `--once-per` keeps a slot's record at least two periods.
fn store_for(args: &RunArgs) -> Result<StoreArgs, i32> {
    let mut store = args.store.clone();
    if let Some(period) = args.once_per {
        // The period's own limits first, reported as the period's.
        if let Err(e) = leasehold::schedule::Schedule::every(period) {
            return Err(fail(&e));
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
        Err(e) => Err(fail(&e)),
    }
}

fn held_for(remaining: Option<Duration>) -> String {
    remaining
        .map(|d| format!(" (held by another process for about {} more)", show(d)))
        .unwrap_or_default()
}
