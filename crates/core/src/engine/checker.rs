//! The whole-log checker: one implementation of "is this log what it claims to be",
//! used by `tlogd verify` and the load generator (through `tlog-verify`, over HTTP or
//! a directory) and by every storage test (through [`check_log`], over a
//! [`LogStorage`]).
//!
//! 1. The checkpoint must verify with the log's key and origin (tlog-checkpoint,
//!    signed-note).
//! 2. Every entry bundle up to the checkpoint's size is read (many at once, processed
//!    in order); its entries are hashed and appended to a tree rebuilt from scratch.
//!    Every bundle must hold exactly its width of entries (tlog-tiles "Log entries").
//!    The log's personality says what a bundle is and how an entry hashes: tlog-tiles
//!    entry bundles by default, static-ct-api data tiles for a CT log, whose entries
//!    an [`EntryCheck`] also checks one by one (the `leaf_index` extension, the issuers
//!    served).
//! 3. Every hash tile of every level is compared with the one the entries determine,
//!    byte for byte; the partial tiles the checkpoint names must be served (tlog-tiles
//!    "Partial Tiles": a log MUST serve them; it MAY have deleted one whose full tile
//!    exists, and then the full tile's prefix is checked).
//! 4. The rebuilt root must be the checkpoint's root, and every earlier checkpoint
//!    given must be the root of the first entries of this tree (the definition of
//!    consistency, RFC 6962 section 2.1.2); the partial tiles and bundle each earlier
//!    checkpoint names must still be served (or their full tile) with the bytes the
//!    entries determine, as for the checkpoint itself.
//! 5. Optionally, the checkpoint's cosignatures must meet a witness policy
//!    (tlog-policy, tlog-cosignature), and the check may run up to a private tree state
//!    ahead of the checkpoint (a store's committed state; adopting a Tessera log), the
//!    checkpoint then being one of the earlier ones.
//!
//! The first failure stops the check and names the resource. Where the bytes come
//! from is a [`Fetch`]: `tlog-verify`'s HTTP and directory fetchers, or any
//! [`LogStorage`] ([`StoredLog`]).

use std::collections::HashSet;
use std::future::Future;
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use futures_util::StreamExt as _;

use super::storage::{LogStorage, StorageError, TreeState};
use crate::checkpoint::Checkpoint;
use crate::hash::{Hash, leaf_hash};
use crate::merkle::TileTree;
use crate::note::{Note, NoteVerifier, SignatureAlgorithm};
use crate::personality::{Personality, StoredEntry, TlogTiles};
use crate::tile::{TILE_WIDTH, TileId, TileKind, edge_bundle, tile_prefix};
use crate::witness::WitnessPolicy;

/// A log that could not be read, or is not what it claims to be. Messages name the
/// resource (tlog-tiles path) at fault.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// A transport failure or an unexpected HTTP status: nothing is known about the
    /// log's contents.
    #[error("{0}")]
    Fetch(String),
    /// A resource the log must serve is absent.
    #[error("{0}: not found")]
    NotFound(String),
    /// A resource is malformed or disagrees with the rest of the log.
    #[error("{0}")]
    Invalid(String),
    /// The checkpoint does not verify with the log's key and origin.
    #[error("checkpoint: {0}")]
    Checkpoint(String),
}

/// Reads a log's resources by tlog-tiles path (`checkpoint`, `tile/0/000`, ...).
pub trait Fetch: Send + Sync {
    /// The bytes at `path`, `Ok(None)` when the log does not have it.
    fn get(&self, path: &str) -> impl Future<Output = Result<Option<Bytes>, VerifyError>> + Send;

    /// Where the log is, for messages.
    fn location(&self) -> String;
}

/// A [`LogStorage`] read as a [`Fetch`]: its checkpoint, tiles and blobs by path.
pub struct StoredLog<'a, S>(pub &'a S);

impl<S: LogStorage> Fetch for StoredLog<'_, S> {
    async fn get(&self, path: &str) -> Result<Option<Bytes>, VerifyError> {
        let got = if path == "checkpoint" {
            self.0.read_checkpoint().await
        } else if let Ok(id) = TileId::parse(path) {
            self.0.read_tile(&id).await
        } else {
            self.0.read_blob(path).await
        };
        got.map(|b| b.map(Bytes::from))
            .map_err(|e| VerifyError::Fetch(format!("{path}: {e}")))
    }

    fn location(&self) -> String {
        format!("{} storage", self.0.backend_name())
    }
}

/// Verify a signed checkpoint of the log `origin` with its key.
pub fn open_checkpoint(
    bytes: &[u8],
    origin: &str,
    verifier: &NoteVerifier,
) -> Result<Checkpoint, VerifyError> {
    open_checkpoint_with(bytes, origin, &[verifier]).map(|(cp, _)| cp)
}

