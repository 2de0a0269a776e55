//! The etcd keys of a lease name.
//!
//! Layout under the client's prefix `P`, for the name `N`:
//! * `P/{N}/<token>`: one key per contender (the holder and every waiter), attached to the
//!   contender's own etcd lease; the holder is the one with the lowest create revision.
//! * `P/{N}`: the record of the last fence issued for the name (its mod revision), so that `status`
//!   still shows the last fence after the holder left; attached to the writing client's retention
//!   lease (`retention.rs`), so that it goes the retention after its last write.
//! * `P/{N}#note`: a note the holder wrote beside the lease (an election's leader record), on the
//!   same retention lease; outside the queue's range, and not a name to `list`.
//!
//! Braces are refused in names and prefixes, so `P/{N}/` is never a prefix of another name's keys
//! (it would need a name starting with `N}/`), and one range read sees one name's queue only.
//!
//! Promise: one name's keys are always the same three shapes under `P/{N}`, so a range read of
//! `P/{N}/` sees that name's contenders and nobody else's, and [`name_of`] gives back `N` from any
//! of its keys.
//!
//! Limit: the layout assumes a name and a prefix already checked (no braces); these functions do
//! not check them. Keys are only names: which contender holds the lease is decided by the
//! transactions that read them, not here.

/// The keys of one lease name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EtcdKeys {
    /// The fence record: its mod revision is the last fence issued for the name.
    pub(crate) record: String,
    /// Prefix of the contenders' keys (`record` + `/`); what status shows as the key.
    pub(crate) queue: String,
    /// The holder's note (`record` + `#note`).
    pub(crate) note: String,
}

impl EtcdKeys {
    /// Keys for a name already checked by `validate_name`.
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let record = format!("{prefix}/{{{name}}}");
        let queue = format!("{record}/");
        let note = format!("{record}#note");
        EtcdKeys {
            record,
            queue,
            note,
        }
    }

    /// The key of the contender holding `token`.
    pub(crate) fn contender(&self, token: &str) -> String {
        format!("{}{token}", self.queue)
    }
}

/// What every key of the prefix starts with (for `list`).
pub(crate) fn names_start(prefix: &str) -> String {
    format!("{prefix}/{{")
}

/// The name a key of the prefix belongs to: `P/{N}` and `P/{N}/…` give `N`.
pub(crate) fn name_of<'k>(names_start: &str, key: &'k str) -> Option<&'k str> {
    let rest = key.strip_prefix(names_start)?;
    let end = rest.find('}')?;
    let tail = &rest[end + 1..];
    (tail.is_empty() || tail.starts_with('/')).then(|| &rest[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_name_per_range_and_back() {
        let k = EtcdKeys::new("leasehold", "orders/eu");
        assert_eq!(k.record, "leasehold/{orders/eu}");
        assert_eq!(k.queue, "leasehold/{orders/eu}/");
        assert_eq!(k.contender("ab"), "leasehold/{orders/eu}/ab");
        // A name that extends another does not fall into its queue range.
        let longer = EtcdKeys::new("leasehold", "orders/eu/x");
        assert!(!longer.contender("ab").starts_with(&k.queue));
        assert!(!longer.record.starts_with(&k.queue));
        let start = names_start("leasehold");
        assert_eq!(name_of(&start, &k.record), Some("orders/eu"));
        assert_eq!(name_of(&start, &k.contender("ab")), Some("orders/eu"));
        assert_eq!(name_of(&start, "leasehold/{x}junk"), None);
        assert_eq!(name_of(&start, "other/{x}"), None);
        // The note is neither in the queue's range nor a name of its own.
        assert_eq!(k.note, "leasehold/{orders/eu}#note");
        assert!(!k.note.starts_with(&k.queue));
        assert_eq!(name_of(&start, &k.note), None);
    }
}
