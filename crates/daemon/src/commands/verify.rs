//! `tlogd verify`: check any tlog-tiles log, tlogd's or not, from a base URL or a
//! local directory (the check itself is `tlog_verify::fsck`, shared with the load
//! generator's verification).

use std::io::IsTerminal;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sha2::{Digest, Sha256};
use tlog_verify::fetch::{DirFetcher, Fetch, HttpFetcher};
use tlog_verify::fsck::{EntryCheck, FsckOptions, FsckProgress, FsckSummary, fsck};
use tlog_verify::reader::open_checkpoint_with;
use tlogd_core::note::{NoteVerifier, SignatureAlgorithm};
use tlogd_core::personality::StoredEntry;
use tlogd_core::witness::WitnessPolicy;

use crate::logset::tessera::verify_failure;

/// Exit status when the log failed verification (or could not be read in full).
pub const EXIT_FAILED: u8 = 1;
/// Exit status for bad arguments (nothing was checked).
pub const EXIT_USAGE: u8 = 2;

/// `tlogd verify` arguments.
#[derive(clap::Args, Debug)]
pub struct VerifyArgs {
    /// The log: a base URL (http://host:port/prefix) or a local directory holding
    /// `checkpoint` and `tile/`.
    pub location: String,
    /// The log's verifier key (`name+hash+base64`, Ed25519 or ML-DSA-44); the first
    /// key's name is the origin unless --origin is given. Repeat for a log known by
    /// several keys (a key rotation): the checkpoint must carry a signature by one of
    /// them at least, and every signature by any of them must verify. With --ct: the
    /// log's ECDSA P-256 public key, base64 DER (a log list's `key`), once, and
    /// --origin is needed.
    #[arg(long, visible_alias = "key", required = true)]
    pub log_public_key: Vec<String>,
    /// A Certificate Transparency log (C2SP static-ct-api): data tiles, RFC 6962
    /// leaf hashes and checkpoint signature; every entry's `leaf_index` must be its
    /// position, and every issuer it names must be served with matching bytes.
    #[arg(long)]
    pub ct: bool,
    /// The checkpoint origin, when it differs from the key's name.
    #[arg(long)]
    pub origin: Option<String>,
    /// A signed checkpoint saved earlier from the same log (a file): the log must be
    /// consistent with it. Repeat for several.
    #[arg(long = "earlier-checkpoint", value_name = "FILE")]
    pub earlier: Vec<PathBuf>,
    /// A witness policy (C2SP tlog-policy file): the checkpoint's cosignatures must
    /// meet its quorum.
    #[arg(long, value_name = "FILE")]
    pub witness_policy: Option<PathBuf>,
    /// Bundles (each with its level-0 tile) read at once.
    #[arg(long, default_value_t = 16)]
    pub jobs: usize,
    /// HTTP timeout per request, in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub http_timeout: f64,
    /// No progress bar (it is only drawn on a terminal anyway).
    #[arg(long)]
    pub quiet: bool,
}

struct Bar(ProgressBar);

impl FsckProgress for Bar {
    fn start(&mut self, size: u64) {
        self.0.set_length(size);
    }
    fn entries(&mut self, done: u64) {
        self.0.set_position(done);
    }
}

/// A progress bar of entries on stderr (`verify`, `migrate`); hidden when `quiet` or
/// stderr is not a terminal.
pub fn entries_bar(quiet: bool) -> ProgressBar {
    if quiet || !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(0), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template(
        "{spinner} [{elapsed_precise}] {wide_bar} {human_pos}/{human_len} entries ({per_sec}, eta {eta})",
    ) {
        bar.set_style(style);
    }
    bar
}

/// Run the check; prints a summary on stdout, the first failure on stderr, and
/// returns the exit status (0 = the log verified).
pub fn run(args: VerifyArgs) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tlogd verify: starting the async runtime: {e}");
            return EXIT_USAGE;
        }
    };
    runtime.block_on(run_async(args))
}