/// Verify a signed checkpoint of the log `origin` known by several keys (a key
/// rotation): it must carry a signature by one of them at least, and every signature
/// by any of them must verify (signed-note "Signatures"). Returns the checkpoint and
/// the keys whose signature it carries, in the order given.
pub fn open_checkpoint_with<'a>(
    bytes: &[u8],
    origin: &str,
    verifiers: &[&'a NoteVerifier],
) -> Result<(Checkpoint, Vec<&'a NoteVerifier>), VerifyError> {
    let (cp, note) = Checkpoint::open_with(bytes, origin, verifiers)
        .map_err(|e| VerifyError::Checkpoint(e.to_string()))?;
    let signed_by = verifiers
        .iter()
        .filter(|v| {
            note.signatures
                .iter()
                .any(|s| s.name == v.name() && s.key_id == v.key_id())
        })
        .copied()
        .collect();
    Ok((cp, signed_by))
}

/// The width of bundle (or level-0 tile) `n` in a tree of `size`.
pub fn width_at(n: u64, size: u64) -> u16 {
    (size.saturating_sub(n * TILE_WIDTH)).min(TILE_WIDTH) as u16
}

/// A bundle holds exactly as many entries as its path's width says (tlog-tiles "Log
/// entries").
pub fn check_width(got: &TileId, entries: usize) -> Result<(), VerifyError> {
    if entries == got.width as usize {
        return Ok(());
    }
    Err(VerifyError::Invalid(format!(
        "{}: holds {entries} entries, expected {}",
        got.path(),
        got.width
    )))
}

/// What to check, and how hard to push the log.
#[derive(Clone, Debug)]
pub struct FsckOptions {
    /// Bundles (each with its level-0 tile) fetched at once.
    pub concurrency: usize,
    /// Earlier checkpoints of the same log (already verified): each must be consistent
    /// with the one checked.
    pub earlier: Vec<Checkpoint>,
    /// Check up to this tree (size, root) instead of the checkpoint's: for a log whose
    /// private tree state is ahead of its published checkpoint (a Tessera log being
    /// adopted). The checkpoint, if any, must then be consistent with it.
    pub tree: Option<(u64, Hash)>,
    /// The checkpoint's cosignatures must meet this policy's quorum (tlog-policy,
    /// tlog-cosignature).
    pub witness_policy: Option<WitnessPolicy>,
    /// More keys of the log beside the one [`fsck`] is given (a key rotation): the
    /// checkpoint verifies when it carries a signature by any of them, and every
    /// signature it carries by any of them verifies.
    pub more_keys: Vec<NoteVerifier>,
    /// What the log's entries are: its bundles' kind and codec, its leaf hash
    /// ([`TlogTiles`] by default).
    pub personality: Arc<dyn Personality>,
    /// Checks of each entry beyond its leaf hash.
    pub entry_check: Option<Arc<dyn EntryCheck>>,
}

impl Default for FsckOptions {
    fn default() -> Self {
        FsckOptions {
            concurrency: 16,
            earlier: Vec::new(),
            tree: None,
            witness_policy: None,
            more_keys: Vec::new(),
            personality: Arc::new(TlogTiles),
            entry_check: None,
        }
    }
}

/// Checks of a log's entries that their leaf hashes cannot make (a CT log's: each
/// entry's `leaf_index` is its position; every issuer it names is served).
pub trait EntryCheck: Send + Sync + std::fmt::Debug {
    /// Check the entry at `index` as stored; the keys of the blobs beside the tree it
    /// names, which must be served.
    fn check_entry(&self, index: u64, entry: &StoredEntry<'_>) -> Result<Vec<String>, String>;

    /// Check a blob an entry named (read once however many entries name it).
    fn check_blob(&self, key: &str, bytes: &[u8]) -> Result<(), String>;

    /// Check the entry at `index` with the blobs it names (in the order
    /// [`check_entry`](Self::check_entry) gave them): what needs both, as a CT
    /// precertificate's TBS derived from its precertificate through its chain. A copy
    /// (`tlogd migrate`) calls it for every entry before committing it.
    fn check_entry_with_blobs(
        &self,
        _index: u64,
        _entry: &StoredEntry<'_>,
        _blobs: &[&[u8]],
    ) -> Result<(), String> {
        Ok(())
    }

    /// The HTTP `Content-Type` of the blobs the entries name, for a copy that stores
    /// them ([`LogStorage::put_blob`](super::storage::LogStorage::put_blob)).
    fn blob_content_type(&self) -> &'static str {
        "application/octet-stream"
    }
}

