//! When a job's slots are: a cron expression read in an IANA time zone, or a fixed interval. A
//! slot's identity is an **instant** (milliseconds since the Unix epoch, whole seconds), so a local
//! time that happens twice on a DST fall-back is one slot (the earlier instant), and one skipped by a
//! spring-forward is one slot at the first valid instant after the gap (croner's rule, tested in this
//! module with Europe/Berlin and America/New_York).
//!
//! Promise: [`When::next_after`] is strictly increasing and never repeats an instant; two replicas
//! with the same expression and zone compute the same instants (the zone database is compiled in,
//! not read from the host). Limit: the zone rules are those of the compiled-in database; a country
//! that changes its rules after the build is followed only by a rebuild.

use std::time::Duration;

use croner::parser::{CronParser, Seconds};
use croner::Cron;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

use crate::error::{Error, Result};

/// Shortest interval of [`When::every`]: one second (slot instants are whole seconds).
pub const MIN_INTERVAL: Duration = Duration::from_secs(1);

/// When the slots of a job are.
#[derive(Debug, Clone)]
pub enum When {
    /// A cron expression (5 fields, or 6 with seconds first; `@hourly`, `@daily`, `@weekly`,
    /// `@monthly`, `@yearly`) read in a time zone.
    Cron {
        /// The expression as given.
        expr: String,
        /// The parsed expression.
        cron: Box<Cron>,
        /// The zone it is read in.
        zone: TimeZone,
        /// The zone's IANA name as given.
        zone_name: String,
    },
    /// Every `period` from the Unix epoch, shifted by `offset`: `every 10m` starts at :00, :10…
    Every {
        /// The interval.
        period: Duration,
        /// The shift, below the period.
        offset: Duration,
    },
}

/// The IANA zone named `name` (`UTC`, `Europe/Berlin`), from the compiled-in database.
///
/// # Errors
///
/// [`Error::Invalid`] naming the zone when the database does not know it.
pub fn zone(name: &str) -> Result<TimeZone> {
    jiff::tz::db().get(name).map_err(|_| {
        Error::invalid(
            "time zone",
            format!("`{name}` is not an IANA zone name; give one such as UTC, Europe/Berlin or America/New_York"),
        )
    })
}

