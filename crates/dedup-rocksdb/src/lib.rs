//! A RocksDB-backed [`DedupIndex`] for tlogd.
//!
//! Kept out of `tlogd-core` because RocksDB is a heavy C++ build.
//!
//! * Keys: the full 32-byte SHA-256 of the entry; values: the index, 8 bytes big-endian,
//!   then, for a personality whose entries carry timestamps (CT), the entry's
//!   timestamp, 8 bytes big-endian ([`Indexed`]). A tlog-tiles log's values stay 8
//!   bytes, and an index written before timestamps reads as it is.
//! * **Newest entries in memory, then one table at a time.** Indexed entries go to an
//!   in-memory map; every [`DedupOptions::recent_entries`] they are sorted, written as
//!   one table file and ingested into RocksDB, and only then does the persisted "indexed
//!   up to" marker move past them. Through RocksDB's write path each entry cost a
//!   write-ahead-log record, a skip-list insert (the largest piece of the daemon's
//!   index CPU, profiled at ~4 % of the daemon) and a flush; a table written from a
//!   sorted map costs a hash-map insert and a share of one sort.
//! * A crash loses the in-memory part; the persisted marker still says what the tables
//!   hold, and the engine's follower re-indexes the rest from the log at start-up (as it
//!   always did for an index that is behind). [`DedupIndex::flush`] at shutdown and
//!   `Drop` write it out.
//! * "First index wins": a hash already present keeps its older index. A table holds
//!   plain values for the hashes the filter (below) rules out of every older table,
//!   and leaves out those a read of the tables finds there already (only the
//!   filter's few "maybe" answers are read). Before the filter is filled at start-up,
//!   a table holds merge operands instead, resolved by a merge operator that keeps
//!   the existing value, so it can be written blind; compactions carry operands at
//!   nearly twice the CPU of values, hence values whenever the filter can tell. A
//!   lookup that finds a hash in memory also asks the tables (only duplicates get that
//!   far) and answers the older.
//! * **A filter in front of the tables** ([`filter`]): nearly every add asks about a
//!   hash never seen, and a Bloom filter in memory answers that without asking
//!   RocksDB (~2 bytes per entry; saved at a clean close, else rebuilt by a scan of
//!   the tables at open, during which lookups go to RocksDB).
//! * Memory: the in-memory map (~56 bytes per entry, reserved up front, two maps and a
//!   sorted copy of the older one, 48 bytes per entry, while a table is being
//!   written), the block cache (see [`DedupOptions`]), and the tables' Bloom filters
//!   and indexes, ~1.3 bytes per entry.
//! * **Generations.** Tables go to one column family until it holds
//!   [`DedupOptions::generation_entries`] (8M, or an eighth of the index if that is
//!   more), then to a new one, and RocksDB merges the full one down to two sorted
//!   runs. Merges happen within a column family, so none rewrites more than one
//!   generation: in a single family universal compaction's largest merges grew with
//!   the index (1.6 GB at 33M entries, ~13 s on one core). A lookup the filter cannot
//!   answer asks every generation.
//! * Disk is ~49 bytes per entry in the tables, and while a merge runs (universal
//!   compaction, see `entries_options`) its output beside its input, at most one
//!   generation's size again; plus a bounded overhead: RocksDB's
//!   defaults preallocate a 4 MiB MANIFEST and a write-ahead log block of 1.1 times
//!   the write buffer per log file, so a fresh index took 36 MiB after 10 entries (a
//!   48 MiB filesystem was full after 2). The MANIFEST's preallocation and size, the
//!   info LOG files, the write buffers (only the marker goes through them now) and the
//!   total write-ahead log are bounded here (measured with `examples/footprint.rs`).

pub mod filter;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::thread::JoinHandle;

use rocksdb::{
    BlockBasedOptions, Cache, ColumnFamilyDescriptor, DBCompactionStyle, DBWithThreadMode,
    IngestExternalFileOptions, MergeOperands, MultiThreaded, Options, ReadOptions, SstFileWriter,
    WriteOptions,
};
use tlogd_core::engine::{DedupError, DedupIndex, EntryHash, Indexed};

use filter::TableFilter;

/// The oldest generation of the entries (see [`DedupOptions::generation_entries`]); the
/// later ones are `entries.1`, `entries.2`, ...
const CF_ENTRIES: &str = "entries";
/// What a later generation's name starts with.
const GENERATION_PREFIX: &str = "entries.";
const CF_META: &str = "meta";
const MARKER: &[u8] = b"indexed_up_to";
/// Tables being written, below the index directory (RocksDB ignores subdirectories).
const INGEST_DIR: &str = "ingest";
/// The filter saved at a clean close (RocksDB ignores files it did not name).
const FILTER_FILE: &str = "tlogd-filter";

