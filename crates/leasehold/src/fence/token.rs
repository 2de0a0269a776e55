use std::fmt;

/// A fencing token: a number that is strictly larger for every new holder of a lease name, and that
/// resources compare to refuse writers whose lease was superseded.
///
/// Leases mint fences as `max(previous + 1, Redis server time in microseconds)`, so fences also keep
/// increasing across a Redis restart without persistence or a failover to a lagging replica.
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
    /// since 1970 are about 2^51); a larger value saturates rather than wrapping negative.
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
