//! The index against its contract: first index wins, recent and sealed generations,
//! the filter, crashes and reopening.

use super::*;

/// Open, and wait until the filter is filled, so lookups take the path that skips
/// RocksDB when the filter says no.
fn open_ready(path: &Path, opts: &DedupOptions) -> RocksDedup {
    let idx = RocksDedup::open(path, opts).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !idx.filter_ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "filter scan never finished"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    idx
}

#[test]
fn a_reopened_index_loads_its_filter_or_refills_it_from_the_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup");
    let opts = DedupOptions {
        recent_entries: 1000,
        ..DedupOptions::default()
    };
    let all_found = |idx: &RocksDedup, n: u64| {
        for i in 0..n {
            assert_eq!(index_of(idx, &hash(i)), Some(i), "entry {i}");
        }
        // Had the filter missed a table, it would turn that table's entries away.
        assert!((n..2 * n).all(|i| index_of(idx, &hash(i)).is_none()));
        let turned_away = (n..2 * n)
            .filter(|&i| !idx.filter.may_contain(&hash(i)))
            .count();
        assert!(turned_away as u64 > n * 9 / 10, "{turned_away}");
    };
    let saved = path.join(FILTER_FILE);
    {
        let idx = open_ready(&path, &opts);
        put(&idx, 0..20_000, 0);
        // Every entry went through a table, and the filter took each table's hashes.
        assert!(idx.recent.read().unwrap().map.is_empty());
        all_found(&idx, 20_000);
    }
    // A clean close saved the filter: the next open is ready at once, no scan.
    assert!(saved.exists());
    {
        let idx = RocksDedup::open(&path, &opts).unwrap();
        assert!(idx.filter_ready() && idx.filter_scan.is_none());
        assert!(!saved.exists(), "a loaded filter's file is deleted");
        all_found(&idx, 20_000);
    }
    // Saved for other tables than there are now (the file of an older close put
    // back): refilled by the scan, which finds the newer tables too.
    let older = dir.path().join("older-filter");
    std::fs::copy(&saved, &older).unwrap();
    {
        let idx = open_ready(&path, &opts);
        put(&idx, 20_000..30_000, 0);
    }
    std::fs::copy(&older, &saved).unwrap();
    {
        let idx = RocksDedup::open(&path, &opts).unwrap();
        assert!(
            idx.filter_scan.is_some(),
            "a filter for other tables is not loaded"
        );
        drop(idx);
    }
    // Lost (a crash, here in the middle of a save): refilled by the scan, and the
    // half-written file removed.
    let _ = std::fs::remove_file(&saved);
    let half_written = saved.with_extension("tmp");
    std::fs::write(&half_written, b"tlogd-dedup-filter v1\n").unwrap();
    let idx = open_ready(&path, &opts);
    assert!(!half_written.exists());
    all_found(&idx, 30_000);
}

#[test]
fn a_fresh_index_takes_little_disk() {
    // RocksDB's defaults preallocated 36 MiB for the first entries: a small
    // filesystem was full after two.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup");
    let idx = RocksDedup::open(&path, &DedupOptions::default()).unwrap();
    for i in 0..10u64 {
        put_indexes(&idx, &[([i as u8; 32], i)], i + 1);
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
        put_indexes(&idx, &batch, 10 + (b + 1) * 500);
    }
    let used = allocated_bytes(&path).unwrap();
    assert!(used < 16 << 20, "{used} bytes after 50k entries");
    assert_eq!(index_of(&idx, &[3u8; 32]), Some(3));
}

fn hash(n: u64) -> EntryHash {
    let mut h = [0u8; 32];
    h[..8].copy_from_slice(&n.wrapping_mul(0x9e37_79b9_7f4a_7c15).to_be_bytes());
    h[8..16].copy_from_slice(&n.to_be_bytes());
    h
}

/// The index `idx` holds for `hash`.
fn index_of(idx: &RocksDedup, hash: &EntryHash) -> Option<u64> {
    idx.get(hash).unwrap().map(|f| f.index)
}