async fn run_async(args: VerifyArgs) -> u8 {
    let keys = match ct_or_note_verifiers(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("tlogd verify: --log-public-key: {e}");
            return EXIT_USAGE;
        }
    };
    let (verifier, more_keys) = match keys.split_first() {
        Some((first, rest)) => (first.clone(), rest.to_vec()),
        None => {
            eprintln!("tlogd verify: --log-public-key is required");
            return EXIT_USAGE;
        }
    };
    let origin = args
        .origin
        .clone()
        .unwrap_or_else(|| verifier.name().to_string());
    let all: Vec<&NoteVerifier> = keys.iter().collect();
    let mut earlier = Vec::new();
    for path in &args.earlier {
        let opened = std::fs::read(path)
            .map_err(|e| e.to_string())
            .and_then(|b| open_checkpoint_with(&b, &origin, &all).map_err(|e| e.to_string()));
        match opened {
            Ok((cp, _)) => earlier.push(cp),
            Err(e) => {
                eprintln!("tlogd verify: --earlier-checkpoint {}: {e}", path.display());
                return EXIT_USAGE;
            }
        }
    }
    let witness_policy = match &args.witness_policy {
        None => None,
        Some(path) => {
            match std::fs::read_to_string(path)
                .map_err(|e| e.to_string())
                .and_then(|t| WitnessPolicy::parse(&t).map_err(|e| e.to_string()))
            {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("tlogd verify: --witness-policy {}: {e}", path.display());
                    return EXIT_USAGE;
                }
            }
        }
    };
    let mut options = FsckOptions {
        concurrency: args.jobs.max(1),
        earlier,
        witness_policy,
        more_keys,
        ..FsckOptions::default()
    };
    if args.ct {
        options.personality = Arc::new(tlogd_ct::StaticCt);
        options.entry_check = Some(Arc::new(CtEntryCheck));
    }
    let timeout = Duration::from_secs_f64(args.http_timeout.max(0.1));
    if args.location.contains("://") {
        match HttpFetcher::new(&args.location, None, timeout) {
            Ok(f) => check(&f, &origin, &verifier, &options, &args).await,
            Err(e) => {
                eprintln!("tlogd verify: {e}");
                EXIT_USAGE
            }
        }
    } else {
        match DirFetcher::new(&args.location) {
            Ok(f) => check(&f, &origin, &verifier, &options, &args).await,
            Err(e) => {
                eprintln!("tlogd verify: {e}");
                EXIT_USAGE
            }
        }
    }
}

/// The log's verifiers: signed-note verifier keys (of distinct keys), or with `--ct`
/// a CT log's public key (base64 DER) under `--origin`.
fn ct_or_note_verifiers(args: &VerifyArgs) -> Result<Vec<NoteVerifier>, String> {
    if !args.ct {
        let mut keys: Vec<NoteVerifier> = Vec::with_capacity(args.log_public_key.len());
        for k in &args.log_public_key {
            let v = NoteVerifier::from_vkey(k.trim()).map_err(|e| e.to_string())?;
            if keys
                .iter()
                .any(|o| o.name() == v.name() && o.key_id() == v.key_id())
            {
                return Err(format!(
                    "the key {}+{:08x} is given twice",
                    v.name(),
                    v.key_id()
                ));
            }
            keys.push(v);
        }
        return Ok(keys);
    }
    let [key] = &args.log_public_key[..] else {
        return Err("a CT log has one key: give --log-public-key once with --ct".into());
    };
    let origin = args
        .origin
        .as_deref()
        .ok_or("a CT log's --origin is needed with --ct")?;
    Ok(vec![ct_log_verifier(origin, key.trim())?])
}

/// The verifier of a CT log's checkpoints (RFC 6962 note signatures) from its public
/// key as log lists give it, base64 DER `SubjectPublicKeyInfo`, under `origin`.
pub(crate) fn ct_log_verifier(origin: &str, key: &str) -> Result<NoteVerifier, String> {
    use base64::Engine as _;
    let spki = base64::engine::general_purpose::STANDARD
        .decode(key)
        .map_err(|e| format!("not base64: {e}"))?;
    tlogd_ct::Rfc6962Check::verifier(origin, &spki).map_err(|e| e.to_string())
}

/// What a CT log's leaf hashes cannot show: each entry's `leaf_index` extension is its
/// position (static-ct-api "Log entries"), and each issuer it names by fingerprint is
/// served at `issuer/<hex>` with bytes of that SHA-256 (static-ct-api "Issuers").
#[derive(Debug)]
pub(crate) struct CtEntryCheck;

/// The largest issuer certificate a CT log's `issuer/` may hold here (real ones are
/// 1–2 KB; RFC 6962 caps a whole chain's body far below this).
const MAX_ISSUER_BYTES: usize = 64 * 1024;

impl EntryCheck for CtEntryCheck {
    fn check_entry(&self, index: u64, entry: &StoredEntry<'_>) -> Result<Vec<String>, String> {
        let leaves = tlogd_static_ct::parse_data_tile(entry.bytes).map_err(|e| e.to_string())?;
        let [leaf] = &leaves[..] else {
            return Err(format!("{} TileLeafs where one was split", leaves.len()));
        };
        let te = &leaf.timestamped_entry;
        match tlogd_static_ct::sct::parse_leaf_index(&te.extensions) {
            Ok(Some(i)) if i == index => {}
            Ok(Some(i)) => return Err(format!("its leaf_index extension says {i}")),
            Ok(None) => return Err("no leaf_index extension".into()),
            Err(e) => return Err(e.to_string()),
        }
        Ok(leaf
            .certificate_chain
            .iter()
            .map(|f| format!("issuer/{}", crate::answer::hex(f)))
            .collect())
    }

    fn check_blob(&self, key: &str, bytes: &[u8]) -> Result<(), String> {
        if bytes.len() > MAX_ISSUER_BYTES {
            return Err(format!("{} bytes, not a certificate", bytes.len()));
        }
        let hex = crate::answer::hex(&Sha256::digest(bytes));
        match key.strip_prefix("issuer/") {
            Some(want) if want == hex => {}
            _ => return Err(format!("its bytes hash to {hex}")),
        }
        tlogd_ct::chain::check_certificate(bytes).map_err(|e| format!("not a certificate: {e}"))
    }

