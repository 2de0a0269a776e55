//! What `run` and `elect` do before they connect: the lease's options and the grace that fits
//! them, the signal handlers, the one listener of `--health`/`--metrics-addr` and the metrics
//! recorder, `--metrics-file`. Promise: bad input (a grace that does not fit, two listen
//! addresses, an address that cannot be bound, a metrics file that cannot be written) is exit 2
//! before anything is sent to the store. Limit: the listener serves only once [`serve_health`]
//! has the client; a scrape before that waits in the listen queue.

use leasehold::{LeaseClient, LeaseOptions};

use super::signals::Signals;
use crate::cli::SuperviseArgs;
use crate::exit;

/// Ready to connect.
pub(crate) struct Prepared {
    pub(crate) opts: LeaseOptions,
    pub(crate) signals: Signals,
    /// The bound listener of `--health`/`--metrics-addr`, for [`serve_health`].
    pub(crate) listener: Option<std::net::TcpListener>,
}

/// Checks `opts` and the grace against each other (setting `s.grace` to the grace in force),
/// installs the signal handlers (before anything else, so that a Ctrl-C while waiting aborts
/// cleanly), binds the listener and starts the metrics. Bad input is exit 2.
pub(crate) fn prepare(
    s: &mut SuperviseArgs,
    opts: leasehold::Result<LeaseOptions>,
) -> Result<Prepared, i32> {
    let opts = match opts.and_then(|o| {
        let grace = s.grace_given.unwrap_or_else(|| o.default_shutdown());
        o.check_shutdown(grace).map(|()| (o, grace))
    }) {
        Ok((o, grace)) => {
            s.grace = grace;
            o
        }
        Err(e) => {
            eprintln!("leasehold: {e}");
            return Err(exit::USAGE);
        }
    };
    let signals = Signals::install().map_err(|e| {
        eprintln!("leasehold: cannot install signal handlers: {e}");
        exit::SOFTWARE
    })?;
    let listener = listen(s)?;
    if let Some(path) = &s.metrics_file {
        crate::prom::to_file(path).map_err(|e| {
            eprintln!("leasehold: {e}; give a path in a directory that exists and is writable");
            exit::USAGE
        })?;
    }
    Ok(Prepared {
        opts,
        signals,
        listener,
    })
}

/// The listener `--health`/`--metrics-addr` name, bound, with the metrics recorder installed.
fn listen(s: &SuperviseArgs) -> Result<Option<std::net::TcpListener>, i32> {
    let addr = match s.listen() {
        Ok(Some(addr)) => addr,
        Ok(None) => return Ok(None),
        Err(e) => {
            eprintln!("leasehold: {e}");
            return Err(exit::USAGE);
        }
    };
    let option = if s.health.is_some() {
        "--health"
    } else {
        "--metrics-addr"
    };
    let listener = addr.bind().map_err(|e| {
        eprintln!("leasehold: cannot listen on {option} {addr}: {e}; pick a free address");
        exit::USAGE
    })?;
    crate::prom::install(&[]).map_err(|e| {
        eprintln!("leasehold: {e}");
        exit::SOFTWARE
    })?;
    Ok(Some(listener))
}

/// Serves `/healthz`, `/leader` and `/metrics` on the prepared listener, from now on.
pub(crate) async fn serve_health(
    listener: Option<std::net::TcpListener>,
    client: &LeaseClient,
    name: &str,
) -> Result<Option<crate::health::Health>, i32> {
    let Some(listener) = listener else {
        return Ok(None);
    };
    crate::health::Health::serve(listener, client, name)
        .await
        .map(Some)
        .map_err(|e| {
            eprintln!("leasehold: cannot serve on the --health/--metrics-addr listener: {e}");
            exit::SOFTWARE
        })
}
