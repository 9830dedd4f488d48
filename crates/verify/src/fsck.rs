//! The whole-log check (`tlogd verify`): every entry bundle and hash tile of a log is
//! recomputed up to its checkpoint, and the root compared.
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
//!    ahead of the checkpoint (adopting a Tessera log), the checkpoint then being one of
//!    the earlier ones.
//!
//! The first failure stops the check and names the resource.

use std::collections::{HashSet, VecDeque};
use std::sync::Arc;

use base64::Engine as _;
use bytes::Bytes;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::hash::Hash;
use tlogd_core::note::{Note, NoteVerifier};
use tlogd_core::personality::{Personality, StoredEntry, TlogTiles};
use tlogd_core::tile::{TILE_WIDTH, TileId, TileKind, edge_bundle, tile_prefix};
use tlogd_core::witness::WitnessPolicy;
use tokio::task::JoinHandle;

use crate::VerifyError;
use crate::fetch::Fetch;
use crate::reader::{open_checkpoint, width_at};
use crate::rebuild::{TreeRebuilder, compare_tile};

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
}

/// Told how far the check got.
pub trait FsckProgress {
    /// The checkpoint verified; `size` entries will be checked.
    fn start(&mut self, _size: u64) {}
    /// `done` entries (and their tiles) checked so far.
    fn entries(&mut self, _done: u64) {}
}

impl FsckProgress for () {}

/// What a check covered.
#[derive(Clone, Debug, Default)]
pub struct FsckSummary {
    /// The checkpoint checked (signature verified).
    pub checkpoint: Option<Checkpoint>,
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
async fn get_tile<F: Fetch>(fetch: &F, id: TileId) -> Result<(TileId, Bytes), VerifyError> {
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

/// Aborts the fetches still running when the check stops early.
struct Inflight(VecDeque<JoinHandle<Result<Fetched, VerifyError>>>);

impl Drop for Inflight {
    fn drop(&mut self) {
        for h in &self.0 {
            h.abort();
        }
    }
}

fn b64(h: &Hash) -> String {
    base64::engine::general_purpose::STANDARD.encode(h)
}

/// Check the log behind `fetch` (see the module docs). `origin` and `verifier`
/// identify the log. On failure, `summary` tells what had been checked before it.
pub async fn fsck<F: Fetch>(
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
            let cp = open_checkpoint(&bytes, origin, verifier)?;
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
    let split_points: Vec<u64> = options
        .earlier
        .iter()
        .chain(cp.iter().filter(|_| options.tree.is_some()))
        .map(|c| c.size)
        .collect();
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
    let window = options.concurrency.max(1);
    let mut inflight = Inflight(VecDeque::with_capacity(window));
    let mut next = 0u64;
    for n in 0..bundles {
        while next < bundles && inflight.0.len() < window {
            let f = fetch.clone();
            let w = width_at(next, size);
            let i = next;
            inflight.0.push_back(tokio::spawn(async move {
                let (bundle, tile) = tokio::join!(
                    get_tile(&f, bundle_at(i, w)),
                    get_tile(&f, TileId::hash(0, i, w))
                );
                Ok(Fetched {
                    bundle: bundle?,
                    tile: tile?,
                })
            }));
            next += 1;
        }
        let Some(job) = inflight.0.pop_front() else {
            break;
        };
        let fetched = job
            .await
            .map_err(|e| VerifyError::Fetch(format!("fetch task failed: {e}")))??;
        let width = width_at(n, size);
        let (bundle_id, bundle_bytes) = &fetched.bundle;
        summary.bytes += (bundle_bytes.len() + fetched.tile.1.len()) as u64;
        let entries = personality
            .split_bundle(bundle_bytes)
            .map_err(|e| VerifyError::Invalid(format!("{}: {e}", bundle_id.path())))?;
        crate::reader::check_width(bundle_id, entries.len())?;
        let entries = &entries[..width as usize];
        summary.bundles += 1;
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
/// verify and meet its quorum (tlog-policy; unknown signature lines are ignored).
fn check_cosignatures(
    bytes: &[u8],
    policy: &WitnessPolicy,
    summary: &mut FsckSummary,
) -> Result<(), VerifyError> {
    let note = Note::parse(bytes).map_err(|e| VerifyError::Checkpoint(e.to_string()))?;
    let mut cosigned = Vec::with_capacity(policy.witnesses().len());
    for w in policy.witnesses() {
        let mut ok = false;
        for sig in note.signatures.iter().filter(|s| w.verifier.matches(s)) {
            let ts = w.verifier.verify(&note.text, sig).map_err(|e| {
                VerifyError::Checkpoint(format!("cosignature of witness {}: {e}", w.name))
            })?;
            summary.cosigned.push((w.name.clone(), ts));
            ok = true;
        }
        cosigned.push(ok);
    }
    if !policy.satisfied(&cosigned) {
        let names: Vec<&str> = summary.cosigned.iter().map(|(n, _)| n.as_str()).collect();
        return Err(VerifyError::Checkpoint(format!(
            "its cosignatures do not meet the witness policy (quorum {}): cosigned by {}",
            policy.describe(),
            if names.is_empty() {
                "none of its witnesses".to_string()
            } else {
                names.join(", ")
            }
        )));
    }
    Ok(())
}

/// The partial hash tiles and bundle an earlier checkpoint of `tree.size()` names
/// must be served with the bytes its first entries determine (tlog-tiles "Partial
/// Tiles"), or be gone with their full tile holding them as its prefix. `want` is
/// the bundle being read (`from`) up to that size.
async fn check_earlier_partials<F: Fetch>(
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
