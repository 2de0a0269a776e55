//! `leasehold status NAME` and `leasehold list [PATTERN]`. Promise: what the store says at the moment of the
//! read. Limit: a lease shown free may be taken a millisecond later, and one shown held may already
//! be lost by a paused holder; these are snapshots for operators, never a basis for mutual exclusion.

use leasehold::lease::LeaseInfo;
use leasehold::LeaseClient;

use crate::cli::{ListArgs, StatusArgs};
use crate::duration::show;
use crate::exit;
use crate::output::{ago, print_json};
use crate::store::{check_name, connect, fail};

/// `info` as JSON: the library's fields (`name`, `key`, `held`, `ttl_ms`, `fence`, `permits`,
/// `holders`, `waiting`), the free permits, the store kind, and for Redis two more keys the lease
/// uses, `fence_key` and `queue_key` (its waiters).
fn json(info: &LeaseInfo, client: &LeaseClient) -> serde_json::Value {
    let mut v = serde_json::to_value(info).expect("LeaseInfo serializes");
    if let Some(obj) = v.as_object_mut() {
        obj.insert("free".into(), info.free_permits().into());
        obj.insert("store".into(), client.store_kind().to_string().into());
        extra_keys(obj, info, client);
    }
    v
}

/// The keys the store keeps beside the lock's (on Redis the fence's and the queue's).
fn extra_keys(
    obj: &mut serde_json::Map<String, serde_json::Value>,
    info: &LeaseInfo,
    client: &LeaseClient,
) {
    if let Ok(keys) = client.extra_keys(&info.name) {
        for (what, key) in keys {
            obj.insert(format!("{what}_key"), key.into());
        }
    }
}

/// ` (for 3m12s)`: how long ago `unix_ms` was, by this machine's clock.
fn since(unix_ms: u64) -> String {
    ago(unix_ms)
        .map(|ago| format!(" (for {})", show(ago)))
        .unwrap_or_default()
}

fn left(ttl_ms: Option<u64>) -> String {
    ttl_ms
        .map(|ms| format!("{} left", show(std::time::Duration::from_millis(ms))))
        .unwrap_or_else(|| "no expiry".to_owned())
}

/// One line for a lock; for a semaphore, a line and one more per holder; for a name with a key
/// leasehold did not write, what is wrong.
fn human(info: &LeaseInfo) -> String {
    if let Some(problem) = &info.problem {
        return format!("{}: NOT USABLE: {problem}", info.name);
    }
    let fence = info
        .fence
        .map(|f| f.to_string())
        .unwrap_or_else(|| "none issued".to_owned());
    let waiting = match info.waiting {
        0 => String::new(),
        n => format!(", {n} waiting"),
    };
    if info.permits > 1 {
        let mut out = format!(
            "{}: semaphore of {} permits, {} held, {} free{waiting}, last fence {fence}, key {}",
            info.name,
            info.permits,
            info.holders.len(),
            info.free_permits(),
            info.key
        );
        for h in &info.holders {
            let f = h.fence.map(|f| format!(", fence {f}")).unwrap_or_default();
            out.push_str(&format!("\n  holder {}: {}{f}", h.token, left(h.ttl_ms)));
        }
        return out;
    }
    if info.held {
        let token = info
            .holders
            .first()
            .map(|h| format!(", token {}", h.token))
            .unwrap_or_default();
        let holder = match &info.holder {
            Some(h) => format!(", holder {}{}{token}", h.label, since(h.since_unix_ms)),
            None => token,
        };
        format!(
            "{}: held, {}, fence {fence}{holder}{waiting}, key {}",
            info.name,
            left(info.ttl_ms),
            info.key
        )
    } else {
        format!(
            "{}: free, last fence {fence}{waiting}, key {}",
            info.name, info.key
        )
    }
}

/// `leasehold status NAME`.
pub(crate) async fn status(args: StatusArgs) -> i32 {
    if let Err(code) = check_name(&args.store, &args.name) {
        return code;
    }
    let client = match connect(&args.store).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.inspect(&args.name).await {
        Ok(info) => {
            if args.json {
                print_json(&json(&info, &client));
            } else {
                println!("{}", human(&info));
            }
            // A name whose keys leasehold did not write cannot be used until it is repaired.
            if info.problem.is_some() {
                exit::CONFIG
            } else {
                0
            }
        }
        Err(e) => fail(&e),
    }
}

/// `leasehold list [PATTERN]`.
pub(crate) async fn list(args: ListArgs) -> i32 {
    // Bad input is exit 2 even when the store is down.
    if let Err(e) = leasehold::lease::check_prefix(&args.store.key_prefix)
        .and_then(|()| leasehold::lease::check_pattern(&args.pattern))
    {
        return fail(&e);
    }
    let client = match connect(&args.store).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.list(&args.pattern).await {
        Ok(infos) => {
            if args.json {
                let all: Vec<_> = infos.iter().map(|i| json(i, &client)).collect();
                print_json(&all);
            } else if infos.is_empty() {
                eprintln!("leasehold: no lease matches `{}`", args.pattern);
            } else {
                for info in &infos {
                    println!("{}", human(info));
                }
            }
            0
        }
        Err(e) => fail(&e),
    }
}
