//! The index's CPU per entry as it grows, without HTTP or the log: for every entry
//! one lookup of a fresh hash (what a non-duplicate add costs) and one insert, in
//! batches as the engine's indexer sends them, on one thread; RocksDB compacts on its
//! own threads. Every `GROWTH_EVERY` entries (default 5M) it prints the process's CPU
//! per entry over that stretch, the share of it on RocksDB's threads, the size, and
//! the wall time of one lookup of a hash never indexed (`miss_ns`, a new add) and of
//! one the tables hold (`hit_ns`, a duplicate).
//!
//!     cargo build --release --workspace --all-targets
//!     GROWTH_N=50000000 $CARGO_TARGET_DIR/release/examples/growth DIR
//!
//! DIR (default a temporary directory) is where the index goes; it is removed first.
//!
//! `GROWTH_RATE=35000` paces the inserts at that many entries per second, as a busy log
//! sends them (0, the default: as fast as the index takes them). The pace changes how
//! compaction runs: flat out, level 0 piles up and is merged in fewer, larger
//! compactions than a live log's would be. `write_mib` is what the process wrote to
//! disk over the stretch (tables, compactions, the log: `/proc/self/io`), so several
//! paced runs side by side compare the compaction settings' write amplification
//! without one's CPU use skewing the other's numbers.

use std::path::Path;
use std::time::Instant;

#[path = "support/keys.rs"]
mod keys;
use keys::hash;

use tlogd_core::engine::{DedupIndex, Indexed};
use tlogd_dedup_rocksdb::{DedupOptions, RocksDedup, allocated_bytes};

/// CPU seconds of this process's threads: (all, RocksDB's own), from /proc.
fn cpu_seconds() -> (f64, f64) {
    let tick = 100.0; // USER_HZ on Linux
    let (mut all, mut rocks) = (0.0, 0.0);
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return (0.0, 0.0);
    };
    for t in tasks.flatten() {
        let Ok(stat) = std::fs::read_to_string(t.path().join("stat")) else {
            continue;
        };
        let Some(close) = stat.rfind(')') else {
            continue;
        };
        let name = stat
            .get(stat.find('(').map_or(0, |p| p + 1)..close)
            .unwrap_or("");
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let ticks: f64 = fields
            .get(11..13)
            .map(|f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum())
            .unwrap_or(0.0);
        all += ticks / tick;
        if name.starts_with("rocksdb") {
            rocks += ticks / tick;
        }
    }
    // Threads that ended (RocksDB's come and go rarely) are in the process's own stat.
    if let Ok(stat) = std::fs::read_to_string("/proc/self/stat")
        && let Some(close) = stat.rfind(')')
    {
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        let own: f64 = fields
            .get(11..13)
            .map(|f| f.iter().filter_map(|v| v.parse::<f64>().ok()).sum())
            .unwrap_or(0.0);
        all = all.max(own / tick);
    }
    (all, rocks)
}

/// Bytes this process has caused to be written to storage, from /proc.
fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|io| {
            io.lines()
                .find_map(|l| l.strip_prefix("write_bytes: "))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Wall-clock nanoseconds per lookup of a hash the index does not hold (what every
/// new add asks), over `MISS_SAMPLE` keys numbered from `from` (never inserted).
fn miss_ns(idx: &RocksDedup, from: u64) -> Result<f64, Box<dyn std::error::Error>> {
    const MISS_SAMPLE: u64 = 200_000;
    let start = Instant::now();
    for i in from..from + MISS_SAMPLE {
        if idx.get(&hash(i))?.is_some() {
            return Err(format!("key {i} found but never indexed").into());
        }
    }
    Ok(start.elapsed().as_nanos() as f64 / MISS_SAMPLE as f64)
}

/// Wall-clock nanoseconds per lookup of a hash the index's tables hold (what a
/// duplicate add asks), over `HIT_SAMPLE` of the first `indexed` keys, spread evenly.
fn hit_ns(idx: &RocksDedup, indexed: u64) -> Result<f64, Box<dyn std::error::Error>> {
    const HIT_SAMPLE: u64 = 20_000;
    // Clear of the newest entries, which may still be in memory.
    let tables = indexed.saturating_sub(2 * DedupOptions::default().recent_entries as u64);
    let step = (tables / HIT_SAMPLE).max(1);
    let start = Instant::now();
    let mut n = 0u64;
    for i in (0..tables).step_by(step as usize).take(HIT_SAMPLE as usize) {
        if idx.get(&hash(i))? != Some(Indexed::at(i)) {
            return Err(format!("key {i} indexed but not found").into());
        }
        n += 1;
    }
    Ok(start.elapsed().as_nanos() as f64 / n.max(1) as f64)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(d)
    };
    let n = env("GROWTH_N", 20_000_000);
    let every = env("GROWTH_EVERY", 5_000_000).max(1);
    let batch = env("GROWTH_BATCH", 64).max(1) as usize;
    let rate = env("GROWTH_RATE", 0);
    let base = std::env::args().nth(1);
    let tmp = tempfile::tempdir()?;
    let root = base.as_deref().map(Path::new).unwrap_or(tmp.path());
    let path = root.join("growth-dedup");
    let _ = std::fs::remove_dir_all(&path);
    let idx = RocksDedup::open(&path, &DedupOptions::default())?;
    // Lookups skip RocksDB only once the filter in front of it is filled (at once here:
    // the index is new).
    while !idx.filter_ready() {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    println!(
        "entries\tseconds\tentries/s\tcpu_us_per_entry\trocksdb_us_per_entry\twrite_mib\tindex_mib\tmiss_ns\thit_ns"
    );
    let started = Instant::now();
    let (mut t0, mut c0, mut w0) = (started, cpu_seconds(), written_bytes());
    let mut pending = Vec::with_capacity(batch);
    for i in 0..n {
        let h = hash(i);
        if idx.get(&h)?.is_some() {
            return Err(format!("entry {i} found before it was indexed").into());
        }
        pending.push((h, Indexed::at(i)));
        if pending.len() == batch {
            idx.put_batch(&pending, i + 1)?;
            pending.clear();
            if rate > 0 {
                let due = std::time::Duration::from_secs_f64((i + 1) as f64 / rate as f64);
                if let Some(ahead) = due.checked_sub(started.elapsed()) {
                    std::thread::sleep(ahead);
                }
            }
        }
        if (i + 1) % every == 0 {
            let (t1, c1, w1) = (Instant::now(), cpu_seconds(), written_bytes());
            let miss = miss_ns(&idx, n + i)?;
            let hit = hit_ns(&idx, i + 1)?;
            let secs = t1.duration_since(t0).as_secs_f64();
            println!(
                "{}\t{:.1}\t{:.0}\t{:.2}\t{:.2}\t{:.0}\t{:.0}\t{:.0}\t{:.0}",
                i + 1,
                secs,
                every as f64 / secs,
                (c1.0 - c0.0) * 1e6 / every as f64,
                (c1.1 - c0.1) * 1e6 / every as f64,
                (w1 - w0) as f64 / (1 << 20) as f64,
                allocated_bytes(&path)? as f64 / (1 << 20) as f64,
                miss,
                hit,
            );
            (t0, c0, w0) = (Instant::now(), cpu_seconds(), written_bytes());
        }
    }
    // Every entry answers with its index (a sample, spread over the run).
    for i in (0..n).step_by((n / 1000).max(1) as usize) {
        if idx.get(&hash(i))? != Some(Indexed::at(i)) && i < n - n % batch as u64 {
            return Err(format!("entry {i} lost").into());
        }
    }
    Ok(())
}