/// `put_batch` of entries whose stored form carries no timestamp (tlog-tiles).
fn put_indexes(idx: &RocksDedup, entries: &[(EntryHash, u64)], upto: u64) {
    let entries: Vec<_> = entries.iter().map(|(h, i)| (*h, Indexed::at(*i))).collect();
    idx.put_batch(&entries, upto).unwrap();
}

/// A CT log's index keeps each entry's timestamp beside its index, in memory, in
/// tables (written as values and as merge operands) and across a reopen; the first
/// index wins with its own timestamp; a tlog-tiles value stays 8 bytes, and such a
/// value (as every index before timestamps holds) reads with timestamp 0.
#[test]
fn timestamps_are_kept_beside_indexes() {
    let dir = tempfile::tempdir().unwrap();
    let opts = DedupOptions {
        recent_entries: 100,
        ..DedupOptions::default()
    };
    let at = |index: u64| Indexed {
        index,
        timestamp: 1_700_000_000_000 + index,
    };
    {
        // Before the filter is ready the first table is written as operands.
        let idx = RocksDedup::open(dir.path(), &opts).unwrap();
        let batch: Vec<_> = (0..150u64).map(|i| (hash(i), at(i))).collect();
        idx.put_batch(&batch, 150).unwrap();
        // In memory, and in the table.
        assert_eq!(idx.get(&hash(149)).unwrap(), Some(at(149)));
        assert_eq!(idx.get(&hash(3)).unwrap(), Some(at(3)));
        // A later occurrence changes nothing, its timestamp included.
        idx.put_batch(&[(hash(3), at(500))], 151).unwrap();
        assert_eq!(idx.get(&hash(3)).unwrap(), Some(at(3)));
        put_indexes(&idx, &[(hash(1000), 151)], 152);
    }
    let idx = open_ready(dir.path(), &opts);
    for i in [0, 3, 99, 100, 149] {
        assert_eq!(idx.get(&hash(i)).unwrap(), Some(at(i)), "{i}");
    }
    assert_eq!(idx.get(&hash(1000)).unwrap(), Some(Indexed::at(151)));
    // As values now that the filter is ready.
    let batch: Vec<_> = (200..400u64).map(|i| (hash(i), at(i))).collect();
    idx.put_batch(&batch, 400).unwrap();
    idx.flush().unwrap();
    assert_eq!(idx.get(&hash(250)).unwrap(), Some(at(250)));
    assert_eq!(encode_value(&Indexed::at(7)).1, 8);
    assert_eq!(decode_value(&7u64.to_be_bytes()).unwrap(), Indexed::at(7));
    assert_eq!(decode_value(&encode_value(&at(7)).0).unwrap(), at(7));
    assert!(decode_value(&[0; 12]).is_err());
}