/// Memory bounds of the index. Beyond these, the Bloom filters and indexes of the
/// open tables take ~1.3 bytes per indexed entry, and the lookup filter in front of
/// them ([`filter`]) 2–4 bytes per indexed entry, 8 MiB at least.
#[derive(Clone, Debug)]
pub struct DedupOptions {
    /// LRU block cache, including index and Bloom filter blocks.
    pub block_cache_bytes: usize,
    /// Entries kept in memory before they are written as one table (reserved up front,
    /// see [`DedupOptions::recent_entries_within`]; two such maps while a table is
    /// being written).
    pub recent_entries: usize,
    /// Write-ahead log kept on disk, all files together (only the marker is logged).
    pub max_wal_bytes: u64,
    /// Entries per generation: once the newest generation (a column family of its
    /// own) holds this many, or an eighth of the whole index if that is more, the
    /// next table starts a new one. RocksDB merges sorted runs within a column
    /// family only, so no merge rewrites more than one generation: in one family,
    /// universal compaction's size-amplification merges came at ~5.5M, ~33M and
    /// ~100M entries, the one at 33M rewriting 1.6 GB on one core for ~13 s with its
    /// input and output both on disk (benches/results/history.md). The eighth keeps the count
    /// of generations, which a lookup the filter cannot answer reads one by one, to
    /// ~30 at a billion entries.
    pub generation_entries: u64,
}

/// Bytes per slot of the in-memory map: a 32-byte key, an 8-byte index, an 8-byte
/// timestamp and the hash table's control byte.
const SLOT_BYTES: usize = 49;

impl DedupOptions {
    /// The most entries the in-memory map holds within `bytes`: its table has a power
    /// of two slots, at most 7/8 of them used (~56 bytes per entry when full).
    pub fn recent_entries_within(bytes: usize) -> usize {
        let slots = (bytes / SLOT_BYTES).max(16);
        let slots = if slots.is_power_of_two() {
            slots
        } else {
            slots.next_power_of_two() / 2
        };
        slots / 8 * 7
    }
}

impl Default for DedupOptions {
    /// 32 MiB cache + 2 x 16 MiB at most for the newest entries (229,376 of them, in
    /// 12.25 MiB): under 64 MiB resident, plus RocksDB's small fixed overhead.
    fn default() -> Self {
        DedupOptions {
            block_cache_bytes: 32 << 20,
            recent_entries: DedupOptions::recent_entries_within(16 << 20),
            max_wal_bytes: 2 << 20,
            generation_entries: 8 << 20,
        }
    }
}

/// Entry hash -> its first occurrence. Keys are SHA-256 digests of
/// client-chosen entries: a randomly seeded hasher (as std's) so that nobody can grind
/// entries into one bucket, but foldhash rather than SipHash, which cost ~0.3 µs per
/// append over the map's insert, lookup and the queue's in-flight map.
type EntryMap = HashMap<EntryHash, Indexed, foldhash::fast::RandomState>;

/// The newest part of the index, not yet in a table.
struct Recent {
    /// Indexed since the last table was started.
    map: EntryMap,
    /// Being written as a table: answered from here until the table is ingested.
    writing: Option<Arc<EntryMap>>,
}

/// RocksDB with column families created while open (a new generation).
type Db = DBWithThreadMode<MultiThreaded>;

/// The RocksDB index.
pub struct RocksDedup {
    db: Arc<Db>,
    /// The entries' column families, oldest generation first; tables go to the last.
    generations: RwLock<Vec<String>>,
    /// See [`DedupOptions::generation_entries`].
    generation_entries: u64,
    write_opts: WriteOptions,
    /// Built once: every add's lookup would otherwise allocate and free a default.
    read_opts: ReadOptions,
    /// The entries column family's options, for the table writer (same table format,
    /// Bloom filters and comparator as the tables RocksDB writes itself).
    table_opts: Options,
    ingest_dir: PathBuf,
    recent: RwLock<Recent>,
    recent_entries: usize,
    /// One table written at a time.
    writer: Mutex<Marks>,
    /// Says when no table holds a hash, so most lookups skip RocksDB.
    filter: Arc<TableFilter>,
    /// The start-up scan filling `filter`, and what stops it early.
    filter_scan: Option<(JoinHandle<()>, Arc<AtomicBool>)>,
    /// Where `filter` is saved at a clean close.
    filter_path: PathBuf,
}

/// Where the index stands.
#[derive(Default)]
struct Marks {
    /// What the tables cover (the marker in RocksDB).
    persisted: u64,
    /// What the tables and the in-memory entries cover.
    latest: u64,
    /// Records in the newest generation's tables (estimated by RocksDB at open).
    newest_records: u64,
    /// Records in all the tables (likewise).
    all_records: u64,
}

fn keep_first(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    match existing {
        Some(v) => Some(v.to_vec()),
        None => operands.iter().next().map(|v| v.to_vec()),
    }
}

/// The column family `name`, which open created or found.
fn family<'a>(db: &'a Db, name: &str) -> Result<Arc<rocksdb::BoundColumnFamily<'a>>, DedupError> {
    db.cf_handle(name)
        .ok_or_else(|| err("missing column family"))
}

fn err(e: impl std::fmt::Display) -> DedupError {
    DedupError(e.to_string())
}