/// Told how far the check got.
pub trait FsckProgress {
    /// The checkpoint verified; `size` entries will be checked.
    fn start(&mut self, _size: u64) {}
    /// `done` entries (and their tiles) checked so far.
    fn entries(&mut self, _done: u64) {}
    /// The entry at `index`, as stored, read in order (before its tiles are checked).
    fn entry(&mut self, _index: u64, _entry: &StoredEntry<'_>) {}
}

impl FsckProgress for () {}

/// What a check covered.
#[derive(Clone, Debug, Default)]
pub struct FsckSummary {
    /// The checkpoint checked (signature verified).
    pub checkpoint: Option<Checkpoint>,
    /// The log's keys (of those given) whose signature the checkpoint carries, all
    /// verified, in the order given: `(name, key ID, signature type)`.
    pub signed_by: Vec<(String, u32, SignatureAlgorithm)>,
    /// Entries read, hashed and found in place.
    pub entries: u64,
    /// Entry bundles read.
    pub bundles: u64,
    /// Hash tiles recomputed and found identical, per level.
    pub hash_tiles: Vec<u64>,
    /// Partial tiles and bundles the checkpoint names, found.
    pub partials: u64,
    /// Of those, how many were gone and checked as the prefix of their full tile.
    pub partials_from_full: u64,
    /// Partial tiles and bundles named by the earlier checkpoints (or their full
    /// tiles), found with the right bytes.
    pub earlier_partials: u64,
    /// Sizes of the earlier checkpoints found consistent.
    pub earlier: Vec<u64>,
    /// The policy's witnesses whose cosignature on the checkpoint verified: (name,
    /// timestamp).
    pub cosigned: Vec<(String, u64)>,
    /// Blobs beside the tree (a CT log's issuers) named by entries, found and checked.
    pub blobs: u64,
    /// Bytes read.
    pub bytes: u64,
}

/// One bundle and its level-0 tile, as read.
struct Fetched {
    bundle: (TileId, Bytes),
    tile: (TileId, Bytes),
}

/// Read `id`; a partial that is gone may be read as its full tile (returned id).
pub(crate) async fn get_tile<F: Fetch + ?Sized>(
    fetch: &F,
    id: TileId,
) -> Result<(TileId, Bytes), VerifyError> {
    if let Some(b) = fetch.get(&id.path()).await? {
        return Ok((id, b));
    }
    if !id.is_full()
        && let Some(b) = fetch.get(&id.full().path()).await?
    {
        return Ok((id.full(), b));
    }
    Err(VerifyError::NotFound(id.path()))
}

fn b64(h: &Hash) -> String {
    base64::engine::general_purpose::STANDARD.encode(h)
}

/// Check the log behind `fetch` (see the module docs). `origin` and `verifier`
/// identify the log. On failure, `summary` tells what had been checked before it.
pub async fn fsck<F: Fetch + ?Sized>(
    fetch: &F,
    origin: &str,
    verifier: &NoteVerifier,
    options: &FsckOptions,
    progress: &mut dyn FsckProgress,
    summary: &mut FsckSummary,
) -> Result<(), VerifyError> {
    let cp = match fetch.get("checkpoint").await? {
        Some(bytes) => {
            summary.bytes += bytes.len() as u64;
            let keys: Vec<&NoteVerifier> = std::iter::once(verifier)
                .chain(&options.more_keys)
                .collect();
            let (cp, signed_by) = open_checkpoint_with(&bytes, origin, &keys)?;
            summary.signed_by = signed_by
                .iter()
                .map(|v| (v.name().to_string(), v.key_id(), v.algorithm()))
                .collect();
            if let Some(policy) = &options.witness_policy {
                check_cosignatures(&bytes, policy, summary)?;
            }
            summary.checkpoint = Some(cp.clone());
            Some(cp)
        }
        // A tree state to check against does without a published checkpoint.
        None if options.tree.is_some() => None,
        None => return Err(VerifyError::NotFound("checkpoint".into())),
    };
    let (size, target_root, target) = match (options.tree, &cp) {
        (Some((size, root)), _) => (size, root, "tree state"),
        (None, Some(cp)) => (cp.size, cp.root, "checkpoint"),
        (None, None) => return Err(VerifyError::NotFound("checkpoint".into())),
    };
    progress.start(size);
    let mut earlier: Vec<&Checkpoint> = options.earlier.iter().collect();
    if options.tree.is_some()
        && let Some(cp) = &cp
    {
        earlier.push(cp);
    }
    earlier.sort_by_key(|c| c.size);
    if let Some(ahead) = earlier.iter().find(|c| c.size > size) {
        return Err(VerifyError::Invalid(format!(
            "the checkpoint of size {} is ahead of the {target} of size {size}: the log went back",
            ahead.size
        )));
    }
    let mut earlier = earlier.into_iter().peekable();
    let mut check_earlier = |tree: &TreeRebuilder, summary: &mut FsckSummary| {
        while let Some(old) = earlier.next_if(|c| c.size <= tree.size()) {
            // Only sizes reached exactly are checked here; the loop below splits
            // appends at every earlier size.
            let root = tree.root();
            if old.size != tree.size() || root != old.root {
                return Err(VerifyError::Invalid(format!(
                    "the checkpoint of size {} is not consistent with the log: its first {} entries hash to {}, the checkpoint names {}",
                    old.size,
                    old.size,
                    b64(&root),
                    b64(&old.root)
                )));
            }
            summary.earlier.push(old.size);
        }
        Ok(())
    };
    let mut tree = TreeRebuilder::new();
    // Earlier checkpoints of the empty tree.
    check_earlier(&tree, summary)?;
    // In order: the published checkpoint may be older than one seen earlier (after a
    // crash lost its rename; the tree went on, and the log publishes again at start).
    let mut split_points: Vec<u64> = options
        .earlier
        .iter()
        .chain(cp.iter().filter(|_| options.tree.is_some()))
        .map(|c| c.size)
        .collect();
    split_points.sort_unstable();
    split_points.dedup();
    // Sizes whose partials are checked on the way; the final size's are checked with
    // the tiles themselves.
    let earlier_sizes: std::collections::BTreeSet<u64> = split_points
        .iter()
        .copied()
        .filter(|&s| s != size)
        .collect();

    let personality = options.personality.clone();
    let kind = personality.bundle_kind();
    let bundle_at = move |n: u64, width: u16| TileId {
        kind,
        index: n,
        width,
    };
    let mut blobs_seen = HashSet::new();
    let bundles = size.div_ceil(TILE_WIDTH);
    // Bundles (with their level-0 tiles) are read `concurrency` at a time, ahead of
    // the one being checked, and checked in order.
    let mut reads = futures_util::stream::iter(0..bundles)
        .map(|i| async move {
            let w = width_at(i, size);
            let (bundle, tile) = tokio::join!(
                get_tile(fetch, bundle_at(i, w)),
                get_tile(fetch, TileId::hash(0, i, w))
            );
            Ok::<_, VerifyError>(Fetched {
                bundle: bundle?,
                tile: tile?,
            })
        })
        .buffered(options.concurrency.max(1));
    for n in 0..bundles {
        let Some(fetched) = reads.next().await else {
            break;
        };
        let fetched = fetched?;
        let width = width_at(n, size);
        let (bundle_id, bundle_bytes) = &fetched.bundle;
        summary.bytes += (bundle_bytes.len() + fetched.tile.1.len()) as u64;
        let entries = personality
            .split_bundle(bundle_bytes)
            .map_err(|e| VerifyError::Invalid(format!("{}: {e}", bundle_id.path())))?;
        check_width(bundle_id, entries.len())?;
        let entries = &entries[..width as usize];
        summary.bundles += 1;
        for (i, e) in entries.iter().enumerate() {
            progress.entry(n * TILE_WIDTH + i as u64, e);
        }
        let leaves: Vec<Hash> = entries.iter().map(|e| personality.stored_leaf(e)).collect();
        if let Some(check) = &options.entry_check {
            for (i, e) in entries.iter().enumerate() {
                let index = n * TILE_WIDTH + i as u64;
                let keys = check.check_entry(index, e).map_err(|why| {
                    VerifyError::Invalid(format!("{}: entry {index}: {why}", bundle_id.path()))
                })?;
                for key in keys {
                    if !blobs_seen.insert(key.clone()) {
                        continue;
                    }
                    let bytes = fetch.get(&key).await?.ok_or_else(|| {
                        VerifyError::NotFound(format!("{key} (named by entry {index})"))
                    })?;
                    summary.bytes += bytes.len() as u64;
                    check
                        .check_blob(&key, &bytes)
                        .map_err(|why| VerifyError::Invalid(format!("{key}: {why}")))?;
                    summary.blobs += 1;
                }
            }
        }
        // Append in pieces that end at every earlier checkpoint's size.
        let start = n * TILE_WIDTH;
        let mut completed = Vec::new();
        let mut at = 0usize;
        for cut in split_points
            .iter()
            .filter(|&&s| s > start && s < start + width as u64)
            .map(|&s| (s - start) as usize)
            .chain([leaves.len()])
        {
            if cut > at {
                completed.extend(tree.append_leaves(&leaves[at..cut], false));
                at = cut;
            }
            check_earlier(&tree, summary)?;
            if earlier_sizes.contains(&tree.size()) {
                let want = tile_prefix(kind, bundle_bytes, bundle_id.width, cut as u16)
                    .ok_or_else(|| {
                        VerifyError::Invalid(format!(
                            "{}: cannot cut it at {cut} entries",
                            bundle_id.path()
                        ))
                    })?;
                check_earlier_partials(fetch, &tree, want, bundle_id, summary).await?;
            }
        }
        let bundle_named = bundle_at(n, width);
        if !bundle_named.is_full() {
            summary.partials += 1;
            if bundle_id.is_full() {
                summary.partials_from_full += 1;
            }
        }
        // The level-0 tile of this bundle: completed (full) or the partial edge.
        let level0 = match completed.first() {
            Some((id, b)) if *id == TileId::hash(0, n, TILE_WIDTH as u16) => (*id, b.clone()),
            _ => tree
                .edge_tiles()
                .into_iter()
                .next()
                .filter(|(id, _)| *id == TileId::hash(0, n, width))
                .ok_or_else(|| VerifyError::Invalid(format!("no level-0 tile for bundle {n}")))?,
        };
        compare(&level0, &fetched.tile, bundle_id, summary)?;
        // Higher tiles this bundle completed (one every 256 bundles at level 1, ...).
        for (id, want) in completed
            .iter()
            .filter(|(id, _)| id.kind != TileKind::Hash { level: 0 })
        {
            let got = get_tile(fetch, *id).await?;
            summary.bytes += got.1.len() as u64;
            compare(&(*id, want.clone()), &got, bundle_id, summary)?;
        }
        summary.entries = tree.size();
        progress.entries(tree.size());
    }
    // The partial hash tiles above level 0 that the checkpoint names.
    for (id, want) in tree.edge_tiles() {
        if id.kind == (TileKind::Hash { level: 0 }) {
            continue;
        }
        let got = get_tile(fetch, id).await?;
        summary.bytes += got.1.len() as u64;
        let last = bundles.saturating_sub(1);
        compare(
            &(id, want),
            &got,
            &bundle_at(last, width_at(last, size)),
            summary,
        )?;
    }
    let root = tree.root();
    if root != target_root {
        return Err(VerifyError::Invalid(format!(
            "the {size} entries hash to root {}, but the {target} names {}",
            b64(&root),
            b64(&target_root)
        )));
    }
    Ok(())
}

/// The cosignatures on the signed checkpoint `bytes` from the policy's witnesses must
/// verify and meet its quorum (tlog-policy; unknown signature lines are ignored). A
/// cosignature with timestamp 0 (which an ML-DSA-44 one may carry: "no statement"
/// about time, tlog-cosignature) verifies but does not count toward the quorum: a
/// witness's cosignature of a checkpoint MUST carry the time it saw the tree
/// (tlog-witness "add-checkpoint").
fn check_cosignatures(
    bytes: &[u8],
    policy: &WitnessPolicy,
    summary: &mut FsckSummary,
) -> Result<(), VerifyError> {
    let note = Note::parse(bytes).map_err(|e| VerifyError::Checkpoint(e.to_string()))?;
    let mut cosigned = Vec::with_capacity(policy.witnesses().len());
    let mut untimed = Vec::new();
    for w in policy.witnesses() {
        let mut ok = false;
        for sig in note.signatures.iter().filter(|s| w.verifier.matches(s)) {
            let ts = w.verifier.verify(&note.text, sig).map_err(|e| {
                VerifyError::Checkpoint(format!("cosignature of witness {}: {e}", w.name))
            })?;
            if ts == 0 {
                untimed.push(w.name.as_str());
                continue;
            }
            summary.cosigned.push((w.name.clone(), ts));
            ok = true;
        }
        cosigned.push(ok);
    }
    if !policy.satisfied(&cosigned) {
        let names: Vec<&str> = summary.cosigned.iter().map(|(n, _)| n.as_str()).collect();
        let mut why = format!(
            "its cosignatures do not meet the witness policy (quorum {}): cosigned by {}",
            policy.describe(),
            if names.is_empty() {
                "none of its witnesses".to_string()
            } else {
                names.join(", ")
            }
        );
        if !untimed.is_empty() {
            why.push_str(&format!(
                "; not counted, with timestamp 0 (a witness's cosignature carries the time): {}",
                untimed.join(", ")
            ));
        }
        return Err(VerifyError::Checkpoint(why));
    }
    Ok(())
}

/// The partial hash tiles and bundle an earlier checkpoint of `tree.size()` names
/// must be served with the bytes its first entries determine (tlog-tiles "Partial
/// Tiles"), or be gone with their full tile holding them as its prefix. `want` is
/// the bundle being read (`from`) up to that size.
async fn check_earlier_partials<F: Fetch + ?Sized>(
    fetch: &F,
    tree: &TreeRebuilder,
    want: &[u8],
    from: &TileId,
    summary: &mut FsckSummary,
) -> Result<(), VerifyError> {
    let size = tree.size();
    for (id, want) in tree.edge_tiles() {
        let (got_id, got) = get_tile(fetch, id).await?;
        summary.bytes += got.len() as u64;
        compare_tile(&id, &want, &got_id, &got, from).map_err(|e| {
            VerifyError::Invalid(format!("{e} (named by the checkpoint of size {size})"))
        })?;
        summary.earlier_partials += 1;
    }
    if let Some(id) = edge_bundle(size) {
        let id = id.with_kind(from.kind);
        let (got_id, got) = get_tile(fetch, id).await?;
        summary.bytes += got.len() as u64;
        let same = if got_id == id {
            got[..] == want[..]
        } else {
            tile_prefix(from.kind, &got, got_id.width, id.width) == Some(want)
        };
        if !same {
            return Err(VerifyError::Invalid(format!(
                "{} (named by the checkpoint of size {size}) does not hold the log's first {size} entries",
                got_id.path()
            )));
        }
        summary.earlier_partials += 1;
    }
    Ok(())
}

/// Compare the recomputed tile `want` with the log's `got` (its full tile when the
/// partial is gone); counts it.
fn compare(
    want: &(TileId, Vec<u8>),
    got: &(TileId, Bytes),
    from: &TileId,
    summary: &mut FsckSummary,
) -> Result<(), VerifyError> {
    let (want_id, want_bytes) = want;
    let (got_id, got_bytes) = got;
    compare_tile(want_id, want_bytes, got_id, got_bytes, from)?;
    if !want_id.is_full() {
        summary.partials += 1;
        if got_id.is_full() {
            summary.partials_from_full += 1;
        }
    }
    if let TileKind::Hash { level } = want_id.kind {
        let l = level as usize;
        if summary.hash_tiles.len() <= l {
            summary.hash_tiles.resize(l + 1, 0);
        }
        summary.hash_tiles[l] += 1;
    }
    Ok(())
}

/// The tree rebuilt from entry bundles, one bundle at a time.
#[derive(Clone, Debug)]
pub struct TreeRebuilder {
    tree: TileTree,
}

impl Default for TreeRebuilder {
    fn default() -> Self {
        Self::new()
    }
}

impl TreeRebuilder {
    /// The empty tree.
    pub fn new() -> Self {
        TreeRebuilder {
            tree: TileTree::empty(),
        }
    }

