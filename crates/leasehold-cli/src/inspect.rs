//! `leasehold status`, `list` and `release --force`. Promise: what Redis says at the moment of the
//! read. Limit: a lease shown free may be taken a millisecond later, and one shown held may already
//! be lost by a paused holder; these are snapshots for operators, never a basis for mutual exclusion.

use leasehold::lease::{LeaseInfo, LeaseKeys};
use leasehold::LeaseClient;

use crate::cli::{ListArgs, RedisArgs, ReleaseArgs, StatusArgs};
use crate::duration::show;
use crate::exit;

/// How long to wait for Redis to accept a connection before calling it unreachable.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// Connects, or prints why not and returns the exit code.
pub(crate) async fn connect(redis: &RedisArgs) -> Result<LeaseClient, i32> {
    let connecting = LeaseClient::builder(redis.url.clone())
        .key_prefix(redis.key_prefix.clone())
        .connect();
    let Ok(result) = tokio::time::timeout(CONNECT_TIMEOUT, connecting).await else {
        eprintln!(
            "leasehold: cannot reach Redis at {}: no answer within {}; check --redis / LEASEHOLD_REDIS_URL and that the server is up",
            redact(&redis.url),
            show(CONNECT_TIMEOUT)
        );
        return Err(exit::UNAVAILABLE);
    };
    result.map_err(|e| match e {
            leasehold::Error::Redis { source, .. } => {
                eprintln!(
                    "leasehold: cannot reach Redis at {}: {source}; check --redis / LEASEHOLD_REDIS_URL and that the server is up",
                    redact(&redis.url),
                );
                exit::UNAVAILABLE
            }
            other => fail(&other),
        })
}

/// The URL without its password, for messages.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

/// Prints a library error and returns its exit code.
pub(crate) fn fail(e: &leasehold::Error) -> i32 {
    eprintln!("leasehold: {}", exit::describe(e));
    exit::for_error(e, exit::BUSY)
}

/// Checks a lease name (and the key prefix) before any connection, so bad input is exit 2 even when
/// Redis is down.
pub(crate) fn check_name(redis: &RedisArgs, name: &str) -> Result<(), i32> {
    if redis.key_prefix.is_empty() {
        eprintln!(
            "leasehold: invalid key prefix: it is empty; leave --key-prefix out to use `leasehold`"
        );
        return Err(exit::USAGE);
    }
    LeaseKeys::new(&redis.key_prefix, name)
        .map(drop)
        .map_err(|e| fail(&e))
}

/// `info` as JSON: the library's fields (`name`, `key`, `held`, `ttl_ms`, `fence`) plus the other two
/// keys the lease uses, `fence_key` and `wake_key`.
fn json(info: &LeaseInfo, prefix: &str) -> serde_json::Value {
    let mut v = serde_json::to_value(info).expect("LeaseInfo serializes");
    if let (Ok(keys), Some(obj)) = (LeaseKeys::new(prefix, &info.name), v.as_object_mut()) {
        obj.insert("fence_key".into(), keys.fence.into());
        obj.insert("wake_key".into(), keys.wake.into());
    }
    v
}

fn human(info: &LeaseInfo) -> String {
    let fence = info
        .fence
        .map(|f| f.to_string())
        .unwrap_or_else(|| "none issued".to_owned());
    if info.held {
        let ttl = info
            .ttl_ms
            .map(|ms| format!("{} left", show(std::time::Duration::from_millis(ms))))
            .unwrap_or_else(|| "no expiry".to_owned());
        format!(
            "{}: held, {ttl}, fence {fence}, key {}",
            info.name, info.key
        )
    } else {
        format!("{}: free, last fence {fence}, key {}", info.name, info.key)
    }
}

/// `leasehold status NAME`.
pub(crate) async fn status(args: StatusArgs) -> i32 {
    if let Err(code) = check_name(&args.redis, &args.name) {
        return code;
    }
    let client = match connect(&args.redis).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.inspect(&args.name).await {
        Ok(info) => {
            if args.json {
                println!("{}", json(&info, &args.redis.key_prefix));
            } else {
                println!("{}", human(&info));
            }
            0
        }
        Err(e) => fail(&e),
    }
}

/// `leasehold list [PATTERN]`.
pub(crate) async fn list(args: ListArgs) -> i32 {
    if args.pattern.is_empty() {
        eprintln!("leasehold: invalid pattern: it is empty; use `*` to list every lease");
        return exit::USAGE;
    }
    let client = match connect(&args.redis).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.list(&args.pattern).await {
        Ok(infos) => {
            if args.json {
                let all: Vec<_> = infos
                    .iter()
                    .map(|i| json(i, &args.redis.key_prefix))
                    .collect();
                println!("{}", serde_json::Value::Array(all));
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

/// `leasehold release --force NAME`.
pub(crate) async fn release(args: ReleaseArgs) -> i32 {
    debug_assert!(args.force, "clap requires --force");
    if let Err(code) = check_name(&args.redis, &args.name) {
        return code;
    }
    let client = match connect(&args.redis).await {
        Ok(c) => c,
        Err(code) => return code,
    };
    match client.force_release(&args.name).await {
        Ok(r) => {
            if args.json {
                let v =
                    serde_json::json!({"name": args.name, "evicted": r.evicted, "fence": r.fence});
                println!("{v}");
            } else if r.evicted {
                println!(
                    "{}: evicted its holder; fence advanced to {} (the holder's fenced writes are now refused)",
                    args.name, r.fence
                );
            } else {
                println!(
                    "{}: was not held; fence advanced to {} anyway",
                    args.name, r.fence
                );
            }
            0
        }
        Err(e) => fail(&e),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn passwords_stay_out_of_messages() {
        assert_eq!(
            super::redact("redis://app:s3cret@db:6379/0"),
            "redis://app:***@db:6379/0"
        );
        assert_eq!(
            super::redact("redis://127.0.0.1:6379"),
            "redis://127.0.0.1:6379"
        );
    }
}
