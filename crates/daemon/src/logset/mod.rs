//! The log set: every log of the configuration opened ([`open_logs`]): its keys
//! ([`keys`]), its storage and dedup index ([`storage`]; a directory Go Tessera wrote
//! is checked whole first, [`tessera`]), its engine, frozen if the file says so, its
//! CT shard's timers, and its routes; and the public router that picks a log by host
//! and path prefix ([`routing`]).

pub mod keys;
pub mod routing;
pub mod storage;
pub mod tessera;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tlogd_core::engine::{DedupIndex, Log, LogConfig, LogStorage, LogTasks, ServedLog};

use crate::config::{Config, LogSection};
use crate::serve::router::HttpOptions;
use keys::{load_ct_key, load_signers, note_signers, read_key_texts, warn_if_readable_by_others};
use routing::LogRoutes;
use storage::{Clients, OverStorage, open_dedup, with_storage};

/// One log, open: its facade, its routes and its background tasks.
pub(crate) struct Opened {
    /// The log's engine, as the daemon serves and stops it.
    pub(crate) log: Arc<dyn ServedLog>,
    /// Its public routes, by host and path prefix.
    pub(crate) routes: LogRoutes,
    /// Its background tasks, joined at shutdown.
    pub(crate) tasks: LogTasks,
    /// A CT log's submission side (its roots reload on SIGHUP).
    pub(crate) ct: Option<Arc<crate::routes::ct::CtLog>>,
}

/// Open one log of the file: its key, storage, dedup index and engine, frozen first
/// if `read_only` says so; and its public routes.
pub(crate) async fn open_log(
    c: &Config,
    l: &LogSection,
    clients: &Clients,
) -> anyhow::Result<Opened> {
    let origin = l.origin.clone().unwrap_or_default();
    let ct = match &l.ct {
        None => None,
        Some(config) => {
            let key = load_ct_key(l)?;
            let timeout = Duration::from_millis(c.http.body_read_timeout_ms);
            Some(Arc::new(crate::routes::ct::CtLog::load(
                config,
                key,
                timeout,
                l.label(),
            )?))
        }
    };
    let mut lc = match &ct {
        None => {
            let mut signers = load_signers(l, &origin)?.into_iter();
            let first = signers
                .next()
                .ok_or_else(|| anyhow::anyhow!("no signing key"))?;
            let mut lc = LogConfig::with_signer(origin.clone(), first);
            lc.signers.extend(signers);
            lc
        }
        Some(ct) => {
            // A CT log: RFC 6962 note signatures over its checkpoints, static-ct-api
            // data tiles for its entries.
            let signer = tlogd_ct::Rfc6962Signer::new(origin.clone(), ct.key().clone());
            let mut lc = LogConfig::with_signer(origin.clone(), Arc::new(signer));
            lc.personality = Arc::new(tlogd_ct::StaticCt);
            // Keys after the first (the ECDSA P-256 key) are note keys (Ed25519,
            // ML-DSA-44) whose signatures follow the RFC 6962 one, in order: a
            // post-quantum checkpoint signature beside what CT clients check.
            // (Files only: a PEM key in TLOGD_PRIVATE_KEY spans several lines.)
            if l.key_files().len() > 1 {
                let more = read_key_texts(l, "")?.into_iter().skip(1).collect();
                lc.signers.extend(note_signers(more, &origin)?);
            }
            lc
        }
    };
    lc.name = l.label().to_string();
    lc.batch_max_entries = l.batching.max_entries;
    lc.batch_max_age = l.batching.max_age(l.ct.is_some());
    lc.min_commit_interval = l.batching.min_commit_interval();
    lc.checkpoint_interval = Duration::from_millis(l.checkpoint.interval_ms);
    lc.republish_interval = Duration::from_millis(l.checkpoint.republish_interval_ms);
    lc.grease = l.checkpoint.grease;
    lc.checkpoint_max_age = Duration::from_millis(l.checkpoint.max_age_ms);
    if let Some(w) = crate::witness::from_config(&l.witnessing, &lc.verifiers())? {
        tracing::info!(log = l.label(), quorum = %w.describe(), "checkpoints are cosigned by witnesses");
        lc.cosigner = Some(Arc::new(w));
    }
    lc.max_pending_entries = l.queue.max_entries;
    lc.max_pending_bytes = l.queue.max_bytes;
    lc.dedup_max_lag = l.dedup.max_lag;
    lc.retry_after = Duration::from_secs(l.queue.retry_after_s.max(1));
    lc.commit_retry = Duration::from_millis(l.storage.commit_retry_ms);
    if let (Some(to), Some(file)) = (&l.forward.to, &l.forward.token_file) {
        warn_if_readable_by_others(file, "the forward token file");
        let (token, _) = crate::auth::load_forward_tokens(file)?;
        let timeout = Duration::from_millis(l.forward.timeout_ms);
        let forwarder = crate::routes::forward::HttpForwarder::new(to, token, timeout, &lc.origin)
            .map_err(|e| anyhow::anyhow!("`forward.to`: {e}"))?;
        tracing::info!(log = l.label(), to = %to, "batches are forwarded to the sequencing frontend");
        lc.forward = Some(Arc::new(forwarder));
    }
    if std::env::var_os("TLOGD_ENGINE_SHARED").is_none() {
        lc.background = Some(engine_runtime()?);
    }
    let verifiers = lc.verifiers();
    let over = Assemble { lc, l, c, ct };
    with_storage(l, &origin, clients, &verifiers, over).await
}