    /// Entries appended so far.
    pub fn size(&self) -> u64 {
        self.tree.size()
    }

    /// RFC 6962 root of the entries appended so far.
    pub fn root(&self) -> Hash {
        self.tree.root()
    }

    /// Append the entries of `bundle`, which must be the bundle that starts at the
    /// current size (or continues the current partial bundle). Returns the hash tiles
    /// these entries determine: every tile they complete (full), and, with `partials`,
    /// the partial edge tiles they changed.
    pub fn append_bundle<E: AsRef<[u8]>>(
        &mut self,
        bundle: &TileId,
        entries: &[E],
        partials: bool,
    ) -> Result<Vec<(TileId, Vec<u8>)>, VerifyError> {
        self.append_bundle_by(bundle, entries, partials, leaf_hash)
    }

    /// [`TreeRebuilder::append_bundle`] with each entry's leaf hash computed by `hash`:
    /// for a log of another personality (a CT log's data tiles, whose leaf hash is
    /// that of the `MerkleTreeLeaf` each `TileLeaf` holds).
    pub fn append_bundle_by<E: AsRef<[u8]>>(
        &mut self,
        bundle: &TileId,
        entries: &[E],
        partials: bool,
        hash: impl Fn(&[u8]) -> Hash,
    ) -> Result<Vec<(TileId, Vec<u8>)>, VerifyError> {
        let start = bundle.index * TILE_WIDTH;
        let size = self.size();
        if !bundle.kind.is_bundle() || size < start || size > start + entries.len() as u64 {
            return Err(VerifyError::Invalid(format!(
                "{} does not continue a tree of {size} entries",
                bundle.path()
            )));
        }
        // Entries already appended (a partial bundle read earlier) are skipped.
        let skip = (size - start) as usize;
        let leaves: Vec<Hash> = entries[skip..].iter().map(|e| hash(e.as_ref())).collect();
        Ok(self.append_leaves(&leaves, partials))
    }

