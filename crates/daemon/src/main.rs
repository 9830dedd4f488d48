//! `tlogd`: a C2SP tlog-tiles transparency log daemon.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand};
use tlogd_core::engine::objects::{ObjectLog, ObjectLogOptions};
use tlogd_core::engine::{DedupIndex, Log, LogConfig, LogStorage, LogTasks, ServedLog};
use tlogd_core::keys::log_signer_from_skey;
use tlogd_core::mldsa::{MAX_NAME_LEN, generate_mldsa44_key};
use tlogd_core::note::{LogSigner, SignatureAlgorithm, generate_key};
use tlogd_dedup_rocksdb::{DedupOptions, RocksDedup};
use tlogd_storage_gcs::GcsOptions;
use tlogd_storage_mysql::{MysqlOptions, MysqlStorage};
use tlogd_storage_object::{CachedTiles, ObjectStoreBackend};
use tlogd_storage_posix::{PosixOptions, PosixStorage};
use tlogd_storage_postgres::PostgresStorage;
use tlogd_storage_s3::S3Options;

use tlogd::config::{Config, LogSection};
use tlogd::observe;
use tlogd::serve::logs::LogRoutes;
use tlogd::serve::router::HttpOptions;
use tlogd::serve::server::ServeOptions;

// glibc's malloc and free were ~10 % of the daemon's CPU under load (hyper, axum and
// the add path allocate per request); mimalloc's thread-local free lists cost a
// fraction of that (benches/results/history.md, "Where tlogd's CPU goes, by stage").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (`mi_option_reset_delay` before 2.1): the same
/// index in its v2 and v3 headers; libmimalloc-sys names no constant for it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Keep memory the daemon frees for reuse instead of handing it back to the kernel,
/// unless `MIMALLOC_PURGE_DELAY` in the environment says otherwise. By default mimalloc
/// returns ("purges") memory that stayed free for a while, and the next allocation
/// faults it back in, zeroed, some of it on the integrator's thread between commits; at
/// 1024 writers that cost ~4 % of the append rate and ~1 µs of CPU per append
/// (benches/results/history.md, "2026-11-25 (late night)"). The price: resident memory stays
/// near its high-water mark, which the queue's and the caches' limits bound.
fn keep_freed_memory() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one of the allocator's options, which it reads atomically; any
        // thread may do so at any time.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1) }
    }
}

/// A C2SP tlog-tiles transparency log daemon.
///
/// Quick start:
///
///   tlogd keygen --origin example.com/mylog --out log.key
///
///   tlogd serve --storage-dir ./log --origin example.com/mylog --private-key-file log.key
///
/// then `curl --data-binary 'hello' http://127.0.0.1:2024/add` prints the entry's index
/// and `curl http://127.0.0.1:2024/checkpoint` the signed checkpoint.
#[derive(Parser)]
#[command(version, about, long_about, verbatim_doc_comment)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the log server.
    Serve(Box<ServeArgs>),
    /// Generate a checkpoint signing key (Ed25519 unless --algorithm says otherwise);
    /// prints the verifier key.
    Keygen {
        /// The log's origin (the key name), e.g. example.com/mylog.
        #[arg(long)]
        origin: String,
        /// The key's algorithm: ed25519 (signed-note type 0x01), ml-dsa-44 (type 0x06,
        /// timestamped ML-DSA-44 cosignatures, for origins of at most 255 bytes) or
        /// ecdsa-p256 (a CT log's key, as --ct).
        #[arg(long, value_enum, default_value_t = KeyAlgorithm::Ed25519, conflicts_with = "ct")]
        algorithm: KeyAlgorithm,
        /// An ECDSA P-256 key for a Certificate Transparency log (PKCS#8 PEM); prints
        /// the public key (PEM) and the log ID.
        #[arg(long)]
        ct: bool,
        /// Where to write the private key (created with mode 0600; never overwritten).
        #[arg(long, default_value = "tlogd.key")]
        out: PathBuf,
    },
    /// Check a whole tlog-tiles log (any implementation's), from a base URL or a local
    /// directory: checkpoint signature, every bundle and hash tile recomputed, the
    /// root, the checkpoint's partial tiles. Exit 0 when it verifies, 1 naming the
    /// first failure, 2 on bad arguments.
    Verify(tlogd::commands::verify::VerifyArgs),
    /// Freeze a log for good: it accepts no more entries (HTTP 403), keeps serving
    /// reads and republishing its checkpoint. Recorded in the log's storage, so every
    /// frontend of a shared store obeys it. Opens the log as `serve` would (a POSIX
    /// log's daemon must be stopped first), commits what it holds, freezes it,
    /// publishes the final checkpoint and exits. `read_only = true` in the file does
    /// the same at start-up.
    Freeze {
        /// The daemon's TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Which of the file's `[[logs]]` (by name); not needed for a single log.
        #[arg(long)]
        log: Option<String>,
    },
    /// Copy a tlog-tiles log (Tessera's, tlogd's, anyone's; from a URL or a directory)
    /// into the log the configuration (or the flags, as `serve` takes them) names,
    /// on any backend: every bundle checked against the source's signed checkpoint
    /// before it is written, resumable (run it again after an interruption), and the
    /// source's checkpoint published only once the whole tree is copied. With this
    /// log's key the copy is a continuation that `tlogd serve` appends to; checked with
    /// --source-public-key only, it is a mirror, which tlogd does not append to.
    /// Prints the copy rate; exit 0 when the target holds the source's checkpoint.
    Migrate(Box<MigrateArgs>),
}

