//! The object-store adapter shared by tlogd's S3 (`tlogd-storage-s3`) and Google Cloud
//! Storage (`tlogd-storage-gcs`) backends, over the [`object_store`] crate.
//!
//! Core owns the log format and the commit protocol ([`ObjectLog`]: stage a batch,
//! compare-and-swap the state record, upload the tiles); this crate only translates
//! core's five calls ([`ObjectBackend`]) to `object_store` requests. What differs per
//! store (configuration, credentials, the store's quirks) lives in the store's own
//! crate, which builds its two clients and hands them to [`ObjectStoreBackend::new`]:
//!
//! | [`ObjectBackend`] | `object_store` | S3 | GCS (XML API) |
//! |---|---|---|---|
//! | `get`, `get_versioned` | `get_opts` | `GET` (`ETag`) | `GET` (`x-goog-generation`) |
//! | `put` | `put_opts`, `PutMode::Overwrite` | `PUT` | `PUT` |
//! | `put_if(Absent)` | `PutMode::Create` | `If-None-Match: *` | `x-goog-if-generation-match: 0` |
//! | `put_if(Matches(v))` | `PutMode::Update(v)` | `If-Match: <etag>` | `x-goog-if-generation-match: <generation>` |
//! | `delete`, `list` | `delete`, `list` | | |
//!
//! Every object carries the `Content-Type` and `Cache-Control` of its
//! [`ObjectClass`], so the bucket can be served to readers as it is.
//!
//! # Retries
//!
//! Plain requests (reads, unconditional writes, deletes, lists) go through a store that
//! retries transient failures (5xx, 429, connection errors and resets) with backoff.
//! Conditional writes go through a second store, on the same endpoint and
//! credentials, that never retries: a conditional write whose response was lost may
//! have taken effect, and its retry would then fail its own condition and report a
//! lost race that was in fact won. Without retries, a `412`/`409` answer always means
//! "not written", and any other failure is an error whose outcome core learns by
//! reading the key back, as the [`ObjectBackend`] contract says.
//!
//! [`ObjectLog`]: tlogd_core::engine::objects::ObjectLog

#[cfg(feature = "conformance")]
pub mod conformance;
#[cfg(feature = "testsupport")]
pub mod testsupport;

mod cache;

pub use cache::CachedTiles;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::path::Path;
use object_store::{
    Attribute, Attributes, GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions,
    PutPayload, UpdateVersion,
};
use tlogd_core::engine::StorageError;
use tlogd_core::engine::objects::{
    ObjectBackend, ObjectClass, ObjectLog, ObjectLogOptions, ObjectOpenError, ObjectVersion,
    PutCondition, PutOutcome,
};

/// Why an object-store backend could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A setting is missing or invalid.
    #[error("{0}")]
    Config(String),
    /// `object_store` refused the configuration.
    #[error("configuring the {backend} client: {source}")]
    Client {
        /// "s3" or "gcs".
        backend: &'static str,
        /// What `object_store` said.
        source: object_store::Error,
    },
}

/// HTTP client and retry settings shared by the S3 and GCS adapters.
#[derive(Clone, Debug)]
pub struct ClientTuning {
    /// Longest a TCP (and TLS) connection may take to establish.
    pub connect_timeout: Duration,
    /// Longest one request may take, body included (a 16 MiB bundle must fit).
    pub request_timeout: Duration,
    /// Idle keep-alive connections kept per host: at least the engine's write
    /// concurrency, so a batch's uploads reuse connections instead of opening new ones.
    pub pool_max_idle_per_host: usize,
    /// How long an idle connection is kept.
    pub pool_idle_timeout: Duration,
    /// Retries of a failed plain request (conditional writes are never retried).
    pub max_retries: usize,
    /// No retry starts after this long from the first attempt.
    pub retry_timeout: Duration,
    /// First backoff between retries (doubling, with jitter).
    pub initial_backoff: Duration,
    /// Longest backoff between retries.
    pub max_backoff: Duration,
}

impl Default for ClientTuning {
    fn default() -> Self {
        ClientTuning {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(30),
            pool_max_idle_per_host: 256,
            pool_idle_timeout: Duration::from_secs(60),
            // Short: core retries failed writes itself (with hedging) and resolves
            // failed commits by reloading, so long retries here would only delay that.
            max_retries: 4,
            retry_timeout: Duration::from_secs(10),
            initial_backoff: Duration::from_millis(50),
            max_backoff: Duration::from_secs(1),
        }
    }
}

