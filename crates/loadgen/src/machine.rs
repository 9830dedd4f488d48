//! What machine and storage a run measured.

use std::io::Write;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;

/// The machine.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Logical CPUs.
    pub cores: usize,
    /// Total memory in bytes (from /proc/meminfo).
    pub memory_bytes: u64,
    /// CPU model (from /proc/cpuinfo).
    pub cpu: String,
    /// The probed storage, when `--probe-dir` was given.
    pub storage: Option<StorageProbe>,
}

/// Filesystem type and fsync latency of a directory.
#[derive(Clone, Debug, Serialize)]
pub struct StorageProbe {
    /// The probed directory.
    pub dir: String,
    /// Filesystem type from /proc/mounts (longest matching mount point).
    pub fs_type: String,
    /// Median latency of write(4 KiB) + fsync, µs.
    pub fsync_p50_us: u64,
    /// 99th percentile, µs.
    pub fsync_p99_us: u64,
}

/// Read the machine, probing `dir` if given.
pub fn describe(dir: Option<&Path>) -> Machine {
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let memory_bytes = meminfo
        .lines()
        .find(|l| l.starts_with("MemTotal:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map(|kb| kb * 1024)
        .unwrap_or(0);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    Machine {
        cores,
        memory_bytes,
        cpu,
        storage: dir.and_then(|d| probe(d).ok()),
    }
}

fn probe(dir: &Path) -> std::io::Result<StorageProbe> {
    let dir = dir.canonicalize()?;
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let fs_type = mounts
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let (_, mnt, ty) = (f.next()?, f.next()?, f.next()?);
            dir.starts_with(mnt).then(|| (mnt.len(), ty.to_string()))
        })
        .max()
        .map(|(_, t)| t)
        .unwrap_or_else(|| "unknown".into());
    let path = dir.join(".tlog-loadgen-fsync-probe");
    let mut f = std::fs::File::create(&path)?;
    let buf = vec![0u8; 4096];
    let mut h = crate::stats::histogram();
    for _ in 0..200 {
        let t = Instant::now();
        f.write_all(&buf)?;
        f.sync_data()?;
        let _ = h.record(t.elapsed().as_micros() as u64);
    }
    drop(f);
    let _ = std::fs::remove_file(&path);
    Ok(StorageProbe {
        dir: dir.display().to_string(),
        fs_type,
        fsync_p50_us: h.value_at_quantile(0.5),
        fsync_p99_us: h.value_at_quantile(0.99),
    })
}
