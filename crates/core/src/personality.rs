//! What a log's entries are: the seam between the engine, which sequences and commits
//! whatever it is given, and the formats a log speaks.
//!
//! The engine (`engine::Log`) knows nothing of entry formats. A [`Personality`] tells
//! it, for every entry, whether it is acceptable, what it is deduplicated by, which
//! bytes are stored in the entry bundle and which leaf hash enters the tree once the
//! entry's index and timestamp are known, and how a stored bundle reads back. Two
//! personalities are planned (docs/seams.md):
//!
//! * [`TlogTiles`], today's log: entries are opaque bytes of 1..=65,535 bytes, stored
//!   as they came in uint16-length-prefixed bundles at `tile/entries/` (tlog-tiles "Log
//!   entries"), hashed as RFC 6962 leaves at submission.
//! * Certificate Transparency (static-ct-api), where what is stored and hashed holds the
//!   index and timestamp given at sequencing, bundles are `tile/data/` tiles of
//!   `TileLeaf` structs without length prefixes, and entries are up to ~16 MiB.
//!
//! A personality is pure (no I/O, no runtime): the engine calls it on request tasks
//! ([`Personality::accept`], [`Personality::dedup_key`]) and on the integrator
//! ([`Personality::encode`]), so it must be cheap and must not block.

use crate::bundle;
use crate::hash::{Hash, leaf_hash};
use crate::tile::TileKind;

/// Why a personality refused an entry.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum EntryError {
    /// A zero-length entry (tlog-tiles "Log entries": entries are 1..=65535 bytes).
    #[error("empty entry")]
    Empty,
    /// Larger than the personality's bundles can hold.
    #[error("entry of {size} bytes exceeds the {max}-byte limit")]
    TooLarge {
        /// The entry's size.
        size: usize,
        /// [`Personality::max_entry_size`].
        max: usize,
    },
    /// Not an entry of this log (a chain that does not validate, bad encoding): one
    /// line saying why, for the client.
    #[error("{0}")]
    Invalid(String),
    /// A stored bundle that does not decode.
    #[error("malformed entry bundle: {0}")]
    Malformed(String),
}

/// One entry read back from a stored bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredEntry<'a> {
    /// The entry's bytes as the personality stored them (for [`TlogTiles`], the
    /// submitted bytes).
    pub bytes: &'a [u8],
    /// The timestamp the entry was sequenced with, in milliseconds since the Unix
    /// epoch; 0 for a personality whose entries carry none.
    pub timestamp: u64,
}