/// The first 16 bytes of `h` as a big-endian integer: its order is the bytes' order.
fn prefix(h: &EntryHash) -> u128 {
    let mut p = [0u8; 16];
    p.copy_from_slice(&h[..16]);
    u128::from_be_bytes(p)
}

/// Keep the older of two records of one hash (first index wins).
fn insert_first(map: &mut EntryMap, hash: EntryHash, first: Indexed) {
    map.entry(hash)
        .and_modify(|f| *f = f.first(first))
        .or_insert(first);
}

/// One hash's record in a table being written (see `RocksDedup::table_records`).
enum Record {
    /// No table holds the hash.
    Put(Indexed),
    /// Unknown whether a table holds it: the older index wins when they are merged.
    Merge(Indexed),
}

/// A stored value (see the module docs): the index, then the timestamp unless it is 0.
fn encode_value(first: &Indexed) -> ([u8; 16], usize) {
    let mut v = [0u8; 16];
    v[..8].copy_from_slice(&first.index.to_be_bytes());
    if first.timestamp == 0 {
        return (v, 8);
    }
    v[8..].copy_from_slice(&first.timestamp.to_be_bytes());
    (v, 16)
}

/// The inverse of [`encode_value`].
fn decode_value(v: &[u8]) -> Result<Indexed, DedupError> {
    let (index, timestamp) = match v.len() {
        8 => (v, None),
        16 => (&v[..8], Some(&v[8..])),
        _ => return Err(err("corrupt value in dedup index")),
    };
    Ok(Indexed {
        index: decode_u64(index, "value")?,
        timestamp: timestamp.map_or(Ok(0), |t| decode_u64(t, "value"))?,
    })
}

/// A stored number (an index, or the marker): 8 bytes big-endian; `what` names it in
/// the error.
fn decode_u64(v: &[u8], what: &str) -> Result<u64, DedupError> {
    let b: [u8; 8] = v
        .try_into()
        .map_err(|_| err(format!("corrupt {what} in dedup index")))?;
    Ok(u64::from_be_bytes(b))
}

fn entries_options(block_cache_bytes: usize, compaction: DBCompactionStyle) -> Options {
    let cache = Cache::new_lru_cache(block_cache_bytes);
    let mut table = BlockBasedOptions::default();
    table.set_block_cache(&cache);
    table.set_bloom_filter(10.0, false);
    // Nearly every lookup is a miss answered by a Bloom filter. Keeping filters and
    // indexes in the block cache let data blocks evict them, and every lookup then
    // re-read and re-checksummed a whole filter block (measured: throughput fell to
    // ~7k/s at 1.4M entries). Held by the open table readers instead, they cost ~1.3
    // bytes per entry (about 13 MiB per 10M entries) and are read once.
    table.set_cache_index_and_filter_blocks(false);
    let mut entries = Options::default();
    entries.set_block_based_table_factory(&table);
    // SHA-256 keys do not compress.
    entries.set_compression_type(rocksdb::DBCompressionType::None);
    // Entries arrive as ingested tables, never through the memtable.
    entries.set_write_buffer_size(1 << 20);
    // RocksDB rewrites every table of a universal-compaction column family after 30
    // days by default (for data that expires or changes): this index's keys never do,
    // and it would rewrite the whole index each month.
    entries.set_periodic_compaction_seconds(0);
    entries.set_ttl(0);
    // Partial merges combine operands only; the oldest wins there too.
    entries.set_merge_operator("keep_first", keep_first, keep_first);
    // The table writer's own files are written back as they grow too (see below).
    entries.set_bytes_per_sync(WRITEBACK_BYTES);
    // Universal compaction. The keys are random hashes, so every table the writer
    // ingests overlaps every other. Leveled compaction (RocksDB's default) then
    // rewrote the whole base level each time level 0 was compacted, and further levels
    // again as they filled. Universal compaction merges sorted runs of similar size,
    // so each entry is rewritten about once per doubling of the index. Lookups
    // rarely reach the tables now that the filter in front of them answers misses, so
    // the extra sorted runs cost little. Measured to 50M entries
    // (`benches/at-scale.sh`, benches/results/history.md): leveled 57.8k appends/s at 17.9 µs
    // of tlogd CPU per append, the last five minutes at 88 % of the first five;
    // universal 60.5k/s at 16.5 µs, 90 %. The price is space while a merge runs: its
    // input and output coexist, up to twice a generation's size (see
    // `DedupOptions::generation_entries`).
    // An index written with leveled compaction (releases before this one) opens as it
    // is, and its levels are merged as sorted runs from then on.
    entries.set_compaction_style(compaction);
    // Level 0 takes every table the writer ingests. RocksDB compacts at 4 tables by
    // default: with leveled compaction the base level was rewritten every ~26 s at 35k
    // adds/s, and the process wrote 21.0 GiB to reach 50M entries, 12.5 GiB at 12
    // tables and less again at 24 (`examples/growth.rs`). For universal
    // compaction this is the number of sorted runs that starts a merge. Writes slow
    // down and stop only far beyond it.
    entries.set_level_zero_file_num_compaction_trigger(LEVEL0_TABLES);
    entries.set_level_zero_slowdown_writes_trigger(LEVEL0_TABLES * 3);
    entries.set_level_zero_stop_writes_trigger(LEVEL0_TABLES * 5);
    entries
}