/// The algorithm of a key `tlogd keygen` makes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum KeyAlgorithm {
    /// Ed25519 note signatures (signed-note type 0x01).
    Ed25519,
    /// Timestamped ML-DSA-44 cosignatures (signed-note type 0x06, tlog-cosignature).
    #[value(name = "ml-dsa-44")]
    MlDsa44,
    /// ECDSA P-256, a Certificate Transparency log's key (RFC 6962 signatures; the same
    /// as --ct).
    #[value(name = "ecdsa-p256")]
    EcdsaP256,
}

/// `tlogd migrate`: where from, how, and the target log as `serve` takes it.
#[derive(clap::Args)]
struct MigrateArgs {
    /// The source log: a base URL (https://host/prefix) or a local directory holding
    /// `checkpoint` and `tile/` (Tessera's POSIX layout, tlogd's, any tlog-tiles log).
    #[arg(long)]
    from: String,
    /// The source's verifier key (`name+hash+base64`), for a source whose checkpoint
    /// this log's own key did not sign: the copy is then a mirror, which tlogd does
    /// not append to. Repeat for several.
    #[arg(long)]
    source_public_key: Vec<String>,
    /// Which of the file's `[[logs]]` (by name); not needed for a single log.
    #[arg(long)]
    log: Option<String>,
    /// Bundles and tiles fetched at once.
    #[arg(long, default_value_t = 16)]
    jobs: usize,
    /// Full entry bundles (256 entries each) per commit to the target: an
    /// interruption loses at most that much copying.
    #[arg(long, default_value_t = 64)]
    bundles_per_commit: usize,
    /// HTTP timeout per request, in seconds.
    #[arg(long, default_value_t = 30.0)]
    http_timeout: f64,
    /// No progress bar (it is only drawn on a terminal anyway).
    #[arg(long)]
    quiet: bool,
    #[command(flatten)]
    target: ServeArgs,
}