/// What a log's entries are; the engine holds one per log (see the module docs).
///
/// # Contract
///
/// * **Deterministic.** [`encode`](Self::encode) of the same entry at the same index and
///   timestamp appends the same bytes and returns the same leaf hash, on every frontend
///   and after every restart: the stored tree is the only source of truth, and a
///   reloaded edge must hash to the committed root.
/// * **Read back.** [`split_bundle`](Self::split_bundle) of the bytes `encode` appended
///   yields the entries in order, and [`stored_leaf`](Self::stored_leaf) and
///   [`stored_dedup_key`](Self::stored_dedup_key) of each give what `encode` returned
///   and what [`dedup_key`](Self::dedup_key) gave at submission. The engine relies on
///   this to check a reloaded edge against the committed root and to rebuild its dedup
///   index from the log.
/// * **Cheap and pure.** No I/O, no blocking: these run on request tasks and on the
///   integrator.
pub trait Personality: Send + Sync + std::fmt::Debug + 'static {
    /// A short name for logs and metrics ("tlog-tiles", "static-ct").
    fn name(&self) -> &'static str;

    /// The largest entry [`accept`](Self::accept) takes, in submitted bytes. The engine
    /// never bounds its queue below one entry of this size.
    fn max_entry_size(&self) -> usize;

    /// Check a submission before it is queued. Returns its leaf hash when that does
    /// not depend on the index and timestamp given at sequencing (computed here, on the
    /// request's task, off the integrator); otherwise any value, which
    /// [`encode`](Self::encode) ignores.
    fn accept(&self, entry: &[u8]) -> Result<Hash, EntryError>;

    /// What duplicates of an entry share: the key of the dedup index. The full
    /// SHA-256, never truncated (Sunlight and Azul had to widen 128-bit keys after
    /// collision attacks).
    fn dedup_key(&self, entry: &[u8]) -> [u8; 32];

    /// The kind of the tiles entries are bundled in (`tile/entries/` for tlog-tiles).
    fn bundle_kind(&self) -> TileKind;

    /// Append the sequenced `entry` (accepted with leaf hash `accepted`) to `bundle`,
    /// the bytes of the bundle being built, as the entry at `index` with `timestamp`
    /// (milliseconds since the Unix epoch, never below the timestamp of any entry
    /// before it); return its leaf hash.
    fn encode(
        &self,
        entry: &[u8],
        accepted: &Hash,
        index: u64,
        timestamp: u64,
        bundle: &mut Vec<u8>,
    ) -> Result<Hash, EntryError>;

    /// Whether stored entries carry the timestamp they were sequenced at (what
    /// [`StoredEntry::timestamp`] reads back). The dedup index keeps an entry's
    /// timestamp beside its index only then, so that it holds what the log holds and
    /// the same after a rebuild from the log.
    fn stores_timestamps(&self) -> bool {
        false
    }

    /// Split a stored bundle into its entries, in order, without copying.
    fn split_bundle<'a>(&self, bytes: &'a [u8]) -> Result<Vec<StoredEntry<'a>>, EntryError>;

    /// The leaf hash of an entry read back from a bundle.
    fn stored_leaf(&self, entry: &StoredEntry<'_>) -> Hash;

    /// The dedup key of an entry read back from a bundle: what
    /// [`dedup_key`](Self::dedup_key) gave for its submission.
    fn stored_dedup_key(&self, entry: &StoredEntry<'_>) -> [u8; 32];
}

/// The tlog-tiles personality: entries are opaque bytes, 1..=65,535 of them, stored as
/// submitted in uint16-length-prefixed entry bundles (tlog-tiles "Log entries"), with
/// the RFC 6962 leaf hash of those bytes (tlog-tiles "Merkle Tree").
#[derive(Clone, Copy, Debug, Default)]
pub struct TlogTiles;

impl Personality for TlogTiles {
    fn name(&self) -> &'static str {
        "tlog-tiles"
    }

    fn max_entry_size(&self) -> usize {
        bundle::MAX_ENTRY_SIZE
    }

    fn accept(&self, entry: &[u8]) -> Result<Hash, EntryError> {
        if entry.is_empty() {
            return Err(EntryError::Empty);
        }
        if entry.len() > bundle::MAX_ENTRY_SIZE {
            return Err(EntryError::TooLarge {
                size: entry.len(),
                max: bundle::MAX_ENTRY_SIZE,
            });
        }
        Ok(leaf_hash(entry))
    }

    fn dedup_key(&self, entry: &[u8]) -> [u8; 32] {
        entry_hash(entry)
    }

    fn bundle_kind(&self) -> TileKind {
        TileKind::Entries
    }

    fn encode(
        &self,
        entry: &[u8],
        accepted: &Hash,
        _index: u64,
        _timestamp: u64,
        bundle: &mut Vec<u8>,
    ) -> Result<Hash, EntryError> {
        bundle::append_entry(bundle, entry).map_err(|e| EntryError::Invalid(e.to_string()))?;
        Ok(*accepted)
    }

    fn split_bundle<'a>(&self, bytes: &'a [u8]) -> Result<Vec<StoredEntry<'a>>, EntryError> {
        let entries =
            bundle::parse_bundle(bytes).map_err(|e| EntryError::Malformed(e.to_string()))?;
        Ok(entries
            .into_iter()
            .map(|bytes| StoredEntry {
                bytes,
                timestamp: 0,
            })
            .collect())
    }

    fn stored_leaf(&self, entry: &StoredEntry<'_>) -> Hash {
        leaf_hash(entry.bytes)
    }

    fn stored_dedup_key(&self, entry: &StoredEntry<'_>) -> [u8; 32] {
        entry_hash(entry.bytes)
    }
}

/// The tlog-tiles dedup key of an entry: the full SHA-256 of its bytes (also
/// `engine::entry_hash`, what the dedup index is keyed by).
pub fn entry_hash(entry: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(entry).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tlog_tiles_encodes_what_it_reads_back() {
        let p = TlogTiles;
        let mut bundle = Vec::new();
        let mut leaves = Vec::new();
        for (i, e) in [&b"one"[..], &[7u8; 65535][..], b"three"]
            .iter()
            .enumerate()
        {
            let accepted = p.accept(e).unwrap();
            assert_eq!(accepted, leaf_hash(e));
            leaves.push(p.encode(e, &accepted, i as u64, 5, &mut bundle).unwrap());
        }
        // Byte for byte the tlog-tiles bundle encoding.
        let mut want = Vec::new();
        for e in [&b"one"[..], &[7u8; 65535][..], b"three"] {
            bundle::append_entry(&mut want, e).unwrap();
        }
        assert_eq!(bundle, want);
        let back = p.split_bundle(&bundle).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[2].bytes, b"three");
        for (e, leaf) in back.iter().zip(&leaves) {
            assert_eq!(p.stored_leaf(e), *leaf);
            assert_eq!(e.timestamp, 0);
            assert_eq!(p.stored_dedup_key(e), p.dedup_key(e.bytes));
        }
    }

    #[test]
    fn tlog_tiles_refuses_what_a_bundle_cannot_hold() {
        let p = TlogTiles;
        assert_eq!(p.accept(b""), Err(EntryError::Empty));
        assert_eq!(
            p.accept(&[0u8; 65536]),
            Err(EntryError::TooLarge {
                size: 65536,
                max: 65535
            })
        );
        assert!(matches!(
            p.split_bundle(&[0, 3, b'a']),
            Err(EntryError::Malformed(_))
        ));
    }
}