    /// Append leaf hashes; returns the tiles they determine as in
    /// [`TreeRebuilder::append_bundle`].
    pub fn append_leaves(&mut self, leaves: &[Hash], partials: bool) -> Vec<(TileId, Vec<u8>)> {
        let mut out = Vec::new();
        self.tree.append(leaves, &mut out);
        if !partials {
            out.retain(|(id, _)| id.is_full());
        }
        out
    }

    /// The partial hash tiles of the current size, with their recomputed bytes: the
    /// hash tiles a checkpoint of this size names.
    pub fn edge_tiles(&self) -> Vec<(TileId, Vec<u8>)> {
        self.tree.edge_tiles()
    }
}

/// Check that the log's copy of a hash tile equals the recomputed one. `got_id` is the
/// tile actually read: `want_id` itself, or its full tile when a partial was gone
/// (tlog-tiles "Partial Tiles": then its prefix must match). `from` names the bundle
/// the tile was recomputed from; the message names both, and the first hash that
/// differs.
pub fn compare_tile(
    want_id: &TileId,
    want: &[u8],
    got_id: &TileId,
    got: &[u8],
    from: &TileId,
) -> Result<(), VerifyError> {
    let compared = if got_id == want_id {
        (got.len() == want.len()).then_some(got)
    } else {
        (got_id.width >= want_id.width)
            .then(|| got.get(..want.len()))
            .flatten()
    };
    if compared == Some(want) {
        return Ok(());
    }
    let detail = match compared {
        Some(c) => {
            let i = c
                .chunks(32)
                .zip(want.chunks(32))
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            format!("hash {i} differs")
        }
        None => format!("{} bytes, expected {}", got.len(), want.len()),
    };
    Err(VerifyError::Invalid(format!(
        "{} is not the tile recomputed from {} and the entries before it ({detail})",
        got_id.path(),
        from.path()
    )))
}

/// What [`check_log`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogReport {
    /// The committed state.
    pub state: TreeState,
    /// The size named by the published checkpoint (0 if none).
    pub checkpoint_size: u64,
}