    fn check_entry_with_blobs(
        &self,
        _index: u64,
        entry: &StoredEntry<'_>,
        blobs: &[&[u8]],
    ) -> Result<(), String> {
        let mut leaves =
            tlogd_static_ct::parse_data_tile(entry.bytes).map_err(|e| e.to_string())?;
        let Some(leaf) = leaves.pop() else {
            return Err("no TileLeaf".into());
        };
        match (&leaf.timestamped_entry.entry, &leaf.pre_certificate) {
            (
                tlogd_static_ct::leaf::LogEntry::Precert {
                    issuer_key_hash,
                    tbs_certificate,
                },
                Some(pre),
            ) => tlogd_ct::chain::check_logged_precertificate(
                pre,
                blobs,
                tbs_certificate,
                issuer_key_hash,
            ),
            _ => Ok(()),
        }
    }

    fn blob_content_type(&self) -> &'static str {
        "application/pkix-cert"
    }
}

async fn check<F: Fetch>(
    fetch: &F,
    origin: &str,
    verifier: &NoteVerifier,
    options: &FsckOptions,
    args: &VerifyArgs,
) -> u8 {
    let started = Instant::now();
    let mut progress = Bar(entries_bar(args.quiet));
    let mut summary = FsckSummary::default();
    let result = fsck(
        fetch,
        origin,
        verifier,
        options,
        &mut progress,
        &mut summary,
    )
    .await;
    progress.0.finish_and_clear();
    let elapsed = started.elapsed();
    match result {
        Ok(()) => {
            println!("{}", describe_ok(&fetch.location(), &summary, elapsed));
            0
        }
        Err(e) => {
            eprintln!("FAIL {}", verify_failure(&e));
            eprintln!(
                "     checked before the failure: {} entries in {} bundles of {}",
                summary.entries,
                summary.bundles,
                fetch.location()
            );
            EXIT_FAILED
        }
    }
}

/// The summary of a successful check.
fn describe_ok(location: &str, s: &FsckSummary, elapsed: Duration) -> String {
    let size = s.checkpoint.as_ref().map_or(0, |c| c.size);
    let origin = s
        .checkpoint
        .as_ref()
        .map_or(String::new(), |c| c.origin.clone());
    let levels: Vec<String> = s
        .hash_tiles
        .iter()
        .enumerate()
        .map(|(l, n)| format!("level {l}: {n}"))
        .collect();
    let keys: Vec<String> = s
        .signed_by
        .iter()
        .map(|(name, id, alg)| format!("{name}+{id:08x} ({})", algorithm_name(*alg)))
        .collect();
    let mut out = format!(
        "OK   {origin}: checkpoint of size {size} verified with {}\n     {} entries in {} bundles; hash tiles recomputed and identical: {}\n     {} partial tiles and bundles named by the checkpoint present",
        keys.join(" and "),
        s.entries,
        s.bundles,
        if levels.is_empty() {
            "none (empty log)".to_string()
        } else {
            levels.join(", ")
        },
        s.partials,
    );
    if s.partials_from_full > 0 {
        out.push_str(&format!(
            " ({} of them deleted after their full tile was written, checked against it)",
            s.partials_from_full
        ));
    }
    if s.earlier_partials > 0 {
        out.push_str(&format!(
            "; {} named by the earlier checkpoints present (or their full tiles)",
            s.earlier_partials
        ));
    }
    if s.blobs > 0 {
        out.push_str(&format!(
            "\n     {} issuers named by the entries served with their fingerprints' bytes; every leaf_index matches its position",
            s.blobs
        ));
    }
    if !s.cosigned.is_empty() {
        let names: Vec<String> = s
            .cosigned
            .iter()
            .map(|(n, t)| format!("{n} (time {t})"))
            .collect();
        out.push_str(&format!(
            "\n     cosigned as the witness policy requires by {}",
            names.join(", ")
        ));
    }
    if !s.earlier.is_empty() {
        let sizes: Vec<String> = s.earlier.iter().map(u64::to_string).collect();
        out.push_str(&format!(
            "\n     consistent with the earlier checkpoints of size {}",
            sizes.join(", ")
        ));
    }
    out.push_str(&format!(
        "\n     read {:.1} MiB from {location} in {:.1} s",
        s.bytes as f64 / (1 << 20) as f64,
        elapsed.as_secs_f64()
    ));
    out
}

/// A signature type in words, for the summary.
fn algorithm_name(alg: SignatureAlgorithm) -> &'static str {
    match alg {
        SignatureAlgorithm::Ed25519 => "Ed25519",
        SignatureAlgorithm::CosignatureMlDsa44 => "ML-DSA-44",
        SignatureAlgorithm::Rfc6962TreeHead => "RFC 6962 ECDSA P-256",
        SignatureAlgorithm::CosignatureEd25519 => "Ed25519 cosignature",
        _ => "other",
    }
}
