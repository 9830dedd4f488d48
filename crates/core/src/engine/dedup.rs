//! The persistent dedup index trait ("antispam" in Tessera).
//!
//! The engine layers an in-memory map of in-flight and not-yet-indexed entries on top
//! of a [`DedupIndex`]; the index itself is written only in batches, after the batch
//! is committed, by a follower task that can always catch up from the log.

/// Identity of an entry for deduplication: the full SHA-256 of its bytes. Never
/// truncated: Sunlight and Azul both had to widen 128-bit keys after collision attacks.
pub type EntryHash = [u8; 32];

pub use crate::personality::entry_hash;

/// A dedup index failure.
#[derive(Debug, thiserror::Error)]
#[error("dedup index: {0}")]
pub struct DedupError(pub String);

/// What the dedup index holds for an entry: where its first occurrence was logged, and
/// when, so that a duplicate is answered without reading the log back (static-ct-api's
/// duplicate SCT needs the original timestamp; docs/seams.md, "Dedup value").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Indexed {
    /// The index of the entry's first occurrence.
    pub index: u64,
    /// The timestamp it was sequenced at (milliseconds since the Unix epoch), as its
    /// stored entry holds it; 0 for a personality whose entries carry none
    /// ([`Personality::stores_timestamps`](crate::personality::Personality::stores_timestamps)).
    pub timestamp: u64,
}

impl Indexed {
    /// An entry at `index` whose stored form carries no timestamp.
    pub fn at(index: u64) -> Self {
        Indexed {
            index,
            timestamp: 0,
        }
    }

    /// The older of two records of one entry: the first index wins.
    pub fn first(self, other: Indexed) -> Indexed {
        if other.index < self.index {
            other
        } else {
            self
        }
    }
}

/// A durable map from [`EntryHash`] to the entry's first occurrence ([`Indexed`]).
///
/// Implementations are blocking (RocksDB is); the engine calls them from blocking
/// threads or accepts the short point-lookup latency on its own tasks.
pub trait DedupIndex: Send + Sync + 'static {
    /// The first entry whose bytes hash to `hash`, if indexed.
    fn get(&self, hash: &EntryHash) -> Result<Option<Indexed>, DedupError>;

    /// Record `entries` (in index order): every entry with an index below
    /// `indexed_up_to` is now indexed, and [`DedupIndex::get`] finds it. The persisted
    /// marker ([`DedupIndex::indexed_up_to`]) moves to `indexed_up_to` together with the
    /// entries it covers, never ahead of them, possibly later (entries held in memory).
    /// First index wins: a hash already present keeps its older record.
    fn put_batch(
        &self,
        entries: &[(EntryHash, Indexed)],
        indexed_up_to: u64,
    ) -> Result<(), DedupError>;

    /// The persisted marker: all entries with an index below it are indexed, and stay
    /// so across a crash. An index may answer [`DedupIndex::get`] from entries it holds
    /// in memory beyond it (lost in a crash, and re-indexed from the log at start-up).
    fn indexed_up_to(&self) -> Result<u64, DedupError>;

    /// Whether [`DedupIndex::put_batch`] of `n` more entries returns without I/O or
    /// waiting (an index that holds its newest entries in memory and has room for
    /// these). The engine then calls it on its own task: a hand-off to a blocking
    /// thread and back costs more than a few dozen in-memory inserts.
    fn put_is_cheap(&self, n: usize) -> bool {
        let _ = n;
        false
    }

    /// Persist what is held in memory (at shutdown), so the next start has nothing to
    /// re-index.
    fn flush(&self) -> Result<(), DedupError> {
        Ok(())
    }
}