/// Flags override the config file; without a file, they are all that is needed.
#[derive(clap::Args)]
struct ServeArgs {
    /// TOML configuration file (see config/posix.toml).
    #[arg(long, short)]
    config: Option<PathBuf>,
    /// Storage backend: posix (default), mysql, postgres, s3 or gcs.
    #[arg(long, value_parser = ["posix", "mysql", "postgres", "s3", "gcs"])]
    backend: Option<String>,
    /// Log root directory (POSIX backend).
    #[arg(long)]
    storage_dir: Option<PathBuf>,
    /// How the POSIX backend makes files durable: auto (default; fsync on FUSE and
    /// filesystems not known to commit on syncfs), syncfs or fsync.
    #[arg(long, value_parser = ["auto", "syncfs", "fsync"])]
    storage_sync: Option<String>,
    /// Database URL (mysql, postgres backends), e.g. mysql://user:pass@127.0.0.1:3306/tlog
    /// or postgres://user:pass@127.0.0.1:5432/tlog. Prefer env TLOGD_DATABASE_URL (or
    /// `storage.url` in the config file): a command line, password included, is visible
    /// to every user of the machine.
    #[arg(long, env = "TLOGD_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Bucket (s3, gcs backends).
    #[arg(long)]
    bucket: Option<String>,
    /// Key prefix inside the bucket (s3, gcs backends).
    #[arg(long)]
    prefix: Option<String>,
    /// Region (s3 backend).
    #[arg(long)]
    region: Option<String>,
    /// Another endpoint than AWS's or Google's, e.g. http://127.0.0.1:9000 for MinIO
    /// (s3, gcs backends).
    #[arg(long)]
    endpoint: Option<String>,
    /// Allow a plain http:// endpoint (s3, gcs backends).
    #[arg(long)]
    allow_http: bool,
    /// Dedup index directory (default: <storage-dir>/.tlogd/dedup; required for mysql,
    /// postgres, s3 and gcs).
    #[arg(long)]
    dedup_path: Option<PathBuf>,
    /// Public listen address for the log API [default: 127.0.0.1:2024].
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Checkpoint origin (the log's name).
    #[arg(long)]
    origin: Option<String>,
    /// File with a PRIVATE+KEY+... signing key (or set TLOGD_PRIVATE_KEY). Repeat for
    /// several keys (a key rotation): checkpoints carry their signatures in this order.
    #[arg(long)]
    private_key_file: Vec<PathBuf>,
    /// Metrics/health listen address [default: 127.0.0.1:9464]; "" disables.
    #[arg(long)]
    metrics_listen: Option<String>,
    /// Turn the dedup index off.
    #[arg(long)]
    no_dedup: bool,
}

fn main() -> anyhow::Result<()> {
    keep_freed_memory();
    let cli = Cli::parse();
    match cli.command {
        Command::Keygen {
            origin,
            out,
            ct,
            algorithm,
        } => match ct || algorithm == KeyAlgorithm::EcdsaP256 {
            true => keygen_ct(&origin, &out),
            false => keygen(&origin, algorithm, &out),
        },
        Command::Verify(args) => std::process::exit(tlogd::commands::verify::run(args).into()),
        Command::Freeze { config, log } => {
            let c = Config::load(&config)?;
            c.validate()?;
            observe::init_logging(&c.log)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(freeze(c, log))
        }
        Command::Migrate(args) => {
            let args = *args;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(migrate(args))
        }
        Command::Serve(args) => {
            let config = load_config(*args)?;
            observe::init_logging(&config.log)?;
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("starting the async runtime")?;
            runtime.block_on(serve(config))
        }
    }
}

/// Write a fresh private key file (mode 0600, never over an existing file).
fn write_key_file(out: &PathBuf, text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .with_context(|| format!("creating {} (it must not exist yet)", out.display()))?;
    f.write_all(text.as_bytes())
        .with_context(|| format!("writing {}", out.display()))?;
    f.sync_all()?;
    eprintln!("private key written to {}", out.display());
    Ok(())
}

fn keygen_ct(origin: &str, out: &PathBuf) -> anyhow::Result<()> {
    use base64::Engine as _;
    // A scalar outside 1..n (probability ~2^-32) is drawn again.
    let key = loop {
        let mut d = [0u8; 32];
        getrandom::fill(&mut d).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
        if let Ok(k) = tlogd_static_ct::signer::LogKey::from_scalar(&d) {
            break k;
        }
    };
    write_key_file(out, &key.to_pkcs8_pem()?)?;
    print!("{}", key.public_key_pem()?);
    println!(
        "log ID: {}",
        base64::engine::general_purpose::STANDARD.encode(key.log_id())
    );
    let signer = tlogd_ct::Rfc6962Signer::new(origin, key);
    println!(
        "vkey: {}",
        tlogd_core::note::LogSigner::verifier(&signer).to_vkey()
    );
    Ok(())
}

fn keygen(origin: &str, algorithm: KeyAlgorithm, out: &PathBuf) -> anyhow::Result<()> {
    let (skey, vkey) = match algorithm {
        KeyAlgorithm::Ed25519 => generate_key(origin),
        KeyAlgorithm::EcdsaP256 => return keygen_ct(origin, out),
        KeyAlgorithm::MlDsa44 => {
            if origin.len() > MAX_NAME_LEN {
                bail!(
                    "an ML-DSA-44 key's name (the origin) is at most {MAX_NAME_LEN} bytes (tlog-cosignature); this one is {}",
                    origin.len()
                );
            }
            generate_mldsa44_key(origin)
        }
    }
    .context("generating key")?;
    write_key_file(out, &format!("{skey}\n"))?;
    println!("{vkey}");
    Ok(())
}

fn load_config(args: ServeArgs) -> anyhow::Result<Config> {
    let mut c = match &args.config {
        Some(p) => Config::load(p)?,
        None => Config::defaults(),
    };
    let per_log_flag = args.backend.is_some()
        || args.storage_dir.is_some()
        || args.storage_sync.is_some()
        || args.database_url.is_some()
        || args.bucket.is_some()
        || args.prefix.is_some()
        || args.region.is_some()
        || args.endpoint.is_some()
        || args.allow_http
        || args.dedup_path.is_some()
        || args.origin.is_some()
        || !args.private_key_file.is_empty()
        || args.no_dedup;
    if per_log_flag && !c.logs.is_empty() {
        bail!(
            "the config file serves several logs ([[logs]]): set storage, origin, key and dedup inside each [[logs]] entry, not by flags"
        );
    }
    if let Some(b) = args.backend {
        c.storage.backend = b;
    }
    if let Some(d) = args.storage_dir {
        c.storage.dir = Some(d);
    }
    if let Some(m) = args.storage_sync {
        c.storage.sync = m
            .parse()
            .map_err(|e| anyhow::anyhow!("--storage-sync: {e}"))?;
    }
    if let Some(u) = args.database_url {
        c.storage.url = Some(u);
    }
    if let Some(b) = args.bucket {
        c.storage.bucket = Some(b);
    }
    if let Some(p) = args.prefix {
        c.storage.prefix = p;
    }
    if let Some(r) = args.region {
        c.storage.region = Some(r);
    }
    if let Some(e) = args.endpoint {
        c.storage.endpoint = Some(e);
    }
    if args.allow_http {
        c.storage.allow_http = true;
    }
    if let Some(p) = args.dedup_path {
        c.dedup.path = Some(p);
    }
    if let Some(l) = args.listen {
        c.listen = l;
    }
    if let Some(o) = args.origin {
        c.origin = Some(o);
    }
    if !args.private_key_file.is_empty() {
        c.private_key_file = None;
        c.private_key_files = args.private_key_file;
    }
    if let Some(m) = args.metrics_listen {
        c.metrics.listen = m;
    }
    if args.no_dedup {
        c.dedup.enabled = false;
    }
    c.validate()?;
    Ok(c)
}

/// A secret file others on the machine can read is a key anyone there can sign with (or
/// a token anyone can write with): say so loudly at start-up. Not refused, as a file
/// shared with a group on purpose (a secrets volume) is legitimate.
fn warn_if_readable_by_others(path: &std::path::Path, what: &str) {
    use std::os::unix::fs::PermissionsExt;
    if let Ok(m) = std::fs::metadata(path)
        && m.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(
            file = %path.display(),
            mode = format!("{:o}", m.permissions().mode() & 0o777),
            "{what} can be read by other users of this machine; chmod 600 it"
        );
    }
}