impl ClientTuning {
    /// `object_store`'s client options: these timeouts and pool settings, plain HTTP
    /// only if `allow_http`.
    pub fn client_options(&self, allow_http: bool) -> object_store::ClientOptions {
        object_store::ClientOptions::new()
            .with_connect_timeout(self.connect_timeout)
            .with_timeout(self.request_timeout)
            .with_pool_max_idle_per_host(self.pool_max_idle_per_host)
            .with_pool_idle_timeout(self.pool_idle_timeout)
            .with_allow_http(allow_http)
    }

    /// The retry policy of plain requests.
    pub fn retry(&self) -> object_store::RetryConfig {
        object_store::RetryConfig {
            backoff: object_store::BackoffConfig {
                init_backoff: self.initial_backoff,
                max_backoff: self.max_backoff,
                base: 2.0,
            },
            max_retries: self.max_retries,
            retry_timeout: self.retry_timeout,
        }
    }

    /// The retry policy of conditional writes: none (see the crate documentation).
    pub fn no_retry() -> object_store::RetryConfig {
        object_store::RetryConfig {
            max_retries: 0,
            ..object_store::RetryConfig::default()
        }
    }
}

/// Install rustls's ring provider as the process default, once; HTTPS connections of
/// `object_store` (reqwest with `rustls-no-provider`) need one. Harmless if another
/// part of the process installed one first.
pub fn install_tls_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// What every store's crate checks before building its clients: a bucket is named, and
/// a plain-HTTP endpoint is allowed explicitly. `store` ("S3", "GCS") names it in
/// messages.
pub fn check_bucket_and_endpoint(
    store: &str,
    bucket: &str,
    endpoint: Option<&str>,
    allow_http: bool,
) -> Result<(), SetupError> {
    if bucket.is_empty() {
        return Err(SetupError::Config(format!(
            "the {store} bucket is required"
        )));
    }
    if let Some(e) = endpoint
        && e.starts_with("http://")
        && !allow_http
    {
        return Err(SetupError::Config(format!(
            "the {store} endpoint {e} is plain HTTP: allow it explicitly (allow_http) or use https://"
        )));
    }
    Ok(())
}

/// The backend named `name` whose two clients `build` makes from the same settings
/// with the two retry policies: plain requests retried as `tuning` says, conditional
/// writes never (see the crate documentation).
pub fn backend_with_two_clients<S: ObjectStore>(
    name: &'static str,
    tuning: &ClientTuning,
    prefix: &str,
    build: impl Fn(object_store::RetryConfig) -> Result<S, object_store::Error>,
) -> Result<ObjectStoreBackend, SetupError> {
    let build = |retry| {
        build(retry).map_err(|source| SetupError::Client {
            backend: name,
            source,
        })
    };
    let plain = build(tuning.retry())?;
    let conditional = build(ClientTuning::no_retry())?;
    ObjectStoreBackend::new(name, Arc::new(plain), Arc::new(conditional), prefix)
}

/// An [`ObjectBackend`] over any [`ObjectStore`], below a key prefix.
#[derive(Clone, Debug)]
pub struct ObjectStoreBackend {
    name: &'static str,
    /// Plain requests, retried.
    store: Arc<dyn ObjectStore>,
    /// Conditional writes, never retried.
    conditional: Arc<dyn ObjectStore>,
    prefix: Path,
}

impl ObjectStoreBackend {
    /// A backend named `name` (metrics, logs) whose plain requests go to `store` and
    /// conditional writes to `conditional`: the same bucket through a client that does
    /// not retry (see the crate documentation). Keys live below `prefix` (`""`: the
    /// bucket's root; `a/b`: objects `a/b/checkpoint`, `a/b/tile/...`).
    pub fn new(
        name: &'static str,
        store: Arc<dyn ObjectStore>,
        conditional: Arc<dyn ObjectStore>,
        prefix: &str,
    ) -> Result<Self, SetupError> {
        let trimmed = prefix.trim_matches('/');
        let prefix = Path::parse(trimmed)
            .map_err(|e| SetupError::Config(format!("invalid key prefix {prefix:?}: {e}")))?;
        Ok(ObjectStoreBackend {
            name,
            store,
            conditional,
            prefix,
        })
    }

