//! `leasehold release --force NAME [--token TOKEN]`: takes a lease away from its holder and advances
//! its fence. Promise: the fence advances whether or not anyone held it, so the evicted holder's
//! fenced writes are refused from now on. Limit: the evicted holder is not asked; what it does
//! outside fenced resources before it notices can overlap with the next holder.

use crate::cli::ReleaseArgs;
use crate::output::print_json;
use crate::store::{check_name, connect, fail};

/// `leasehold release --force NAME`.
pub(crate) async fn release(args: ReleaseArgs) -> i32 {
    debug_assert!(args.force, "clap requires --force");
    if let Err(code) = check_name(&args.store, &args.name) {
        return code;
    }
    let client = match connect(&args.store).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    let forced = match &args.token {
        Some(token) => client.force_release_holder(&args.name, token).await,
        None => client.force_release(&args.name).await,
    };
    match forced {
        Ok(r) => {
            if args.json {
                print_json(
                    &serde_json::json!({"name": args.name, "evicted": r.evicted, "fence": r.fence}),
                );
            } else if r.evicted {
                let who = match &args.token {
                    Some(t) => format!("the holder {t}"),
                    None => "its holder(s)".to_owned(),
                };
                println!(
                    "{}: evicted {who}; fence advanced to {} (the evicted holder's fenced writes are now refused)",
                    args.name, r.fence
                );
            } else {
                let who = match &args.token {
                    Some(t) => format!("{t} did not hold it"),
                    None => "was not held".to_owned(),
                };
                println!("{}: {who}; fence advanced to {} anyway", args.name, r.fence);
            }
            0
        }
        Err(e) => fail(&e),
    }
}
