//! Fuzz targets for every parser of untrusted bytes in tlogd, one function per family
//! of inputs. Each takes arbitrary bytes, must never panic, and checks what the parsers
//! promise beyond not crashing (a parsed value encodes back to exactly the input; what
//! is signed opens again; ...), so a fuzzer finds wrong answers, not only crashes.
//!
//! * [`tile`]: tile paths ([`TileId::parse`]), hash tiles ([`parse_hash_tile`]), entry
//!   bundles ([`parse_bundle`]) and prefixes of stored tiles ([`tile_prefix`]);
//! * [`note`]: signed notes ([`Note::parse`], [`open_note`]), checkpoints
//!   ([`Checkpoint::parse`], [`Checkpoint::open`], [`signed_size`]), origins
//!   ([`validate_origin`]) and cosignature lines;
//! * [`keys`]: verifier and private key strings, log (Ed25519) and cosigner keys;
//! * [`witness`]: tlog-witness request and response bodies and tlog-policy files;
//! * [`config`](fn@config): the daemon's TOML configuration file;
//! * [`verify_log`]: a whole log as `tlogd verify` and the load generator read it
//!   (checkpoint, bundles, hash tiles, proofs; crate `tlog-verify`);
//! * [`ct`]: a CT log's untrusted bytes: static-ct-api data tiles, queued submissions,
//!   and X.509 certificates as `add-chain` and `add-pre-chain` validate them
//!   (`tlogd_ct::chain`, with its DER walker and precertificate TBS surgery).
//!
//! `src/bin/fuzz_*.rs` run them under AFL++ (`cargo afl`, stable Rust; see
//! `fuzz/README.md`); `tests/targets.rs` runs each on its seed corpus and a few
//! thousand mutations in the ordinary test suite.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use tlog_verify::VerifyError;
use tlog_verify::fetch::Fetch;
use tlog_verify::fsck::{FsckOptions, FsckSummary, fsck};
use tlog_verify::reader::LogReader;
use tlogd_core::bundle::{append_entry, parse_bundle};
use tlogd_core::checkpoint::{Checkpoint, signed_size, validate_origin};
use tlogd_core::cosignature::{CosignatureSigner, CosignatureVerifier};
use tlogd_core::hash::{Hash, leaf_hash};
use tlogd_core::merkle::TileTree;
use tlogd_core::note::{
    Note, NoteSigner, NoteVerifier, SignatureAlgorithm, key_id, open_note, sign_note,
};
use tlogd_core::tile::{TILE_WIDTH, TileId, TileKind, parse_hash_tile, tile_prefix};
use tlogd_core::witness::{
    WitnessPolicy, add_checkpoint_body, parse_add_checkpoint, parse_cosignatures, parse_size_body,
};

/// The daemon's configuration module, compiled from the daemon's own source. The
/// daemon crate links RocksDB and the SQL drivers, whose C and C++ an instrumented
/// build would compile again for half an hour; this module needs only serde, toml and
/// anyhow, and is the whole of the config file's parsing and validation.
#[path = "../../crates/daemon/src/config/mod.rs"]
pub mod config;

/// The log key the targets sign with (the Go test vectors' key).
pub const LOG_SKEY: &str =
    "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";
/// Its name, the log's origin in [`verify_log`].
pub const ORIGIN: &str = "example.com/log/testdata";

fn log_signer() -> &'static NoteSigner {
    static S: OnceLock<NoteSigner> = OnceLock::new();
    S.get_or_init(|| {
        NoteSigner::from_skey(LOG_SKEY).unwrap_or_else(|e| panic!("the fixed log key: {e}"))
    })
}

/// torchwood's ML-DSA-44 test log key (testdata/mldsa44), whose signed checkpoint is a
/// seed of the `note` corpus.
fn mldsa44_log() -> &'static NoteVerifier {
    static V: OnceLock<NoteVerifier> = OnceLock::new();
    V.get_or_init(|| {
        let vkey = include_str!("../../testdata/mldsa44/torchwood-log.vkey").trim();
        NoteVerifier::from_vkey(vkey).unwrap_or_else(|e| panic!("the fixed ML-DSA-44 key: {e}"))
    })
}