    /// A backend whose plain and conditional requests share `store`: for stores whose
    /// requests cannot fail half-way (`object_store`'s in-memory store).
    pub fn single(
        name: &'static str,
        store: Arc<dyn ObjectStore>,
        prefix: &str,
    ) -> Result<Self, SetupError> {
        Self::new(name, store.clone(), store, prefix)
    }

    /// The same bucket through the same clients (connection pools, credentials), with
    /// keys below `prefix` instead: several logs of one bucket share one client.
    pub fn with_prefix(&self, prefix: &str) -> Result<Self, SetupError> {
        Self::new(
            self.name,
            self.store.clone(),
            self.conditional.clone(),
            prefix,
        )
    }

    /// The key prefix (empty: the bucket's root).
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The store of plain requests.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// The full object path of `key`.
    fn path(&self, key: &str) -> Result<Path, StorageError> {
        let full = if self.prefix.as_ref().is_empty() {
            key.to_string()
        } else {
            format!("{}/{key}", self.prefix)
        };
        Path::parse(&full).map_err(|e| StorageError::Backend(format!("invalid key {key:?}: {e}")))
    }

    /// `key` of an object path listed below the prefix.
    fn key_of<'a>(&self, path: &'a Path) -> Option<&'a str> {
        let full = path.as_ref();
        if self.prefix.as_ref().is_empty() {
            return Some(full);
        }
        full.strip_prefix(self.prefix.as_ref())?.strip_prefix('/')
    }

    fn error(&self, op: &'static str, key: &str, e: &object_store::Error) -> StorageError {
        metrics::counter!("tlogd_storage_errors_total", "backend" => self.name, "op" => op)
            .increment(1);
        StorageError::Backend(format!("{} {op} {key}: {}", self.name, one_line(e)))
    }

    fn timed(&self, op: &'static str, started: Instant) {
        metrics::histogram!("tlogd_storage_op_duration_seconds", "backend" => self.name, "op" => op)
            .record(started.elapsed().as_secs_f64());
    }

    async fn get_inner(&self, key: &str) -> Result<Option<(Bytes, ObjectVersion)>, StorageError> {
        let started = Instant::now();
        let path = self.path(key)?;
        let got = match self.store.get_opts(&path, GetOptions::default()).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                self.timed("get", started);
                return Ok(None);
            }
            Err(e) => return Err(self.error("get", key, &e)),
        };
        let version = ObjectVersion {
            e_tag: got.meta.e_tag.clone(),
            version: got.meta.version.clone(),
        };
        let bytes = got.bytes().await.map_err(|e| self.error("get", key, &e))?;
        self.timed("get", started);
        Ok(Some((bytes, version)))
    }
}

/// The metadata every object of `class` is stored with.
fn attributes(class: ObjectClass) -> Attributes {
    let mut a = Attributes::with_capacity(2);
    a.insert(Attribute::ContentType, class.content_type().into());
    a.insert(Attribute::CacheControl, class.cache_control().into());
    a
}

/// An error on one line (`object_store` errors nest their causes and may hold the
/// server's multi-line XML answer).
fn one_line(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let c = cause.to_string();
        if !s.contains(&c) {
            s.push_str(": ");
            s.push_str(&c);
        }
        source = cause.source();
    }
    let s: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    match s.char_indices().nth(600) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s,
    }
}

/// Whether a failed conditional write says the store does not implement conditional
/// writes (as opposed to a transient failure).
fn conditions_unsupported(e: &object_store::Error) -> bool {
    if matches!(
        e,
        object_store::Error::NotImplemented { .. } | object_store::Error::NotSupported { .. }
    ) {
        return true;
    }
    let text = one_line(e);
    text.contains("501 Not Implemented") || text.contains("<Code>NotImplemented</Code>")
}

/// The marker of a put_if error that [`open_log`] turns into
/// [`ObjectOpenError::NoConditionalWrites`].
const UNSUPPORTED: &str = "conditional writes are not supported by the store";

