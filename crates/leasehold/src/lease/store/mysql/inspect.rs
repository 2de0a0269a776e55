//! `status` and `list` on MariaDB: the rows under the client's prefix, read without locking them,
//! by the database clock; `list` keeps the names its pattern matches ([`Glob`], the one matcher of
//! every store).
//!
//! Promise: nothing is locked or written; `status` answers for every name asked, in the order asked
//! (a name without a row is free), with whether it is held, its remaining time and its last fence,
//! all by the database clock, so the reading client's clock does not matter.
//!
//! Limit: `list` reads every row under the prefix (held, or idle within the retention) and filters
//! them in the client.

use std::collections::HashMap;
use std::sync::Arc;

use super::{key, Core};
use crate::error::{Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::LeaseInfo;
use crate::lease::Glob;

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
    let glob = Glob::new(pattern);
    Ok(rows(core, "ORDER BY leasehold_leases.name", &[])
        .await?
        .into_iter()
        .filter(|r| glob.matches(&r.0))
        .map(|r| info(&core.prefix, r))
        .filter(|i| crate::lease::names::validate_name(&i.name).is_ok())
        .collect())
}
