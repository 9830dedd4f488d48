//! `tlogd migrate`: its flags, the source side (a URL or a directory), the progress a
//! user sees, and the command's course; the copy itself is
//! [`tlogd_core::engine::import`], and the target is opened as `serve` opens a log
//! ([`crate::logset`]).

use std::time::Duration;

use bytes::Bytes;
use indicatif::ProgressBar;
use tlog_verify::VerifyError;
use tlog_verify::fetch::{DirFetcher, Fetch, HttpFetcher};
use tlogd_core::engine::import::CopyProgress;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::bail;
use tlogd_core::engine::LogStorage;

use crate::commands::serve::{ServeArgs, load_config};
use crate::commands::verify::CtEntryCheck;
use crate::logset::keys::{load_ct_key, load_signers};
use crate::logset::storage::{Clients, OverStorage, with_storage};
use crate::logset::{open_log, pick_log};
use crate::observe;

/// Where a migration reads from: any tlog-tiles or static-ct-api log, by base URL or
/// directory.
pub enum Source {
    /// A log served over HTTP(S).
    Http(HttpFetcher),
    /// A log in a local directory (Tessera's POSIX layout is tlog-tiles').
    Dir(DirFetcher),
}

impl Source {
    /// A base URL (`scheme://...`) or a directory; `timeout` per HTTP request.
    pub fn open(location: &str, timeout: Duration) -> Result<Self, VerifyError> {
        if location.contains("://") {
            HttpFetcher::new(location, None, timeout).map(Source::Http)
        } else {
            DirFetcher::new(location).map(Source::Dir)
        }
    }
}

impl Fetch for Source {
    async fn get(&self, path: &str) -> Result<Option<Bytes>, VerifyError> {
        let got = match self {
            Source::Http(f) => f.get(path).await,
            Source::Dir(f) => f.get(path).await,
        }?;
        Ok(match got {
            Some(b) if path.starts_with("tile/data/") && b.starts_with(&GZIP_MAGIC) => {
                Some(gunzip(path, &b)?)
            }
            other => other,
        })
    }

    fn location(&self) -> String {
        match self {
            Source::Http(f) => f.location(),
            Source::Dir(f) => f.location(),
        }
    }
}

