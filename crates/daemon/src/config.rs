//! The TOML configuration file, and the flags that override it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use tlogd_core::checkpoint::{OriginError, validate_origin};

/// The whole configuration file. Every section and key is optional except `origin`
/// and the storage directory; unknown keys are errors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Public HTTP address for the log API.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// Checkpoint origin (the log's name), e.g. `example.com/log`.
    pub origin: Option<String>,
    /// File holding the `PRIVATE+KEY+...` signing key: `private_key_files` with one
    /// file. If neither is set, env `TLOGD_PRIVATE_KEY` (one key per line).
    pub private_key_file: Option<PathBuf>,
    /// Files holding the log's `PRIVATE+KEY+...` signing keys (Ed25519 or ML-DSA-44,
    /// the type is the key's), one key each. Every checkpoint carries one signature
    /// line per key, in this order; the first is the key the log is known by. Several
    /// keys are how a key is rotated (docs/operating.md, "Rotating the log's key").
    #[serde(default)]
    pub private_key_files: Vec<PathBuf>,
    /// Storage backend.
    #[serde(default)]
    pub storage: StorageConfig,
    /// Batching.
    #[serde(default)]
    pub batching: BatchingConfig,
    /// Checkpoint publishing.
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// Sequencing queue bounds.
    #[serde(default)]
    pub queue: QueueConfig,
    /// Dedup index.
    #[serde(default)]
    pub dedup: DedupConfig,
    /// Metrics and health endpoints.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// Logging.
    #[serde(default)]
    pub log: LogFormatConfig,
    /// Write authentication.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Witness cosigning.
    #[serde(default)]
    pub witnessing: WitnessingConfig,
    /// Forwarding between frontends of one shared store.
    #[serde(default)]
    pub forward: ForwardConfig,
    /// Serve the log as a Certificate Transparency log (C2SP static-ct-api) instead of
    /// a tlog-tiles log of opaque entries.
    pub ct: Option<CtConfig>,
    /// HTTP connections: timeouts and limits of the public listener (and the metrics one).
    #[serde(default)]
    pub http: HttpConfig,
    /// Freeze the log: accept no more entries, for good (recorded in its storage, so
    /// every frontend obeys it; removing this setting does not unfreeze it).
    #[serde(default)]
    pub read_only: bool,
    /// Several logs in one daemon, each under its own path prefix (`/<name>/...`):
    /// then the per-log keys (`origin`, `private_key_file(s)`, `read_only`, `[storage]`,
    /// `[batching]`, `[checkpoint]`, `[queue]`, `[dedup]`, `[auth]`, `[witnessing]`)
    /// go inside each `[[logs]]` entry, and the top level keeps what the daemon shares
    /// (`listen`, `[http]`, `[metrics]`, `[log]`).
    #[serde(default)]
    pub logs: Vec<LogSection>,
}

/// Keys of one log, at the top level of a single-log file or in a `[[logs]]` entry.
const PER_LOG_KEYS: &[&str] = &[
    "origin",
    "private_key_file",
    "private_key_files",
    "read_only",
    "storage",
    "batching",
    "checkpoint",
    "queue",
    "dedup",
    "auth",
    "witnessing",
    "forward",
    "ct",
];

/// The name of the one log of a file without `[[logs]]`: its metrics' `log` label.
pub const DEFAULT_LOG_NAME: &str = "default";

/// One log of the daemon: a `[[logs]]` entry, or the top level of a single-log file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSection {
    /// The path prefix the log is served under (`/<name>/checkpoint`, `/<name>/add`)
    /// and its metrics' `log` label: 1 to 64 of `a-z 0-9 . _ -`, starting with a letter
    /// or digit. Empty for the top-level log of a single-log file, served at `/`.
    #[serde(default)]
    pub name: String,
    /// Also serve the log at `/` to requests for this host name (the `Host` header, or
    /// the HTTP/2 authority, without the port).
    pub host: Option<String>,
    /// Checkpoint origin (the log's name), e.g. `example.com/log`.
    pub origin: Option<String>,
    /// File holding the `PRIVATE+KEY+...` signing key: `private_key_files` with one
    /// file. If neither is set, env `TLOGD_PRIVATE_KEY` (only for a single log: each log
    /// of several needs its own key).
    pub private_key_file: Option<PathBuf>,
    /// Files holding the log's signing keys, in signing order (see
    /// [`Config::private_key_files`]).
    #[serde(default)]
    pub private_key_files: Vec<PathBuf>,
    /// Freeze the log (see [`Config::read_only`]).
    #[serde(default)]
    pub read_only: bool,
    /// Storage backend.
    #[serde(default)]
    pub storage: StorageConfig,
    /// Batching.
    #[serde(default)]
    pub batching: BatchingConfig,
    /// Checkpoint publishing.
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// Sequencing queue bounds.
    #[serde(default)]
    pub queue: QueueConfig,
    /// Dedup index.
    #[serde(default)]
    pub dedup: DedupConfig,
    /// Write authentication.
    #[serde(default)]
    pub auth: AuthConfig,
    /// Witness cosigning.
    #[serde(default)]
    pub witnessing: WitnessingConfig,
    /// Forwarding between frontends of one shared store.
    #[serde(default)]
    pub forward: ForwardConfig,
    /// A Certificate Transparency log (see [`Config::ct`]).
    pub ct: Option<CtConfig>,
}

impl LogSection {
    /// Check this log's values (the top-level ones of a single-log file, or one
    /// `[[logs]]` entry); `listen` is the daemon's public address.
    pub fn validate(&self, listen: SocketAddr) -> anyhow::Result<()> {
        match self.origin.as_deref() {
            None | Some("") => bail!("`origin` is required (config key `origin` or --origin)"),
            // Checked once here, before anything is opened: an origin that cannot be
            // signed or recorded would otherwise let the daemon accept adds and never
            // publish a checkpoint.
            Some(o) => validate_origin(o).map_err(|e| match e {
                OriginError::TooLong(_) => anyhow::anyhow!("`origin` {e}"),
                _ => anyhow::anyhow!("`origin` = {o:?} {e}"),
            })?,
        }
        if self.private_key_file.is_some() && !self.private_key_files.is_empty() {
            bail!(
                "set `private_key_file` (one key) or `private_key_files` (several, in signing order), not both"
            );
        }
        let files = self.key_files();
        if let Some(dup) = files
            .iter()
            .enumerate()
            .find_map(|(i, f)| files[..i].contains(f).then_some(f))
        {
            bail!("`private_key_files` names {} twice", dup.display());
        }
        match self.storage.backend.as_str() {
            "posix" => {
                if self.storage.dir.is_none() {
                    bail!("`storage.dir` is required for the posix backend (or --storage-dir)");
                }
            }
            _ if self.storage.sync != tlogd_storage_posix::SyncMode::Auto => {
                bail!(
                    "`storage.sync` is for the posix backend (the {} backend makes its own writes durable)",
                    self.storage.backend
                )
            }
            backend @ ("mysql" | "postgres") => {
                let (schemes, example): (&[&str], _) = if backend == "mysql" {
                    (
                        &["mysql://", "mariadb://"],
                        "mysql://user:pass@127.0.0.1:3306/tlog",
                    )
                } else {
                    (
                        &["postgres://", "postgresql://"],
                        "postgres://user:pass@127.0.0.1:5432/tlog",
                    )
                };
                match self.storage.url.as_deref() {
                    None | Some("") => bail!(
                        "`storage.url` is required for the {backend} backend (or --database-url), e.g. {example}"
                    ),
                    Some(u) if !schemes.iter().any(|s| u.starts_with(s)) => {
                        bail!("`storage.url` must start with {}", schemes[0])
                    }
                    _ => {}
                }
                if self.storage.pool_size == 0 {
                    bail!("`storage.pool_size` must be at least 1");
                }
                if self.storage.reader_pool_size == 0 {
                    bail!("`storage.reader_pool_size` must be at least 1");
                }
                if self.dedup.enabled && self.dedup.path.is_none() {
                    bail!(
                        "the {backend} backend keeps its dedup index in a local directory: set `dedup.path` (or --dedup-path), or `dedup.enabled = false` (--no-dedup)"
                    );
                }
            }
            backend @ ("s3" | "gcs") => {
                if self.storage.bucket.as_deref().is_none_or(str::is_empty) {
                    bail!("`storage.bucket` is required for the {backend} backend (or --bucket)");
                }
                if let Some(e) = self.storage.endpoint.as_deref() {
                    if !(e.starts_with("https://") || e.starts_with("http://")) {
                        bail!("`storage.endpoint` must be an http:// or https:// URL, not {e:?}");
                    }
                    if e.starts_with("http://") && !self.storage.allow_http {
                        bail!(
                            "`storage.endpoint` {e} is plain HTTP: set `storage.allow_http = true` (--allow-http) to use it"
                        );
                    }
                }
                if backend == "s3" && self.storage.service_account_path.is_some() {
                    bail!("`storage.service_account_path` is for the gcs backend");
                }
                if backend == "gcs"
                    && (self.storage.region.is_some()
                        || self.storage.virtual_hosted_style.is_some())
                {
                    bail!(
                        "`storage.region` and `storage.virtual_hosted_style` are for the s3 backend"
                    );
                }
                if self.storage.write_concurrency == 0 {
                    bail!("`storage.write_concurrency` must be at least 1");
                }
                if self.dedup.enabled && self.dedup.path.is_none() {
                    bail!(
                        "the {backend} backend keeps its dedup index in a local directory: set `dedup.path` (or --dedup-path), or `dedup.enabled = false` (--no-dedup)"
                    );
                }
            }
            other => bail!(
                "`storage.backend` = {other:?} is not supported (supported: \"posix\", \"mysql\", \"postgres\", \"s3\", \"gcs\")"
            ),
        }
        if self.batching.max_entries == 0 {
            bail!("`batching.max_entries` must be at least 1");
        }
        if self.queue.max_entries < self.batching.max_entries {
            bail!("`queue.max_entries` must be at least `batching.max_entries`");
        }
        if self.queue.max_bytes < 65_535 {
            bail!("`queue.max_bytes` must be at least 65535 (one maximal entry)");
        }
        if self.checkpoint.interval_ms == 0 {
            bail!("`checkpoint.interval_ms` must be at least 1");
        }
        if let Some(to) = &self.forward.to {
            if self.forward.token_file.is_none() {
                bail!("`forward.to` needs `forward.token_file` (the frontends' shared token)");
            }
            if self.storage.backend == "posix" {
                bail!(
                    "`forward.to`: a POSIX log has one frontend; forwarding is for shared stores"
                );
            }
            if !(to.starts_with("http://") || to.starts_with("https://")) {
                bail!("`forward.to` = {to:?}: not an http:// or https:// URL");
            }
        }
        if self.forward.timeout_ms == 0 {
            bail!("`forward.timeout_ms` must be at least 1");
        }
        if self.witnessing.timeout_ms == 0 {
            bail!("`witnessing.timeout_ms` must be at least 1");
        }
        if let Some(ct) = &self.ct {
            ct.validate()?;
            if self.origin.as_deref().is_some_and(|o| o.contains("://")) {
                bail!(
                    "a CT log's `origin` is its submission prefix without the scheme (static-ct-api \"Checkpoints\"), e.g. \"ct.example.com/2026h1\""
                );
            }
        }
        let has_tokens = self.auth.bearer_tokens_file.is_some()
            || std::env::var_os(TOKENS_ENV).is_some_and(|v| !v.is_empty());
        if !listen.ip().is_loopback() && !has_tokens && !self.auth.allow_anonymous_writes {
            bail!(
                "listening on {} (not loopback) with no write tokens: anyone could add entries, which a log can never delete; set `auth.bearer_tokens_file` (or env {}), or `auth.allow_anonymous_writes = true` to accept adds from anyone",
                listen,
                TOKENS_ENV
            );
        }
        Ok(())
    }