/// Tables level 0 may hold before they are compacted (see `entries_options`).
const LEVEL0_TABLES: i32 = 24;

/// Tables (written by compactions and by the table writer) are handed to the kernel's
/// writeback every this many bytes instead of piling up as dirty pages. The POSIX
/// backend's commits `syncfs` the filesystem the index usually shares with the log:
/// with compactions leaving hundreds of MiB dirty, a commit waited for them (at 25-45M
/// entries, throughput fell to a third, the engine's threads in disk wait).
const WRITEBACK_BYTES: u64 = 1 << 20;

impl RocksDedup {
    /// Open or create the index at `path`.
    pub fn open(path: &Path, opts: &DedupOptions) -> Result<Self, DedupError> {
        Self::open_with(path, opts, DBCompactionStyle::Universal)
    }

    /// [`RocksDedup::open`] with a compaction style (tests open an index the way an
    /// earlier release wrote it).
    fn open_with(
        path: &Path,
        opts: &DedupOptions,
        compaction: DBCompactionStyle,
    ) -> Result<Self, DedupError> {
        let entries = entries_options(opts.block_cache_bytes, compaction);
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
        db_opts.set_db_write_buffer_size(4 << 20);
        db_opts.set_bytes_per_sync(WRITEBACK_BYTES);
        db_opts.set_wal_bytes_per_sync(WRITEBACK_BYTES);
        // Every generation there is: `entries` alone in a new index and in one written
        // by a release before generations.
        let families = if path.join("CURRENT").exists() {
            Db::list_cf(&db_opts, path)
                .map_err(|e| DedupError(format!("opening {}: {e}", path.display())))?
        } else {
            Vec::new()
        };
        let generations = generations_in(families)?;
        let mut sealed = entries.clone();
        sealed.set_level_zero_file_num_compaction_trigger(SEALED_LEVEL0_TABLES);
        let newest = generations.len() - 1;
        let mut families: Vec<_> = generations
            .iter()
            .enumerate()
            .map(|(n, g)| {
                let full = if n < newest { &sealed } else { &entries };
                ColumnFamilyDescriptor::new(g, full.clone())
            })
            .collect();
        families.push(ColumnFamilyDescriptor::new(CF_META, meta));
        let db = Db::open_cf_descriptors(&db_opts, path, families)
            .map_err(|e| DedupError(format!("opening {}: {e}", path.display())))?;
        // A table left half-written by a crash: its entries are re-indexed from the log
        // (the marker never covered them).
        let ingest_dir = path.join(INGEST_DIR);
        let _ = std::fs::remove_dir_all(&ingest_dir);
        std::fs::create_dir_all(&ingest_dir)
            .map_err(|e| DedupError(format!("creating {}: {e}", ingest_dir.display())))?;
        let mut write_opts = WriteOptions::default();
        write_opts.set_sync(false);
        let recent_entries = opts.recent_entries.max(1);
        let db = Arc::new(db);
        let filter_path = path.join(FILTER_FILE);
        let records: Vec<u64> = generations.iter().map(|g| records_in(&db, g)).collect();
        let all_records: u64 = records.iter().sum();
        let (filter, filter_scan) = match load_filter(&db, &filter_path) {
            Some(saved) => (Arc::new(saved), None),
            None => {
                let filter = Arc::new(TableFilter::new(all_records + all_records / 4));
                let scan = spawn_filter_scan(db.clone(), generations.clone(), filter.clone())?;
                (filter, Some(scan))
            }
        };
        let idx = RocksDedup {
            db,
            generations: RwLock::new(generations),
            generation_entries: opts.generation_entries.max(1),
            write_opts,
            read_opts: ReadOptions::default(),
            table_opts: entries,
            ingest_dir,
            recent: RwLock::new(Recent {
                map: EntryMap::with_capacity_and_hasher(recent_entries, Default::default()),
                writing: None,
            }),
            recent_entries,
            writer: Mutex::new(Marks::default()),
            filter,
            filter_scan,
            filter_path,
        };
        let marker = idx.stored_marker()?;
        *idx.writer.lock().unwrap_or_else(|e| e.into_inner()) = Marks {
            persisted: marker,
            latest: marker,
            newest_records: records.last().copied().unwrap_or(0),
            all_records,
        };
        Ok(idx)
    }

    /// The 8-byte big-endian number at `key` in column family `cf`.
    fn read_u64(&self, cf: &str, key: &[u8], what: &str) -> Result<Option<u64>, DedupError> {
        let handle = family(&self.db, cf)?;
        match self
            .db
            .get_pinned_cf_opt(&handle, key, &self.read_opts)
            .map_err(err)?
        {
            None => Ok(None),
            Some(v) => decode_u64(&v, what).map(Some),
        }
    }

    fn stored_marker(&self) -> Result<u64, DedupError> {
        Ok(self.read_u64(CF_META, MARKER, "marker")?.unwrap_or(0))
    }

