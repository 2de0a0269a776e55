//! Human durations on the command line (`500ms`, `30s`, `1m30s`, `0`). Promise: a value either parses
//! to an exact [`Duration`] or is refused with a message naming the value and the accepted form. Limit:
//! ranges (a TTL between 10 ms and 24 h, ...) are checked by the library, not here.

use std::time::Duration;

/// Parses a human duration for clap. A bare `0` means zero; any other number needs a unit, because a
/// bare `30` is ambiguous (seconds? milliseconds?) and a wrong guess holds a lease 1000 times too long.
pub(crate) fn parse(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty duration; write it like 500ms, 30s or 1m30s".to_owned());
    }
    if t == "0" {
        return Ok(Duration::ZERO);
    }
    if t.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(format!(
            "`{t}` has no unit; write {t}s for seconds or {t}ms for milliseconds"
        ));
    }
    humantime::parse_duration(t)
        .map_err(|e| format!("`{t}` is not a duration ({e}); write it like 500ms, 30s or 1m30s"))
}

/// Formats a duration as a person writes it, in the largest unit that divides it: `25h`, `2d`,
/// `90m`, `30s`, `250ms`; a measured one to a tenth of a second below a minute (`1.5s`) and to the
/// second above (`2m3s`). So `--ttl 25h` is echoed as `25h`, never as milliseconds.
pub(crate) fn show(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000)] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms.is_multiple_of(1000) && ms < 60_000 {
        format!("{}s", ms / 1000)
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        humantime::format_duration(Duration::from_secs(d.as_secs()))
            .to_string()
            .replace(' ', "")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_the_documented_forms() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1m 30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
    }

    #[test]
    fn refuses_garbage_with_the_reason() {
        for bad in ["", "30", "1.5", "fast", "-1s", "10 parsecs", "5s!"] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains("500ms") || e.contains("unit"), "{bad:?}: {e}");
        }
        assert!(parse("30").unwrap_err().contains("30s"));
    }

    #[test]
    fn shows_compactly_and_as_written() {
        assert_eq!(show(Duration::from_millis(250)), "250ms");
        assert_eq!(show(Duration::from_millis(1500)), "1.5s");
        assert_eq!(show(Duration::from_secs(30)), "30s");
        assert_eq!(show(Duration::from_secs(123)), "2m3s");
        for written in ["25h", "2d", "90m", "10s", "1h", "500ms", "1m30s"] {
            assert_eq!(show(parse(written).unwrap()), written);
        }
    }
}