    /// The files of the log's signing keys, in signing order: `private_key_file`, or
    /// `private_key_files` (empty: none configured, env `TLOGD_PRIVATE_KEY` then).
    pub fn key_files(&self) -> Vec<PathBuf> {
        self.private_key_file
            .iter()
            .chain(&self.private_key_files)
            .cloned()
            .collect()
    }

    /// The `log` label of the log's metrics.
    pub fn label(&self) -> &str {
        if self.name.is_empty() {
            DEFAULT_LOG_NAME
        } else {
            &self.name
        }
    }
}

/// The environment variable of write tokens, beside `auth.bearer_tokens_file` (read by
/// `auth::load`; here so that validation sees it without the auth module).
pub const TOKENS_ENV: &str = "TLOGD_BEARER_TOKENS";

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 2024))
}

/// `[storage]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// `posix` (the default), `mysql`, `postgres`, `s3` or `gcs`.
    pub backend: String,
    /// POSIX: the log root directory.
    pub dir: Option<PathBuf>,
    /// POSIX: how written files are made durable: `auto` (the default: `syncfs` on
    /// filesystems known to commit on it, such as ext4, XFS, btrfs and the kernel's NFS
    /// client; `fsync` of every file and directory elsewhere, FUSE included, which
    /// never sees a `syncfs`), `syncfs` or `fsync`. See docs/backends/posix.md.
    pub sync: tlogd_storage_posix::SyncMode,
    /// SQL backends: `mysql://user:password@host:port/database` or
    /// `postgres://user:password@host:port/database`.
    pub url: Option<String>,
    /// SQL backends: connections in the pool.
    pub pool_size: u32,
    /// SQL backends: connections of a second pool for public tile reads only (opened
    /// as readers need them), so readers never wait for, or take, a commit's.
    pub reader_pool_size: u32,
    /// SQL and object-store backends: memory for cached full tiles and bundles (MiB).
    pub cache_mib: usize,
    /// How long a batch whose commit did not persist (storage unreachable) is retried
    /// before its adds fail with 500.
    pub commit_retry_ms: u64,
    /// s3, gcs: the bucket (it must exist).
    pub bucket: Option<String>,
    /// s3, gcs: key prefix inside the bucket (`""`: the bucket's root).
    pub prefix: String,
    /// s3: the region (default `AWS_REGION` / `AWS_DEFAULT_REGION`, else `us-east-1`).
    pub region: Option<String>,
    /// s3, gcs: another endpoint than AWS's or Google's (MinIO, an emulator).
    pub endpoint: Option<String>,
    /// s3, gcs: allow a plain `http://` endpoint.
    pub allow_http: bool,
    /// s3: virtual-hosted-style requests (`https://<bucket>.<endpoint>`); default:
    /// virtual-hosted on AWS, path style on a custom endpoint.
    pub virtual_hosted_style: Option<bool>,
    /// gcs: a service account key file (default: the standard Google chain).
    pub service_account_path: Option<PathBuf>,
    /// s3, gcs: most tile uploads in flight at once while a batch is applied.
    pub write_concurrency: usize,
    /// s3, gcs: a write not answered after this long is sent again (0: never).
    pub hedge_after_ms: u64,
    /// s3, gcs: how long a failed write is retried before the commit fails.
    pub write_retry_ms: u64,
    /// s3, gcs: how long a frontend keeps the sequencer lease, once several busy
    /// frontends contend, before it hands it to one that waits (0: no turns).
    pub turn_ms: u64,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            backend: "posix".into(),
            dir: None,
            sync: tlogd_storage_posix::SyncMode::Auto,
            url: None,
            pool_size: 16,
            reader_pool_size: 4,
            cache_mib: 64,
            commit_retry_ms: 10_000,
            bucket: None,
            prefix: String::new(),
            region: None,
            endpoint: None,
            allow_http: false,
            virtual_hosted_style: None,
            service_account_path: None,
            write_concurrency: 64,
            hedge_after_ms: 500,
            write_retry_ms: 10_000,
            turn_ms: 250,
        }
    }
}

/// `[batching]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BatchingConfig {
    /// Largest batch committed at once.
    pub max_entries: usize,
    /// Linger for more entries before committing a non-full batch (0 = never). Unset:
    /// 0 for a tlog-tiles log, [`CT_BATCH_MAX_AGE_MS`] for a CT log.
    pub max_age_ms: Option<u64>,
}

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
}

impl Default for BatchingConfig {
    fn default() -> Self {
        BatchingConfig {
            max_entries: 4096,
            max_age_ms: None,
        }
    }
}

/// Why a database URL's connection may be read or altered on the way: `None` when the
/// server is on this machine (a loopback host or a Unix socket), or TLS is required
/// and the server's certificate verified (PostgreSQL `sslmode=verify-ca|verify-full`,
/// MySQL/MariaDB `ssl-mode=VERIFY_CA|VERIFY_IDENTITY`). Otherwise one line for the
/// start-up warning, naming the parameter that would fix it (never the password).
pub fn database_tls_warning(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    let (authority_path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let authority = authority_path.split('/').next().unwrap_or("");
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host_port.split(':').next().unwrap_or(""),
    };
    let param = |names: &[&str]| {
        query.split('&').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            names
                .iter()
                .any(|n| k.eq_ignore_ascii_case(n))
                .then(|| v.to_ascii_lowercase())
        })
    };
    let socket =
        param(&["socket", "host"]).is_some_and(|h| h.starts_with('/') || h.starts_with("%2f"));
    let local = host.is_empty()
        || host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if local || socket {
        return None;
    }
    let (key, mode, verified): (&str, Option<String>, &[&str]) = match scheme {
        "postgres" | "postgresql" => (
            "sslmode",
            param(&["sslmode"]),
            &["verify-ca", "verify-full"],
        ),
        _ => (
            "ssl-mode",
            param(&["ssl-mode", "sslmode", "ssl_mode"]),
            &["verify_ca", "verify_identity"],
        ),
    };
    if mode.as_deref().is_some_and(|m| verified.contains(&m)) {
        return None;
    }
    let fix = verified.join(" or ");
    Some(match mode {
        None => format!(
            "the database at {host} is reached without verified TLS (no `{key}` in the URL: TLS only if the server offers it, its certificate not checked); add `{key}={fix}` to the URL"
        ),
        Some(m) => format!(
            "the database at {host} is reached with `{key}={m}`: the server's certificate is not verified, so anyone on the path can read or alter what the log stores; use `{key}={fix}`"
        ),
    })
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
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval_ms: 1000,
            republish_interval_ms: 600_000,
            max_age_ms: 1000,
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