/// A cosigner key from a fixed seed, so every run of a target is the same run.
fn cosigner() -> &'static CosignatureSigner {
    static S: OnceLock<CosignatureSigner> = OnceLock::new();
    S.get_or_init(|| {
        let seed = [7u8; 32];
        let public = ed25519_dalek::SigningKey::from_bytes(&seed).verifying_key();
        let name = "witness.example/w1";
        let mut typed = vec![0x04];
        typed.extend_from_slice(public.as_bytes());
        let id = key_id(name, &typed);
        let mut private = vec![0x04];
        private.extend_from_slice(&seed);
        let skey = format!("PRIVATE+KEY+{name}+{id:08x}+{}", B64.encode(private));
        CosignatureSigner::from_skey(&skey)
            .unwrap_or_else(|e| panic!("the fixed cosigner key: {e}"))
    })
}

/// Tile paths, hash tiles, entry bundles and tile prefixes; the first byte chooses.
pub fn tile(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => tile_path(rest),
        1 => hash_tile(rest),
        2 => bundle(rest),
        _ => prefix(rest),
    }
}

fn tile_path(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(id) = TileId::parse(s) {
        // Only canonical paths parse: the id names exactly this path.
        assert_eq!(id.path(), s, "{id:?}");
        assert!((1..=TILE_WIDTH as u16).contains(&id.width), "{id:?}");
        if let TileKind::Hash { level } = id.kind {
            assert!(level <= 63, "{id:?}");
        }
    }
}

fn hash_tile(data: &[u8]) {
    let Some((w, bytes)) = data.split_first_chunk::<2>() else {
        return;
    };
    let width = u16::from_be_bytes(*w);
    if let Ok(hashes) = parse_hash_tile(bytes, width) {
        assert_eq!(hashes.len(), width as usize);
        assert_eq!(hashes.concat(), bytes);
    }
}

fn bundle(data: &[u8]) {
    let Ok(entries) = parse_bundle(data) else {
        return;
    };
    assert!(entries.len() <= TILE_WIDTH as usize);
    let mut again = Vec::with_capacity(data.len());
    for e in &entries {
        if let Err(err) = append_entry(&mut again, e) {
            panic!("a parsed entry does not encode: {err}");
        }
    }
    assert_eq!(again, data, "a bundle encodes back to its bytes");
    // Every narrower partial of this bundle is its prefix (tlog-tiles "Partial Tiles").
    let n = entries.len() as u16;
    for w in [0, n / 2, n.saturating_sub(1), n] {
        let Some(p) = tile_prefix(TileKind::Entries, data, n, w) else {
            panic!("no prefix of width {w} in a bundle of {n}");
        };
        match parse_bundle(p) {
            Ok(first) => assert_eq!(first, entries[..w as usize]),
            Err(err) => panic!("the prefix of width {w} does not parse: {err}"),
        }
    }
    assert_eq!(tile_prefix(TileKind::Entries, data, n, n + 1), None);
}

fn prefix(data: &[u8]) {
    let Some((head, bytes)) = data.split_first_chunk::<5>() else {
        return;
    };
    let kind = if head[0] & 1 == 0 {
        TileKind::Entries
    } else {
        TileKind::Hash {
            level: head[0] >> 1,
        }
    };
    let stored = u16::from_be_bytes([head[1], head[2]]);
    let width = u16::from_be_bytes([head[3], head[4]]);
    if let Some(p) = tile_prefix(kind, bytes, stored, width) {
        assert!(width <= stored);
        assert!(bytes.starts_with(p));
        if let TileKind::Hash { .. } = kind {
            assert_eq!(p.len(), width as usize * 32);
        }
    }
}

