//! `leasehold leader NAME [--watch]`: who leads an election (term, value, holder, since when), once
//! or at each change. Promise: what the store says at the moment of the read. Limit: a snapshot for
//! operators and health checks, never a basis for deciding who may write; a leader shown may
//! already be deposed.

use std::time::Duration;

use leasehold::election::{leader_of, Election, Leader};

use crate::cli::LeaderArgs;
use crate::duration::show;
use crate::exit;
use crate::output::{ago, print_json};
use crate::store::{check_name, connect, fail};

/// One line for a leader, or for nobody.
fn human(name: &str, leader: &Option<Leader>) -> String {
    let Some(l) = leader else {
        return format!("{name}: no leader");
    };
    let value = l
        .value
        .as_deref()
        .map(|v| format!("value {v:?}"))
        .unwrap_or_else(|| {
            "no value advertised (held as a plain lease, or not yet written)".into()
        });
    let holder = l
        .holder
        .as_deref()
        .map(|h| format!(", holder {h}"))
        .unwrap_or_default();
    let since = l
        .since_unix_ms
        .and_then(ago)
        .map(|ago| format!(", leading for {}", show(ago)))
        .unwrap_or_default();
    let ttl = l
        .ttl_ms
        .map(|ms| format!(", lease {} left", show(Duration::from_millis(ms))))
        .unwrap_or_default();
    format!("{name}: term {}, {value}{holder}{since}{ttl}", l.term)
}

fn print(args: &LeaderArgs, leader: &Option<Leader>) {
    if args.json {
        print_json(leader);
    } else {
        println!("{}", human(&args.name, leader));
    }
}

/// `leasehold leader NAME [--watch]`.
pub(crate) async fn leader(args: LeaderArgs) -> i32 {
    if let Err(code) = check_name(&args.store, &args.name) {
        return code;
    }
    let client = match connect(&args.store).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    if !args.watch {
        return match leader_of(&client, &args.name).await {
            Ok(l) => {
                print(&args, &l);
                if l.is_some() {
                    0
                } else {
                    exit::NO_LEADER
                }
            }
            Err(e) => fail(&e),
        };
    }
    let opts = match leasehold::LeaseOptions::with_ttl(Duration::from_secs(30)) {
        Ok(o) => o,
        Err(e) => return fail(&e),
    };
    let mut observer = match Election::new(&client, &args.name, &opts) {
        Ok(e) => e.observe(),
        Err(e) => return fail(&e),
    };
    loop {
        tokio::select! {
            changed = observer.changed() => match changed {
                Ok(l) => print(&args, &l),
                Err(e) => {
                    // Said once per failure; the observer asks again.
                    eprintln!("leasehold: {}", exit::describe(&e));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            },
            _ = tokio::signal::ctrl_c() => return 0,
        }
    }
}