fn ms_of(ts: Timestamp) -> i64 {
    ts.as_millisecond()
}

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl When {
    /// A cron expression read in the zone named `zone_name`.
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for an expression that does not parse (the parser's reason) or an unknown
    /// zone.
    pub fn cron(expr: &str, zone_name: &str) -> Result<When> {
        let trimmed = expr.trim();
        let cron = CronParser::builder()
            .seconds(Seconds::Optional)
            .build()
            .parse(trimmed)
            .map_err(|e| {
                Error::invalid(
                    "cron expression",
                    format!("`{trimmed}` does not parse: {e}; give 5 fields (minute hour day month weekday), 6 with seconds first, or @hourly/@daily/@weekly/@monthly/@yearly"),
                )
            })?;
        let zone = zone(zone_name)?;
        Ok(When::Cron {
            expr: trimmed.to_owned(),
            cron: Box::new(cron),
            zone,
            zone_name: zone_name.to_owned(),
        })
    }

    /// Every `period` (whole seconds, at least [`MIN_INTERVAL`], at most a little over a year),
    /// shifted by `offset` (below the period).
    ///
    /// # Errors
    ///
    /// [`Error::Invalid`] for a period out of range or not whole seconds, or an offset not below it.
    pub fn every(period: Duration, offset: Duration) -> Result<When> {
        if period < MIN_INTERVAL || period > super::MAX_PERIOD || period.subsec_nanos() != 0 {
            return Err(Error::invalid(
                "interval",
                format!(
                    "{period:?} is not a whole number of seconds between 1s and {:?}; give e.g. 30s, 10m, 1h",
                    super::MAX_PERIOD
                ),
            ));
        }
        if offset >= period || offset.subsec_nanos() != 0 {
            return Err(Error::invalid(
                "offset",
                format!(
                    "{offset:?} is not a whole number of seconds below the interval {period:?}"
                ),
            ));
        }
        Ok(When::Every { period, offset })
    }

    /// The zone the schedule is read in (UTC for an interval).
    pub fn zone(&self) -> TimeZone {
        match self {
            When::Cron { zone, .. } => zone.clone(),
            When::Every { .. } => TimeZone::UTC,
        }
    }

    /// The first slot instant strictly after `unix_ms`, in milliseconds since the epoch (`None`:
    /// none, an expression that never matches again).
    pub fn next_after(&self, unix_ms: i64) -> Option<i64> {
        match self {
            When::Every { period, offset } => {
                let (p, off) = (millis(*period), millis(*offset));
                let k = (unix_ms - off).div_euclid(p) + 1;
                Some(k * p + off)
            }
            When::Cron { cron, zone, .. } => {
                let ts = Timestamp::from_millisecond(unix_ms).ok()?;
                let at = Zoned::new(ts, zone.clone());
                let next = cron.find_next_occurrence(&at, false).ok()?;
                Some(ms_of(next.timestamp()))
            }
        }
    }

    /// The latest slot instant at or before `unix_ms` (`None`: none).
    pub fn latest_at_or_before(&self, unix_ms: i64) -> Option<i64> {
        match self {
            When::Every { period, offset } => {
                let (p, off) = (millis(*period), millis(*offset));
                Some((unix_ms - off).div_euclid(p) * p + off)
            }
            When::Cron { cron, zone, .. } => {
                let ts = Timestamp::from_millisecond(unix_ms).ok()?;
                let at = Zoned::new(ts, zone.clone());
                let prev = cron.find_previous_occurrence(&at, true).ok()?;
                Some(ms_of(prev.timestamp()))
            }
        }
    }

    /// `unix_ms` as a date and time in the schedule's zone, with its offset and zone name.
    pub fn local(&self, unix_ms: i64) -> String {
        match Timestamp::from_millisecond(unix_ms) {
            Ok(ts) => Zoned::new(ts, self.zone())
                .strftime("%Y-%m-%d %H:%M:%S%:z %Q")
                .to_string(),
            Err(_) => unix_ms.to_string(),
        }
    }

    /// What the schedule is, as given (`0 2 * * * in Europe/Berlin`, `every 600s`).
    pub fn describe(&self) -> String {
        match self {
            When::Cron {
                expr, zone_name, ..
            } => format!("{expr} in {zone_name}"),
            When::Every { period, offset } if offset.is_zero() => {
                format!("every {}s", period.as_secs())
            }
            When::Every { period, offset } => {
                format!("every {}s offset {}s", period.as_secs(), offset.as_secs())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> i64 {
        s.parse::<Timestamp>().unwrap().as_millisecond()
    }

    fn next_n(w: &When, from: i64, n: usize) -> Vec<i64> {
        let mut out = Vec::new();
        let mut t = from;
        for _ in 0..n {
            t = w.next_after(t).unwrap();
            out.push(t);
        }
        out
    }

    #[test]
    fn a_fall_back_repeats_01_30_but_the_slot_runs_once() {
        // Europe/Berlin leaves summer time on 2026-10-25: 03:00 CEST becomes 02:00 CET, so 02:30
        // happens twice (00:30Z and 01:30Z).
        let w = When::cron("30 2 * * *", "Europe/Berlin").unwrap();
        let got = next_n(&w, ms("2026-10-24T12:00:00Z"), 2);
        assert_eq!(
            got[0],
            ms("2026-10-25T00:30:00Z"),
            "the earlier 02:30, once"
        );
        assert_eq!(
            got[1],
            ms("2026-10-26T01:30:00Z"),
            "the next day's 02:30 CET"
        );
        // An hourly job in the repeated hour runs at each instant (both are real hours).
        let h = When::cron("0 * * * *", "Europe/Berlin").unwrap();
        let hours = next_n(&h, ms("2026-10-24T23:30:00Z"), 4);
        assert_eq!(
            hours,
            vec![
                ms("2026-10-25T00:00:00Z"),
                ms("2026-10-25T01:00:00Z"),
                ms("2026-10-25T02:00:00Z"),
                ms("2026-10-25T03:00:00Z")
            ]
        );
    }

    #[test]
    fn a_spring_forward_skips_02_30_and_the_slot_runs_once_after_the_gap() {
        // America/New_York enters summer time on 2026-03-08: 02:00 EST becomes 03:00 EDT.
        let w = When::cron("30 2 * * *", "America/New_York").unwrap();
        let got = next_n(&w, ms("2026-03-07T12:00:00Z"), 3);
        assert_eq!(
            got[0],
            ms("2026-03-08T07:00:00Z"),
            "03:00 EDT, the first instant after the gap"
        );
        assert_eq!(got[1], ms("2026-03-09T06:30:00Z"), "02:30 EDT the next day");
        assert!(got[0] > ms("2026-03-07T07:30:00Z"));
        // The day before ran at 02:30 EST: one slot per day on each side of the gap.
        assert_eq!(
            w.latest_at_or_before(ms("2026-03-08T06:59:59Z")),
            Some(ms("2026-03-07T07:30:00Z"))
        );
    }

    #[test]
    fn intervals_and_six_fields_and_nicknames() {
        let w = When::every(Duration::from_secs(600), Duration::from_secs(120)).unwrap();
        assert_eq!(
            w.next_after(ms("2026-01-01T00:00:00Z")),
            Some(ms("2026-01-01T00:02:00Z"))
        );
        assert_eq!(
            w.next_after(ms("2026-01-01T00:02:00Z")),
            Some(ms("2026-01-01T00:12:00Z"))
        );
        assert_eq!(
            w.latest_at_or_before(ms("2026-01-01T00:12:00Z")),
            Some(ms("2026-01-01T00:12:00Z"))
        );
        let s = When::cron("*/5 * * * * *", "UTC").unwrap();
        assert_eq!(
            s.next_after(ms("2026-01-01T00:00:01Z")),
            Some(ms("2026-01-01T00:00:05Z"))
        );
        let d = When::cron("@daily", "UTC").unwrap();
        assert_eq!(
            d.next_after(ms("2026-01-01T00:00:01Z")),
            Some(ms("2026-01-02T00:00:00Z"))
        );
    }

    #[test]
    fn bad_schedules_are_refused_with_what_was_wrong() {
        for bad in ["", "61 * * * *", "* * *", "every day", "0 0 31 2 * * * *"] {
            let e = When::cron(bad, "UTC").unwrap_err().to_string();
            assert!(e.contains("cron expression"), "{bad}: {e}");
        }
        let e = When::cron("0 * * * *", "Mars/Olympus")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Mars/Olympus"), "{e}");
        assert!(When::every(Duration::ZERO, Duration::ZERO).is_err());
        assert!(When::every(Duration::from_millis(1500), Duration::ZERO).is_err());
        assert!(When::every(Duration::from_secs(60), Duration::from_secs(60)).is_err());
    }
}
