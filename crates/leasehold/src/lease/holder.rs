//! Who holds a lease: a label the holder announces beside it ([`Lease::announce`](crate::Lease::announce)),
//! the time since it holds and its fence, which [`LeaseClient::inspect`](crate::LeaseClient::inspect)
//! and [`LeaseClient::list`](crate::LeaseClient::list) report in [`LeaseInfo::holder`].
//!
//! Promise: the label is read back only while it belongs to the current holder: the record carries
//! the first digits of the holder's token and its fence, and is matched to the holder the store
//! reports (by token where the store names holders, else by the name's fence), so a record left by
//! an earlier holder is never shown as the current one's. An election's leader record counts too.
//! Limit: it is for operators; nothing checks that a label is true, a holder that never announced
//! has none, a semaphore's permits keep no record, and `list` reads one record per held name (one
//! more request each).

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::lease::recorded::{self, is_holders, unix_ms};
use crate::lease::store::LeaseInfo;

/// Longest holder label, in bytes.
pub const MAX_HOLDER_LABEL: usize = 128;

/// Who holds a name, as its holder announced it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[non_exhaustive]
pub struct HolderLabel {
    /// The label (`host:pid` by default in the `leasehold` command).
    pub label: String,
    /// Since when it holds, in milliseconds since the Unix epoch by the holder's clock.
    pub since_unix_ms: u64,
    /// The fence it holds with.
    pub fence: Fence,
}

/// The record a holder writes beside its lease (a plain lease's; an election's has the same fields
/// and a value).
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub(crate) struct Record {
    pub(crate) term: u64,
    pub(crate) holder: String,
    pub(crate) since_unix_ms: u64,
    pub(crate) tag: String,
}

impl Record {
    /// Whether this record is the current holder's ([`is_holders`]).
    pub(crate) fn is_of(&self, info: &LeaseInfo) -> bool {
        is_holders(info, self.term, &self.tag)
    }
}

/// This machine's host name, as the operating system gives it (`gethostname(2)` on Unix,
/// `GetComputerNameExW` on Windows); `unknown-host` when it is empty or not UTF-8.
pub fn host_name() -> String {
    gethostname::gethostname()
        .into_string()
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned())
}

/// The default label of a holder: `host:pid`.
pub fn default_label() -> String {
    format!("{}:{}", host_name(), std::process::id())
}

/// Checks a holder label: at most [`MAX_HOLDER_LABEL`] bytes, no control characters.
pub fn check_label(label: &str) -> Result<()> {
    if label.is_empty() || label.len() > MAX_HOLDER_LABEL {
        return Err(Error::invalid(
            "holder",
            format!(
                "{} bytes; give between 1 and {MAX_HOLDER_LABEL} bytes (a host name and pid, a pod name)",
                label.len()
            ),
        ));
    }
    if label.chars().any(char::is_control) {
        return Err(Error::invalid(
            "holder",
            "control characters (a newline, a tab, an escape) are refused: they would garble `status` and `list`",
        ));
    }
    Ok(())
}

/// The record's JSON for a holding.
pub(crate) fn encode(label: &str, fence: Fence, token: &str) -> Vec<u8> {
    let rec = Record {
        term: fence.get(),
        holder: label.to_owned(),
        since_unix_ms: unix_ms(),
        tag: recorded::tag(token),
    };
    let mut v = serde_json::to_value(&rec).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.insert("lease".into(), 1.into());
    }
    serde_json::to_vec(&v).unwrap_or_default()
}

/// Fills `info.holder` from the note `note`, when it is the current holder's.
pub(crate) fn fill(info: &mut LeaseInfo, note: Option<&[u8]>) {
    let Some(rec) = note.and_then(recorded::decode::<Record>) else {
        return;
    };
    if info.held && info.permits <= 1 && rec.is_of(info) {
        info.holder = Some(HolderLabel {
            label: rec.holder,
            since_unix_ms: rec.since_unix_ms,
            fence: Fence::new(rec.term),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_bounded_and_plain() {
        assert!(check_label("web-1:4121").is_ok());
        for bad in ["", "two\nlines", "tab\there", "esc\x1b[31m"] {
            assert!(
                matches!(check_label(bad), Err(Error::Invalid { what: "holder", .. })),
                "{bad:?}"
            );
        }
        assert!(check_label(&"h".repeat(MAX_HOLDER_LABEL + 1)).is_err());
    }

    #[test]
    fn a_record_is_shown_only_for_its_own_holding() {
        let mut info = LeaseInfo::free("n", "k".into());
        info.held = true;
        info.fence = Some(Fence::new(7));
        let note = encode("web-1:42", Fence::new(7), "abcdef0123456789");
        fill(&mut info, Some(&note));
        assert_eq!(
            info.holder.as_ref().map(|h| h.label.as_str()),
            Some("web-1:42")
        );
        let mut later = LeaseInfo::free("n", "k".into());
        later.held = true;
        later.fence = Some(Fence::new(8));
        fill(&mut later, Some(&note));
        assert_eq!(
            later.holder, None,
            "an earlier holder's record is not the current one's"
        );
    }
}