/// The texts of a log's signing keys, each with where it came from: one per file of
/// `private_key_file(s)`, in order, else one per non-empty line of env
/// `TLOGD_PRIVATE_KEY`; `missing` says how to make one.
fn read_key_texts(c: &LogSection, missing: &str) -> anyhow::Result<Vec<(String, String)>> {
    let files = c.key_files();
    if files.is_empty() {
        let env = std::env::var("TLOGD_PRIVATE_KEY").map_err(|_| anyhow::anyhow!("{missing}"))?;
        return Ok(env
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .enumerate()
            .map(|(i, l)| (format!("TLOGD_PRIVATE_KEY line {}", i + 1), l.to_string()))
            .collect());
    }
    files
        .iter()
        .map(|p| {
            warn_if_readable_by_others(p, "the signing key file");
            let text = std::fs::read_to_string(p)
                .with_context(|| format!("reading private key file {}", p.display()))?;
            Ok((format!("private key file {}", p.display()), text))
        })
        .collect()
}

/// A log's checkpoint signers, in signing order, of the types their keys name
/// (Ed25519 or ML-DSA-44). Refused here, before the log opens: no key, a key twice,
/// and an ML-DSA-44 key for an origin longer than its signed message carries.
fn load_signers(c: &LogSection, origin: &str) -> anyhow::Result<Vec<Arc<dyn LogSigner>>> {
    let texts = read_key_texts(
        c,
        &format!(
            "no signing key: set `private_key_file` or `private_key_files` (or --private-key-file) or env TLOGD_PRIVATE_KEY; \
             `tlogd keygen --origin {origin}` makes one"
        ),
    )?;
    if texts.is_empty() {
        bail!("no signing key: TLOGD_PRIVATE_KEY is empty");
    }
    note_signers(texts, origin)
}

/// The note signers of key texts (see [`load_signers`]).
fn note_signers(
    texts: Vec<(String, String)>,
    origin: &str,
) -> anyhow::Result<Vec<Arc<dyn LogSigner>>> {
    let mut signers: Vec<Arc<dyn LogSigner>> = Vec::with_capacity(texts.len());
    for (source, text) in texts {
        let signer =
            log_signer_from_skey(text.trim()).with_context(|| format!("parsing the {source}"))?;
        if signer.algorithm() == SignatureAlgorithm::CosignatureMlDsa44
            && origin.len() > MAX_NAME_LEN
        {
            bail!(
                "{source}: an ML-DSA-44 key signs origins of at most {MAX_NAME_LEN} bytes (tlog-cosignature \"ML-DSA-44 signed message\"); `origin` is {} bytes",
                origin.len()
            );
        }
        if signers
            .iter()
            .any(|s| s.name() == signer.name() && s.key_id() == signer.key_id())
        {
            bail!(
                "{source}: the key {}+{:08x} is configured twice",
                signer.name(),
                signer.key_id()
            );
        }
        if signer.name() != origin {
            tracing::warn!(
                key_name = signer.name(),
                origin,
                "the signing key's name differs from the origin"
            );
        }
        signers.push(signer);
    }
    Ok(signers)
}