    /// The index stored for `hash`, from the oldest generation holding it. Tables are
    /// written in log order, so a newer generation can hold the hash too (a table
    /// written before the filter was filled holds what it was given) but never with
    /// an older index.
    fn stored_get(&self, hash: &EntryHash) -> Result<Option<Indexed>, DedupError> {
        let generations = self.generations.read().unwrap_or_else(|e| e.into_inner());
        for g in generations.iter() {
            let handle = family(&self.db, g)?;
            if let Some(v) = self
                .db
                .get_pinned_cf_opt(&handle, hash, &self.read_opts)
                .map_err(err)?
            {
                return decode_value(&v).map(Some);
            }
        }
        Ok(None)
    }

    /// The column family the next table goes to: the newest generation, or a new one
    /// once that holds [`DedupOptions::generation_entries`] (or an eighth of the index).
    /// Called only by the table writer (`marks` is its lock), so `generations` changes
    /// nowhere else meanwhile. While RocksDB creates the column family (a MANIFEST and
    /// an OPTIONS file written, once per generation), rust-rocksdb holds its map of
    /// families, and lookups that reach the tables wait.
    fn generation_for_next_table(&self, marks: &mut Marks) -> Result<String, DedupError> {
        let newest = self
            .generations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .last()
            .cloned();
        let limit = self.generation_entries.max(marks.all_records / 8);
        if let Some(newest) = &newest
            && marks.newest_records < limit
        {
            return Ok(newest.clone());
        }
        let name = format!(
            "{GENERATION_PREFIX}{}",
            newest.as_deref().map_or(0, generation_number) + 1
        );
        self.db
            .create_cf(&name, &self.table_opts)
            .map_err(|e| err(format!("creating dedup index generation {name}: {e}")))?;
        if let Some(full) = &newest {
            seal(&self.db, full);
        }
        tracing::info!(
            generation = %name,
            records = marks.all_records,
            "dedup index: a new generation"
        );
        self.generations
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(name.clone());
        marks.newest_records = 0;
        Ok(name)
    }

    /// Write the in-memory entries as one table, ingest it, then persist `marker`. The
    /// entries stay answerable from memory until the table is in; on failure they go
    /// back to the in-memory map (and the next write tries again).
    fn write_recent(&self, marks: &mut Marks) -> Result<(), DedupError> {
        let marker = marks.latest;
        let frozen = {
            let mut r = self.recent.write().unwrap_or_else(|e| e.into_inner());
            if r.map.is_empty() {
                None
            } else {
                let full = std::mem::replace(
                    &mut r.map,
                    EntryMap::with_capacity_and_hasher(self.recent_entries, Default::default()),
                );
                let full = Arc::new(full);
                r.writing = Some(full.clone());
                Some(full)
            }
        };
        let started = std::time::Instant::now();
        let written = match &frozen {
            Some(entries) => self.ingest(entries, marker, marks),
            None => Ok(()),
        };
        let took = started.elapsed();
        if took > std::time::Duration::from_secs(1) {
            // The indexer waits meanwhile; beyond `dedup.max_lag`, adds get 503.
            tracing::warn!(
                entries = frozen.as_ref().map_or(0, |f| f.len()),
                seconds = took.as_secs_f64(),
                "dedup index: writing a table was slow (disk busy?)"
            );
        }
        let result = written.and_then(|()| {
            let meta = family(&self.db, CF_META)?;
            self.db
                .put_cf_opt(&meta, MARKER, marker.to_be_bytes(), &self.write_opts)
                .map_err(err)
        });
        let mut r = self.recent.write().unwrap_or_else(|e| e.into_inner());
        if let Some(entries) = r.writing.take()
            && result.is_err()
        {
            for (h, i) in entries.iter() {
                insert_first(&mut r.map, *h, *i);
            }
        }
        if result.is_ok() {
            marks.persisted = marker;
        }
        result
    }

