//! A log's storage, whichever backend its `[storage]` names (POSIX, MySQL,
//! PostgreSQL, S3, GCS), object-store clients shared by the logs of one bucket, and its
//! RocksDB dedup index.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tlogd_core::engine::objects::{ObjectLog, ObjectLogOptions};
use tlogd_core::engine::{DedupIndex, LogStorage};
use tlogd_dedup_rocksdb::{DedupOptions, RocksDedup};
use tlogd_storage_gcs::GcsOptions;
use tlogd_storage_mysql::{MysqlOptions, MysqlStorage};
use tlogd_storage_object::{CachedTiles, ObjectStoreBackend};
use tlogd_storage_posix::{PosixOptions, PosixStorage};
use tlogd_storage_postgres::PostgresStorage;
use tlogd_storage_s3::S3Options;

use crate::config::LogSection;

/// What runs over a log's storage, whichever backend the configuration names.
pub(crate) trait OverStorage {
    type Output;
    /// Run over `storage`; `private_dir` is a POSIX log's `.tlogd` (where its dedup
    /// index lives by default).
    async fn run<S: LogStorage>(
        self,
        storage: Arc<S>,
        private_dir: Option<PathBuf>,
    ) -> anyhow::Result<Self::Output>;
}

/// Open the storage of the log `l` (of `origin`) and run `over` on it. A POSIX
/// directory left by Tessera is checked with `verifiers` before anything else.
pub(crate) async fn with_storage<O: OverStorage>(
    l: &LogSection,
    origin: &str,
    clients: &Clients,
    verifiers: &[tlogd_core::note::NoteVerifier],
    over: O,
) -> anyhow::Result<O::Output> {
    // The SQL backends share one layer and one set of options (MysqlOptions and
    // PostgresOptions are both tlogd_storage_sql::SqlOptions).
    let url = l.storage.url.clone().unwrap_or_default();
    let sql = MysqlOptions {
        max_connections: l.storage.pool_size,
        tile_cache_bytes: l.storage.cache_mib << 20,
        reader_connections: l.storage.reader_pool_size,
        ..MysqlOptions::default()
    };
    let opening = || format!("opening the {} log", l.storage.backend);
    if matches!(l.storage.backend.as_str(), "mysql" | "postgres")
        && let Some(w) = crate::config::database_tls_warning(&url)
    {
        tracing::warn!(log = l.label(), "{w}");
    }
    match l.storage.backend.as_str() {
        "mysql" => {
            let storage = MysqlStorage::connect(&url, origin, sql).await;
            return over
                .run(Arc::new(storage.with_context(opening)?), None)
                .await;
        }
        "postgres" => {
            let storage = PostgresStorage::connect(&url, origin, sql).await;
            return over
                .run(Arc::new(storage.with_context(opening)?), None)
                .await;
        }
        "s3" | "gcs" => {
            let storage = open_object_store(l, origin, clients)
                .await
                .with_context(opening)?;
            return over.run(Arc::new(storage), None).await;
        }
        _ => {}
    }
    let dir = l.storage.dir.clone().unwrap_or_default();
    let storage = Arc::new(
        PosixStorage::open_with(&dir, origin, &PosixOptions::with_sync(l.storage.sync))
            .with_context(|| format!("opening log directory {}", dir.display()))?,
    );
    if let Some(state) = storage.adopted_tessera() {
        super::tessera::check_adopted_tessera(&dir, origin, verifiers, state).await?;
    }
    let private = storage.private_dir().to_path_buf();
    over.run(storage, Some(private)).await
}

/// The log in an S3 or GCS bucket, with a cache of full tiles for reads served through
/// this daemon.
pub(crate) async fn open_object_store(
    l: &LogSection,
    origin: &str,
    clients: &Clients,
) -> anyhow::Result<CachedTiles<ObjectLog<ObjectStoreBackend>>> {
    let st = &l.storage;
    let bucket = st.bucket.clone().unwrap_or_default();
    // Logs of one bucket (reached the same way) share its clients: one connection pool.
    let client_key = format!(
        "{}|{}|{bucket}|{:?}|{}|{:?}|{:?}",
        st.backend,
        st.endpoint.as_deref().unwrap_or(""),
        st.region,
        st.allow_http,
        st.virtual_hosted_style,
        st.service_account_path
    );
    let shared = lock_clients(clients).get(&client_key).cloned();
    let backend = match shared {
        Some(b) => b.with_prefix(&st.prefix)?,
        None => {
            let b = new_object_client(st, &bucket)?;
            lock_clients(clients).insert(client_key, b.clone());
            b
        }
    };
    let options = ObjectLogOptions {
        write_concurrency: st.write_concurrency,
        hedge_after: Duration::from_millis(st.hedge_after_ms),
        write_retry: Duration::from_millis(st.write_retry_ms),
        turn: Duration::from_millis(st.turn_ms),
        ..ObjectLogOptions::default()
    };
    tracing::info!(
        backend = %st.backend,
        %bucket,
        prefix = %st.prefix,
        endpoint = st.endpoint.as_deref().unwrap_or("(default)"),
        "opening the log in the bucket (checking conditional writes)"
    );
    let log = tlogd_storage_object::open_log(backend, origin, options).await?;
    Ok(CachedTiles::new(Arc::new(log), st.cache_mib << 20))
}

/// Object-store clients by bucket and the way it is reached, shared by the logs the
/// daemon opens.
pub(crate) type Clients = std::sync::Mutex<std::collections::HashMap<String, ObjectStoreBackend>>;

fn lock_clients(
    c: &Clients,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, ObjectStoreBackend>> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new client of the bucket `st` names, below its prefix.
fn new_object_client(
    st: &crate::config::StorageConfig,
    bucket: &str,
) -> anyhow::Result<ObjectStoreBackend> {
    Ok(match st.backend.as_str() {
        "s3" => tlogd_storage_s3::backend(&S3Options {
            bucket: bucket.to_string(),
            prefix: st.prefix.clone(),
            region: st.region.clone(),
            endpoint: st.endpoint.clone(),
            allow_http: st.allow_http,
            virtual_hosted_style: st.virtual_hosted_style,
            ..S3Options::default()
        })?,
        _ => tlogd_storage_gcs::backend(&GcsOptions {
            bucket: bucket.to_string(),
            prefix: st.prefix.clone(),
            service_account_path: st
                .service_account_path
                .as_ref()
                .map(|p| p.to_string_lossy().into_owned()),
            endpoint: st.endpoint.clone(),
            allow_http: st.allow_http,
            ..GcsOptions::default()
        })?,
    })
}

/// The RocksDB dedup index, if enabled: at `dedup.path`, else at `default_path`.
pub(crate) async fn open_dedup(
    c: &LogSection,
    default_path: Option<PathBuf>,
) -> anyhow::Result<Option<Arc<dyn DedupIndex>>> {
    if !c.dedup.enabled {
        return Ok(None);
    }
    let Some(path) = c.dedup.path.clone().or(default_path) else {
        bail!("`dedup.path` is required");
    };
    let opts = DedupOptions {
        block_cache_bytes: c.dedup.block_cache_mib << 20,
        // Two maps of this size at most (one being written as a table).
        recent_entries: DedupOptions::recent_entries_within(c.dedup.write_buffer_mib << 20),
        ..DedupOptions::default()
    };
    let index = tokio::task::spawn_blocking(move || RocksDedup::open(&path, &opts))
        .await
        .context("opening dedup index")??;
    Ok(Some(Arc::new(index)))
}