/// The first bytes of a gzip stream (RFC 1952).
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The largest data tile decompressed (256 entries of a CT log's largest chains).
const MAX_DATA_TILE: u64 = 64 << 20;

/// A data tile as Sunlight keeps it: gzip-compressed (in its directory, and over HTTP
/// unless the server decodes it). A data tile as static-ct-api gives it never starts
/// with gzip's magic: its first bytes are a timestamp in milliseconds, and 0x1f8b...
/// is 72 million years from now. Decompressed to at most [`MAX_DATA_TILE`] bytes.
fn gunzip(path: &str, compressed: &[u8]) -> Result<Bytes, VerifyError> {
    use std::io::Read as _;
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(compressed)
        .take(MAX_DATA_TILE + 1)
        .read_to_end(&mut out)
        .map_err(|e| VerifyError::Invalid(format!("{path}: gzip: {e}")))?;
    if out.len() as u64 > MAX_DATA_TILE {
        return Err(VerifyError::Invalid(format!(
            "{path}: more than {MAX_DATA_TILE} bytes decompressed"
        )));
    }
    Ok(Bytes::from(out))
}

/// A progress bar on a terminal (entries committed to the target), nothing elsewhere.
pub struct CopyBar(ProgressBar);

impl CopyBar {
    /// Drawn on stderr unless `quiet` or stderr is not a terminal.
    pub fn new(quiet: bool) -> Self {
        CopyBar(crate::commands::verify::entries_bar(quiet))
    }
}

impl CopyProgress for CopyBar {
    fn start(&mut self, from: u64, to: u64) {
        self.0.set_length(to);
        self.0.set_position(from);
        self.0.reset_eta();
    }

    fn committed(&mut self, size: u64) {
        self.0.set_position(size);
    }
}

impl Drop for CopyBar {
    fn drop(&mut self) {
        self.0.finish_and_clear();
    }
}

/// `tlogd migrate`: where from, how, and the target log as `serve` takes it.
#[derive(clap::Args)]
pub struct MigrateArgs {
    /// The source log: a base URL (https://host/prefix) or a local directory holding
    /// `checkpoint` and `tile/` (Tessera's POSIX layout, tlogd's, any tlog-tiles log;
    /// for a target with `[ct]`, a static-ct-api log: TesseraCT's, Sunlight's).
    #[arg(long)]
    from: String,
    /// The source's verifier key (`name+hash+base64`; for a CT log, its public key as
    /// base64 DER, as log lists give it), for a source whose checkpoint this log's own
    /// key did not sign: the copy is then a mirror, which tlogd does not append to.
    /// Repeat for several.
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

/// `tlogd migrate`: check the source's checkpoint, copy its tree into the target log
/// ([`tlogd_core::engine::import`]), then build the dedup index of a continuation.
pub async fn run(args: MigrateArgs) -> anyhow::Result<()> {
    use tlogd_core::checkpoint::Checkpoint;
    use tlogd_core::engine::checker::{Fetch, open_checkpoint_with};
    use tlogd_core::note::NoteVerifier;
    let c = load_config(args.target)?;
    observe::init_logging(&c.log)?;
    let section = pick_log(&c, args.log.as_deref())?;
    let origin = section.origin.clone().unwrap_or_default();
    // A CT log (static-ct-api): its checkpoints carry an RFC 6962 note signature by its
    // ECDSA key, its entries are data tiles, and they name issuers by fingerprint.
    let ct = section.ct.is_some();
    // This log's own keys, when it has any: a copy they signed is a continuation.
    let keyed = !section.key_files().is_empty() || std::env::var_os("TLOGD_PRIVATE_KEY").is_some();
    let own: Vec<NoteVerifier> = match keyed {
        true if ct => {
            let key = load_ct_key(&section)?;
            vec![
                tlogd_ct::Rfc6962Check::verifier(&origin, key.public_key_der())
                    .map_err(|e| anyhow::anyhow!("the CT log's key: {e}"))?,
            ]
        }
        true => load_signers(&section, &origin)?
            .iter()
            .map(|s| s.verifier())
            .collect(),
        false => Vec::new(),
    };
    let mut theirs = Vec::new();
    for k in &args.source_public_key {
        theirs.push(
            source_verifier(k.trim(), &origin, ct)
                .map_err(|e| anyhow::anyhow!("--source-public-key {k:?}: {e}"))?,
        );
    }
    if own.is_empty() && theirs.is_empty() {
        bail!(
            "nothing to check the source's checkpoint with: configure this log's private key (the copy continues the log) or give --source-public-key (the copy is a mirror)"
        );
    }
    let timeout = Duration::from_secs_f64(args.http_timeout.max(0.1));
    let source = Source::open(&args.from, timeout)
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
        source: &'a Source,
        personality: Arc<dyn tlogd_core::personality::Personality>,
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
            let mut bar = CopyBar::new(self.quiet);
            Ok(tlogd_core::engine::import::copy_log(
                self.source,
                &*storage,
                &*self.personality,
                &self.checkpoint,
                &self.signed,
                &self.options,
                &mut bar,
            )
            .await?)
        }
    }
    let size = checkpoint.size;
    let (personality, entry_check): (Arc<dyn tlogd_core::personality::Personality>, _) = match ct {
        true => (
            Arc::new(tlogd_ct::StaticCt),
            Some(Arc::new(CtEntryCheck) as Arc<dyn tlogd_core::engine::checker::EntryCheck>),
        ),
        false => (Arc::new(tlogd_core::personality::TlogTiles), None),
    };
    let copy = Copy {
        source: &source,
        personality,
        checkpoint,
        signed,
        options: tlogd_core::engine::import::CopyOptions {
            jobs: args.jobs.max(1),
            bundles_per_commit: args.bundles_per_commit.max(1),
            entry_check,
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
        let issuers = match ct {
            true => format!(" and {} issuers", report.blobs),
            false => String::new(),
        };
        println!(
            "copied {copied} entries ({} bundles){issuers} from {} in {:.1} s: {:.0} entries/s{}; published the source's checkpoint (size {size})",
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

/// A `--source-public-key`: a note verifier key, or for a CT log its public key
/// (base64 DER SubjectPublicKeyInfo) under the log's origin.
fn source_verifier(
    key: &str,
    origin: &str,
    ct: bool,
) -> Result<tlogd_core::note::NoteVerifier, String> {
    match ct {
        true => crate::commands::verify::ct_log_verifier(origin, key),
        false => tlogd_core::note::NoteVerifier::from_vkey(key).map_err(|e| e.to_string()),
    }
}