/// Signed notes, checkpoints, origins and cosignature lines.
pub fn note(data: &[u8]) {
    let signer = log_signer();
    let verifier = signer.verifier();
    if let Ok(n) = Note::parse(data) {
        // One encoding per note: what parses is what would be written.
        assert_eq!(n.to_bytes(), data, "a note encodes back to its bytes");
        for sig in &n.signatures {
            let _ = cosigner().verifier().verify(&n.text, sig);
        }
    }
    if let Ok(n) = open_note(data, &[&verifier]) {
        assert!(n.signatures.iter().any(|s| s.name == signer.name()));
    }
    if let Ok(n) = open_note(data, &[mldsa44_log()]) {
        // What an ML-DSA-44 signature verified is a checkpoint without extensions.
        match Checkpoint::parse(&n.text) {
            Ok(cp) => assert!(cp.extensions.is_empty()),
            Err(e) => panic!("an ML-DSA-44 signature verified a non-checkpoint: {e}"),
        }
    }
    let _ = signed_size(data);
    let cp_text = "example.com/log/testdata\n1\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n";
    if let Ok(sigs) = parse_cosignatures(cp_text, data) {
        for sig in &sigs {
            let _ = cosigner().verifier().verify(cp_text, sig);
        }
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let _ = Checkpoint::open(data, ORIGIN, &verifier);
    // What signs must open again, with the same text.
    if let Ok(signed) = sign_note(text, &[signer]) {
        match open_note(&signed, &[&verifier]) {
            Ok(n) => assert_eq!(n.text, text),
            Err(e) => panic!("a note signed here does not open: {e}"),
        }
    }
    if let Ok(cp) = Checkpoint::parse(text) {
        assert_eq!(cp.to_text(), text, "a checkpoint encodes back to its text");
        if let Ok(signed) = cp.sign(signer) {
            assert_eq!(signed_size(&signed), Some(cp.size));
            match Checkpoint::open(&signed, &cp.origin, &verifier) {
                Ok((back, _)) => assert_eq!(back, cp),
                Err(e) => panic!("a checkpoint signed here does not open: {e}"),
            }
            let cosig = cosigner().cosign(text, 1_700_000_000);
            assert_eq!(
                cosigner().verifier().verify(text, &cosig),
                Ok(1_700_000_000)
            );
        }
    }
    // Every origin the daemon accepts must make checkpoints it can sign and clients
    // can open; otherwise adds are accepted and nothing is ever published.
    if validate_origin(text).is_ok() {
        let cp = Checkpoint {
            origin: text.to_string(),
            size: 3,
            root: [9; 32],
            extensions: Vec::new(),
        };
        let signed = match cp.sign(signer) {
            Ok(s) => s,
            Err(e) => panic!("a valid origin {text:?} does not sign: {e}"),
        };
        match Checkpoint::open(&signed, text, &verifier) {
            Ok((back, _)) => assert_eq!(back, cp),
            Err(e) => panic!("a valid origin {text:?} does not open: {e}"),
        }
    }
}

/// Verifier and private key strings: log keys (Ed25519, type 0x01), cosigner keys
/// (type 0x04), and ML-DSA-44 keys (type 0x06), which are both.
pub fn keys(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(v) = NoteVerifier::from_vkey(s) {
        assert_eq!(v.to_vkey(), s, "a verifier key encodes back to its string");
    }
    if let Ok(k) = NoteSigner::from_skey(s) {
        let v = k.verifier();
        assert_eq!(NoteVerifier::from_vkey(&v.to_vkey()).as_ref(), Ok(&v));
        match sign_note("text\n", &[&k]) {
            Ok(signed) => assert!(open_note(&signed, &[&v]).is_ok()),
            Err(e) => panic!("a parsed key does not sign: {e}"),
        }
    }
    if let Ok(k) = tlogd_core::keys::log_signer_from_skey(s) {
        // Every log key signs a checkpoint (the ML-DSA-44 message needs one).
        let text = "o\n1\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n";
        let v = k.verifier();
        assert_eq!(NoteVerifier::from_vkey(&v.to_vkey()).as_ref(), Ok(&v));
        let cp = match Checkpoint::parse(text) {
            Ok(cp) => cp,
            Err(e) => panic!("the fixed checkpoint text: {e}"),
        };
        match cp.sign_with(&[&*k], 5_000) {
            Ok(signed) => assert!(open_note(&signed, &[&v]).is_ok()),
            Err(e) => panic!("a parsed log key does not sign: {e}"),
        }
    }
    if let Ok(v) = CosignatureVerifier::from_vkey(s) {
        assert_eq!(v.to_vkey(), s, "a cosigner key encodes back to its string");
    }
    if let Ok(k) = CosignatureSigner::from_skey(s) {
        let sig = k.cosign("o\n1\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n", 5);
        assert_eq!(
            k.verifier()
                .verify("o\n1\nBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwcHBwc=\n", &sig),
            Ok(5)
        );
    }
    // A log key and a cosigner key are never each other, but for ML-DSA-44 (type 0x06,
    // a log's ML-DSA-44 signature being a cosignature by its own key).
    if let (Ok(l), Ok(c)) = (
        NoteVerifier::from_vkey(s),
        CosignatureVerifier::from_vkey(s),
    ) {
        assert_eq!(l.algorithm(), SignatureAlgorithm::CosignatureMlDsa44);
        assert_eq!(c.algorithm(), SignatureAlgorithm::CosignatureMlDsa44);
    }
}

/// tlog-witness add-checkpoint request and 409 bodies, cosignature responses, and
/// tlog-policy files.
pub fn witness(data: &[u8]) {
    if let Ok(req) = parse_add_checkpoint(data) {
        assert_eq!(
            add_checkpoint_body(req.old, &req.proof, &req.checkpoint),
            data,
            "an add-checkpoint body encodes back to its bytes"
        );
    }
    if let Some(n) = parse_size_body(data) {
        assert_eq!(format!("{n}\n").as_bytes(), data);
    }
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(policy) = WitnessPolicy::parse(text) {
        let n = policy.witnesses().len();
        let _ = policy.describe();
        assert!(
            policy.satisfied(&vec![true; n]),
            "every witness cosigning meets any quorum"
        );
        if n > 0 && policy.describe() != "none" {
            assert!(
                !policy.satisfied(&vec![false; n]),
                "no cosignature meets none"
            );
        }
    }
}

/// The daemon's configuration file: parse, then validate what parsed.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = config::Config::parse(text) {
        let _ = c.validate();
    }
}