/// [`open_log`] over the storage: the dedup index, the engine and the routes.
struct Assemble<'a> {
    lc: LogConfig,
    l: &'a LogSection,
    c: &'a Config,
    ct: Option<Arc<crate::routes::ct::CtLog>>,
}

impl OverStorage for Assemble<'_> {
    type Output = Opened;
    async fn run<S: LogStorage>(
        self,
        storage: Arc<S>,
        private_dir: Option<PathBuf>,
    ) -> anyhow::Result<Opened> {
        let dedup = open_dedup(self.l, private_dir.map(|d| d.join("dedup"))).await?;
        assemble(storage, dedup, self.lc, self.l, self.c, self.ct).await
    }
}

/// The engine over `storage`, frozen if `read_only` says so, and its routes.
async fn assemble<S: LogStorage>(
    storage: Arc<S>,
    dedup: Option<Arc<dyn DedupIndex>>,
    lc: LogConfig,
    l: &LogSection,
    c: &Config,
    ct: Option<Arc<crate::routes::ct::CtLog>>,
) -> anyhow::Result<Opened> {
    if let Some(p) = &l.auth.bearer_tokens_file {
        warn_if_readable_by_others(p, "the write tokens file");
    }
    let tokens = crate::auth::load(l.auth.bearer_tokens_file.as_deref())?.map(Arc::new);
    let forward = match &l.forward.token_file {
        Some(file) => Some(crate::routes::forward::ForwardRoute::new(
            Arc::new(crate::auth::load_forward_tokens(file)?.1),
            Duration::from_millis(c.http.body_read_timeout_ms),
            lc.batch_max_entries,
            lc.origin.clone(),
        )),
        None => None,
    };
    if let Some(ct) = &ct {
        ct.root_set()
            .open(storage.clone())
            .await
            .context("loading the CT roots")?;
    }
    let (log, tasks) = Log::open(storage, dedup, lc)
        .await
        .context("opening the log")?;
    if l.read_only && !log.is_frozen() {
        let size = log.committed_size();
        tracing::warn!(
            log = l.label(),
            size,
            "read_only is set: freezing the log for good"
        );
        log.freeze().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    } else if !l.read_only && log.is_frozen() {
        tracing::warn!(
            log = l.label(),
            "the log is frozen in its storage: it accepts no entries (a freeze is for good, whether `read_only` is set or not)"
        );
    }
    // A CT shard: its log.v3.json, and its freeze once its window has ended.
    let ct_shard = match (&l.ct, &ct) {
        (Some(config), Some(ct)) => {
            let origin = log.config().origin.clone();
            let spki = ct.key().public_key_der();
            let shard = crate::routes::ct_shard::CtShard::new(config, &origin, &l.name, spki)?;
            crate::routes::ct_shard::freeze_if_past(&log, &shard, l.label()).await?;
            let shard = Arc::new(shard);
            crate::routes::ct_shard::spawn_freeze_at_window_end(
                log.clone(),
                shard.clone(),
                l.label().to_string(),
            );
            Some(shard)
        }
        _ => None,
    };
    let http = HttpOptions {
        tokens: tokens.clone(),
        body_read_timeout: Duration::from_millis(c.http.body_read_timeout_ms),
        max_storage_reads: c.http.max_storage_reads,
        storage_read_queue_timeout: Duration::from_millis(c.http.storage_read_queue_timeout_ms),
        forward,
        ct: ct.clone(),
        ct_shard,
    };
    let router = crate::serve::router::router_with(log.clone(), &http);
    for (i, v) in log.config().verifiers().iter().enumerate() {
        tracing::info!(
            log = l.label(),
            order = i + 1,
            algorithm = ?v.algorithm(),
            vkey = %v.to_vkey(),
            "checkpoint signing key"
        );
    }
    tracing::info!(
        log = l.label(),
        path = %format!("/{}", l.name),
        host = l.host.as_deref().unwrap_or("(any)"),
        origin = %log.config().origin,
        vkey = %log.config().verifier().to_vkey(),
        keys = log.config().signers.len(),
        backend = log.storage().backend_name(),
        size = log.committed_size(),
        frozen = log.is_frozen(),
        write_tokens = tokens.as_ref().map_or(0, |t| t.len()),
        "log open"
    );
    let origin = log.config().origin.clone();
    Ok(Opened {
        log: Arc::new(log),
        routes: LogRoutes {
            name: l.name.clone(),
            host: l.host.clone(),
            router,
            origin,
        },
        tasks,
        ct,
    })
}

