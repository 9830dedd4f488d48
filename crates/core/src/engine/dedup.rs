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

/// A durable map from [`EntryHash`] to the index of the entry's first occurrence.
///
/// Implementations are blocking (RocksDB is); the engine calls them from blocking
/// threads or accepts the short point-lookup latency on its own tasks.
pub trait DedupIndex: Send + Sync + 'static {
    /// The index of the first entry whose bytes hash to `hash`, if indexed.
    fn get(&self, hash: &EntryHash) -> Result<Option<u64>, DedupError>;

    /// Record `entries` (in index order): every entry with an index below
    /// `indexed_up_to` is now indexed, and [`DedupIndex::get`] finds it. The persisted
    /// marker ([`DedupIndex::indexed_up_to`]) moves to `indexed_up_to` together with the
    /// entries it covers, never ahead of them, possibly later (entries held in memory).
    /// First index wins: a hash already present keeps its older index.
    fn put_batch(&self, entries: &[(EntryHash, u64)], indexed_up_to: u64)
    -> Result<(), DedupError>;

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
