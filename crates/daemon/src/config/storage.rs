//! `[storage]`: where a log lives (POSIX directory, MySQL or PostgreSQL database, S3 or
//! GCS bucket) and how the backend is tuned; the start-up warning about a database
//! reached without verified TLS.

use std::path::PathBuf;

use serde::Deserialize;

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
