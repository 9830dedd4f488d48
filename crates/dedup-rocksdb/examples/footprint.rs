//! Disk footprint of a fresh dedup index (`du`: allocated blocks, preallocation
//! included) after 10 entries and after N (default 100k) entries, written as the
//! daemon writes them (one batch per commit), and the write and lookup rates.
//!
//!     cargo build --release -p tlogd -p tlogd-dedup-rocksdb --example footprint
//!     FP_N=1000000 FP_LIST=1 $CARGO_TARGET_DIR/release/examples/footprint [DIR]
//!
//! (Built together with `tlogd` so that Cargo resolves the same features as the
//! workspace and reuses its RocksDB build.) DIR (default a temporary directory) is
//! where the index goes; `FP_LIST` lists its files after the writes.

use std::path::Path;

#[path = "support/keys.rs"]
mod keys;
use keys::hash;

use tlogd_core::engine::{DedupIndex, Indexed};
use tlogd_dedup_rocksdb::{DedupOptions, RocksDedup, allocated_bytes};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let base = std::env::args().nth(1);
    let tmp = tempfile::tempdir()?;
    let root = base.as_deref().map(Path::new).unwrap_or(tmp.path());
    let path = root.join("footprint-dedup");
    let _ = std::fs::remove_dir_all(&path);
    let idx = RocksDedup::open(&path, &DedupOptions::default())?;
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    println!("fresh:        {:7.2} MiB", mib(allocated_bytes(&path)?));
    for i in 0..10u64 {
        idx.put_batch(&[(hash(i), Indexed::at(i))], i + 1)?;
    }
    println!("10 entries:   {:7.2} MiB", mib(allocated_bytes(&path)?));
    let mut next = 10u64;
    let start = std::time::Instant::now();
    let total: u64 = std::env::var("FP_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    while next < total {
        let batch: Vec<_> = (next..(next + 256).min(total))
            .map(|i| (hash(i), Indexed::at(i)))
            .collect();
        next += batch.len() as u64;
        idx.put_batch(&batch, next)?;
    }
    let took = start.elapsed();
    println!(
        "{total} entries: {:7.2} MiB ({:.0} entries/s written)",
        mib(allocated_bytes(&path)?),
        total as f64 / took.as_secs_f64()
    );
    if std::env::var_os("FP_LIST").is_some() {
        use std::os::unix::fs::MetadataExt;
        for e in std::fs::read_dir(&path)? {
            let e = e?;
            let m = e.metadata()?;
            println!(
                "  {:>12} {:>12} {}",
                m.len(),
                m.blocks() * 512,
                e.file_name().to_string_lossy()
            );
        }
    }
    let start = std::time::Instant::now();
    let mut hits = 0;
    for i in 0..200_000u64 {
        hits += idx.get(&hash(i))?.is_some() as u32;
    }
    println!(
        "lookups:      {:.0}/s ({hits} hits of 200k)",
        200_000.0 / start.elapsed().as_secs_f64()
    );
    let start = std::time::Instant::now();
    let mut misses = 0;
    for i in total..total + 200_000 {
        misses += idx.get(&hash(i))?.is_none() as u32;
    }
    println!(
        "misses:       {:.0}/s ({misses} misses of 200k)",
        200_000.0 / start.elapsed().as_secs_f64()
    );
    drop(idx);
    println!("closed:       {:7.2} MiB", mib(allocated_bytes(&path)?));
    Ok(())
}
