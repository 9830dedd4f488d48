//! What one full compaction of the index's tables costs in CPU per entry, with the
//! entries written as merge operands (as every table was before the filter could tell
//! a hash is absent) against plain values (what `RocksDedup` writes now; see
//! `table_records` in `src/lib.rs`). Tables of 229,376 entries, the default in-memory
//! batch, are ingested with automatic compactions off, then merged into one by
//! `compact_range` on this thread, twice per kind, alternated.
//!
//!     cargo build --release -p tlogd-dedup-rocksdb --examples
//!     $CARGO_TARGET_DIR/release/examples/compaction [DIR] [TABLES, default 40]
//!
//! DIR (default a temporary directory) is where the databases go; each is removed
//! after its run. The table options are the index's where they matter to a merge: no
//! compression, a 10-bit Bloom filter per table, universal compaction, the same merge
//! operator.

use std::path::Path;
use std::time::Instant;

#[path = "support/keys.rs"]
mod keys;
use keys::hash;

use rocksdb::{
    BlockBasedOptions, DB, DBCompactionStyle, IngestExternalFileOptions, MergeOperands, Options,
    SstFileWriter,
};

/// The index's merge operator: the existing value, else the first operand.
fn keep_first(_key: &[u8], existing: Option<&[u8]>, operands: &MergeOperands) -> Option<Vec<u8>> {
    match existing {
        Some(v) => Some(v.to_vec()),
        None => operands.iter().next().map(|v| v.to_vec()),
    }
}

/// CPU seconds of this process so far, from /proc.
fn cpu_seconds() -> Result<f64, Box<dyn std::error::Error>> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let close = stat.rfind(')').ok_or("odd /proc/self/stat")?;
    let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
    let ticks: f64 = fields
        .get(11..13)
        .ok_or("odd /proc/self/stat")?
        .iter()
        .map(|f| f.parse::<f64>())
        .sum::<Result<f64, _>>()?;
    Ok(ticks / 100.0) // USER_HZ on Linux
}

/// Ingest `tables` tables of fresh keys into a new database at `path`, as operands or
/// values, then compact them into one: CPU microseconds per entry of the compaction.
fn run(path: &Path, operands: bool, tables: u64) -> Result<f64, Box<dyn std::error::Error>> {
    const PER_TABLE: u64 = 229_376;
    let _ = std::fs::remove_dir_all(path);
    let mut table = BlockBasedOptions::default();
    table.set_bloom_filter(10.0, false);
    let mut opts = Options::default();
    opts.create_if_missing(true);
    opts.set_block_based_table_factory(&table);
    opts.set_compression_type(rocksdb::DBCompressionType::None);
    opts.set_merge_operator("keep_first", keep_first, keep_first);
    opts.set_compaction_style(DBCompactionStyle::Universal);
    opts.set_disable_auto_compactions(true);
    opts.set_level_zero_file_num_compaction_trigger(1 << 20);
    opts.set_level_zero_slowdown_writes_trigger(1 << 20);
    opts.set_level_zero_stop_writes_trigger(1 << 20);
    let db = DB::open(&opts, path)?;
    let staging = path.join("staging");
    std::fs::create_dir_all(&staging)?;
    for t in 0..tables {
        let mut keys: Vec<[u8; 32]> = (t * PER_TABLE..(t + 1) * PER_TABLE).map(hash).collect();
        keys.sort_unstable();
        let file = staging.join(format!("{t}.sst"));
        let mut w = SstFileWriter::create(&opts);
        w.open(&file)?;
        for (i, k) in keys.iter().enumerate() {
            let v = (t * PER_TABLE + i as u64).to_be_bytes();
            if operands {
                w.merge(k, v)?;
            } else {
                w.put(k, v)?;
            }
        }
        w.finish()?;
        let mut io = IngestExternalFileOptions::default();
        io.set_move_files(true);
        db.ingest_external_file_opts(&io, vec![&file])?;
    }
    let (started, cpu) = (Instant::now(), cpu_seconds()?);
    db.compact_range::<&[u8], &[u8]>(None, None);
    let spent = cpu_seconds()? - cpu;
    let entries = tables * PER_TABLE;
    let per_entry = spent * 1e6 / entries as f64;
    println!(
        "{}\t{entries}\t{:.2}\t{spent:.2}\t{per_entry:.3}",
        if operands { "operands" } else { "values" },
        started.elapsed().as_secs_f64(),
    );
    drop(db);
    std::fs::remove_dir_all(path)?;
    Ok(per_entry)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let base = std::env::args().nth(1);
    let root = base.as_deref().map(Path::new).unwrap_or(tmp.path());
    let tables = match std::env::args().nth(2) {
        Some(t) => t.parse()?,
        None => 40,
    };
    let path = root.join("compaction-dedup");
    println!("written_as\tentries\tseconds\tcpu_seconds\tcpu_us_per_entry");
    for _ in 0..2 {
        run(&path, true, tables)?;
        run(&path, false, tables)?;
    }
    Ok(())
}