/// `[metrics]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// Address for `/metrics`, `/healthz`, `/readyz`. Empty string disables.
    pub listen: String,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: "127.0.0.1:9464".into(),
        }
    }
}

/// `[log]`
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogFormatConfig {
    /// `text` or `json`.
    pub format: String,
    /// A `tracing` filter such as `info` or `tlogd=debug`; `RUST_LOG` wins if set.
    pub level: String,
}

impl Default for LogFormatConfig {
    fn default() -> Self {
        LogFormatConfig {
            format: "text".into(),
            level: "info".into(),
        }
    }
}

/// `[auth]`
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AuthConfig {
    /// File of bearer tokens accepted on `POST /add` (one or more per line). Tokens may
    /// also come from env `TLOGD_BEARER_TOKENS`; never from the command line.
    pub bearer_tokens_file: Option<PathBuf>,
    /// Accept adds from anyone on a listener that is not loopback. Off by default: a
    /// transparency log can never delete what it logged, so an open one is a standing
    /// invitation to spam. Loopback listeners (behind a proxy that authenticates) need
    /// no tokens either way.
    pub allow_anonymous_writes: bool,
}

/// `[forward]`: frontends of one shared store (MySQL, PostgreSQL, S3, GCS) that all
/// take adds but let one of them sequence. A frontend with `to` sends its batches to
/// the frontend there, which commits them with its own; while that one cannot be
/// reached, it commits them itself. A frontend with `token_file` takes batches
/// forwarded to it (`POST <log>/.tlogd/forward`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForwardConfig {
    /// This log's base URL on the sequencing frontend (`http://10.0.0.1:8080`, or
    /// `http://10.0.0.1:8080/<name>` for one of several logs). Unset: commit here.
    pub to: Option<String>,
    /// The frontends' shared bearer token (same syntax as `auth.bearer_tokens_file`):
    /// the first is sent with forwards, any is accepted. Required with `to`; set alone,
    /// this frontend takes forwards but sends none.
    pub token_file: Option<PathBuf>,
    /// How long a forward may take; one unanswered is answered `503` (the entries may
    /// be logged: resubmit), two in a row make this frontend commit by itself for 5 s.
    pub timeout_ms: u64,
}

impl Default for ForwardConfig {
    fn default() -> Self {
        ForwardConfig {
            to: None,
            token_file: None,
            timeout_ms: 10_000,
        }
    }
}

/// `[ct]`: a Certificate Transparency log (C2SP static-ct-api). Submissions come to
/// `POST <log>/ct/v1/add-chain` and `add-pre-chain` (no `/add`), chains are validated
/// against the roots, and the checkpoint is signed with the RFC 6962 note signature of
/// the ECDSA P-256 key in `private_key_file`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CtConfig {
    /// The accepted roots, a PEM file (served by `get-roots`). Blocks that do not
    /// parse are skipped with a warning; reloaded on SIGHUP, never dropping a root.
    pub roots_file: PathBuf,
    /// Refuse certificates whose notAfter has passed.
    #[serde(default)]
    pub reject_expired: bool,
    /// Refuse certificates whose notAfter has not passed (a log for expired ones).
    #[serde(default)]
    pub reject_unexpired: bool,
    /// Temporal shard: refuse certificates expiring before this instant (RFC 3339,
    /// `2026-01-01T00:00:00Z`).
    pub not_after_start: Option<String>,
    /// Temporal shard: refuse certificates expiring at or after this instant.
    pub not_after_limit: Option<String>,
    /// Extended key usages (dotted OIDs) a certificate must have one of, as TesseraCT
    /// checks them: a certificate without the extension is refused, and
    /// anyExtendedKeyUsage counts only when listed (listing `2.5.29.37.0` turns the
    /// check off). Empty: any.
    #[serde(default)]
    pub allowed_ekus: Vec<String>,
    /// Extensions (dotted OIDs) a certificate must not carry.
    #[serde(default)]
    pub rejected_extensions: Vec<String>,
    /// Refuse precertificates issued by a precertificate signing certificate (RFC 6962
    /// §3.1), as Sunlight and Azul do; accepted by default, as TesseraCT does.
    #[serde(default)]
    pub reject_pre_issuers: bool,
    /// Answer an add only once a published checkpoint covers its entry (TesseraCT's
    /// publication awaiter): the SCT's entry is then visible to monitors when the CA
    /// gets it. Off: answered once the entry is durable in the committed tree, which
    /// static-ct-api allows and is a checkpoint interval sooner.
    #[serde(default)]
    pub await_publication: bool,
    /// Rate-limit submissions of old certificates (TesseraCT's
    /// `rate_limit_old_not_before`): those whose notBefore is more than this many days
    /// ago get at most `old_not_before_per_second` adds a second (one second's burst),
    /// beyond it `429` with `Retry-After`; re-logging an old CA's whole history cannot
    /// crowd out fresh issuance. 0: no limit.
    #[serde(default)]
    pub old_not_before_days: u64,
    /// See `old_not_before_days`.
    #[serde(default)]
    pub old_not_before_per_second: f64,
    /// Freeze the shard for good (the engine's freeze: adds get `403`, reads go on,
    /// a final checkpoint is published) once `not_after_limit` plus `freeze_grace_s`
    /// has passed: at start-up if it already has, else when the instant comes. No
    /// unexpired certificate can fall in the window any more. Without
    /// `not_after_limit`, nothing to do.
    #[serde(default = "default_true")]
    pub freeze_after_window: bool,
    /// Seconds after `not_after_limit` before the shard is frozen (Sunlight's
    /// read-only delay: one week), for late submissions and clock skew.
    #[serde(default = "default_freeze_grace_s")]
    pub freeze_grace_s: u64,
    /// `log.v3.json`: where CAs submit, with its trailing slash (default
    /// `https://<origin>/`).
    pub submission_url: Option<String>,
    /// `log.v3.json`: where monitors read (default: `submission_url`).
    pub monitoring_url: Option<String>,
    /// `log.v3.json`: the log's description (default: the origin).
    pub description: Option<String>,
    /// `log.v3.json`: a short name (default: the `[[logs]]` name, else the origin).
    pub friendly_name: Option<String>,
    /// `log.v3.json`: the maximum merge delay promised, in seconds (`mmd` and
    /// `mmd_seconds`; a static-ct-api log merges within a checkpoint interval).
    #[serde(default = "default_mmd_seconds")]
    pub mmd_seconds: u64,
    /// `log.v3.json`: `"production"` or `"test"`; unset: left out (as Sunlight does
    /// for a log of custom roots).
    pub intended_use: Option<String>,
}

fn default_true() -> bool {
    true
}

fn default_freeze_grace_s() -> u64 {
    7 * 86_400
}

fn default_mmd_seconds() -> u64 {
    60
}

/// A `log.v3.json` URL setting (`ct.submission_url`, `ct.monitoring_url`): http(s),
/// with a host, no query, fragment or whitespace; returned with a trailing slash.
pub fn log_list_url(key: &str, url: &str) -> anyhow::Result<String> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"));
    let ok = rest.is_some_and(|r| {
        let host = r.split('/').next().unwrap_or("");
        !host.is_empty()
            && !r.contains(['?', '#'])
            && !r.chars().any(|c| c.is_whitespace() || c.is_control())
    });
    if !ok {
        bail!(
            "`{key}` = {url:?} is not an http:// or https:// URL with a host (and no query or fragment), like \"https://ct.example.com/2026h1/\""
        );
    }
    Ok(match url.ends_with('/') {
        true => url.to_string(),
        false => format!("{url}/"),
    })
}

impl CtConfig {
    fn validate(&self) -> anyhow::Result<()> {
        let start = self
            .not_after_start
            .as_deref()
            .map(|s| parse_rfc3339_ms(s).with_context(|| "`ct.not_after_start`"))
            .transpose()?;
        let limit = self
            .not_after_limit
            .as_deref()
            .map(|s| parse_rfc3339_ms(s).with_context(|| "`ct.not_after_limit`"))
            .transpose()?;
        if let (Some(a), Some(b)) = (start, limit)
            && a >= b
        {
            bail!("`ct.not_after_start` must be before `ct.not_after_limit`");
        }
        if self.old_not_before_days > 0
            && !(self.old_not_before_per_second.is_finite() && self.old_not_before_per_second > 0.0)
        {
            bail!("`ct.old_not_before_days` needs `ct.old_not_before_per_second` above 0");
        }
        if self.reject_expired && self.reject_unexpired {
            bail!("`ct.reject_expired` and `ct.reject_unexpired` together refuse everything");
        }
        for oid in self.allowed_ekus.iter().chain(&self.rejected_extensions) {
            let ok = oid.split('.').count() >= 2
                && oid
                    .split('.')
                    .all(|a| !a.is_empty() && a.bytes().all(|b| b.is_ascii_digit()));
            if !ok {
                bail!(
                    "`{oid}` in `ct.allowed_ekus` or `ct.rejected_extensions` is not a dotted OID"
                );
            }
        }
        for (key, url) in [
            ("ct.submission_url", &self.submission_url),
            ("ct.monitoring_url", &self.monitoring_url),
        ] {
            if let Some(u) = url {
                log_list_url(key, u)?;
            }
        }
        for (key, v) in [
            ("ct.description", &self.description),
            ("ct.friendly_name", &self.friendly_name),
        ] {
            if let Some(v) = v
                && (v.trim().is_empty() || v.chars().any(char::is_control))
            {
                bail!("`{key}` = {v:?}: empty or with control characters");
            }
        }
        if self.mmd_seconds == 0 {
            bail!("`ct.mmd_seconds` must be at least 1 (the merge delay promised in log.v3.json)");
        }
        if let Some(u) = self.intended_use.as_deref()
            && !matches!(u, "production" | "test")
        {
            bail!("`ct.intended_use` = {u:?}: \"production\" or \"test\" (or unset)");
        }
        Ok(())
    }