/// Called with every entry's index and bytes while [`check_log`] reads the log.
pub type EntryVisitor<'a> = &'a mut dyn FnMut(u64, &[u8]);

/// Check a whole log in `storage`, up to its committed state. `entries`, when given,
/// is called with every entry in order.
pub async fn check_log<S: LogStorage>(
    storage: &S,
    origin: &str,
    verifier: &NoteVerifier,
    entries: Option<EntryVisitor<'_>>,
) -> Result<LogReport, StorageError> {
    check_log_observed(storage, origin, verifier, &[], entries).await
}

/// [`check_log`], and also every checkpoint in `observed` (checkpoints of this log a
/// test read while it grew, signatures already verified): each must be the root of
/// the log's first entries at its size, and the partial tiles and bundle it names must
/// be in the store with exactly those bytes, or their full tile with them as prefix.
/// The published checkpoint is checked the same way: [`fsck`] up to the committed
/// state, with every checkpoint an earlier one.
pub async fn check_log_observed<S: LogStorage>(
    storage: &S,
    origin: &str,
    verifier: &NoteVerifier,
    observed: &[Checkpoint],
    entries: Option<EntryVisitor<'_>>,
) -> Result<LogReport, StorageError> {
    let state = storage.load_state().await?.unwrap_or_else(TreeState::empty);
    if let Some(cp) = observed.iter().find(|cp| cp.origin != origin) {
        return Err(StorageError::Corrupt(format!(
            "a checkpoint of size {} is for the log {:?}",
            cp.size, cp.origin
        )));
    }
    let options = FsckOptions {
        earlier: observed.to_vec(),
        tree: Some((state.size, state.root)),
        ..FsckOptions::default()
    };
    struct Visit<'a>(Option<EntryVisitor<'a>>);
    impl FsckProgress for Visit<'_> {
        fn entry(&mut self, index: u64, entry: &StoredEntry<'_>) {
            if let Some(f) = self.0.as_mut() {
                f(index, entry.bytes);
            }
        }
    }
    let mut summary = FsckSummary::default();
    fsck(
        &StoredLog(storage),
        origin,
        verifier,
        &options,
        &mut Visit(entries),
        &mut summary,
    )
    .await
    .map_err(|e| match e {
        VerifyError::Fetch(m) => StorageError::Backend(m),
        other => StorageError::Corrupt(other.to_string()),
    })?;
    Ok(LogReport {
        state,
        checkpoint_size: summary.checkpoint.map_or(0, |c| c.size),
    })
}

