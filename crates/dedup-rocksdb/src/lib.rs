//! A RocksDB-backed [`DedupIndex`] for tlogd.
//!
//! Kept out of `tlogd-core` because RocksDB is a heavy C++ build.
//!
//! * Keys: the full 32-byte SHA-256 of the entry; values: the index, 8 bytes big-endian.
//! * "First index wins" is a merge operator that keeps the existing value, so a batch is
//!   one blind `WriteBatch` with no read-before-write.
//! * The "indexed up to" marker is written in the same `WriteBatch` as the entries it
//!   covers, so the two never disagree. The WAL is on but not synced: a crash may lose
//!   the newest index writes together with their marker, and the engine's follower then
//!   re-indexes them from the log.
//! * Memory is the block cache and the write buffers (see [`DedupOptions`]) plus the
//!   tables' Bloom filters and indexes, ~1.3 bytes per entry.
//! * Disk is ~49 bytes per entry in the tables plus a bounded overhead: RocksDB's
//!   defaults preallocate a 4 MiB MANIFEST and a write-ahead log block of 1.1 times
//!   the write buffer (17.6 MiB) per log file, twice, so a fresh index took 36 MiB
//!   after 10 entries (a 48 MiB filesystem was full after 2). The MANIFEST's
//!   preallocation and size, the info LOG files and the total write-ahead log (which
//!   also caps its preallocation, and makes RocksDB flush the memtables holding the
//!   oldest log, the tiny `meta` one included, once it is exceeded) are bounded here:
//!   ~2 MiB after 10 entries, ~5.4 MiB after 100k, ~49 MiB after 1M (measured with
//!   `examples/footprint.rs`).

use std::path::Path;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DB, MergeOperands, Options, WriteBatch,
    WriteOptions,
};
use tlogd_core::engine::{DedupError, DedupIndex, EntryHash};

const CF_ENTRIES: &str = "entries";
const CF_META: &str = "meta";
const MARKER: &[u8] = b"indexed_up_to";

/// Memory bounds of the index. Beyond these, the Bloom filters and indexes of the
/// open tables take ~1.3 bytes per indexed entry.
#[derive(Clone, Debug)]
pub struct DedupOptions {
    /// LRU block cache, including index and Bloom filter blocks.
    pub block_cache_bytes: usize,
    /// Size of one memtable.
    pub write_buffer_bytes: usize,
    /// Memtables kept before writes stall.
    pub max_write_buffers: i32,
    /// Write-ahead log kept on disk, all files together: beyond it the memtables
    /// holding the oldest log are flushed. Also caps the space RocksDB preallocates for
    /// each new log file (1.1 write buffers otherwise).
    pub max_wal_bytes: u64,
}

impl Default for DedupOptions {
    /// 32 MiB cache + 2 x 16 MiB memtables: ~64 MiB resident at most, plus RocksDB's
    /// small fixed overhead. 2 MiB of write-ahead log: a flush every ~45k entries,
    /// which RocksDB's compactions absorb (measured: no loss of write or lookup rate at
    /// 1M entries against the 32 MiB log the memtables would allow).
    fn default() -> Self {
        DedupOptions {
            block_cache_bytes: 32 << 20,
            write_buffer_bytes: 16 << 20,
            max_write_buffers: 2,
            max_wal_bytes: 2 << 20,
        }
    }
}

/// The RocksDB index.
pub struct RocksDedup {
    db: DB,
    write_opts: WriteOptions,
}

fn keep_first(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    match existing {
        Some(v) => Some(v.to_vec()),
        None => operands.iter().next().map(|v| v.to_vec()),
    }
}

fn err(e: impl std::fmt::Display) -> DedupError {
    DedupError(e.to_string())
}

impl RocksDedup {
    /// Open or create the index at `path`.
    pub fn open(path: &Path, opts: &DedupOptions) -> Result<Self, DedupError> {
        let cache = Cache::new_lru_cache(opts.block_cache_bytes);
        let mut table = BlockBasedOptions::default();
        table.set_block_cache(&cache);
        table.set_bloom_filter(10.0, false);
        // Nearly every lookup is a miss answered by a Bloom filter. Keeping filters and
        // indexes in the block cache let data blocks evict them, and every lookup then
        // re-read and re-checksummed a whole filter block (measured: throughput fell to
        // ~7k/s at 1.4M entries). Held by the open table readers instead, they cost
        // ~1.3 bytes per entry (about 13 MiB per 10M entries) and are read once.
        table.set_cache_index_and_filter_blocks(false);

        let mut entries = Options::default();
        entries.set_block_based_table_factory(&table);
        // SHA-256 keys do not compress.
        entries.set_compression_type(rocksdb::DBCompressionType::None);
        entries.set_write_buffer_size(opts.write_buffer_bytes);
        entries.set_max_write_buffer_number(opts.max_write_buffers.max(2));
        // Partial merges combine operands only; the oldest wins there too.
        entries.set_merge_operator("keep_first", keep_first, keep_first);
        // Most lookups are misses: a Bloom filter on the memtable answers them without
        // walking the skip list (profiled at ~11 % of the daemon's CPU before).
        entries.set_memtable_whole_key_filtering(true);
        entries.set_memtable_prefix_bloom_ratio(0.1);

        let mut meta = Options::default();
        meta.set_write_buffer_size(1 << 20);

        let mut db_opts = Options::default();
        db_opts.create_if_missing(true);
        db_opts.create_missing_column_families(true);
        // Keep every table open, so its filter and index stay in memory.
        db_opts.set_max_open_files(-1);
        db_opts.set_max_background_jobs(2);
        // Disk bounds (see the module docs): a fresh index is preallocated kilobytes,
        // not tens of MiB.
        db_opts.set_manifest_preallocation_size(64 << 10);
        db_opts.set_max_manifest_file_size(8 << 20);
        db_opts.set_max_total_wal_size(opts.max_wal_bytes.max(1 << 20));
        // The info LOG: at most 3 files of 1 MiB (unbounded by default, one per open).
        db_opts.set_max_log_file_size(1 << 20);
        db_opts.set_keep_log_file_num(3);
        // Bound the total memtable memory across both column families.
        db_opts.set_db_write_buffer_size(
            opts.write_buffer_bytes * opts.max_write_buffers.max(2) as usize,
        );
        let db = DB::open_cf_descriptors(
            &db_opts,
            path,
            vec![
                ColumnFamilyDescriptor::new(CF_ENTRIES, entries),
                ColumnFamilyDescriptor::new(CF_META, meta),
            ],
        )
        .map_err(|e| DedupError(format!("opening {}: {e}", path.display())))?;
        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(false);
        Ok(RocksDedup { db, write_opts })
    }
}

