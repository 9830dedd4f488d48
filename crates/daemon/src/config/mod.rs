//! The TOML configuration file, and the flags that override it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;
use tlogd_core::checkpoint::{OriginError, validate_origin};

mod ct;
mod engine;
mod http;
mod observe;
mod peers;
mod storage;
#[cfg(test)]
mod tests;
mod tls;

pub use ct::{CtConfig, log_list_url, parse_fingerprint, parse_rfc3339_ms};
pub use engine::{
    BatchingConfig, CT_BATCH_MAX_AGE_MS, CheckpointConfig, DedupConfig, MIN_COMMIT_INTERVAL_MS,
    QueueConfig,
};
pub use http::{AuthConfig, HttpConfig, IpCidr, MAX_RESPONSE_BYTES, client_key};
pub use observe::{LogFormatConfig, MetricsConfig};
pub use peers::{ForwardConfig, WitnessingConfig};
pub use storage::{StorageConfig, database_tls_warning};
pub use tls::{AcmeConfig, LETS_ENCRYPT, TlsConfig};

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
    /// HTTPS on the public listener.
    pub tls: Option<TlsConfig>,
    /// Freeze the log: accept no more entries, for good (recorded in its storage, so
    /// every frontend obeys it; removing this setting does not unfreeze it).
    #[serde(default)]
    pub read_only: bool,
    /// Several logs in one daemon, each under its own path prefix (`/<name>/...`):
    /// then the per-log keys (`origin`, `private_key_file(s)`, `read_only`, `[storage]`,
    /// `[batching]`, `[checkpoint]`, `[queue]`, `[dedup]`, `[auth]`, `[witnessing]`)
    /// go inside each `[[logs]]` entry, and the top level keeps what the daemon shares
    /// (`listen`, `[http]`, `[tls]`, `[metrics]`, `[log]`).
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
        if let Some(tls) = &self.tls {
            tls.validate()?;
        }
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
        if self.http.max_request_bytes_per_ip < 512 << 10
            || self.http.max_request_bytes_in_flight < self.http.max_request_bytes_per_ip
        {
            bail!(
                "`http.max_request_bytes_per_ip` must be at least 524288 (one CT chain), and `http.max_request_bytes_in_flight` at least that"
            );
        }
        if self.http.max_response_bytes_per_ip < MAX_RESPONSE_BYTES {
            bail!(
                "`http.max_response_bytes_per_ip` must be at least {MAX_RESPONSE_BYTES} (one full entry bundle)"
            );
        }
        self.http.trusted_proxies()?;
        if self.http.ipv6_prefix_len > 128 {
            bail!(
                "`http.ipv6_prefix_len` is {}: an IPv6 prefix is 0 to 128 bits",
                self.http.ipv6_prefix_len
            );
        }
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