    /// When the shard freezes (`not_after_limit` plus `freeze_grace_s`), in
    /// milliseconds since the Unix epoch; `None` without a limit or with
    /// `freeze_after_window = false`.
    pub fn freeze_at_ms(&self) -> anyhow::Result<Option<u64>> {
        let (_, limit) = self.shard_window()?;
        Ok(limit
            .filter(|_| self.freeze_after_window)
            .map(|l| l.saturating_add(self.freeze_grace_s.saturating_mul(1000))))
    }

    /// `not_after_start` and `not_after_limit`, in milliseconds since the Unix epoch.
    pub fn shard_window(&self) -> anyhow::Result<(Option<u64>, Option<u64>)> {
        let ms = |s: &Option<String>| s.as_deref().map(parse_rfc3339_ms).transpose();
        Ok((ms(&self.not_after_start)?, ms(&self.not_after_limit)?))
    }
}

/// `YYYY-MM-DDTHH:MM:SS[.fff]Z` (RFC 3339 in UTC) in milliseconds since the Unix epoch.
pub fn parse_rfc3339_ms(s: &str) -> anyhow::Result<u64> {
    let bad = || anyhow::anyhow!("{s:?} is not an RFC 3339 UTC time like 2026-01-01T00:00:00Z");
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return Err(bad());
    }
    if b[13] != b':' || b[16] != b':' || !matches!(b[b.len() - 1], b'Z' | b'z') {
        return Err(bad());
    }
    let num = |r: std::ops::Range<usize>| -> anyhow::Result<u64> {
        let t = s.get(r).ok_or_else(bad)?;
        if !t.bytes().all(|c| c.is_ascii_digit()) {
            return Err(bad());
        }
        t.parse().map_err(|_| bad())
    };
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let frac = &s[19..s.len() - 1];
    let millis = match frac {
        "" => 0,
        f if f.starts_with('.') && f.len() > 1 => {
            let digits = &f[1..];
            if !digits.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            let mut padded: String = digits.chars().take(3).collect();
            while padded.len() < 3 {
                padded.push('0');
            }
            padded.parse::<u64>().map_err(|_| bad())?
        }
        _ => return Err(bad()),
    };
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&mo) || h > 23 || mi > 59 || sec > 59 {
        return Err(bad());
    }
    if d == 0 || d > u64::from(tlogd_core::time::days_in_month(y as i64, mo as u32)) {
        return Err(bad());
    }
    // From 1970 on (checked above): not negative.
    let days = tlogd_core::time::days_from_civil(y as i64, mo as u32, d as u32) as u64;
    Ok(((days * 24 + h) * 60 + mi) * 60_000 + sec * 1000 + millis)
}

/// `[witnessing]`
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct WitnessingConfig {
    /// A C2SP tlog-policy file: `witness <name> <vkey> <url>` lines, `group`s and the
    /// `quorum`. Unset: checkpoints are published without cosignatures.
    pub policy_file: Option<PathBuf>,
    /// How long one request to a witness may take.
    pub timeout_ms: u64,
    /// Publish a checkpoint even when the quorum is not met (with the cosignatures
    /// obtained); by default it is withheld and retried.
    pub fail_open: bool,
}

impl Default for WitnessingConfig {
    fn default() -> Self {
        WitnessingConfig {
            policy_file: None,
            timeout_ms: 5000,
            fail_open: false,
        }
    }
}

/// `[http]`: what a slow, idle or greedy client may hold.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// A request's headers must arrive within this; a new connection's first request
    /// too. For HTTP/1.1 it also bounds the wait for the next request on a keep-alive
    /// connection (one deadline, from the previous response, covers both).
    pub header_read_timeout_ms: u64,
    /// `POST /add`: the whole body must arrive within this once the headers have
    /// (`408` otherwise).
    pub body_read_timeout_ms: u64,
    /// A connection with no request in flight for this long is closed (HTTP/2; an idle
    /// HTTP/1.1 connection is closed after `header_read_timeout_ms` already).
    pub idle_timeout_ms: u64,
    /// A response that makes no progress for this long closes its connection: a socket
    /// write blocked (the peer reads nothing), or a response whose next piece has not
    /// been taken (an HTTP/2 stream whose window stays shut). On progress, not on the
    /// whole response: a slow reader that keeps reading gets all of it.
    pub write_timeout_ms: u64,
    /// Open connections at most; a connection beyond it is closed as soon as it is
    /// accepted.
    pub max_connections: usize,
    /// Open connections from one client address at most (beyond it, closed as soon as
    /// accepted); addresses in `trusted_proxies` have no such cap.
    pub max_connections_per_ip: usize,
    /// Addresses or CIDR ranges (`10.0.0.0/8`, `::1`) exempt from
    /// `max_connections_per_ip`: a reverse proxy or load balancer, from which every
    /// client comes. Default: loopback (`127.0.0.0/8`, `::1`).
    pub trusted_proxies: Vec<String>,
    /// Response body bytes held for clients at once (each listener); a response that
    /// does not fit gets `503` with `Retry-After: 1`.
    pub max_response_bytes_in_flight: u64,
    /// Requests in flight at once on one HTTP/2 connection.
    pub h2_max_concurrent_streams: u32,
    /// An HTTP/2 connection is pinged after this long without hearing from the peer.
    pub h2_keep_alive_interval_ms: u64,
    /// A ping not answered within this closes the connection.
    pub h2_keep_alive_timeout_ms: u64,
    /// At shutdown, how long connections still busy are waited for before the queue is
    /// drained without them.
    pub shutdown_grace_ms: u64,
    /// Tile and bundle reads from storage at once (the checkpoint and paths beyond the
    /// tree are answered from memory): what readers can take from the database pool or
    /// the object store client that commits use.
    pub max_storage_reads: usize,
    /// A read waiting this long for its turn is answered `503` with `Retry-After`.
    pub storage_read_queue_timeout_ms: u64,
}

/// The largest response tlogd sends: a full entry bundle, 256 entries of the largest
/// size with their length prefixes. `http.max_response_bytes_in_flight` must hold one.
pub const MAX_RESPONSE_BYTES: u64 = 256 * (2 + 65_535);

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            header_read_timeout_ms: 10_000,
            body_read_timeout_ms: 10_000,
            idle_timeout_ms: 60_000,
            write_timeout_ms: 30_000,
            max_connections: 4096,
            max_connections_per_ip: 256,
            trusted_proxies: vec!["127.0.0.0/8".into(), "::1".into()],
            max_response_bytes_in_flight: 256 << 20,
            h2_max_concurrent_streams: 100,
            h2_keep_alive_interval_ms: 20_000,
            h2_keep_alive_timeout_ms: 20_000,
            shutdown_grace_ms: 30_000,
            max_storage_reads: 32,
            storage_read_queue_timeout_ms: 2_000,
        }
    }
}

impl HttpConfig {
    /// `trusted_proxies` parsed; the first entry that is not an address or a CIDR range
    /// is the error, naming the key.
    pub fn trusted_proxies(&self) -> anyhow::Result<Vec<IpCidr>> {
        self.trusted_proxies
            .iter()
            .map(|t| {
                IpCidr::parse(t).map_err(|why| {
                    anyhow::anyhow!(
                        "`http.trusted_proxies`: {t:?} is not an IP address or CIDR range ({why})"
                    )
                })
            })
            .collect()
    }
}

/// An IP address range: an address and how many leading bits of it count (`/32` or
/// `/128` for one address). IPv4-mapped IPv6 addresses are taken as the IPv4 ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpCidr {
    addr: std::net::IpAddr,
    prefix: u8,
}

impl IpCidr {
    /// `192.0.2.1`, `10.0.0.0/8`, `::1`, `2001:db8::/32`. Bits set beyond the prefix
    /// are refused (`10.0.0.1/8` is most likely a typo for something else).
    pub fn parse(s: &str) -> Result<Self, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: std::net::IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| format!("{:?} is not an address", addr.trim()))?;
        let addr = addr.to_canonical();
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.trim().parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => return Err(format!("the prefix length must be 0 to {max}")),
            },
        };
        let net = IpCidr { addr, prefix };
        if net.masked(addr) != bits(addr) {
            return Err(format!("bits are set beyond the /{prefix} prefix"));
        }
        Ok(net)
    }

    /// Whether `ip` is in the range (an IPv4-mapped IPv6 address as its IPv4 one).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        ip.is_ipv4() == self.addr.is_ipv4() && self.masked(ip) == self.masked(self.addr)
    }

    /// The first `prefix` bits of `ip`.
    fn masked(&self, ip: std::net::IpAddr) -> u128 {
        let width = if ip.is_ipv4() { 32 } else { 128 };
        let keep = u32::from(self.prefix).min(width);
        match keep {
            0 => 0,
            k => bits(ip) & (u128::MAX << (width - k)) & (u128::MAX >> (128 - width)),
        }
    }
}