impl ObjectBackend for ObjectStoreBackend {
    fn backend_name(&self) -> &'static str {
        self.name
    }

    async fn get(&self, key: &str) -> Result<Option<Bytes>, StorageError> {
        Ok(self.get_inner(key).await?.map(|(b, _)| b))
    }

    async fn get_versioned(
        &self,
        key: &str,
    ) -> Result<Option<(Bytes, ObjectVersion)>, StorageError> {
        self.get_inner(key).await
    }

    async fn put(&self, key: &str, bytes: Bytes, class: ObjectClass) -> Result<(), StorageError> {
        let started = Instant::now();
        let path = self.path(key)?;
        let opts = PutOptions {
            mode: PutMode::Overwrite,
            attributes: attributes(class),
            ..PutOptions::default()
        };
        self.store
            .put_opts(&path, PutPayload::from(bytes), opts)
            .await
            .map_err(|e| self.error("put", key, &e))?;
        self.timed("put", started);
        Ok(())
    }

    async fn put_if(
        &self,
        key: &str,
        bytes: Bytes,
        class: ObjectClass,
        condition: PutCondition,
    ) -> Result<PutOutcome, StorageError> {
        let started = Instant::now();
        let path = self.path(key)?;
        let mode = match condition {
            PutCondition::Absent => PutMode::Create,
            PutCondition::Matches(v) => PutMode::Update(UpdateVersion {
                e_tag: v.e_tag,
                version: v.version,
            }),
        };
        let opts = PutOptions {
            mode,
            attributes: attributes(class),
            ..PutOptions::default()
        };
        let outcome = match self
            .conditional
            .put_opts(&path, PutPayload::from(bytes), opts)
            .await
        {
            Ok(r) => PutOutcome::Written(ObjectVersion {
                e_tag: r.e_tag,
                version: r.version,
            }),
            // One attempt only (no retries): 412, or S3's 409 for a concurrent
            // conditional write, means this write did not happen.
            Err(
                object_store::Error::Precondition { .. }
                | object_store::Error::AlreadyExists { .. }
                | object_store::Error::NotModified { .. },
            ) => {
                metrics::counter!("tlogd_object_condition_failed_total", "backend" => self.name)
                    .increment(1);
                PutOutcome::ConditionFailed
            }
            Err(e) if conditions_unsupported(&e) => {
                metrics::counter!("tlogd_storage_errors_total", "backend" => self.name, "op" => "put_if")
                    .increment(1);
                return Err(StorageError::Backend(format!(
                    "{UNSUPPORTED}: {} put_if {key}: {}",
                    self.name,
                    one_line(&e)
                )));
            }
            Err(e) => return Err(self.error("put_if", key, &e)),
        };
        self.timed("put_if", started);
        Ok(outcome)
    }

    async fn delete(&self, key: &str) -> Result<(), StorageError> {
        let started = Instant::now();
        let path = self.path(key)?;
        match self.store.delete(&path).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                self.timed("delete", started);
                Ok(())
            }
            Err(e) => Err(self.error("delete", key, &e)),
        }
    }

    async fn list(&self, prefix: &str) -> Result<Vec<String>, StorageError> {
        let started = Instant::now();
        // object_store lists by whole path segments: list the directory holding the
        // prefix, then keep the keys that start with it.
        let dir = match prefix.rfind('/') {
            Some(i) => &prefix[..i],
            None => "",
        };
        let dir_path = match (self.prefix.as_ref().is_empty(), dir.is_empty()) {
            (true, true) => None,
            (false, true) => Some(self.prefix.clone()),
            _ => Some(self.path(dir)?),
        };
        let metas: Vec<_> = self
            .store
            .list(dir_path.as_ref())
            .try_collect()
            .await
            .map_err(|e| self.error("list", prefix, &e))?;
        let keys = metas
            .iter()
            .filter_map(|m| self.key_of(&m.location))
            .filter(|k| k.starts_with(prefix))
            .map(str::to_string)
            .collect();
        self.timed("list", started);
        Ok(keys)
    }
}

/// [`ObjectLog::open`], with a store that rejects conditional writes outright (HTTP
/// 501, or `object_store` configured without them) refused as clearly as one that
/// ignores them: [`ObjectOpenError::NoConditionalWrites`].
pub async fn open_log(
    backend: ObjectStoreBackend,
    origin: &str,
    options: ObjectLogOptions,
) -> Result<ObjectLog<ObjectStoreBackend>, ObjectOpenError> {
    match ObjectLog::open(backend, origin, options).await {
        Err(ObjectOpenError::Storage(StorageError::Backend(why)))
            if why.starts_with(UNSUPPORTED) =>
        {
            Err(ObjectOpenError::NoConditionalWrites(why))
        }
        other => other,
    }
}

#[cfg(test)]
mod tests;