/// Open every log of the file (several: in order, each named in its errors).
pub(crate) async fn open_logs(c: &Config) -> anyhow::Result<Vec<Opened>> {
    let mut opened = Vec::new();
    let clients = Clients::default();
    // Each CT log (shard) needs its own key: a log list tells logs apart by log ID.
    let mut log_ids = std::collections::HashMap::new();
    for l in c.served_logs().iter().filter(|l| l.ct.is_some()) {
        let id = load_ct_key(l)
            .with_context(|| format!("log {:?}", l.label()))?
            .log_id();
        if let Some(other) = log_ids.insert(id, l.label().to_string()) {
            use base64::Engine as _;
            let id = base64::engine::general_purpose::STANDARD.encode(id);
            bail!(
                "[[logs]] {other:?} and {:?} have the same CT key (log ID {id}): each CT log needs its own",
                l.label()
            );
        }
    }
    for l in c.served_logs() {
        let log = open_log(c, &l, &clients).await;
        opened.push(match l.name.is_empty() {
            true => log?,
            false => log.with_context(|| format!("log {:?}", l.name))?,
        });
    }
    Ok(opened)
}

/// The one log of the file, or the one named `name`.
pub(crate) fn pick_log(c: &Config, name: Option<&str>) -> anyhow::Result<LogSection> {
    let logs = c.served_logs();
    match (name, logs.len()) {
        (None, 1) => Ok(logs[0].clone()),
        (None, _) => bail!("the file serves several logs: name one with --log"),
        (Some(n), _) => logs
            .iter()
            .find(|l| l.name == n)
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("the file has no [[logs]] named {n:?}")),
    }
}

/// The runtime of the log's integrator, publisher and indexer: one thread of their
/// own, so that the kernel, not tokio's run queue shared with every connection, decides
/// when they run. Alive for the whole process (a runtime must not be dropped inside
/// another).
fn engine_runtime() -> anyhow::Result<tokio::runtime::Handle> {
    static ENGINE: std::sync::OnceLock<tokio::runtime::Runtime> = std::sync::OnceLock::new();
    if let Some(rt) = ENGINE.get() {
        return Ok(rt.handle().clone());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tlogd-engine")
        .enable_all()
        .build()
        .context("starting the engine's runtime")?;
    Ok(ENGINE.get_or_init(|| rt).handle().clone())
}