/// A `[[logs]]` name: 1 to 64 of `a-z 0-9 . _ -`, starting with a letter or digit (a
/// path segment that needs no escaping and cannot be `.` or `..`).
fn valid_log_name(name: &str) -> bool {
    name.len() <= 64
        && name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && name.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'.' | b'_' | b'-')
        })
}

/// Several logs must not share what identifies or holds a log: a name, a host, an
/// origin, a store (directory, database, bucket and prefix) or a dedup index.
fn check_distinct(logs: &[LogSection]) -> anyhow::Result<()> {
    if logs.len() == 1 && logs[0].name.is_empty() {
        return Ok(());
    }
    let mut seen: std::collections::HashMap<String, String> = Default::default();
    let mut claim = |what: String, log: &str| -> anyhow::Result<()> {
        match seen.insert(what.clone(), log.to_string()) {
            Some(other) if other != log => {
                bail!("[[logs]] {other:?} and {log:?} have the same {what}: each log needs its own")
            }
            _ => Ok(()),
        }
    };
    let mut names = std::collections::HashSet::new();
    // (bucket, prefix, log) of the object-store logs: one prefix inside another's keys
    // would mix two logs' objects.
    let mut buckets: Vec<(String, String, String)> = Vec::new();
    for l in logs {
        if !valid_log_name(&l.name) {
            bail!(
                "[[logs]] `name` = {:?}: a log's name is its path prefix, 1 to 64 of a-z 0-9 . _ - starting with a letter or digit",
                l.name
            );
        }
        if !names.insert(l.name.as_str()) {
            bail!("two [[logs]] are named {:?}", l.name);
        }
        if let Some(h) = &l.host {
            if h.is_empty() || h.contains(['/', ':', ' ']) {
                bail!(
                    "[[logs]] {:?}: `host` = {h:?} is not a host name (no scheme, port or path)",
                    l.name
                );
            }
            claim(format!("host {}", h.to_ascii_lowercase()), &l.name)?;
        }
        if l.key_files().is_empty() {
            bail!(
                "[[logs]] {:?}: `private_key_file` (or `private_key_files`) is required (env TLOGD_PRIVATE_KEY serves a single log only)",
                l.name
            );
        }
        if let Some(o) = &l.origin {
            claim(format!("origin {o:?}"), &l.name)?;
        }
        let st = &l.storage;
        let store = match st.backend.as_str() {
            "posix" => st
                .dir
                .as_ref()
                .map(|d| format!("storage.dir {}", d.display())),
            "mysql" | "postgres" => st.url.as_ref().map(|u| {
                // The database, not the credentials: two users of one database clash too.
                let (scheme, rest) = u.split_once("://").unwrap_or(("", u));
                let at = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
                let db = at.split('?').next().unwrap_or(at);
                format!("database {scheme}://{db}")
            }),
            _ => st.bucket.as_ref().map(|b| {
                let bucket = format!(
                    "{}:{}/{b}",
                    st.backend,
                    st.endpoint.as_deref().unwrap_or("")
                );
                let prefix = st.prefix.trim_matches('/').to_string();
                buckets.push((bucket.clone(), prefix.clone(), l.name.clone()));
                format!("bucket and prefix {bucket}/{prefix}")
            }),
        };
        if let Some(store) = store {
            claim(store, &l.name)?;
        }
        if let Some(p) = &l.dedup.path
            && l.dedup.enabled
        {
            claim(format!("dedup.path {}", p.display()), &l.name)?;
        }
    }
    for (i, (b1, p1, n1)) in buckets.iter().enumerate() {
        for (b2, p2, n2) in &buckets[i + 1..] {
            let nested = |outer: &str, inner: &str| {
                outer.is_empty()
                    || inner
                        .strip_prefix(outer)
                        .is_some_and(|r| r.starts_with('/'))
            };
            if b1 == b2 && p1 != p2 && (nested(p1, p2) || nested(p2, p1)) {
                bail!(
                    "[[logs]] {n1:?} and {n2:?} are in bucket {b1} under prefixes {p1:?} and {p2:?}, one inside the other: give each log a prefix of its own beside the other's"
                );
            }
        }
    }
    Ok(())
}

/// An address as a number (IPv4 in the low 32 bits).
fn bits(ip: std::net::IpAddr) -> u128 {
    match ip {
        std::net::IpAddr::V4(v4) => u32::from(v4).into(),
        std::net::IpAddr::V6(v6) => u128::from(v6),
    }
}

impl Config {
    /// The built-in defaults (what running without `--config` starts from).
    pub fn defaults() -> Self {
        toml::from_str("").unwrap_or_else(|_| unreachable!("empty config always parses"))
    }

