//! `status` and `list` on MariaDB: the rows under the client's prefix, read without locking them,
//! by the database clock; the glob of `list` (`*`, `?`, `[abc]`, `[^a-z]`, `\x`, as Redis's
//! `SCAN MATCH`) is matched here, so the same pattern lists the same names in every store.
//!
//! Limit: `list` reads every row under the prefix (held, or idle within the retention) and filters
//! them in the client.

use std::collections::HashMap;
use std::sync::Arc;

use super::{key, Core};
use crate::error::{Phase, Result};
use crate::fence::Fence;
use crate::lease::store::LeaseInfo;

/// Names inspected by one statement.
const CHUNK: usize = 500;

/// One row of `sql/inspect.sql`: name, held, remaining ms, fence.
type InfoRow = (String, bool, Option<i64>, i64);

fn info(prefix: &str, (name, held, remaining_ms, fence): InfoRow) -> LeaseInfo {
    LeaseInfo {
        held,
        ttl_ms: remaining_ms.and_then(|m| u64::try_from(m).ok()),
        fence: u64::try_from(fence).ok().filter(|f| *f > 0).map(Fence::new),
        ..LeaseInfo::free(&name, key(prefix, &name))
    }
}

async fn rows(core: &Core, condition: &str, names: &[&str]) -> Result<Vec<InfoRow>> {
    let sql: Arc<str> = format!("{} {condition}", include_str!("sql/inspect.sql")).into();
    let names: Arc<[String]> = names.iter().map(|n| (*n).to_owned()).collect();
    core.run(Phase::Inspect, 1, |conn| {
        let (sql, prefix, names) = (sql.clone(), core.prefix.clone(), names.clone());
        Box::pin(async move {
            // leasehold's own statement and `?` marks; values are bound.
            let mut q = sqlx::query_as::<_, InfoRow>(sqlx::AssertSqlSafe(sql)).bind(&*prefix);
            for n in names.iter() {
                q = q.bind(n);
            }
            q.fetch_all(conn).await
        })
    })
    .await
}

/// The state of each name, in the order asked; a name without a row is free.
pub(super) async fn inspect(core: &Core, names: &[&str]) -> Result<Vec<LeaseInfo>> {
    let mut out = Vec::with_capacity(names.len());
    for chunk in names.chunks(CHUNK) {
        let marks = vec!["?"; chunk.len()].join(", ");
        let found: HashMap<String, InfoRow> = rows(core, &format!("AND name IN ({marks})"), chunk)
            .await?
            .into_iter()
            .map(|r| (r.0.clone(), r))
            .collect();
        out.extend(chunk.iter().map(|n| match found.get(*n) {
            Some(r) => info(&core.prefix, r.clone()),
            None => LeaseInfo::free(n, key(&core.prefix, n)),
        }));
    }
    Ok(out)
}

/// Every name under the prefix with a row whose name matches the glob.
pub(super) async fn list(core: &Core, pattern: &str) -> Result<Vec<LeaseInfo>> {
    let pattern: Vec<char> = pattern.chars().collect();
    Ok(rows(core, "ORDER BY leasehold_leases.name", &[])
        .await?
        .into_iter()
        .filter(|r| glob_match(&pattern, &r.0.chars().collect::<Vec<_>>()))
        .map(|r| info(&core.prefix, r))
        .filter(|i| crate::lease::names::validate_name(&i.name).is_ok())
        .collect())
}

/// Whether `text` matches the glob `pattern` whole (Redis's `stringmatchlen` rules, case-sensitive).
fn glob_match(pattern: &[char], text: &[char]) -> bool {
    match pattern.first() {
        None => text.is_empty(),
        Some('*') => (0..=text.len()).any(|i| glob_match(&pattern[1..], &text[i..])),
        Some('?') => !text.is_empty() && glob_match(&pattern[1..], &text[1..]),
        Some('[') => match (class_match(&pattern[1..], text.first()), text.first()) {
            (Some((true, rest)), Some(_)) => glob_match(rest, &text[1..]),
            (Some(_), _) => false,
            (None, Some('[')) => glob_match(&pattern[1..], &text[1..]),
            (None, _) => false,
        },
        Some('\\') if pattern.len() > 1 => {
            text.first() == Some(&pattern[1]) && glob_match(&pattern[2..], &text[1..])
        }
        Some(c) => text.first() == Some(c) && glob_match(&pattern[1..], &text[1..]),
    }
}

/// Matches `c` against the class whose body starts at `body` (after `[`): whether it matched and
/// the pattern after the closing `]`; `None` when the class is not closed (a literal `[`).
fn class_match<'p>(body: &'p [char], c: Option<&char>) -> Option<(bool, &'p [char])> {
    let (negate, mut i) = if body.first() == Some(&'^') {
        (true, 1)
    } else {
        (false, 0)
    };
    let mut hit = false;
    while i < body.len() {
        match body[i] {
            ']' => return Some((hit != negate, &body[i + 1..])),
            '\\' if i + 1 < body.len() => {
                hit |= c == Some(&body[i + 1]);
                i += 2;
            }
            lo if i + 2 < body.len() && body[i + 1] == '-' && body[i + 2] != ']' => {
                let hi = body[i + 2];
                hit |= c.is_some_and(|c| (lo.min(hi)..=lo.max(hi)).contains(c));
                i += 3;
            }
            x => {
                hit |= c == Some(&x);
                i += 1;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    fn m(p: &str, t: &str) -> bool {
        glob_match(
            &p.chars().collect::<Vec<_>>(),
            &t.chars().collect::<Vec<_>>(),
        )
    }

    #[test]
    fn globs_match_as_redis_does() {
        assert!(m("job*", "job-1"));
        assert!(!m("job*", "xjob"));
        assert!(m("j?b", "jab"));
        assert!(m("[a-c]x", "bx"));
        assert!(!m("[^a-c]x", "bx"));
        assert!(m("a\\*", "a*"));
        assert!(!m("a\\*", "ab"));
        assert!(m("[x", "[x"));
        assert!(m("*", ""));
    }
}