/// Checkpoints read from a store while a test writes to it, for
/// [`check_log_observed`]: a task polls [`LogStorage::read_checkpoint`] until stopped.
pub struct CheckpointWatch {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<Result<Vec<Checkpoint>, String>>,
}

impl CheckpointWatch {
    /// Start watching `storage` (a log of `origin` signed by `verifier`) every
    /// millisecond.
    pub fn start<S: LogStorage + Send + Sync + 'static>(
        storage: std::sync::Arc<S>,
        origin: &str,
        verifier: &NoteVerifier,
    ) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (flag, origin, verifier) = (stop.clone(), origin.to_string(), verifier.clone());
        let task = tokio::spawn(async move {
            let mut seen: Vec<Checkpoint> = Vec::new();
            loop {
                let last = flag.load(std::sync::atomic::Ordering::Acquire);
                if let Some(b) = storage.read_checkpoint().await.map_err(|e| e.to_string())? {
                    let cp = Checkpoint::open(&b, &origin, &verifier)
                        .map_err(|e| format!("a published checkpoint: {e}"))?
                        .0;
                    if seen.last() != Some(&cp) {
                        seen.push(cp);
                    }
                }
                if last {
                    return Ok(seen);
                }
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        });
        CheckpointWatch { stop, task }
    }

    /// Stop; every distinct checkpoint seen, in the order seen (one more read is made
    /// after the stop, so the latest is included).
    pub async fn stop(self) -> Result<Vec<Checkpoint>, StorageError> {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.task
            .await
            .map_err(|e| StorageError::Backend(format!("checkpoint watch: {e}")))?
            .map_err(StorageError::Backend)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::engine::Log;
    use crate::engine::memory::MemoryStorage;
    use crate::note::NoteSigner;

    use crate::conformance::{ORIGIN, SKEY};

    /// A policy witness's cosignature with timestamp 0 (an ML-DSA-44 one may carry it)
    /// verifies but does not count toward the quorum; with a time, it does.
    #[test]
    fn a_witness_cosignature_with_timestamp_zero_does_not_count() {
        use crate::mldsa::MlDsa44Signer;
        use crate::witness::WitnessPolicy;
        let w = MlDsa44Signer::from_seed("w.witness.example", &[4; 32]).unwrap();
        let policy = WitnessPolicy::parse(&format!("witness w {}\nquorum w\n", w.vkey())).unwrap();
        let log = NoteSigner::from_skey(SKEY).unwrap();
        let cp = Checkpoint {
            origin: ORIGIN.into(),
            size: 1,
            root: [6; 32],
            extensions: vec![],
        };
        let text = cp.to_text();
        for (ts, counts) in [(0, false), (1_800_000_000, true)] {
            let mut note = Note::parse(&cp.sign(&log).unwrap()).unwrap();
            note.signatures.push(w.cosign(&text, ts).unwrap());
            let mut summary = FsckSummary::default();
            let r = check_cosignatures(&note.to_bytes(), &policy, &mut summary);
            match counts {
                true => {
                    r.unwrap();
                    assert_eq!(summary.cosigned, [("w".to_string(), ts)]);
                }
                false => {
                    let e = r.unwrap_err().to_string();
                    assert!(e.contains("not counted, with timestamp 0"), "{e}");
                    assert!(summary.cosigned.is_empty());
                }
            }
        }
    }

    /// A log of 300 entries and the checkpoints it published at sizes 100 and 200
    /// (signed), its last one naming 300.
    async fn grown_log() -> (Arc<MemoryStorage>, NoteVerifier, [(Checkpoint, Vec<u8>); 2]) {
        let cfg = crate::conformance::config(4096);
        let verifier = cfg.verifier();
        let storage = Arc::new(MemoryStorage::new());
        let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
        let mut seen = Vec::new();
        for size in [100u32, 200] {
            for i in size - 100..size {
                log.add(Bytes::from(format!("c{i}"))).await.unwrap();
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while log.published_size() != Some(size.into()) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "no checkpoint at {size}"
                );
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let signed = storage.read_checkpoint().await.unwrap().unwrap();
            let cp = Checkpoint::open(&signed, ORIGIN, &verifier).unwrap().0;
            assert_eq!(cp.size, u64::from(size));
            seen.push((cp, signed));
        }
        for i in 200..300u32 {
            log.add(Bytes::from(format!("c{i}"))).await.unwrap();
        }
        log.shutdown();
        tasks.join().await;
        let seen: [(Checkpoint, Vec<u8>); 2] = seen.try_into().unwrap();
        (storage, verifier, seen)
    }

    /// Found by a power cut (issue #36): the published checkpoint may be older than
    /// one a reader saw (the crash lost its rename; the tree went on), and observed
    /// checkpoints may come in any order. Each earlier size's partials are then checked
    /// against that size's own prefix of the bundle, not another's.
    #[tokio::test]
    async fn earlier_checkpoints_are_checked_in_size_order() {
        let (storage, verifier, [(cp100, signed100), (cp200, _)]) = grown_log().await;
        let out_of_order = [cp200.clone(), cp100.clone()];
        check_log_observed(&*storage, ORIGIN, &verifier, &out_of_order, None)
            .await
            .unwrap();
        storage.publish_checkpoint(&signed100).await.unwrap();
        let report = check_log_observed(&*storage, ORIGIN, &verifier, &[cp200], None)
            .await
            .unwrap();
        assert_eq!(report.state.size, 300);
    }

    #[tokio::test]
    async fn the_partials_of_every_observed_checkpoint_are_checked() {
        let (storage, verifier, [(cp100, _), _]) = grown_log().await;
        let report = check_log_observed(
            &*storage,
            ORIGIN,
            &verifier,
            std::slice::from_ref(&cp100),
            None,
        )
        .await
        .unwrap();
        assert_eq!(report.state.size, 300);

        // A partial named only by the earlier checkpoint, altered: the final state's
        // tiles are all right, so only the observed checkpoint finds it.
        let id = TileId::hash(0, 0, 100);
        let good = storage.read_tile(&id).await.unwrap().unwrap();
        let mut bad = good.clone();
        bad[40] ^= 1;
        storage.tamper(&id, bad);
        check_log(&*storage, ORIGIN, &verifier, None).await.unwrap();
        let e = check_log_observed(
            &*storage,
            ORIGIN,
            &verifier,
            std::slice::from_ref(&cp100),
            None,
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("tile/0/000.p/100") && e.contains("size 100"),
            "{e}"
        );
        storage.tamper(&id, good);

        let id = TileId::entries(0, 100);
        let good = storage.read_tile(&id).await.unwrap().unwrap();
        storage.tamper(&id, good[..good.len() - 1].to_vec());
        let e = check_log_observed(
            &*storage,
            ORIGIN,
            &verifier,
            std::slice::from_ref(&cp100),
            None,
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("tile/entries/000.p/100"), "{e}");
        storage.tamper(&id, good);

        // A checkpoint this log never had at that size (a fork) is refused.
        let mut forked = cp100.clone();
        forked.root[0] ^= 1;
        let e = check_log_observed(&*storage, ORIGIN, &verifier, &[forked], None)
            .await
            .unwrap_err()
            .to_string();
        assert!(e.contains("size 100"), "{e}");
        check_log_observed(&*storage, ORIGIN, &verifier, &[cp100], None)
            .await
            .unwrap();
    }
}