/// A log held in memory, at tlog-tiles paths.
#[derive(Clone, Default)]
struct MemoryLog(Arc<HashMap<String, Bytes>>);

impl Fetch for MemoryLog {
    async fn get(&self, path: &str) -> Result<Option<Bytes>, VerifyError> {
        Ok(self.0.get(path).cloned())
    }

    fn location(&self) -> String {
        "memory".into()
    }
}

/// The encoding of a log for [`verify_log`]: records of `kind`, a fixed header and a
/// length-prefixed body. Kinds: 0 a checkpoint text the harness signs with
/// [`LOG_SKEY`] (so the fuzzer gets past the signature), 1 a raw checkpoint, 2 an
/// entry bundle (header: index, width; width 0 is full), 3 a hash tile (header:
/// level, index, width), 4 an earlier checkpoint text (signed, given to the check as
/// already verified).
fn decode_log(mut data: &[u8]) -> (HashMap<String, Bytes>, Vec<String>) {
    let mut files = HashMap::new();
    let mut earlier = Vec::new();
    let width = |w: u8| if w == 0 { TILE_WIDTH as u16 } else { w as u16 };
    while let Some((&kind, rest)) = data.split_first() {
        let header = match kind % 5 {
            2 => 2,
            3 => 3,
            _ => 0,
        };
        let Some((h, rest)) = rest.split_at_checked(header) else {
            break;
        };
        let Some((len, rest)) = rest.split_first_chunk::<2>() else {
            break;
        };
        let len = (u16::from_be_bytes(*len) as usize).min(rest.len());
        let (body, rest) = rest.split_at(len);
        data = rest;
        let (path, body) = match kind % 5 {
            0 => match std::str::from_utf8(body)
                .ok()
                .and_then(|t| sign_note(t, &[log_signer()]).ok())
            {
                Some(signed) => ("checkpoint".to_string(), signed),
                None => continue,
            },
            1 => ("checkpoint".to_string(), body.to_vec()),
            2 => (
                TileId::entries(h[0] as u64, width(h[1])).path(),
                body.to_vec(),
            ),
            3 => (
                TileId::hash(h[0] % 64, h[1] as u64, width(h[2])).path(),
                body.to_vec(),
            ),
            _ => {
                if let Ok(t) = std::str::from_utf8(body) {
                    earlier.push(t.to_string());
                }
                continue;
            }
        };
        files.insert(path, Bytes::from(body));
    }
    (files, earlier)
}