    /// What a new table holds for each of `sorted`'s hashes: a plain value where no
    /// table holds the hash yet, nothing where one holds an older index, and a merge
    /// operand (first index wins, resolved by `keep_first`) where that is not known.
    ///
    /// Why not merge operands throughout: every compaction carries an operand through
    /// the merge operator's machinery, and one that reaches the oldest sorted run calls
    /// `keep_first` across the FFI and allocates its result. A full compaction of
    /// 9.2M entries took 0.54–0.63 µs of CPU per entry as operands and 0.31–0.36 µs
    /// as values (`examples/compaction.rs`, two sittings); to 50M entries the index's
    /// compactions took 41.7–43.7 s of CPU with operands and 31.3 s with values, for
    /// the same 4.18 GB written (benches/results/history.md). Knowing a hash is absent costs the
    /// filter's probe, and a read of the tables for the few hashes it answers "maybe"
    /// to (~0.1 % per filter generation), read together in key order.
    ///
    /// Until the filter is filled (the start-up scan) its "maybe" means nothing, so
    /// such a table is written as operands, as every table was before. Operands and
    /// values mix safely: an operand over a value keeps the value, and a value is
    /// only written over nothing.
    fn table_records<'a>(
        &self,
        sorted: &'a [(EntryHash, Indexed)],
        maybe: Vec<bool>,
    ) -> Result<Vec<(&'a EntryHash, Record)>, DedupError> {
        // `maybe` was asked before each hash went into the filter (after, all say
        // "maybe"); before the filter is filled it is "maybe" throughout and means
        // nothing.
        if !self.filter.is_ready() {
            return Ok(sorted.iter().map(|(h, i)| (h, Record::Merge(*i))).collect());
        }
        let asked: Vec<&EntryHash> = sorted
            .iter()
            .zip(&maybe)
            .filter(|(_, m)| **m)
            .map(|((h, _), _)| h)
            .collect();
        // The oldest index any generation holds for each hash asked about.
        let mut stored: Vec<Option<u64>> = vec![None; asked.len()];
        for g in self
            .generations
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let cf = family(&self.db, g)?;
            let found =
                self.db
                    .batched_multi_get_cf_opt(&cf, asked.iter().copied(), true, &self.read_opts);
            if found.len() != asked.len() {
                return Err(err("dedup index: a table lookup went unanswered"));
            }
            for (first, v) in stored.iter_mut().zip(found) {
                if let Some(v) = v.map_err(err)? {
                    let i = decode_value(&v)?.index;
                    *first = Some(first.map_or(i, |f| f.min(i)));
                }
            }
        }
        let mut stored = stored.into_iter();
        let mut records = Vec::with_capacity(sorted.len());
        for ((h, i), maybe) in sorted.iter().zip(maybe) {
            let older = if maybe { stored.next().flatten() } else { None };
            match older {
                // The older index stays; this one adds nothing.
                Some(o) if o <= i.index => {}
                // Never expected (tables are written in log order), but first index
                // wins either way: a value replaces the newer one.
                Some(_) | None => records.push((h, Record::Put(*i))),
            }
        }
        Ok(records)
    }

    /// Sort `entries` into a table file and ingest it into the newest generation.
    fn ingest(&self, entries: &EntryMap, marker: u64, marks: &mut Marks) -> Result<(), DedupError> {
        // Copied out of the map (read in its own order, which is its memory's) and
        // sorted in place: through pointers into the map, a ~11 MiB table far larger
        // than the caches, every comparison and every key the table writer checks and
        // copies was a miss. Byte order, compared first on the leading 16 bytes as one
        // integer: the keys are distinct digests, so that nearly always decides,
        // without the call to `memcmp` per comparison that sorting `[u8; 32]` keys costs.
        let mut sorted: Vec<(EntryHash, Indexed)> = entries.iter().map(|(h, i)| (*h, *i)).collect();
        sorted.sort_unstable_by(|(a, _), (b, _)| prefix(a).cmp(&prefix(b)).then_with(|| a.cmp(b)));
        // Into the filter before the table is visible: a lookup the filter turns away
        // must not be for a hash in a table. (The bits are relaxed stores; a lookup
        // sees them because it reads `recent` under its lock first: either it finds the
        // hash in `writing`, or it took the lock after this writer's release of it
        // that cleared `writing`, which follows these stores.) Each hash is asked
        // about just before it goes in (see `TableFilter::probe_and_insert`).
        let maybe = self.filter.probe_and_insert(sorted.iter().map(|(h, _)| h));
        let records = self.table_records(&sorted, maybe)?;
        if records.is_empty() {
            // Every hash was in a table already (RocksDB refuses an empty table).
            return Ok(());
        }
        let generation = self.generation_for_next_table(marks)?;
        let cf = family(&self.db, &generation)?;
        let written = records.len() as u64;
        let path = self.ingest_dir.join(format!("{marker}.sst"));
        let ingested = (|| {
            let mut w = SstFileWriter::create(&self.table_opts);
            w.open(&path)?;
            for (h, record) in records {
                match record {
                    Record::Put(i) => {
                        let (v, n) = encode_value(&i);
                        w.put(h, &v[..n])?
                    }
                    Record::Merge(i) => {
                        let (v, n) = encode_value(&i);
                        w.merge(h, &v[..n])?
                    }
                }
            }
            w.finish()?;
            let mut io = IngestExternalFileOptions::default();
            // Renamed into the index (same filesystem), not copied.
            io.set_move_files(true);
            self.db.ingest_external_file_cf_opts(&cf, &io, vec![&path])
        })();
        if ingested.is_err() {
            let _ = std::fs::remove_file(&path);
        } else {
            marks.newest_records += written;
            marks.all_records += written;
        }
        ingested.map_err(|e| DedupError(format!("writing {}: {e}", path.display())))
    }
}