#[test]
fn entries_move_from_memory_to_tables_and_the_marker_follows_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup");
    let opts = DedupOptions {
        recent_entries: 4,
        ..DedupOptions::default()
    };
    {
        let idx = open_ready(&path, &opts);
        // Room for two more in memory: the engine may insert them on its own task.
        assert!(idx.put_is_cheap(2));
        put_indexes(&idx, &[(hash(0), 0), (hash(1), 1)], 2);
        // Two more fill the map, and that put writes a table: not cheap.
        assert!(idx.put_is_cheap(1));
        assert!(!idx.put_is_cheap(2));
        // Found in memory; the persisted marker has not moved (a crash now loses
        // these two, and the engine re-indexes them from the log).
        assert_eq!(index_of(&idx, &hash(1)), Some(1));
        assert_eq!(idx.indexed_up_to().unwrap(), 0);
        put_indexes(&idx, &[(hash(2), 2), (hash(3), 3)], 4);
        // Four entries: written as a table, and the marker with them.
        assert_eq!(idx.indexed_up_to().unwrap(), 4);
        assert!(idx.recent.read().unwrap().map.is_empty());
        assert_eq!(index_of(&idx, &hash(0)), Some(0));
        assert_eq!(index_of(&idx, &hash(3)), Some(3));
        assert_eq!(index_of(&idx, &hash(9)), None);
        // The same bytes logged again (two frontends racing): the first index
        // answers, from memory against a table and from two tables.
        put_indexes(&idx, &[(hash(0), 4), (hash(5), 5)], 6);
        assert_eq!(index_of(&idx, &hash(0)), Some(0));
        put_indexes(&idx, &[(hash(6), 6), (hash(7), 7)], 8);
        assert_eq!(idx.indexed_up_to().unwrap(), 8);
        assert_eq!(index_of(&idx, &hash(0)), Some(0));
        put_indexes(&idx, &[(hash(8), 8)], 9);
        assert_eq!(idx.indexed_up_to().unwrap(), 8);
        // Closed cleanly: the last entry is written out.
    }
    let idx = open_ready(&path, &opts);
    assert_eq!(idx.indexed_up_to().unwrap(), 9);
    // (Index 4 holds the second copy of entry 0.)
    for n in [1, 2, 3, 5, 6, 7, 8] {
        assert_eq!(index_of(&idx, &hash(n)), Some(n));
    }
    assert_eq!(index_of(&idx, &hash(0)), Some(0));
    // Nothing is left behind in the directory tables are written in.
    assert_eq!(std::fs::read_dir(path.join(INGEST_DIR)).unwrap().count(), 0);
}

#[test]
fn the_in_memory_map_fits_its_budget() {
    let n = DedupOptions::recent_entries_within(16 << 20);
    assert_eq!(n, 229_376);
    let map = EntryMap::with_capacity_and_hasher(n, Default::default());
    // Reserving this many entries does not double the table.
    assert!(map.capacity() < n + n / 7 + 1, "{}", map.capacity());
    assert!(n * 8 / 7 * SLOT_BYTES <= 16 << 20);
    assert_eq!(DedupOptions::recent_entries_within(0), 14);
}

#[test]
fn an_index_of_the_leveled_release_opens_and_keeps_its_entries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup");
    let opts = DedupOptions {
        recent_entries: 4,
        ..DedupOptions::default()
    };
    let n = 200u64;
    {
        // As the previous release wrote it: leveled, with tables below level 0.
        let idx = RocksDedup::open_with(&path, &opts, DBCompactionStyle::Level).unwrap();
        for i in (0..n).step_by(4) {
            let batch: Vec<_> = (i..i + 4).map(|j| (hash(j), j)).collect();
            put_indexes(&idx, &batch, i + 4);
        }
        let cf = idx.db.cf_handle(CF_ENTRIES).unwrap();
        idx.db.compact_range_cf(&cf, None::<&[u8]>, None::<&[u8]>);
        let below_level_0: u64 = (1..7)
            .map(|l| {
                idx.db
                    .property_int_value_cf(&cf, format!("rocksdb.num-files-at-level{l}").as_str())
                    .unwrap()
                    .unwrap()
            })
            .sum();
        assert!(below_level_0 > 0, "no table below level 0");
    }
    let idx = open_ready(&path, &opts);
    assert_eq!(idx.indexed_up_to().unwrap(), n);
    for j in 0..n {
        assert_eq!(index_of(&idx, &hash(j)), Some(j));
    }
    // It goes on: new tables, and the first index still wins.
    for i in (n..2 * n).step_by(4) {
        let batch: Vec<_> = (i..i + 4).map(|j| (hash(j - n), j)).collect();
        put_indexes(&idx, &batch, i + 4);
    }
    {
        let cf = idx.db.cf_handle(CF_ENTRIES).unwrap();
        idx.db.compact_range_cf(&cf, None::<&[u8]>, None::<&[u8]>);
    }
    drop(idx);
    // The index now runs with universal compaction (RocksDB records the options
    // it opened with).
    let style = stored_option(&path, CF_ENTRIES, "compaction_style");
    assert_eq!(style, "kCompactionStyleUniversal");
    let idx = open_ready(&path, &opts);
    assert_eq!(idx.indexed_up_to().unwrap(), 2 * n);
    for j in 0..n {
        assert_eq!(index_of(&idx, &hash(j)), Some(j));
    }
    assert_eq!(index_of(&idx, &hash(2 * n)), None);
}