/// Encode a log for [`verify_log`] (the inverse of its decoder), for seed inputs.
pub fn encode_log(
    checkpoint_text: &str,
    files: &[(TileId, Vec<u8>)],
    earlier: &[String],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut record = |kind: u8, header: &[u8], body: &[u8]| {
        out.push(kind);
        out.extend_from_slice(header);
        out.extend_from_slice(&(body.len() as u16).to_be_bytes());
        out.extend_from_slice(body);
    };
    record(0, &[], checkpoint_text.as_bytes());
    for e in earlier {
        record(4, &[], e.as_bytes());
    }
    for (id, bytes) in files {
        let w = if id.is_full() { 0 } else { id.width as u8 };
        match id.kind {
            TileKind::Entries => record(2, &[id.index as u8, w], bytes),
            // The fuzzed logs are tlog-tiles logs: they hold no data tiles.
            TileKind::Data => {}
            TileKind::Hash { level } => record(3, &[level, id.index as u8, w], bytes),
        }
    }
    out
}

/// A well-formed log of `entries` (entry `i` is `entry i`), every partial tile and
/// bundle of the checkpoints at `sizes` included, the last size checkpointed: the
/// seeds of [`verify_log`].
pub fn sample_log(sizes: &[u64]) -> Vec<u8> {
    let mut tree = TileTree::empty();
    let mut files: Vec<(TileId, Vec<u8>)> = Vec::new();
    let mut bundle = Vec::new();
    let mut texts = Vec::new();
    let mut out = Vec::new();
    for &size in sizes {
        let from = tree.size();
        let leaves: Vec<Hash> = (from..size)
            .map(|i| leaf_hash(format!("entry {i}").as_bytes()))
            .collect();
        for i in from..size {
            if i % TILE_WIDTH == 0 {
                bundle.clear();
            }
            if let Err(e) = append_entry(&mut bundle, format!("entry {i}").as_bytes()) {
                panic!("sample entry: {e}");
            }
            let n = i + 1 - i / TILE_WIDTH * TILE_WIDTH;
            if n == TILE_WIDTH || i + 1 == size {
                files.push((TileId::entries(i / TILE_WIDTH, n as u16), bundle.clone()));
            }
        }
        tree.append(&leaves, &mut out);
        files.append(&mut out);
        let cp = Checkpoint {
            origin: ORIGIN.into(),
            size,
            root: tree.root(),
            extensions: Vec::new(),
        };
        texts.push(cp.to_text());
    }
    let last = texts.pop().unwrap_or_default();
    encode_log(&last, &files, &texts)
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap_or_else(|e| panic!("a current-thread runtime: {e}"))
    })
}

/// A whole log read as `tlogd verify` and the load generator read one: the full check
/// (every bundle and tile up to the checkpoint, the partials it names, the root, the
/// earlier checkpoints' consistency), then proofs built from the log's tiles.
pub fn verify_log(data: &[u8]) {
    let (files, earlier) = decode_log(data);
    let log = MemoryLog(Arc::new(files));
    let verifier = log_signer().verifier();
    let earlier: Vec<Checkpoint> = earlier
        .iter()
        .filter_map(|t| Checkpoint::parse(t).ok())
        .collect();
    runtime().block_on(async {
        let options = FsckOptions {
            concurrency: 2,
            earlier: earlier.clone(),
            ..FsckOptions::default()
        };
        let mut summary = FsckSummary::default();
        let checked = fsck(&log, ORIGIN, &verifier, &options, &mut (), &mut summary).await;
        let mut reader = LogReader::new(log.clone(), ORIGIN.into(), verifier.clone());
        let Ok(cp) = reader.checkpoint().await else {
            assert!(checked.is_err(), "a log without a valid checkpoint passed");
            return;
        };
        if checked.is_ok() {
            assert_eq!(
                summary.entries, cp.size,
                "a log passed without all its entries"
            );
        }
        // Proofs from the log's own tiles, as the load generator checks entries.
        if cp.size > 0 {
            let index = cp.size - 1;
            if let Ok(entries) = reader.bundle(index / TILE_WIDTH, cp.size).await
                && let Some(e) = entries.get((index % TILE_WIDTH) as usize)
            {
                let leaf = leaf_hash(e);
                let included = reader.verify_inclusion(&cp, index, &leaf).await;
                let via_tile = reader.verify_via_tile(&cp, index, &leaf).await;
                if checked.is_ok() {
                    assert!(
                        included.is_ok() && via_tile.is_ok(),
                        "a checked log's proof failed"
                    );
                }
            }
        }
        for old in &earlier {
            let consistent = reader.verify_consistency(old, &cp).await;
            if checked.is_ok() && old.size <= cp.size {
                assert!(
                    consistent.is_ok(),
                    "a checked log's consistency proof failed"
                );
            }
        }
    });
}