/// A clean close writes the in-memory entries out (a crash leaves them to the
/// engine's catch-up from the log).
impl Drop for RocksDedup {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!(error = %e, "dedup index: writing the newest entries at close failed; they are re-indexed from the log at the next start");
        }
        // The scan holds the database open: end it before the database closes.
        if let Some((scan, stop)) = self.filter_scan.take() {
            stop.store(true, Ordering::Relaxed);
            let _ = scan.join();
        }
        // Saved with the names of the tables it covers, so the next open need not scan
        // them. Compactions are stopped first: one finishing later would replace
        // tables, and the next open would find other names and scan.
        if self.filter.is_ready() {
            self.db.cancel_all_background_work(true);
            let saved = table_fingerprint(&self.db).and_then(|tables| {
                self.filter
                    .save(&self.filter_path, &tables)
                    .map_err(|e| DedupError(format!("saving {}: {e}", self.filter_path.display())))
            });
            if let Err(e) = saved {
                tracing::warn!(error = %e, "dedup index: the filter was not saved; the next start rebuilds it from the tables");
            }
        }
    }
}

impl DedupIndex for RocksDedup {
    fn get(&self, hash: &EntryHash) -> Result<Option<Indexed>, DedupError> {
        let recent = {
            let r = self.recent.read().unwrap_or_else(|e| e.into_inner());
            r.map
                .get(hash)
                .or_else(|| r.writing.as_ref().and_then(|w| w.get(hash)))
                .copied()
        };
        let stored = if self.filter.may_contain(hash) {
            self.stored_get(hash)?
        } else {
            None
        };
        Ok(match (recent, stored) {
            (Some(a), Some(b)) => Some(a.first(b)),
            (a, b) => a.or(b),
        })
    }

    fn put_batch(
        &self,
        entries: &[(EntryHash, Indexed)],
        indexed_up_to: u64,
    ) -> Result<(), DedupError> {
        let mut marks = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        let full = {
            let mut r = self.recent.write().unwrap_or_else(|e| e.into_inner());
            for (h, i) in entries {
                insert_first(&mut r.map, *h, *i);
            }
            r.map.len() >= self.recent_entries
        };
        marks.latest = marks.latest.max(indexed_up_to);
        if full {
            self.write_recent(&mut marks)?;
        }
        Ok(())
    }

    /// The in-memory map has room (only the indexer, the one caller of `put_batch`,
    /// grows it, so the answer holds until it calls).
    fn put_is_cheap(&self, n: usize) -> bool {
        let r = self.recent.read().unwrap_or_else(|e| e.into_inner());
        r.map.len() + n < self.recent_entries
    }

    fn flush(&self) -> Result<(), DedupError> {
        let mut marks = self.writer.lock().unwrap_or_else(|e| e.into_inner());
        if marks.latest > marks.persisted {
            self.write_recent(&mut marks)?;
        }
        Ok(())
    }

    fn indexed_up_to(&self) -> Result<u64, DedupError> {
        self.stored_marker()
    }
}

impl RocksDedup {
    /// Whether the filter in front of the tables is filled (see [`filter`]); until then
    /// every lookup asks RocksDB.
    pub fn filter_ready(&self) -> bool {
        self.filter.is_ready()
    }
}

/// The SHA-256 of the sorted names of the entries' table files. RocksDB never reuses a
/// file number, so the same names mean the same keys.
fn table_fingerprint(db: &Db) -> Result<[u8; 32], DedupError> {
    use sha2::{Digest, Sha256};
    let mut names: Vec<String> = db
        .live_files()
        .map_err(err)?
        .into_iter()
        .filter(|f| is_generation(&f.column_family_name))
        .map(|f| f.name)
        .collect();
    names.sort_unstable();
    let mut sum = Sha256::new();
    for n in names {
        sum.update(n.as_bytes());
        sum.update([0]);
    }
    Ok(sum.finalize().into())
}

/// The filter saved by the last clean close, if it covers exactly the tables there are
/// now. The file is deleted either way: once tables change it no longer describes them.
fn load_filter(db: &Db, path: &Path) -> Option<TableFilter> {
    let loaded = table_fingerprint(db).and_then(|tables| {
        TableFilter::load(path, &tables)
            .map_err(|e| DedupError(format!("reading {}: {e}", path.display())))
    });
    // A save a crash interrupted: never renamed, never read.
    let _ = std::fs::remove_file(path.with_extension("tmp"));
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            // Left in place it could be loaded again after the tables changed: scan.
            tracing::warn!(error = %e, path = %path.display(), "dedup index: cannot remove the saved filter");
            return None;
        }
        _ => {}
    }
    match loaded {
        Ok(Some(f)) => {
            let (generations, bytes) = f.size();
            tracing::info!(mib = bytes >> 20, generations, "dedup index: filter loaded");
            Some(f)
        }
        Ok(None) => None,
        Err(e) => {
            tracing::warn!(error = %e, "dedup index: the saved filter is unreadable; rebuilding it from the tables");
            None
        }
    }
}

/// Whether a column family holds entries: a generation.
fn is_generation(name: &str) -> bool {
    name == CF_ENTRIES || name.starts_with(GENERATION_PREFIX)
}