/// The value of `option` in column family `cf` of the newest OPTIONS file RocksDB
/// wrote (what it last opened or set).
fn stored_option(path: &Path, cf: &str, option: &str) -> String {
    let mut options_files: Vec<_> = std::fs::read_dir(path)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("OPTIONS-"))
        .collect();
    options_files.sort_by_key(|n| n[8..].parse::<u64>().unwrap_or(0));
    let newest = std::fs::read_to_string(path.join(options_files.last().unwrap())).unwrap();
    let section = newest
        .split(&format!("[CFOptions \"{cf}\"]"))
        .nth(1)
        .unwrap_or_else(|| panic!("no column family {cf}"));
    let prefix = format!("{option}=");
    section
        .lines()
        .find_map(|l| l.trim_start().strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no {option} for {cf}"))
        .to_string()
}

#[test]
fn generations_are_ordered_by_number_and_strangers_refused() {
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        generations_in(names(&[
            "default",
            "meta",
            "entries",
            "entries.10",
            "entries.2"
        ]))
        .unwrap(),
        names(&["entries", "entries.2", "entries.10"])
    );
    assert_eq!(generations_in(Vec::new()).unwrap(), names(&["entries"]));
    assert!(generations_in(names(&["entries", "entries.x"])).is_err());
    assert!(generations_in(names(&["entries", "entries.0"])).is_err());
}