/// A CT log's ECDSA P-256 key: `private_key_file`, else env `TLOGD_PRIVATE_KEY`, PEM.
fn load_ct_key(l: &LogSection) -> anyhow::Result<tlogd_static_ct::signer::LogKey> {
    let missing = "no signing key: set `private_key_file` to a PEM ECDSA P-256 key; `tlogd keygen --ct` makes one";
    let text = match l.key_files().first() {
        Some(p) => {
            warn_if_readable_by_others(p, "the signing key file");
            std::fs::read_to_string(p)
                .with_context(|| format!("reading private key file {}", p.display()))?
        }
        None => std::env::var("TLOGD_PRIVATE_KEY").map_err(|_| anyhow::anyhow!("{missing}"))?,
    };
    tlogd_static_ct::signer::LogKey::from_pem(&text).context("parsing the CT log's private key")
}

/// One log, open: its facade, its routes and its background tasks.
struct Opened {
    log: Arc<dyn ServedLog>,
    routes: LogRoutes,
    tasks: LogTasks,
    /// A CT log's submission side (its roots reload on SIGHUP).
    ct: Option<Arc<tlogd::routes::ct::CtLog>>,
}

/// Open one log of the file: its key, storage, dedup index and engine, frozen first
/// if `read_only` says so; and its public routes.
async fn open_log(c: &Config, l: &LogSection, clients: &Clients) -> anyhow::Result<Opened> {
    let origin = l.origin.clone().unwrap_or_default();
    let ct = match &l.ct {
        None => None,
        Some(config) => {
            let key = load_ct_key(l)?;
            let timeout = Duration::from_millis(c.http.body_read_timeout_ms);
            Some(Arc::new(tlogd::routes::ct::CtLog::load(
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
    lc.checkpoint_interval = Duration::from_millis(l.checkpoint.interval_ms);
    lc.republish_interval = Duration::from_millis(l.checkpoint.republish_interval_ms);
    lc.checkpoint_max_age = Duration::from_millis(l.checkpoint.max_age_ms);
    if let Some(w) = tlogd::witness::from_config(&l.witnessing, &lc.verifiers())? {
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
        let (token, _) = tlogd::auth::load_forward_tokens(file)?;
        let timeout = Duration::from_millis(l.forward.timeout_ms);
        let forwarder = tlogd::routes::forward::HttpForwarder::new(to, token, timeout, &lc.origin)
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

/// What runs over a log's storage, whichever backend the configuration names.
trait OverStorage {
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
async fn with_storage<O: OverStorage>(
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
        && let Some(w) = tlogd::config::database_tls_warning(&url)
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
        tlogd::commands::verify::check_adopted_tessera(&dir, origin, verifiers, state).await?;
    }
    let private = storage.private_dir().to_path_buf();
    over.run(storage, Some(private)).await
}

/// [`open_log`] over the storage: the dedup index, the engine and the routes.
struct Assemble<'a> {
    lc: LogConfig,
    l: &'a LogSection,
    c: &'a Config,
    ct: Option<Arc<tlogd::routes::ct::CtLog>>,
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
    ct: Option<Arc<tlogd::routes::ct::CtLog>>,
) -> anyhow::Result<Opened> {
    if let Some(p) = &l.auth.bearer_tokens_file {
        warn_if_readable_by_others(p, "the write tokens file");
    }
    let tokens = tlogd::auth::load(l.auth.bearer_tokens_file.as_deref())?.map(Arc::new);
    let forward = match &l.forward.token_file {
        Some(file) => Some(tlogd::routes::forward::ForwardRoute::new(
            Arc::new(tlogd::auth::load_forward_tokens(file)?.1),
            Duration::from_millis(c.http.body_read_timeout_ms),
            lc.batch_max_entries,
            lc.origin.clone(),
        )),
        None => None,
    };
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
            let shard = tlogd::routes::ct_shard::CtShard::new(config, &origin, &l.name, spki)?;
            tlogd::routes::ct_shard::freeze_if_past(&log, &shard, l.label()).await?;
            let shard = Arc::new(shard);
            tlogd::routes::ct_shard::spawn_freeze_at_window_end(
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
    let router = tlogd::serve::router::router_with(log.clone(), &http);
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
    Ok(Opened {
        log: Arc::new(log),
        routes: LogRoutes {
            name: l.name.clone(),
            host: l.host.clone(),
            router,
        },
        tasks,
        ct,
    })
}

/// Open every log of the file (several: in order, each named in its errors).
async fn open_logs(c: &Config) -> anyhow::Result<Vec<Opened>> {
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
fn pick_log(c: &Config, name: Option<&str>) -> anyhow::Result<LogSection> {
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

/// `tlogd migrate` (see [`Command::Migrate`] and `tlogd_core::engine::import`).
async fn migrate(args: MigrateArgs) -> anyhow::Result<()> {
    use tlogd_core::checkpoint::Checkpoint;
    use tlogd_core::engine::checker::{Fetch, open_checkpoint_with};
    use tlogd_core::note::NoteVerifier;
    let c = load_config(args.target)?;
    observe::init_logging(&c.log)?;
    let section = pick_log(&c, args.log.as_deref())?;
    if section.ct.is_some() {
        bail!(
            "migrating a Certificate Transparency log (static-ct-api data tiles and issuers) is not supported yet: only tlog-tiles logs"
        );
    }
    let origin = section.origin.clone().unwrap_or_default();
    // This log's own keys, when it has any: a copy they signed is a continuation.
    let keyed = !section.key_files().is_empty() || std::env::var_os("TLOGD_PRIVATE_KEY").is_some();
    let own: Vec<NoteVerifier> = match keyed {
        true => load_signers(&section, &origin)?
            .iter()
            .map(|s| s.verifier())
            .collect(),
        false => Vec::new(),
    };
    let mut theirs = Vec::new();
    for k in &args.source_public_key {
        theirs.push(
            NoteVerifier::from_vkey(k.trim())
                .map_err(|e| anyhow::anyhow!("--source-public-key {k:?}: {e}"))?,
        );
    }
    if own.is_empty() && theirs.is_empty() {
        bail!(
            "nothing to check the source's checkpoint with: configure this log's private key (the copy continues the log) or give --source-public-key (the copy is a mirror)"
        );
    }
    let timeout = Duration::from_secs_f64(args.http_timeout.max(0.1));
    let source = tlogd::commands::migrate::Source::open(&args.from, timeout)
        .map_err(|e| anyhow::anyhow!("--from {}: {e}", args.from))?;
    let signed = source
        .get("checkpoint")
        .await
        .map_err(|e| anyhow::anyhow!("{}: {e}", source.location()))?
        .ok_or_else(|| anyhow::anyhow!("{}: no checkpoint", source.location()))?
        .to_vec();
    let keys: Vec<&NoteVerifier> = own.iter().chain(&theirs).collect();
    let (checkpoint, signed_by) = open_checkpoint_with(&signed, &origin, &keys)
        .map_err(|e| anyhow::anyhow!("the source's checkpoint ({}): {e}", source.location()))?;
    let continuation = signed_by.iter().any(|v| {
        own.iter()
            .any(|o| o.key_id() == v.key_id() && o.name() == v.name())
    });
    if !continuation {
        eprintln!(
            "tlogd migrate: a mirror, not a continuation: the source's checkpoint is not signed by this log's key, so `tlogd serve` will refuse to open the copy (it never appends to a log it cannot sign for)"
        );
    }
    struct Copy<'a> {
        source: &'a tlogd::commands::migrate::Source,
        checkpoint: Checkpoint,
        signed: Vec<u8>,
        options: tlogd_core::engine::import::CopyOptions,
        quiet: bool,
    }
    impl OverStorage for Copy<'_> {
        type Output = tlogd_core::engine::import::CopyReport;
        async fn run<S: LogStorage>(
            self,
            storage: Arc<S>,
            _private_dir: Option<PathBuf>,
        ) -> anyhow::Result<Self::Output> {
            let mut bar = tlogd::commands::migrate::CopyBar::new(self.quiet);
            Ok(tlogd_core::engine::import::copy_log(
                self.source,
                &*storage,
                &tlogd_core::personality::TlogTiles,
                &self.checkpoint,
                &self.signed,
                &self.options,
                &mut bar,
            )
            .await?)
        }
    }
    let size = checkpoint.size;
    let copy = Copy {
        source: &source,
        checkpoint,
        signed,
        options: tlogd_core::engine::import::CopyOptions {
            jobs: args.jobs.max(1),
            bundles_per_commit: args.bundles_per_commit.max(1),
        },
        quiet: args.quiet,
    };
    let clients = Clients::default();
    // A mirror into a Tessera POSIX directory is checked with the source's keys too.
    let all_keys: Vec<NoteVerifier> = own.iter().chain(&theirs).cloned().collect();
    let report = with_storage(&section, &origin, &clients, &all_keys, copy).await?;
    if report.already_complete {
        println!(
            "the target already holds the source's tree and checkpoint (size {size}): nothing to copy"
        );
    } else {
        let copied = report.size - report.resumed_from;
        println!(
            "copied {copied} entries ({} bundles) from {} in {:.1} s: {:.0} entries/s{}; published the source's checkpoint (size {size})",
            report.bundles,
            source.location(),
            report.seconds,
            copied as f64 / report.seconds.max(1e-9),
            match report.resumed_from {
                0 => String::new(),
                n => format!(", resumed at {n}"),
            }
        );
    }
    // The dedup index, built now rather than at the first start (adds wait for it).
    if continuation && section.dedup.enabled {
        let started = std::time::Instant::now();
        eprintln!("tlogd migrate: building the dedup index from the copy");
        // Opened to build the index only: `read_only` would freeze the copy for good.
        let mut section = section.clone();
        section.read_only = false;
        let opened = open_log(&c, &section, &clients).await?;
        let caught_up = async {
            while opened.log.dedup_lag() > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        tokio::select! {
            () = caught_up => {}
            why = opened.log.failed() => bail!("building the dedup index: {why}"),
        }
        opened.log.shutdown();
        opened.tasks.join().await;
        println!(
            "dedup index built up to {} entries in {:.1} s",
            opened.log.committed_size(),
            started.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// `tlogd freeze`: open the one log, freeze it, publish its final checkpoint, stop.
async fn freeze(c: Config, name: Option<String>) -> anyhow::Result<()> {
    let mut section = pick_log(&c, name.as_deref())?;
    section.read_only = true;
    let opened = open_log(&c, &section, &Clients::default()).await?;
    opened.log.shutdown();
    opened.tasks.join().await;
    let (size, published) = (opened.log.committed_size(), opened.log.published_size());
    if published != Some(size) {
        bail!(
            "the log is frozen at size {size}, but its final checkpoint was not published (a restart publishes it)"
        );
    }
    println!(
        "log {} ({}) is frozen at size {size}",
        section.label(),
        opened.log.origin()
    );
    Ok(())
}

async fn serve(c: Config) -> anyhow::Result<()> {
    check_fd_limit(c.http.max_connections);
    let metrics = observe::install_metrics()?;
    // Histograms buffer raw samples until drained: drain them even if nobody scrapes,
    // so memory stays bounded.
    let upkeep = {
        let handle = metrics.clone();
        tokio::spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                handle.run_upkeep();
            }
        })
    };
    let shutdown_signal = shutdown_signals()?;
    // Bind first (the metrics port too): a taken port fails before any log is opened
    // or written.
    let listener = listen(c.listen, c.http.max_connections)
        .with_context(|| format!("listening on {}", c.listen))?;
    let metrics_listener = match c.metrics.listen.as_str() {
        "" => None,
        addr => {
            let addr: SocketAddr = addr
                .parse()
                .with_context(|| format!("metrics.listen {addr:?}"))?;
            let ml = tokio::net::TcpListener::bind(addr)
                .await
                .with_context(|| format!("metrics: listening on {addr}"))?;
            Some((addr, ml))
        }
    };
    let opened = open_logs(&c).await?;
    let logs: Vec<Arc<dyn ServedLog>> = opened.iter().map(|o| o.log.clone()).collect();
    let mut routes = Vec::new();
    let mut tasks = Vec::new();
    let mut ct_logs = Vec::new();
    for o in opened {
        routes.push(o.routes);
        tasks.push(o.tasks);
        ct_logs.extend(o.ct);
    }
    if !ct_logs.is_empty() {
        reload_roots_on_sighup(ct_logs)?;
    }
    let metrics_task = if let Some((addr, ml)) = metrics_listener {
        let app = observe::router(logs.clone(), metrics);
        tracing::info!(%addr, "metrics and health endpoints listening");
        let opts = ServeOptions {
            name: "metrics",
            ..ServeOptions::from(&c.http)
        };
        Some(tokio::spawn(tlogd::serve::server::serve(
            ml,
            app,
            opts,
            std::future::pending(),
        )))
    } else {
        None
    };
    tracing::info!(
        addr = %c.listen,
        logs = logs.len(),
        max_connections = c.http.max_connections,
        "tlogd serving"
    );
    // Stop on a signal, or when a background task of a log died (fail-stop: a restart
    // re-reads storage; staying up would only answer errors).
    let failed = {
        let watched = logs.clone();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stop = async move {
            let failures = watched.iter().map(|l| l.failed());
            tokio::select! {
                _ = shutdown_signal => {}
                (reason, _, _) = futures_util::future::select_all(failures) => { let _ = tx.send(reason); }
            }
        };
        tlogd::serve::server::serve(
            listener,
            tlogd::serve::logs::public_router(routes),
            ServeOptions::from(&c.http),
            stop,
        )
        .await;
        rx.await.ok()
    };
    if let Some(reason) = failed {
        bail!("{reason}; stopping (restart to recover from storage)");
    }
    tracing::info!("shutting down: draining the queues");
    for log in &logs {
        log.shutdown();
    }
    for t in tasks {
        t.join().await;
    }
    if let Some(t) = metrics_task {
        t.abort();
    }
    upkeep.abort();
    let mut unpublished = Vec::new();
    for log in &logs {
        tracing::info!(log = log.name(), size = log.committed_size(), checkpoint = ?log.published_size(), "stopped");
        if log.published_size() != Some(log.committed_size()) {
            unpublished.push(log.name().to_string());
        }
    }
    if !unpublished.is_empty() {
        bail!(
            "final checkpoint was not published ({})",
            unpublished.join(", ")
        );
    }
    Ok(())
}

/// The log in an S3 or GCS bucket, with a cache of full tiles for reads served through
/// this daemon.
async fn open_object_store(
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
type Clients = std::sync::Mutex<std::collections::HashMap<String, ObjectStoreBackend>>;

fn lock_clients(
    c: &Clients,
) -> std::sync::MutexGuard<'_, std::collections::HashMap<String, ObjectStoreBackend>> {
    c.lock().unwrap_or_else(|e| e.into_inner())
}

/// A new client of the bucket `st` names, below its prefix.
fn new_object_client(
    st: &tlogd::config::StorageConfig,
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

/// A listening socket whose accept queue holds a burst of `max_connections` new
/// connections (the kernel caps it at `net.core.somaxconn`): `TcpListener::bind` asks
/// for 1,024, and a burst beyond that is answered with dropped handshakes and resets
/// before tlogd sees a connection it could admit or refuse.
fn listen(addr: SocketAddr, max_connections: usize) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(max_connections.clamp(1024, 65_535) as u32)
}

/// The RocksDB dedup index, if enabled: at `dedup.path`, else at `default_path`.
async fn open_dedup(
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

/// Raise the soft limit on open files to the hard one (as Go programs do): every
/// connection is a file descriptor, and the usual soft default of 1024 is below
/// `http.max_connections`. Warn when even the hard limit is.
fn check_fd_limit(max_connections: usize) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed.
    let soft = unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return;
        }
        if lim.rlim_cur < lim.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: lim.rlim_max,
                rlim_max: lim.rlim_max,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &raised) == 0 {
                lim.rlim_cur = lim.rlim_max;
            }
        }
        lim.rlim_cur
    };
    // Files, RocksDB and the database pool need descriptors too.
    let needed = max_connections as u64 + 512;
    if soft < needed {
        tracing::warn!(
            open_files_limit = soft,
            max_connections,
            "the open-files limit (ulimit -n) is too low for http.max_connections: connections beyond it fail to be accepted"
        );
    }
}

/// SIGTERM and SIGINT, caught from the moment this is called: a signal arriving while
/// the logs open, or before the server first polls its stop future, stops the daemon
/// cleanly instead of killing it (the default action) with its queues undrained.
/// On SIGHUP, every CT log reads its roots file again and adds its roots.
fn reload_roots_on_sighup(ct_logs: Vec<Arc<tlogd::routes::ct::CtLog>>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            for ct in &ct_logs {
                match ct.reload_roots() {
                    Ok(n) => tracing::info!(roots = n, "CT roots reloaded"),
                    Err(e) => tracing::error!(
                        error = %format!("{e:#}"),
                        "CT roots not reloaded; the roots in force stay"
                    ),
                }
            }
        }
    });
    Ok(())
}

fn shutdown_signals() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {},
            _ = term.recv() => {},
        }
    })
}

#[cfg(test)]
mod tests {
    use super::MI_OPTION_PURGE_DELAY;

    fn purge_delay() -> std::ffi::c_long {
        // SAFETY: reads one of the allocator's options.
        unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) }
    }

    /// The option index really is the purge delay (mimalloc v3's default for it is
    /// 1000 ms; the options next to it default to 1 and 0), and the daemon turns
    /// purging off unless the environment chose a delay.
    #[test]
    fn freed_memory_is_kept_unless_the_environment_says_otherwise() {
        let chosen = std::env::var("MIMALLOC_PURGE_DELAY").ok();
        let before = chosen.as_deref().map_or(Ok(1000), str::parse);
        assert_eq!(Ok(purge_delay()), before);
        super::keep_freed_memory();
        assert_eq!(
            Ok(purge_delay()),
            if chosen.is_some() { before } else { Ok(-1) }
        );
    }
}