/// DER certificates of the CT target's fixed chain: TesseraCT's test root and
/// intermediate (crates/ct/testdata/chains/tesseract).
fn ct_chain() -> &'static (tlogd_ct::chain::Roots, Vec<u8>) {
    static C: OnceLock<(tlogd_ct::chain::Roots, Vec<u8>)> = OnceLock::new();
    C.get_or_init(|| {
        let root =
            include_bytes!("../../crates/ct/testdata/chains/tesseract/test_root_ca_cert.pem");
        let inter = include_bytes!(
            "../../crates/ct/testdata/chains/tesseract/test_intermediate_ca_cert.pem"
        );
        let (roots, _) = tlogd_ct::chain::Roots::from_pem(root);
        let (inter, _) = tlogd_ct::chain::Roots::from_pem(inter);
        let der = inter.ders().next().map(<[u8]>::to_vec).unwrap_or_default();
        (roots, der)
    })
}

/// A CT log's untrusted bytes. The first byte picks the parser:
///
/// * `0`: a data tile ([`tlogd_static_ct::parse_data_tile`]): what parses encodes back
///   to exactly the input, and its leaves hash;
/// * `1`: a queued submission ([`tlogd_ct::Submission::decode`], what a forwarding
///   frontend sends): what decodes encodes back to the input;
/// * otherwise: a DER certificate, validated alone and followed by the fixed
///   intermediate, for both endpoints: never a panic; what validates names its chain's
///   fingerprints and queues as bytes that decode back to it.
pub fn ct(data: &[u8]) {
    use tlogd_ct::chain::{ChainKind, ChainPolicy, validate};
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    match mode {
        0 => {
            if let Ok(leaves) = tlogd_static_ct::parse_data_tile(rest) {
                let mut back = Vec::with_capacity(rest.len());
                for leaf in &leaves {
                    leaf.encode(&mut back);
                    let _ = leaf.merkle_tree_leaf().leaf_hash();
                }
                assert_eq!(back, rest, "a data tile re-encodes to other bytes");
                let split = tlogd_static_ct::split_data_tile(rest)
                    .unwrap_or_else(|e| panic!("parsed but does not split: {e}"));
                assert_eq!(split.len(), leaves.len());
            }
        }
        1 => {
            if let Ok(s) = tlogd_ct::Submission::decode(rest) {
                let back = s
                    .encode()
                    .unwrap_or_else(|e| panic!("decoded but does not encode: {e}"));
                assert_eq!(back, rest, "a submission re-encodes to other bytes");
            }
        }
        _ => {
            let (roots, inter) = ct_chain();
            let policy = ChainPolicy::default();
            let now = 1_767_139_200_000;
            for chain in [vec![rest.to_vec()], vec![rest.to_vec(), inter.clone()]] {
                for kind in [ChainKind::Certificate, ChainKind::Precertificate] {
                    let Ok(v) = validate(&chain, kind, roots, &policy, now) else {
                        continue;
                    };
                    assert_eq!(v.issuers.len(), v.submission.chain.len());
                    let bytes = v
                        .submission
                        .encode()
                        .unwrap_or_else(|e| panic!("a validated chain does not queue: {e}"));
                    let back = tlogd_ct::Submission::decode(&bytes)
                        .unwrap_or_else(|e| panic!("a queued submission does not decode: {e}"));
                    assert_eq!(back, v.submission);
                }
            }
        }
    }
}