/// A number from the entries' aggregated table properties, e.g. "# merge operands".
fn table_property(idx: &RocksDedup, name: &str) -> u64 {
    let cf = idx.db.cf_handle(CF_ENTRIES).unwrap();
    let all = idx
        .db
        .property_value_cf(&cf, "rocksdb.aggregated-table-properties")
        .unwrap()
        .unwrap();
    let field = format!("{name}=");
    let at = all
        .find(&field)
        .unwrap_or_else(|| panic!("{name} in {all}"));
    all[at + field.len()..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn tables_hold_values_where_the_filter_rules_out_older_tables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup");
    let opts = DedupOptions {
        recent_entries: 1000,
        ..DedupOptions::default()
    };
    let idx = open_ready(&path, &opts);
    for b in (0..5000u64).step_by(500) {
        let batch: Vec<_> = (b..b + 500).map(|i| (hash(i), i)).collect();
        put_indexes(&idx, &batch, b + 500);
    }
    assert_eq!(idx.indexed_up_to().unwrap(), 5000);
    assert_eq!(table_property(&idx, "# entries"), 5000);
    assert_eq!(table_property(&idx, "# merge operands"), 0);
    // Logged again (the index lagged, or two frontends raced): 300 hashes the
    // tables hold, among 700 new ones. The table leaves the 300 out.
    let batch: Vec<_> = (0..1000u64)
        .map(|j| {
            let n = if j < 300 { j * 7 } else { 10_000 + j };
            (hash(n), 5000 + j)
        })
        .collect();
    put_indexes(&idx, &batch, 6000);
    assert_eq!(idx.indexed_up_to().unwrap(), 6000);
    assert_eq!(table_property(&idx, "# entries"), 5700);
    assert_eq!(table_property(&idx, "# merge operands"), 0);
    for j in 0..300u64 {
        assert_eq!(index_of(&idx, &hash(j * 7)), Some(j * 7));
    }
    for j in 300..1000u64 {
        assert_eq!(index_of(&idx, &hash(10_000 + j)), Some(5000 + j));
    }
    // A table of nothing but hashes already held writes no table at all.
    let again: Vec<_> = (0..1000u64).map(|j| (hash(j), 6000 + j)).collect();
    put_indexes(&idx, &again, 7000);
    assert_eq!(idx.indexed_up_to().unwrap(), 7000);
    assert_eq!(table_property(&idx, "# entries"), 5700);
    assert_eq!(index_of(&idx, &hash(999)), Some(999));
    drop(idx);
    // Reopened, values and all.
    let idx = open_ready(&path, &opts);
    assert_eq!(index_of(&idx, &hash(21)), Some(21));
    assert_eq!(index_of(&idx, &hash(10_500)), Some(5500));
}

#[test]
fn tables_written_before_the_filter_is_filled_hold_merge_operands() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup");
    let opts = DedupOptions {
        recent_entries: 100,
        ..DedupOptions::default()
    };
    let idx = open_ready(&path, &opts);
    let batch: Vec<_> = (0..100u64).map(|i| (hash(i), i)).collect();
    put_indexes(&idx, &batch, 100);
    // As while the start-up scan runs: every lookup is "maybe" and means nothing.
    idx.filter.set_unready();
    let batch: Vec<_> = (50..150u64).map(|i| (hash(i), i + 100)).collect();
    put_indexes(&idx, &batch, 200);
    assert_eq!(table_property(&idx, "# merge operands"), 100);
    idx.filter.set_ready();
    // Operands over values keep the values; compacted, still the first index.
    for i in 0..150u64 {
        let want = if i < 100 { i } else { i + 100 };
        assert_eq!(index_of(&idx, &hash(i)), Some(want), "{i}");
    }
    let cf = idx.db.cf_handle(CF_ENTRIES).unwrap();
    idx.db.compact_range_cf(&cf, None::<&[u8]>, None::<&[u8]>);
    assert_eq!(table_property(&idx, "# merge operands"), 0);
    assert_eq!(table_property(&idx, "# entries"), 150);
    // A value written over operands (the filter ready again, the hash absent).
    let batch: Vec<_> = (150..250u64).map(|i| (hash(i), i + 100)).collect();
    put_indexes(&idx, &batch, 300);
    for i in 0..250u64 {
        let want = if i < 100 { i } else { i + 100 };
        assert_eq!(index_of(&idx, &hash(i)), Some(want), "{i}");
    }
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
        put_indexes(&idx, &[(a, 0), (b, 1)], 2);
        put_indexes(&idx, &[(a, 5)], 6);
        assert_eq!(index_of(&idx, &a), Some(0));
    }
    let idx = open_ready(&path, &DedupOptions::default());
    assert_eq!(index_of(&idx, &a), Some(0));
    assert_eq!(index_of(&idx, &b), Some(1));
    assert_eq!(idx.get(&[3u8; 32]).unwrap(), None);
    assert_eq!(idx.indexed_up_to().unwrap(), 6);
}

/// Sorted runs per generation, oldest first: each level-0 table is one, and each
/// other level holding tables one.
fn sorted_runs(idx: &RocksDedup) -> Vec<u64> {
    let generations = idx.generations.read().unwrap().clone();
    let number = |cf: &Arc<rocksdb::BoundColumnFamily>, name: String| {
        idx.db
            .property_int_value_cf(cf, name.as_str())
            .unwrap()
            .unwrap()
    };
    generations
        .iter()
        .map(|g| {
            let cf = idx.db.cf_handle(g).unwrap();
            number(&cf, "rocksdb.num-files-at-level0".into())
                + (1..7)
                    .filter(|l| number(&cf, format!("rocksdb.num-files-at-level{l}")) > 0)
                    .count() as u64
        })
        .collect()
}

/// Index log entries `range` in batches of 100 (as the engine's indexer does),
/// entry `i` with the hash of entry `i - offset` (a resubmission when `offset > 0`).
fn put(idx: &RocksDedup, range: std::ops::Range<u64>, offset: u64) {
    for b in range.step_by(100) {
        let batch: Vec<_> = (b..b + 100).map(|i| (hash(i - offset), i)).collect();
        put_indexes(idx, &batch, b + 100);
    }
}

