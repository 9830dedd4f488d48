//! The engine's sections: `[batching]`, `[checkpoint]`, `[queue]` and `[dedup]`.

use std::path::PathBuf;

use serde::Deserialize;

/// `[batching]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchingConfig {
    /// Largest batch committed at once.
    pub max_entries: usize,
    /// Linger for more entries before committing a non-full batch (0 = never). Unset:
    /// 0 for a tlog-tiles log, [`CT_BATCH_MAX_AGE_MS`] for a CT log.
    pub max_age_ms: Option<u64>,
    /// Under load, start commits at most this often, unless every waiting writer is
    /// already in the batch (0 = commit back to back). Unused while `max_age_ms`
    /// lingers. Unset: [`MIN_COMMIT_INTERVAL_MS`].
    pub min_commit_interval_ms: Option<u64>,
}

/// The default `[batching] min_commit_interval_ms`. Back to back on a fast disk, a busy
/// log made ~1,200–1,500 commits a second of ~20–30 entries; paced at 1 ms, ~550 of
/// ~65, with a lower add p99 and appends/s level or up to 22 % higher from 32 to 1024
/// writers (benches/results/history.md, 2026-11-29 later). A lone writer never waits
/// for it; a batch waits at most this long after the previous commit started, and only
/// for writers the engine has seen.
pub const MIN_COMMIT_INTERVAL_MS: u64 = 1;

/// A CT log's default linger (`[batching] max_age_ms`). A CT entry is ~1.2 KB and every
/// commit rewrites the partial data tile (up to ~300 KB) and syncs it: committing back
/// to back under load made batches of a few entries, and the commits most of the CPU
/// outside the signatures. Lingering 10 ms cut tlogd's CPU per add-chain from ~115 to
/// ~83 µs and raised the rate ~15 % (benches/README.md, "Certificate Transparency
/// against TesseraCT"), for ~10 ms more per add-chain: a CT client waits for its SCT,
/// not for a checkpoint (TesseraCT batches for up to 250 ms).
pub const CT_BATCH_MAX_AGE_MS: u64 = 10;

impl BatchingConfig {
    /// The linger in force for a log that is (`ct`) or is not a CT log.
    pub fn max_age(&self, ct: bool) -> std::time::Duration {
        let default = if ct { CT_BATCH_MAX_AGE_MS } else { 0 };
        std::time::Duration::from_millis(self.max_age_ms.unwrap_or(default))
    }

    /// The commit pacing in force ([`BatchingConfig::min_commit_interval_ms`]).
    pub fn min_commit_interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(
            self.min_commit_interval_ms
                .unwrap_or(MIN_COMMIT_INTERVAL_MS),
        )
    }
}

impl Default for BatchingConfig {
    fn default() -> Self {
        BatchingConfig {
            max_entries: 4096,
            max_age_ms: None,
            min_commit_interval_ms: None,
        }
    }
}

/// `[checkpoint]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointConfig {
    /// Minimum interval between published checkpoints.
    pub interval_ms: u64,
    /// Republish the checkpoint after the tree has not grown for this long (fresh
    /// witness cosignatures); 0 = never.
    pub republish_interval_ms: u64,
    /// Readers get the checkpoint from memory; with a shared store (other frontends
    /// publish too) it is re-read at most this often. 0 = on every request that finds
    /// the copy in hand older than a millisecond.
    pub max_age_ms: u64,
    /// Add a signature line of no known key to every published checkpoint (random key
    /// ID and bytes), so that clients keep ignoring lines they do not know.
    pub grease: bool,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval_ms: 1000,
            republish_interval_ms: 600_000,
            max_age_ms: 1000,
            grease: false,
        }
    }
}

/// `[queue]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Entries queued or committing before adds get 503.
    pub max_entries: usize,
    /// Entry bytes queued or committing before adds get 503.
    pub max_bytes: usize,
    /// `Retry-After` seconds sent with 503.
    pub retry_after_s: u64,
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            max_entries: 65_536,
            max_bytes: 256 << 20,
            retry_after_s: 1,
        }
    }
}

/// `[dedup]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DedupConfig {
    /// Deduplicate resubmitted entries.
    pub enabled: bool,
    /// Index directory (default `<storage.dir>/.tlogd/dedup`).
    pub path: Option<PathBuf>,
    /// Pushback when the index lags the tree by more entries than this.
    pub max_lag: u64,
    /// RocksDB block cache (MiB).
    pub block_cache_mib: usize,
    /// Memory for the newest indexed entries (MiB, ~56 bytes each): when full, they
    /// are written as one RocksDB table; twice this while it is being written.
    pub write_buffer_mib: usize,
}

impl Default for DedupConfig {
    fn default() -> Self {
        DedupConfig {
            enabled: true,
            path: None,
            max_lag: 200_000,
            block_cache_mib: 32,
            write_buffer_mib: 16,
        }
    }
}
