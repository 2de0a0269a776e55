//! What commands print for people and programs: every `--json` goes through [`print_json`], one
//! JSON value on one line of stdout; [`ago`] and [`shown_ago`] are the time since an instant the
//! store recorded, as the human lines show it. Promise: the JSON is the value's serialization, compact, on one line.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::duration::show;

/// Prints `value` as one line of JSON on stdout.
pub(crate) fn print_json(value: &impl Serialize) {
    let v = serde_json::to_value(value).expect("what a command prints serializes");
    println!("{v}");
}

/// How long ago `unix_ms` (milliseconds since the Unix epoch) was, by this machine's clock; `None`
/// when it is in the future.
pub(crate) fn ago(unix_ms: u64) -> Option<Duration> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0);
    now.checked_sub(unix_ms).map(Duration::from_millis)
}

/// [`ago`] as the human lines show it; `0s` for an instant in the future.
pub(crate) fn shown_ago(unix_ms: u64) -> String {
    show(ago(unix_ms).unwrap_or_default())
}