/// Records per generation, oldest first.
fn generation_records(idx: &RocksDedup) -> Vec<u64> {
    let generations = idx.generations.read().unwrap().clone();
    generations.iter().map(|g| records_in(&idx.db, g)).collect()
}

#[test]
fn a_full_generation_is_followed_by_a_new_one_and_lookups_span_them_all() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dedup");
    let opts = DedupOptions {
        recent_entries: 100,
        generation_entries: 1000,
        ..DedupOptions::default()
    };
    let n = 10_000;
    {
        let idx = open_ready(&path, &opts);
        put(&idx, 0..n, 0);
        // 10,000 records in tables of 100: 1,000 per generation until an eighth of
        // the index is more. The ninth, started at 8,000, takes 1,200: at 9,200
        // records an eighth is 1,150.
        let records = generation_records(&idx);
        assert_eq!(
            records,
            [1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1200, 800]
        );
        // Every full generation is merged down to two sorted runs at most (from
        // ten or twelve tables); the newest is not.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while sorted_runs(&idx)[..9].iter().any(|&r| r > 2) {
            assert!(
                std::time::Instant::now() < deadline,
                "{:?}",
                sorted_runs(&idx)
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert!(sorted_runs(&idx)[9] > 1, "{:?}", sorted_runs(&idx));
        for i in 0..n {
            assert_eq!(index_of(&idx, &hash(i)), Some(i), "entry {i}");
        }
        // Resubmitted: every generation is asked, and the first index wins.
        put(&idx, n..n + 2000, n);
        assert_eq!(generation_records(&idx).iter().sum::<u64>(), n);
        for i in 0..2000 {
            assert_eq!(index_of(&idx, &hash(i)), Some(i), "entry {i}");
        }
    }
    // Reopened without the saved filter (a crash): the scan reads every generation;
    // a generation it missed would have its entries turned away by the filter.
    std::fs::remove_file(path.join(FILTER_FILE)).unwrap();
    let idx = open_ready(&path, &opts);
    assert_eq!(idx.generations.read().unwrap().len(), 10);
    // Full generations open sealed; the newest takes tables as before.
    let trigger = |cf: &str| stored_option(&path, cf, "level0_file_num_compaction_trigger");
    assert_eq!(trigger("entries.8"), SEALED_LEVEL0_TABLES.to_string());
    assert_eq!(trigger("entries.9"), LEVEL0_TABLES.to_string());
    assert_eq!(
        stored_option(&path, "entries.9", "periodic_compaction_seconds"),
        "0"
    );
    for i in 0..n {
        assert_eq!(index_of(&idx, &hash(i)), Some(i), "entry {i}");
    }
    assert_eq!(index_of(&idx, &hash(n)), None);
    // The newest generation goes on after the reopen (its 800 records estimated by
    // RocksDB), and a new one follows it once it holds an eighth of the index.
    put(&idx, n + 2000..n + 2100, 0);
    assert_eq!(idx.generations.read().unwrap().len(), 10);
    put(&idx, n + 2100..n + 3000, 0);
    assert_eq!(generation_records(&idx)[9..], [1400, 400]);
    assert_eq!(index_of(&idx, &hash(n + 2000)), Some(n + 2000));
    assert_eq!(index_of(&idx, &hash(n + 2999)), Some(n + 2999));
    // Two generations holding one hash (a table written before the filter was
    // filled is written blind): the older index wins.
    let newest = idx.generations.read().unwrap().last().unwrap().clone();
    let cf = idx.db.cf_handle(&newest).unwrap();
    idx.db
        .put_cf(&cf, hash(7), (n + 5000).to_be_bytes())
        .unwrap();
    assert_eq!(index_of(&idx, &hash(7)), Some(7));
}
