//! A lease and the typed record its holder keeps beside it (the lease's note, as JSON): what an
//! election's leader, a scheduled slot's run and an announced holder share. The record is written
//! only while the lease is held ([`Recorded::write`]), read by anyone ([`read`]), and matched to
//! the current holder ([`is_holders`]) so that a record left by an earlier holder is never taken
//! for the current one's.
//!
//! Promise: a record is written under the lease (compare-and-set on the holder's token: a holder
//! that lost its lease writes nothing and is told [`Error::LeaseLost`](crate::Error::LeaseLost)); what [`read`] returns is
//! what the last write that landed wrote, or `None` for no note or one that is not this type's;
//! [`is_holders`] says whether it belongs to the holder the store reports now (by token where the
//! store names holders, else by fence).
//! Limit: a note outlives its lease (up to the name's retention), so a record read without
//! matching is only "the last one written"; a record is at most
//! [`MAX_NOTE_LEN`](crate::lease::store::MAX_NOTE_LEN) bytes (a longer one is refused by
//! [`Lease::write_note`], nothing written); the times in it are the writer's clock.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::{de::DeserializeOwned, Serialize};

use crate::error::Result;
use crate::fence::Fence;
use crate::lease::store::LeaseInfo;
use crate::lease::{Lease, LeaseClient};

/// How much of the holder's token a record keeps: enough to tell holders apart, far from enough to
/// act as one.
pub(crate) const TAG_LEN: usize = 12;

/// The tag a record keeps of the holder's `token` (its first [`TAG_LEN`] characters).
pub(crate) fn tag(token: &str) -> String {
    token.chars().take(TAG_LEN).collect()
}

/// Whether a record written with `term` (the writer's fence) and `tag` ([`tag`] of its token) is
/// the current holder's: by token where the store names holders, else by fence (every store's fence
/// for a held lock is its holder's). An empty or short tag matches nobody by token.
pub(crate) fn is_holders(info: &LeaseInfo, term: u64, tag: &str) -> bool {
    match info.holders.first() {
        Some(h) => tag.len() == TAG_LEN && h.token.starts_with(tag),
        None => info.fence == Some(Fence::new(term)),
    }
}

/// Milliseconds since the Unix epoch at `t` (0 before the epoch).
pub(crate) fn unix_ms_at(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Milliseconds since the Unix epoch, by this process's clock.
pub(crate) fn unix_ms() -> u64 {
    unix_ms_at(SystemTime::now())
}

/// A record's JSON (empty if it cannot be written, which a plain struct of strings and numbers
/// never is).
pub(crate) fn encode<R: Serialize>(record: &R) -> Vec<u8> {
    serde_json::to_vec(record).unwrap_or_default()
}

/// A record from a note (`None`: not JSON of this type).
pub(crate) fn decode<R: DeserializeOwned>(bytes: &[u8]) -> Option<R> {
    serde_json::from_slice(bytes).ok()
}

/// The record last written beside `name` that decodes as `R` and passes `valid` (`None`: none kept,
/// or another kind of note), whoever wrote it.
///
/// # Errors
///
/// As [`LeaseClient::read_note`].
///
/// # Cancel safety
///
/// Cancel safe: it only reads.
pub(crate) async fn read<R: DeserializeOwned>(
    client: &LeaseClient,
    name: &str,
    valid: impl Fn(&R) -> bool,
) -> Result<Option<R>> {
    Ok(client
        .read_note(name)
        .await?
        .and_then(|b| decode::<R>(&b))
        .filter(valid))
}

/// Writes `record` as `lease`'s note.
///
/// # Errors
///
/// As [`Lease::write_note`]: [`Error::LeaseLost`](crate::Error::LeaseLost) when the lease is no longer held (nothing
/// written), [`Error::Invalid`](crate::Error::Invalid) for a record over the note's limit or a store that keeps no notes.
///
/// # Cancel safety
///
/// As [`Lease::write_note`]: the write may or may not land.
pub(crate) async fn write<R: Serialize>(lease: &Lease, record: &R) -> Result<()> {
    lease.write_note(&encode(record)).await
}

/// A held lease and the record its holder keeps beside it.
#[derive(Debug)]
pub(crate) struct Recorded<R> {
    lease: Lease,
    record: R,
}

impl<R: Serialize> Recorded<R> {
    /// Pairs a held lease with its record (nothing written yet: [`write`](Self::write)).
    pub(crate) fn new(lease: Lease, record: R) -> Self {
        Recorded { lease, record }
    }

    /// The lease.
    pub(crate) fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The record as last kept here.
    pub(crate) fn record(&self) -> &R {
        &self.record
    }

    /// Writes the record beside the lease.
    ///
    /// # Errors
    ///
    /// As [`write`].
    ///
    /// # Cancel safety
    ///
    /// As [`write`].
    pub(crate) async fn write(&self) -> Result<()> {
        write(&self.lease, &self.record).await
    }

    /// Changes the record with `change` and writes it; the change is kept only if the write
    /// landed.
    ///
    /// # Errors
    ///
    /// As [`write`]; the record kept here is then the one before.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the write may or may not land; the record kept here changes only once it did.
    pub(crate) async fn update(&mut self, change: impl FnOnce(&mut R)) -> Result<()>
    where
        R: Clone,
    {
        let mut next = self.record.clone();
        change(&mut next);
        write(&self.lease, &next).await?;
        self.record = next;
        Ok(())
    }

    /// The lease and the record, taken apart.
    pub(crate) fn into_parts(self) -> (Lease, R) {
        (self.lease, self.record)
    }
}

/// Releases `lease`, logging (not returning) a failure: for a lease taken only to read or write its
/// record.
///
/// # Cancel safety
///
/// As [`Lease::release`]: the release is handed to the background.
pub(crate) async fn release_quietly(lease: Lease) {
    if let Err(e) = lease.release().await {
        tracing::debug!(error = %e, "releasing a lease after reading or writing its record");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lease::store::HolderInfo;

    #[test]
    fn a_record_belongs_to_the_holder_by_token_else_by_fence() {
        let mut info = LeaseInfo::free("n", "k".into());
        info.held = true;
        info.fence = Some(Fence::new(7));
        assert!(is_holders(&info, 7, "0123456789ab"));
        assert!(!is_holders(&info, 6, "0123456789ab"));
        info.holders
            .push(HolderInfo::new("0123456789abcdef".into(), None, None));
        assert!(is_holders(&info, 6, "0123456789ab"), "the token decides");
        assert!(!is_holders(&info, 7, "ffff456789ab"));
        assert!(!is_holders(&info, 7, ""), "an empty tag matches nobody");
        assert_eq!(tag("0123456789abcdef"), "0123456789ab");
    }

    #[test]
    fn garbage_is_no_record() {
        assert_eq!(decode::<u32>(b"not json"), None);
        assert_eq!(decode::<u32>(&encode(&7_u32)), Some(7));
        assert_eq!(
            unix_ms_at(UNIX_EPOCH - std::time::Duration::from_secs(1)),
            0
        );
    }
}
