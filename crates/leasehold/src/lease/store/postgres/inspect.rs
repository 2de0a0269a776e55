//! Reading the PostgreSQL store without touching it: `status` (inspect) and `list`.
//!
//! Promise: nothing is written or locked; `status` answers for every name asked, in the order asked
//! (a name without a row is free, with no known fence), with whether it is held, its remaining time
//! and its last fence, by the database clock; `list` gives every valid name under the prefix with a
//! row (held, or idle within the retention) that its pattern matches.
//!
//! Limit: a read is a snapshot; a holder may change right after it.

use super::{key, statements, Core, INSPECT_CHUNK};
use crate::error::{Phase, Result};
use crate::fence::Fence;
use crate::lease::store::contract::LeaseInfo;

fn info(prefix: &str, row: statements::InfoRow) -> LeaseInfo {
    let (name, held, remaining_ms, fence) = row;
    LeaseInfo {
        held,
        ttl_ms: remaining_ms.and_then(|m| u64::try_from(m).ok()),
        fence: fence.and_then(|f| u64::try_from(f).ok()).map(Fence::new),
        ..LeaseInfo::free(&name, key(prefix, &name))
    }
}

impl Core {
    pub(super) async fn inspect(&self, names: &[&str]) -> Result<Vec<LeaseInfo>> {
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(INSPECT_CHUNK) {
            let owned: Vec<String> = chunk.iter().map(|n| (*n).to_owned()).collect();
            let prefix = self.prefix.to_string();
            let rows = self
                .fetch_all(Phase::Inspect, || {
                    statements::inspect(prefix.clone(), owned.clone())
                })
                .await?;
            out.extend(rows.into_iter().map(|r| info(&self.prefix, r)));
        }
        Ok(out)
    }

    /// Every name under the prefix with a row (held, or idle within the retention) whose name
    /// matches the glob.
    pub(super) async fn list(&self, pattern: &str) -> Result<Vec<LeaseInfo>> {
        let (prefix, glob) = (self.prefix.to_string(), crate::lease::Glob::new(pattern));
        let rows = self
            .fetch_all(Phase::Inspect, || statements::list(prefix.clone()))
            .await?;
        Ok(rows
            .into_iter()
            .filter(|r| glob.matches(&r.0))
            .map(|r| info(&self.prefix, r))
            .filter(|i| crate::lease::names::validate_name(&i.name).is_ok())
            .collect())
    }
}