impl DedupIndex for RocksDedup {
    fn get(&self, hash: &EntryHash) -> Result<Option<u64>, DedupError> {
        let cf = self
            .db
            .cf_handle(CF_ENTRIES)
            .ok_or_else(|| err("missing column family"))?;
        match self.db.get_pinned_cf(&cf, hash).map_err(err)? {
            None => Ok(None),
            Some(v) => {
                let b: [u8; 8] = v
                    .as_ref()
                    .try_into()
                    .map_err(|_| err("corrupt value in dedup index"))?;
                Ok(Some(u64::from_be_bytes(b)))
            }
        }
    }

    fn put_batch(
        &self,
        entries: &[(EntryHash, u64)],
        indexed_up_to: u64,
    ) -> Result<(), DedupError> {
        let cf = self
            .db
            .cf_handle(CF_ENTRIES)
            .ok_or_else(|| err("missing column family"))?;
        let meta = self
            .db
            .cf_handle(CF_META)
            .ok_or_else(|| err("missing column family"))?;
        let mut batch = WriteBatch::default();
        for (h, i) in entries {
            batch.merge_cf(&cf, h, i.to_be_bytes());
        }
        batch.put_cf(&meta, MARKER, indexed_up_to.to_be_bytes());
        self.db.write_opt(batch, &self.write_opts).map_err(err)
    }

    fn indexed_up_to(&self) -> Result<u64, DedupError> {
        let meta = self
            .db
            .cf_handle(CF_META)
            .ok_or_else(|| err("missing column family"))?;
        match self.db.get_pinned_cf(&meta, MARKER).map_err(err)? {
            None => Ok(0),
            Some(v) => {
                let b: [u8; 8] = v.as_ref().try_into().map_err(|_| err("corrupt marker"))?;
                Ok(u64::from_be_bytes(b))
            }
        }
    }
}

/// Disk space allocated to the files below `path` (what `du` reports: preallocated
/// blocks included), for measuring the index's footprint.
pub fn allocated_bytes(path: &Path) -> std::io::Result<u64> {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![path.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p)?;
        if m.is_dir() {
            for e in std::fs::read_dir(&p)? {
                stack.push(e?.path());
            }
        }
        total += m.blocks() * 512;
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_index_takes_little_disk() {
        // RocksDB's defaults preallocated 36 MiB for the first entries: a small
        // filesystem was full after two.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dedup");
        let idx = RocksDedup::open(&path, &DedupOptions::default()).unwrap();
        for i in 0..10u64 {
            idx.put_batch(&[([i as u8; 32], i)], i + 1).unwrap();
        }
        let used = allocated_bytes(&path).unwrap();
        assert!(used < 4 << 20, "{used} bytes after 10 entries");
        // Growing by batches keeps the write-ahead log bounded too.
        for b in 0..100u64 {
            let batch: Vec<_> = (0..500u64)
                .map(|j| {
                    let n = 10 + b * 500 + j;
                    let mut h = [0u8; 32];
                    h[..8].copy_from_slice(&n.to_be_bytes());
                    h[8..16].copy_from_slice(&n.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
                    (h, n)
                })
                .collect();
            idx.put_batch(&batch, 10 + (b + 1) * 500).unwrap();
        }
        let used = allocated_bytes(&path).unwrap();
        assert!(used < 16 << 20, "{used} bytes after 50k entries");
        assert_eq!(idx.get(&[3u8; 32]).unwrap(), Some(3));
    }

    #[test]
    fn first_index_wins_and_survives_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dedup");
        let a = [1u8; 32];
        let b = [2u8; 32];
        {
            let idx = RocksDedup::open(&path, &DedupOptions::default()).unwrap();
            assert_eq!(idx.indexed_up_to().unwrap(), 0);
            idx.put_batch(&[(a, 0), (b, 1)], 2).unwrap();
            idx.put_batch(&[(a, 5)], 6).unwrap();
            assert_eq!(idx.get(&a).unwrap(), Some(0));
        }
        let idx = RocksDedup::open(&path, &DedupOptions::default()).unwrap();
        assert_eq!(idx.get(&a).unwrap(), Some(0));
        assert_eq!(idx.get(&b).unwrap(), Some(1));
        assert_eq!(idx.get(&[3u8; 32]).unwrap(), None);
        assert_eq!(idx.indexed_up_to().unwrap(), 6);
    }
}