/// A generation's number: 0 for [`CF_ENTRIES`], n for `entries.n`.
fn generation_number(name: &str) -> u64 {
    name.strip_prefix(GENERATION_PREFIX)
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// The generations among a database's column families, oldest first; [`CF_ENTRIES`]
/// always (a new index creates it).
fn generations_in(families: Vec<String>) -> Result<Vec<String>, DedupError> {
    let mut generations = Vec::new();
    for f in families {
        if !f.starts_with(GENERATION_PREFIX) {
            continue;
        }
        if generation_number(&f) == 0 {
            return Err(err(format!(
                "unexpected column family {f:?} in the dedup index (not written by tlogd?)"
            )));
        }
        generations.push(f);
    }
    generations.sort_by_key(|g| generation_number(g));
    generations.insert(0, CF_ENTRIES.to_string());
    Ok(generations)
}

/// Level-0 tables (sorted runs, for universal compaction) that start a merge in a
/// generation no table goes to any more: RocksDB's universal compaction merges its
/// sorted runs down to two, once. A lookup the filter cannot answer (a
/// duplicate, or one of its ~0.1 % "maybe"s per filter generation) reads every sorted
/// run of every generation, ~0.6 µs each (~14 µs across two dozen, benches/results/history.md):
/// a full 8M generation is one run of 5.5M entries (its merge at 24 tables) and up to
/// a dozen tables, which this makes one run of ~2.5M, ~0.9 s of one core
/// (`examples/compaction.rs`). Merging the two as well would cost the whole
/// generation again for one run less.
const SEALED_LEVEL0_TABLES: i32 = 2;

/// Apply [`SEALED_LEVEL0_TABLES`] to a generation that just became full (the next open
/// passes it with the generation's options). A failure costs only lookups that reach
/// the tables: logged, not returned.
fn seal(db: &Db, generation: &str) {
    let trigger = SEALED_LEVEL0_TABLES.to_string();
    let sealed = family(db, generation).and_then(|cf| {
        db.set_options_cf(
            &cf,
            &[("level0_file_num_compaction_trigger", trigger.as_str())],
        )
        .map_err(err)
    });
    if let Err(e) = sealed {
        tracing::warn!(error = %e, %generation, "dedup index: a full generation is not merged into one run; lookups that reach the tables read more runs");
    }
}

/// What a generation's tables hold, as RocksDB estimates it from their properties.
fn records_in(db: &Db, generation: &str) -> u64 {
    db.cf_handle(generation)
        .and_then(|cf| {
            db.property_int_value_cf(&cf, "rocksdb.estimate-num-keys")
                .ok()
                .flatten()
        })
        .unwrap_or(0)
}

/// Fill `filter` with every hash in the tables on a thread of its own, then mark it
/// ready. Tables ingested meanwhile insert their own hashes first, so a table is either
/// in the scan's view of the database or already in the filter. If the scan fails the
/// filter stays "maybe" for everything: lookups cost what they did without it.
fn spawn_filter_scan(
    db: Arc<Db>,
    generations: Vec<String>,
    filter: Arc<TableFilter>,
) -> Result<(JoinHandle<()>, Arc<AtomicBool>), DedupError> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let scan = std::thread::Builder::new()
        .name("dedup-filter".into())
        .spawn(move || {
            let started = std::time::Instant::now();
            match scan_tables(&db, &generations, &filter, &stopped) {
                Ok(Some(n)) => {
                    filter.set_ready();
                    let (generations, bytes) = filter.size();
                    tracing::info!(
                        entries = n,
                        seconds = started.elapsed().as_secs_f64(),
                        mib = bytes >> 20,
                        generations,
                        "dedup index: filter filled; lookups of new entries no longer read the tables"
                    );
                }
                Ok(None) => {}
                Err(e) => tracing::warn!(
                    error = %e,
                    "dedup index: filling the filter failed; every lookup reads the tables"
                ),
            }
        })
        .map_err(|e| DedupError(format!("starting the dedup filter scan: {e}")))?;
    Ok((scan, stop))
}

/// Insert every key of the `generations` into `filter`: the number of keys, or `None`
/// if `stop` was raised first.
fn scan_tables(
    db: &Db,
    generations: &[String],
    filter: &TableFilter,
    stop: &AtomicBool,
) -> Result<Option<u64>, DedupError> {
    const BATCH: usize = 8192;
    let mut batch: Vec<EntryHash> = Vec::with_capacity(BATCH);
    let mut n = 0u64;
    for g in generations {
        let cf = family(db, g)?;
        let mut opts = ReadOptions::default();
        // A one-off pass: keep the cache for lookups' blocks.
        opts.fill_cache(false);
        opts.set_readahead_size(2 << 20);
        let mut it = db.raw_iterator_cf_opt(&cf, opts);
        it.seek_to_first();
        while let Some(key) = it.key() {
            let hash: EntryHash = key
                .try_into()
                .map_err(|_| err(format!("corrupt key of {} bytes in dedup index", key.len())))?;
            batch.push(hash);
            if batch.len() == BATCH {
                if stop.load(Ordering::Relaxed) {
                    return Ok(None);
                }
                filter.insert_all(batch.iter());
                n += batch.len() as u64;
                batch.clear();
            }
            it.next();
        }
        it.status().map_err(err)?;
    }
    filter.insert_all(batch.iter());
    Ok(Some(n + batch.len() as u64))
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
mod tests;