    /// Read and parse a TOML file; errors name the file, line and key.
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("in config file {}", path.display()))
    }

    /// Parse TOML text.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let c: Config =
            toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim()))?;
        if !c.logs.is_empty() {
            // Present at the top level, whatever its value: which log it was meant for
            // cannot be guessed.
            let table: toml::Table =
                toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim()))?;
            if let Some(key) = PER_LOG_KEYS.iter().find(|k| table.contains_key(**k)) {
                bail!(
                    "`{key}` is a setting of one log: with [[logs]], put it inside each [[logs]] entry"
                );
            }
        }
        Ok(c)
    }

    /// The logs to serve: the `[[logs]]` entries, or the one log of a single-log file
    /// (name `""`, served at `/`).
    pub fn served_logs(&self) -> Vec<LogSection> {
        if !self.logs.is_empty() {
            return self.logs.clone();
        }
        vec![LogSection {
            name: String::new(),
            host: None,
            origin: self.origin.clone(),
            private_key_file: self.private_key_file.clone(),
            private_key_files: self.private_key_files.clone(),
            read_only: self.read_only,
            storage: self.storage.clone(),
            batching: self.batching.clone(),
            checkpoint: self.checkpoint.clone(),
            queue: self.queue.clone(),
            dedup: self.dedup.clone(),
            auth: self.auth.clone(),
            witnessing: self.witnessing.clone(),
            forward: self.forward.clone(),
            ct: self.ct.clone(),
        }]
    }

    /// Check values that parse but make no sense. Called after flags are applied.
    pub fn validate(&self) -> anyhow::Result<()> {
        let logs = self.served_logs();
        for log in &logs {
            let checked = log.validate(self.listen);
            if log.name.is_empty() {
                checked?;
            } else {
                checked.map_err(|e| anyhow::anyhow!("[[logs]] {:?}: {e}", log.name))?;
            }
        }
        check_distinct(&logs)?;
        for (key, v) in [
            (
                "http.header_read_timeout_ms",
                self.http.header_read_timeout_ms,
            ),
            ("http.body_read_timeout_ms", self.http.body_read_timeout_ms),
            ("http.idle_timeout_ms", self.http.idle_timeout_ms),
            ("http.max_connections", self.http.max_connections as u64),
            (
                "http.h2_max_concurrent_streams",
                self.http.h2_max_concurrent_streams.into(),
            ),
            ("http.max_storage_reads", self.http.max_storage_reads as u64),
            ("http.write_timeout_ms", self.http.write_timeout_ms),
            (
                "http.max_connections_per_ip",
                self.http.max_connections_per_ip as u64,
            ),
            (
                "http.h2_keep_alive_interval_ms",
                self.http.h2_keep_alive_interval_ms,
            ),
            (
                "http.h2_keep_alive_timeout_ms",
                self.http.h2_keep_alive_timeout_ms,
            ),
        ] {
            if v == 0 {
                bail!("`{key}` must be at least 1");
            }
        }
        if self.http.max_response_bytes_in_flight < MAX_RESPONSE_BYTES {
            bail!(
                "`http.max_response_bytes_in_flight` must be at least {MAX_RESPONSE_BYTES} (one full entry bundle)"
            );
        }
        self.http.trusted_proxies()?;
        if !matches!(self.log.format.as_str(), "text" | "json") {
            bail!(
                "`log.format` must be \"text\" or \"json\", not {:?}",
                self.log.format
            );
        }
        if !self.metrics.listen.is_empty() {
            self.metrics.listen.parse::<SocketAddr>().with_context(|| {
                format!(
                    "`metrics.listen` = {:?} is not an address",
                    self.metrics.listen
                )
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_urls_without_verified_tls_to_another_host_are_warned_about() {
        for quiet in [
            "mysql://u:p@127.0.0.1:3306/tlog",
            "postgres://u:p@localhost/tlog",
            "postgres://u:p@[::1]:5432/tlog",
            "postgres://u:p@db.example/tlog?sslmode=verify-full",
            "mysql://u:p@db.example/tlog?ssl-mode=VERIFY_IDENTITY",
            "mysql://u:p@db.example/tlog?ssl-mode=verify_ca&charset=utf8mb4",
            "postgres://u@/tlog?host=/run/postgresql",
        ] {
            assert_eq!(database_tls_warning(quiet), None, "{quiet}");
        }
        for (loud, says) in [
            (
                "mysql://u:secret@db.example:3306/tlog",
                "add `ssl-mode=verify_ca",
            ),
            (
                "postgres://u:secret@10.0.0.5/tlog?sslmode=require",
                "`sslmode=require`",
            ),
            (
                "mysql://u:secret@db.example/tlog?ssl-mode=REQUIRED",
                "`ssl-mode=required`",
            ),
        ] {
            let w = database_tls_warning(loud).expect(loud);
            assert!(w.contains(says), "{w}");
            assert!(!w.contains("secret"), "{w}");
            assert_eq!(w.lines().count(), 1);
        }
    }

    #[test]
    fn example_configs_parse_and_validate() {
        // Read at run time: the binary may come from a build in another clone.
        let manifest: std::path::PathBuf = std::env::var_os("CARGO_MANIFEST_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| env!("CARGO_MANIFEST_DIR").into());
        // This module is also compiled into the fuzz crate, one level up from the
        // repository root instead of two: find the examples from either.
        let root = manifest
            .ancestors()
            .find(|d| d.join("config/posix.toml").is_file())
            .expect("config/ above the crate");
        let dir = root.join("crates/daemon");
        let c = Config::load(&dir.join("../../config/posix.toml")).unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.batching.max_entries,
            Config::defaults().batching.max_entries
        );
        let c = Config::load(&dir.join("../../config/mysql.toml")).unwrap();
        c.validate().unwrap();
        assert_eq!(c.storage.backend, "mysql");
        assert_eq!(c.storage.pool_size, Config::defaults().storage.pool_size);
        let c = Config::load(&dir.join("../../config/postgres.toml")).unwrap();
        c.validate().unwrap();
        assert_eq!(c.storage.backend, "postgres");
        let c = Config::load(&dir.join("../../config/s3.toml")).unwrap();
        c.validate().unwrap();
        assert_eq!(c.storage.backend, "s3");
        assert_eq!(
            c.storage.write_concurrency,
            Config::defaults().storage.write_concurrency
        );
        let c = Config::load(&dir.join("../../config/gcs.toml")).unwrap();
        c.validate().unwrap();
        assert_eq!(c.storage.backend, "gcs");
        let c = Config::load(&dir.join("../../config/three-logs.toml")).unwrap();
        c.validate().unwrap();
        let logs = c.served_logs();
        let names: Vec<&str> = logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["products", "audit", "archive"]);
        assert_eq!(logs[1].storage.backend, "mysql");
        assert!(logs[2].read_only);
        let c = Config::load(&dir.join("../../config/ct.toml")).unwrap();
        c.validate().unwrap();
        let ct = c.ct.as_ref().expect("[ct]");
        assert!(ct.freeze_after_window);
        assert_eq!((ct.freeze_grace_s, ct.mmd_seconds), (604_800, 60));
        let c = Config::load(&dir.join("../../config/ct-shards.toml")).unwrap();
        c.validate().unwrap();
        let logs = c.served_logs();
        let names: Vec<&str> = logs.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["2027h1", "2027h2"]);
        let windows: Vec<_> = logs
            .iter()
            .map(|l| l.ct.as_ref().expect("[logs.ct]").shard_window().unwrap())
            .collect();
        assert_eq!(windows[0].1, windows[1].0, "the shards' windows meet");
        // A CT shard without `[batching]` lingers as a CT log does.
        assert!(logs.iter().all(|l| l.ct.is_some()
            && l.batching.max_age(true) == std::time::Duration::from_millis(CT_BATCH_MAX_AGE_MS)));
    }

    /// `[batching] max_age_ms`: unset, 0 for a tlog-tiles log and 10 ms for a CT log;
    /// set, what it says for either.
    #[test]
    fn batching_linger_defaults_by_kind_of_log() {
        use std::time::Duration;
        let unset = BatchingConfig::default();
        assert_eq!(unset.max_age(false), Duration::ZERO);
        assert_eq!(unset.max_age(true), Duration::from_millis(10));
        let set: BatchingConfig = toml::from_str("max_age_ms = 0").unwrap();
        assert_eq!(set.max_age(true), Duration::ZERO);
        let set: BatchingConfig = toml::from_str("max_age_ms = 3").unwrap();
        assert_eq!(set.max_age(false), Duration::from_millis(3));
    }

    /// The log's keys: one file, or a list in signing order (inside `[[logs]]` too);
    /// both at once, a file twice, or several keys for a CT log are refused.
    #[test]
    fn signing_keys_are_one_file_or_a_list_in_signing_order() {
        let base = "origin = \"example.com/x\"\nstorage.dir = \"x\"\n";
        let files = |toml: &str| {
            let c = Config::parse(&format!("{base}{toml}")).unwrap();
            c.validate().map_err(|e| e.to_string())?;
            Ok::<_, String>(c.served_logs()[0].key_files())
        };
        let p = |s: &str| PathBuf::from(s);
        assert_eq!(
            files("private_key_files = [\"new.key\", \"old.key\"]\n"),
            Ok(vec![p("new.key"), p("old.key")])
        );
        assert_eq!(
            files("private_key_file = \"a.key\"\n"),
            Ok(vec![p("a.key")])
        );
        assert_eq!(files(""), Ok(vec![]));
        let e =
            files("private_key_file = \"a.key\"\nprivate_key_files = [\"b.key\"]\n").unwrap_err();
        assert!(e.contains("not both"), "{e}");
        let e = files("private_key_files = [\"a.key\", \"a.key\"]\n").unwrap_err();
        assert!(e.contains("names a.key twice"), "{e}");
        // A CT log: its ECDSA key, then note keys signing after it.
        let ct = "[ct]\nroots_file = \"r.pem\"\n";
        Config::parse(&format!(
            "origin = \"ct.example.com/2026h1\"\nstorage.dir = \"d\"\nprivate_key_files = [\"a.pem\", \"b.key\"]\n{ct}"
        ))
        .unwrap()
        .validate()
        .unwrap();
        let logs = two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n").replace(
            "private_key_file = \"b.key\"",
            "private_key_files = [\"b1.key\", \"b2.key\"]",
        );
        let c = Config::parse(&logs).unwrap();
        c.validate().unwrap();
        assert_eq!(c.served_logs()[1].key_files(), [p("b1.key"), p("b2.key")]);
        let e = Config::parse(&format!("private_key_files = [\"k\"]\n{logs}")).unwrap_err();
        assert!(
            e.to_string()
                .contains("`private_key_files` is a setting of one log"),
            "{e}"
        );
    }

    fn two_logs(a: &str, b: &str) -> String {
        format!(
            "[[logs]]\nname = \"a\"\norigin = \"example.com/a\"\nprivate_key_file = \"a.key\"\n{a}\
             [[logs]]\nname = \"b\"\norigin = \"example.com/b\"\nprivate_key_file = \"b.key\"\n{b}"
        )
    }

    /// What several logs must not share, and keys that belong inside `[[logs]]`: each
    /// refused with one line naming it. A single-log file is one log named "" at `/`.
    #[test]
    fn storage_sync_is_a_posix_setting_with_three_values() {
        let posix = |sync: &str| {
            Config::parse(&format!(
                "origin = \"example.com/x\"\nstorage.dir = \"x\"\nstorage.sync = \"{sync}\"\n"
            ))
        };
        for (value, mode) in [
            ("auto", tlogd_storage_posix::SyncMode::Auto),
            ("syncfs", tlogd_storage_posix::SyncMode::Syncfs),
            ("fsync", tlogd_storage_posix::SyncMode::Fsync),
        ] {
            let c = posix(value).unwrap();
            c.validate().unwrap();
            assert_eq!(c.storage.sync, mode);
        }
        let e = format!("{:#}", posix("fdatasync").unwrap_err());
        assert!(e.contains("fdatasync") && e.contains("fsync"), "{e}");
        let mysql = Config::parse(
            "origin = \"example.com/x\"\nstorage.backend = \"mysql\"\n\
             storage.url = \"mysql://u:p@db:3306/t\"\ndedup.path = \"d\"\nstorage.sync = \"fsync\"\n",
        )
        .unwrap();
        let e = mysql.validate().unwrap_err().to_string();
        assert!(e.contains("`storage.sync` is for the posix backend"), "{e}");
    }

    #[test]
    fn several_logs_are_checked_for_what_they_must_not_share() {
        let single = Config::parse("origin = \"example.com/x\"\nstorage.dir = \"x\"\n").unwrap();
        single.validate().unwrap();
        let logs = single.served_logs();
        assert_eq!(
            (logs.len(), logs[0].name.as_str(), logs[0].label()),
            (1, "", "default")
        );
        let ok = two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n");
        Config::parse(&ok).unwrap().validate().unwrap();
        for (toml, says) in [
            (
                two_logs("storage.dir = \"x\"\n", "storage.dir = \"x\"\n"),
                "same storage.dir x",
            ),
            (
                two_logs(
                    "storage.dir = \"a\"\nhost = \"h.example\"\n",
                    "storage.dir = \"b\"\nhost = \"H.example\"\n",
                ),
                "same host h.example",
            ),
            (
                two_logs(
                    "storage.backend = \"mysql\"\nstorage.url = \"mysql://u:p@db:3306/t\"\ndedup.path = \"d1\"\n",
                    "storage.backend = \"mysql\"\nstorage.url = \"mysql://v:q@db:3306/t\"\ndedup.path = \"d2\"\n",
                ),
                "same database mysql://db:3306/t",
            ),
            (
                two_logs(
                    "storage.dir = \"a\"\ndedup.path = \"d\"\n",
                    "storage.dir = \"b\"\ndedup.path = \"d\"\n",
                ),
                "same dedup.path d",
            ),
            (
                two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
                    .replace("name = \"b\"", "name = \"a\""),
                "two [[logs]] are named \"a\"",
            ),
            (
                two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
                    .replace("name = \"b\"", "name = \"B/x\""),
                "a log's name is its path prefix",
            ),
            (
                two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
                    .replace("private_key_file = \"b.key\"\n", ""),
                "`private_key_file` (or `private_key_files`) is required",
            ),
            (
                two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
                    .replace("origin = \"example.com/b\"", "origin = \"example.com/a\""),
                "same origin",
            ),
            (
                two_logs("", "storage.dir = \"b\"\n"),
                "[[logs]] \"a\": `storage.dir` is required",
            ),
            (
                two_logs(
                    "storage.backend = \"s3\"\nstorage.bucket = \"k\"\ndedup.path = \"d1\"\n",
                    "storage.backend = \"s3\"\nstorage.bucket = \"k\"\nstorage.prefix = \"b\"\ndedup.path = \"d2\"\n",
                ),
                "one inside the other",
            ),
        ] {
            let e = Config::parse(&toml)
                .unwrap()
                .validate()
                .expect_err(says)
                .to_string();
            assert!(e.contains(says), "{says}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        for key in [
            "origin = \"example.com/x\"",
            "read_only = true",
            "[storage]\ndir = \"x\"",
        ] {
            let toml = format!(
                "{key}\n{}",
                two_logs("storage.dir = \"a\"\n", "storage.dir = \"b\"\n")
            );
            let e = Config::parse(&toml).expect_err(key).to_string();
            assert!(e.contains("inside each [[logs]] entry"), "{key}: {e}");
        }
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = Config::parse("origin = \"a\"\n[batching]\nmax_entrys = 5\n").unwrap_err();
        let msg = format!("{e:#}");
        assert!(msg.contains("max_entrys"), "{msg}");
    }

    #[test]
    fn an_origin_that_cannot_be_signed_or_stored_is_refused_naming_why() {
        let with = |o: &str| {
            let mut c = Config::parse("[storage]\ndir = \"/x\"\n").unwrap();
            c.origin = Some(o.to_string());
            c.validate().map_err(|e| format!("{e:#}"))
        };
        with("example.com/log").unwrap();
        for (origin, says) in [
            ("", "`origin` is required"),
            ("a\nb", "control character '\\n'"),
            ("ex\tample.com/log", "control character '\\t' at byte 2"),
            ("log\u{7f}", "control character '\\u{7f}'"),
            ("example.com/log ", "whitespace"),
        ] {
            let e = with(origin).unwrap_err();
            assert!(e.starts_with("`origin`"), "{e}");
            assert!(e.contains(says), "{origin:?}: {e}");
            assert_eq!(e.lines().count(), 1, "one line: {e}");
        }
        let long = "o".repeat(tlogd_core::checkpoint::MAX_ORIGIN_LEN + 1);
        let e = with(&long).unwrap_err();
        assert!(e.contains("1025 bytes long; at most 1024"), "{e}");
        assert!(!e.contains(&long), "the origin is not echoed whole: {e}");
    }

    /// An open listener with nobody checked is refused, unless asked for; loopback and
    /// tokens need nothing more. (The env token source is not touched here: tests run
    /// in one process.)
    #[test]
    fn a_public_listener_without_write_tokens_is_refused_unless_allowed() {
        let base = "origin = \"o\"\n[storage]\ndir = \"/x\"\n";
        let parse = |extra: &str| Config::parse(&format!("{extra}{base}")).unwrap();
        parse("").validate().unwrap();
        parse("listen = \"127.0.0.1:7000\"\n").validate().unwrap();
        parse("listen = \"[::1]:7000\"\n").validate().unwrap();
        let mut open = parse("listen = \"0.0.0.0:7000\"\n");
        if std::env::var_os(TOKENS_ENV).is_none() {
            let e = format!("{:#}", open.validate().unwrap_err());
            assert!(
                e.contains("0.0.0.0:7000 (not loopback) with no write tokens")
                    && e.contains("allow_anonymous_writes"),
                "{e}"
            );
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        open.auth.allow_anonymous_writes = true;
        open.validate().unwrap();
        open.auth.allow_anonymous_writes = false;
        open.auth.bearer_tokens_file = Some("/etc/tlogd/tokens".into());
        open.validate().unwrap();
    }

    #[test]
    fn bad_values_are_named() {
        let e = Config::parse("listen = \"nope\"\n").unwrap_err();
        assert!(format!("{e:#}").contains("listen"), "{e:#}");
        let mut c =
            Config::parse("origin = \"o\"\n[storage]\ndir = \"/x\"\n[log]\nformat = \"xml\"\n")
                .unwrap();
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("log.format"));
        c.log.format = "json".into();
        c.storage.backend = "s4".into();
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.backend"));
        c.storage.backend = "mysql".into();
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.url"));
        c.storage.url = Some("mysql://root@127.0.0.1/t".into());
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("dedup.path"));
        c.dedup.enabled = false;
        c.validate().unwrap();
        c.storage.backend = "postgres".into();
        let msg = format!("{:#}", c.validate().unwrap_err());
        assert!(msg.contains("postgres://"), "{msg}");
        c.storage.url = Some("postgres://tlogd@127.0.0.1/t".into());
        c.validate().unwrap();
        c.storage.backend = "s3".into();
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.bucket"));
        c.storage.bucket = Some("logs".into());
        c.validate().unwrap();
        c.storage.endpoint = Some("http://127.0.0.1:9000".into());
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("allow_http"));
        c.storage.allow_http = true;
        c.validate().unwrap();
        c.storage.endpoint = Some("127.0.0.1:9000".into());
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.endpoint"));
        c.storage.endpoint = None;
        c.storage.backend = "gcs".into();
        c.storage.region = Some("eu-west-1".into());
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("storage.region"));
        c.storage.region = None;
        c.validate().unwrap();
        c.storage.write_concurrency = 0;
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("write_concurrency"));
        c.storage.write_concurrency = 1;
        c.dedup.enabled = true;
        assert!(format!("{:#}", c.validate().unwrap_err()).contains("dedup.path"));
        c.dedup.enabled = false;
        c.validate().unwrap();
        c.http.idle_timeout_ms = 0;
        let msg = format!("{:#}", c.validate().unwrap_err());
        assert!(msg.contains("http.idle_timeout_ms"), "{msg}");
    }

    #[test]
    fn http_section_parses() {
        let c = Config::parse(
            "origin = \"o\"\n[http]\nheader_read_timeout_ms = 500\nmax_connections = 7\n",
        )
        .unwrap();
        assert_eq!(c.http.header_read_timeout_ms, 500);
        assert_eq!(c.http.max_connections, 7);
        assert_eq!(
            c.http.idle_timeout_ms,
            HttpConfig::default().idle_timeout_ms
        );
        let e = Config::parse("origin = \"o\"\n[http]\nidle_timeout = 5\n").unwrap_err();
        assert!(format!("{e:#}").contains("idle_timeout"), "{e:#}");
    }

    #[test]
    fn http_limits_have_defaults_and_parse() {
        let d = HttpConfig::default();
        assert_eq!(d.write_timeout_ms, 30_000);
        assert_eq!(d.max_connections_per_ip, 256);
        assert_eq!(d.max_response_bytes_in_flight, 256 << 20);
        assert_eq!(d.h2_max_concurrent_streams, 100);
        assert_eq!(d.h2_keep_alive_interval_ms, 20_000);
        assert_eq!(d.h2_keep_alive_timeout_ms, 20_000);
        let loopback = d.trusted_proxies().unwrap();
        assert!(
            loopback
                .iter()
                .any(|n| n.contains("127.0.0.1".parse().unwrap()))
        );
        assert!(
            loopback
                .iter()
                .any(|n| n.contains("127.9.8.7".parse().unwrap()))
        );
        assert!(loopback.iter().any(|n| n.contains("::1".parse().unwrap())));
        assert!(
            loopback
                .iter()
                .any(|n| n.contains("::ffff:127.0.0.1".parse().unwrap()))
        );
        assert!(
            !loopback
                .iter()
                .any(|n| n.contains("10.0.0.1".parse().unwrap()))
        );
        let c = Config::parse(
            "origin = \"o\"\n[storage]\ndir = \"/x\"\n[http]\nwrite_timeout_ms = 1500\n\
             max_connections_per_ip = 3\ntrusted_proxies = [\"10.1.0.0/16\", \"2001:db8::/32\"]\n\
             max_response_bytes_in_flight = 33554432\nh2_keep_alive_interval_ms = 7\n\
             h2_keep_alive_timeout_ms = 8\n",
        )
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.http.write_timeout_ms, 1500);
        assert_eq!(c.http.max_connections_per_ip, 3);
        assert_eq!(c.http.max_response_bytes_in_flight, 32 << 20);
        assert_eq!(
            (
                c.http.h2_keep_alive_interval_ms,
                c.http.h2_keep_alive_timeout_ms
            ),
            (7, 8)
        );
        let t = c.http.trusted_proxies().unwrap();
        assert!(t[0].contains("10.1.200.3".parse().unwrap()));
        assert!(!t[0].contains("10.2.0.1".parse().unwrap()));
        assert!(t[1].contains("2001:db8:ffff::1".parse().unwrap()));
        assert!(!t[1].contains("2001:db9::1".parse().unwrap()));
        // An empty list trusts nobody.
        let c = Config::parse("origin = \"o\"\n[http]\ntrusted_proxies = []\n").unwrap();
        assert!(c.http.trusted_proxies().unwrap().is_empty());
    }

    #[test]
    fn bad_http_limits_are_named_in_one_line() {
        let base = "origin = \"o\"\n[storage]\ndir = \"/x\"\n[http]\n";
        for (extra, says) in [
            (
                "trusted_proxies = [\"10.0.0.0/33\"]",
                "`http.trusted_proxies`: \"10.0.0.0/33\"",
            ),
            ("trusted_proxies = [\"10.0.0.1/8\"]", "beyond the /8 prefix"),
            (
                "trusted_proxies = [\"::1\", \"proxy.local\"]",
                "\"proxy.local\" is not",
            ),
            ("trusted_proxies = [\"::/129\"]", "0 to 128"),
            (
                "write_timeout_ms = 0",
                "`http.write_timeout_ms` must be at least 1",
            ),
            (
                "max_connections_per_ip = 0",
                "`http.max_connections_per_ip`",
            ),
            (
                "h2_keep_alive_timeout_ms = 0",
                "`http.h2_keep_alive_timeout_ms`",
            ),
            (
                "max_response_bytes_in_flight = 1048576",
                "one full entry bundle",
            ),
        ] {
            let c = Config::parse(&format!("{base}{extra}\n")).unwrap();
            let e = format!("{:#}", c.validate().unwrap_err());
            assert!(e.contains(says), "{extra}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        assert!(
            IpCidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("203.0.113.9".parse().unwrap())
        );
        assert!(
            !IpCidr::parse("0.0.0.0/0")
                .unwrap()
                .contains("::2".parse().unwrap())
        );
        assert!(
            IpCidr::parse("::/0")
                .unwrap()
                .contains("::2".parse().unwrap())
        );
    }

    #[test]
    fn forwarding_is_checked() {
        let s3 = "origin = \"o\"\n[dedup]\nenabled = false\n[storage]\nbackend = \"s3\"\nbucket = \"b\"\nregion = \"r\"\n";
        let c = Config::parse(&format!(
            "{s3}[forward]\nto = \"http://10.0.0.1:8080\"\ntoken_file = \"/t\"\n"
        ))
        .unwrap();
        c.validate().unwrap();
        assert_eq!(c.served_logs()[0].forward.timeout_ms, 10_000);
        for (forward, says) in [
            ("to = \"http://a:1\"", "needs `forward.token_file`"),
            (
                "to = \"a:1\"\ntoken_file = \"/t\"",
                "not an http:// or https:// URL",
            ),
            ("timeout_ms = 0", "`forward.timeout_ms`"),
        ] {
            let c = Config::parse(&format!("{s3}[forward]\n{forward}\n")).unwrap();
            let e = format!("{:#}", c.validate().unwrap_err());
            assert!(e.contains(says), "{forward}: {e}");
        }
        let c = Config::parse(
            "origin = \"o\"\n[storage]\ndir = \"/d\"\n[forward]\nto = \"http://a:1\"\ntoken_file = \"/t\"\n",
        )
        .unwrap();
        let e = format!("{:#}", c.validate().unwrap_err());
        assert!(e.contains("a POSIX log has one frontend"), "{e}");
        assert!(Config::parse("origin = \"o\"\n[forward]\nurl = \"x\"\n").is_err());
    }

    #[test]
    fn rfc3339_times_parse_to_epoch_milliseconds() {
        for (s, ms) in [
            ("1970-01-01T00:00:00Z", 0),
            ("2025-12-31T00:00:00Z", 1_767_139_200_000),
            ("2024-02-29T12:34:56.789Z", 1_709_210_096_789),
            ("2026-01-01T00:00:00.5z", 1_767_225_600_500),
        ] {
            assert_eq!(parse_rfc3339_ms(s).unwrap(), ms, "{s}");
        }
        for bad in [
            "2025-02-29T00:00:00Z",
            "2025-13-01T00:00:00Z",
            "2025-01-01 00:00:00Z",
            "2025-01-01T00:00:00+01:00",
            "2025-01-01T24:00:00Z",
            "2025-01-01T00:00:00.Z",
            "1969-12-31T23:59:59Z",
            "",
        ] {
            assert!(parse_rfc3339_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn ct_settings_are_checked() {
        let base = "origin = \"ct.example.com/2026h1\"\nstorage.dir = \"d\"\n[ct]\nroots_file = \"r.pem\"\n";
        let c = Config::parse(base).unwrap();
        c.validate().unwrap();
        let ct = c.ct.as_ref().unwrap();
        assert_eq!(ct.shard_window().unwrap(), (None, None));
        for (extra, why) in [
            (
                "not_after_start = \"2026-07-01T00:00:00Z\"\nnot_after_limit = \"2026-01-01T00:00:00Z\"\n",
                "must be before",
            ),
            ("not_after_start = \"July\"\n", "not_after_start"),
            (
                "reject_expired = true\nreject_unexpired = true\n",
                "refuse everything",
            ),
            ("allowed_ekus = [\"serverAuth\"]\n", "not a dotted OID"),
            ("old_not_before_days = 30\n", "old_not_before_per_second"),
        ] {
            let c = Config::parse(&format!("{base}{extra}")).unwrap();
            let e = format!("{:#}", c.validate().unwrap_err());
            assert!(e.contains(why), "{extra}: {e}");
        }
        let c = Config::parse(&base.replace("ct.example.com", "https://ct.example.com")).unwrap();
        let e = format!("{:#}", c.validate().unwrap_err());
        assert!(e.contains("without the scheme"), "{e}");
        assert!(
            Config::parse("origin = \"o\"\n[ct]\n").is_err(),
            "roots_file is required"
        );
    }

    #[test]
    fn ct_log_list_and_freeze_settings_are_checked() {
        let base = "origin = \"ct.example.com/2026h1\"\nstorage.dir = \"d\"\n[ct]\nroots_file = \"r.pem\"\n";
        let ct = |extra: &str| {
            let c = Config::parse(&format!("{base}{extra}")).unwrap();
            c.validate().map(|()| c.ct.clone().unwrap())
        };
        let d = ct("").unwrap();
        assert!(d.freeze_after_window);
        assert_eq!(d.freeze_at_ms().unwrap(), None, "no limit, no freeze");
        let limit = "not_after_limit = \"2026-07-01T00:00:00Z\"\n";
        let at = parse_rfc3339_ms("2026-07-08T00:00:00Z").unwrap();
        assert_eq!(ct(limit).unwrap().freeze_at_ms().unwrap(), Some(at));
        let c = ct(&format!("{limit}freeze_grace_s = 0\n")).unwrap();
        assert_eq!(
            c.freeze_at_ms().unwrap(),
            Some(at - 7 * 86_400_000),
            "no grace: at the limit"
        );
        let c = ct(&format!("{limit}freeze_after_window = false\n")).unwrap();
        assert_eq!(c.freeze_at_ms().unwrap(), None);
        let c = ct("submission_url = \"https://ct.example.com/2026h1\"\nmonitoring_url = \"https://mon.example.com/2026h1/\"\nintended_use = \"test\"\nmmd_seconds = 86400\n").unwrap();
        assert_eq!(c.intended_use.as_deref(), Some("test"));
        assert_eq!(
            log_list_url("k", c.submission_url.as_deref().unwrap()).unwrap(),
            "https://ct.example.com/2026h1/"
        );
        for (extra, why) in [
            (
                "submission_url = \"ct.example.com/x\"\n",
                "ct.submission_url",
            ),
            ("monitoring_url = \"https:///x\"\n", "ct.monitoring_url"),
            ("submission_url = \"https://a.example/?x=1\"\n", "no query"),
            ("mmd_seconds = 0\n", "ct.mmd_seconds"),
            ("intended_use = \"prod\"\n", "ct.intended_use"),
            ("description = \" \"\n", "ct.description"),
            ("friendly_name = \"a\\nb\"\n", "ct.friendly_name"),
        ] {
            let e = format!("{:#}", ct(extra).unwrap_err());
            assert!(e.contains(why), "{extra}: {e}");
            assert_eq!(e.lines().count(), 1, "{e}");
        }
        assert!(Config::parse(&format!("{base}freeze_grace = 1\n")).is_err());
    }
}
