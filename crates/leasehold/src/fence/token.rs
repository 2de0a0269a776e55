//! The fencing token itself: a [`Fence`] is the number a lease's store issues with every grant, and
//! what a resource compares to refuse a writer whose lease was superseded.
//!
//! Promise: for one lease name, every new holder's fence is strictly greater than every fence an
//! earlier holder could have acted on, by the rule of the store that issued it (none of them a
//! client's clock): Redis and MariaDB/MySQL `max(previous + 1, server time in µs)`; Redlock the same
//! on each master, the largest among a majority that recorded it; PostgreSQL a sequence drawn under
//! the name's advisory lock; etcd the cluster revision at which the holder became the owner. The
//! type is a plain ordered `u64` that prints and parses as its decimal digits.
//! Limit: fences of different names, or of different stores, are not comparable; a fence orders
//! holders but stops nobody by itself: only a resource that checks it ([`crate::fence`]) refuses
//! the stale writer. A store's clock stepped back by more than the time passed (Redis, MariaDB,
//! Redlock after the name's record was lost) can issue a smaller fence.

use std::fmt;

/// A fencing token: a number that is strictly larger for every new holder of a lease name, and that
/// resources compare to refuse writers whose lease was superseded.
///
/// Each store mints them by its own rule: a server clock in microseconds
/// floored by the previous fence (Redis, Redlock, MariaDB/MySQL), a sequence (PostgreSQL) or the
/// cluster revision (etcd), so fences keep increasing across a restart or failover of the store
/// within the limits the store documents. Fences of different names, or of different stores, are not
/// comparable.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(transparent)]
pub struct Fence(u64);

impl Fence {
    /// Wraps a raw fence value (e.g. one read from `LEASEHOLD_FENCE`).
    pub const fn new(value: u64) -> Self {
        Fence(value)
    }

    /// The raw value.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The value as SQL `BIGINT`. Fences minted by leasehold stay far below `i64::MAX` (microseconds
    /// since 1970 are about 2^51; sequences and revisions are smaller); a larger value saturates
    /// rather than wrapping negative.
    pub fn as_i64(self) -> i64 {
        i64::try_from(self.0).unwrap_or(i64::MAX)
    }
}

impl fmt::Display for Fence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl From<u64> for Fence {
    fn from(v: u64) -> Self {
        Fence(v)
    }
}

impl std::str::FromStr for Fence {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.trim().parse().map(Fence)
    }
}
