//! Copying a tlog-tiles log into a [`LogStorage`] (`tlogd migrate`): from any
//! implementation's public resources (a URL or a directory, through a [`Fetch`]), up to
//! a checkpoint of the source whose signature the caller has checked.
//!
//! 1. **Prove the source's tile roots.** The level-1 hash tiles hold the root of every
//!    full 256-entry tile; with the leaf hashes of the last, partial bundle they must
//!    hash to the checkpoint's root ([`root_from_tile_roots`]). From then on every full
//!    bundle is checked against its proven root before a byte of it is written, and the
//!    partial one against the leaves proven with the root: nothing unproven reaches the
//!    target. (What a leaf hash covers is proven. Static-ct-api data tiles carry bytes
//!    beyond it, a precertificate's and the chain's fingerprints: those are checked
//!    as `tlogd verify --ct` checks them, through the [`EntryCheck`] of step 3.)
//! 2. **Find where the target stands.** Its committed tree (empty, or a copy an
//!    interruption left, or a mirror copied from an earlier checkpoint) must be the
//!    source's first entries: its root must be the source's root at its size, computed
//!    the same way. A target ahead of the source, or another tree, is refused.
//! 3. **Copy.** Bundles are fetched many at once (`jobs`) and appended in order, their
//!    bytes verbatim; the hash tiles are computed here (the same bytes a correct source
//!    serves), and every few bundles one [`LogStorage::commit`] makes the copy so far
//!    the target's committed tree. An interruption loses at most the uncommitted
//!    bundles; a new run starts from the committed size (step 2). With an
//!    [`EntryCheck`] (a CT log's), every copied entry is checked with it too (its
//!    `leaf_index` is its position; a precertificate's TBS is the one its
//!    `pre_certificate` gives through its chain), and the blobs the entries name (the issuers of a
//!    CT log, static-ct-api "Issuers") are fetched, checked (their bytes hash to their
//!    name) and stored before the commit that makes those entries the target's: a
//!    committed entry never names a blob the target lacks.
//! 4. **Publish the source's checkpoint**, byte for byte, once the committed root is
//!    the checkpoint's: until then the target holds no checkpoint it did not hold
//!    before, so nothing reads a partial copy as a log.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt as _;

use super::Edge;
use super::checker::{EntryCheck, Fetch, VerifyError, get_tile};
use super::storage::{CommitBatch, LogStorage, StorageError, TreeState};
use crate::checkpoint::Checkpoint;
use crate::hash::Hash;
use crate::merkle::{root_from_tile_roots, subtree_root};
use crate::personality::Personality;
use crate::tile::{self, TILE_WIDTH, TileId, TileKind};

/// How to copy.
#[derive(Clone, Debug)]
pub struct CopyOptions {
    /// Fetches in flight at once.
    pub jobs: usize,
    /// Full bundles per commit to the target (at least 1).
    pub bundles_per_commit: usize,
    /// What the leaf hashes cannot prove about each entry, and the blobs it names
    /// (a CT log's issuers), copied before the entries (module docs, step 3).
    pub entry_check: Option<Arc<dyn EntryCheck>>,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            jobs: 16,
            bundles_per_commit: 64,
            entry_check: None,
        }
    }
}

/// Told how the copy goes.
pub trait CopyProgress: Send {
    /// The copy starts with the target at `from` entries, toward `to`.
    fn start(&mut self, _from: u64, _to: u64) {}
    /// The target has committed `size` entries.
    fn committed(&mut self, _size: u64) {}
}

impl CopyProgress for () {}

/// What a copy did.
#[derive(Clone, Debug, PartialEq)]
pub struct CopyReport {
    /// The target's committed size when the copy started.
    pub resumed_from: u64,
    /// The size copied to (the source checkpoint's).
    pub size: u64,
    /// Bundles fetched and written by this run.
    pub bundles: u64,
    /// Blobs the copied entries name (CT issuers), fetched, checked and stored.
    pub blobs: u64,
    /// The target already held the tree and exactly this checkpoint: nothing was
    /// written.
    pub already_complete: bool,
    /// How long the copy took, in seconds.
    pub seconds: f64,
}

/// Why a copy stopped. Nothing the target committed before is lost, and it holds no
/// new checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The source could not be read, or is not the log its checkpoint names.
    #[error("source: {0}")]
    Source(#[from] VerifyError),
    /// The target's storage failed.
    #[error("target: {0}")]
    Target(#[from] StorageError),
    /// The target holds something the copy must not write over.
    #[error("{0}")]
    Refused(String),
}

/// Copy the log behind `source` up to `checkpoint` (already verified; `signed` is its
/// signed note) into `storage`, then publish `signed` there. See the module docs.
pub async fn copy_log<F: Fetch, S: LogStorage>(
    source: &F,
    storage: &S,
    personality: &dyn Personality,
    checkpoint: &Checkpoint,
    signed: &[u8],
    options: &CopyOptions,
    progress: &mut dyn CopyProgress,
) -> Result<CopyReport, CopyError> {
    let started = Instant::now();
    let size = checkpoint.size;
    let kind = personality.bundle_kind();
    let jobs = options.jobs.max(1);
    // 1. The roots of the full tiles, proven by the checkpoint's root.
    let tile_roots = level1_hashes(source, size, jobs).await?;
    let tail = leaves_of(source, personality, kind, size, size).await?;
    if root_from_tile_roots(&tile_roots, &tail) != checkpoint.root {
        return Err(VerifyError::Invalid(format!(
            "the level-1 hash tiles and the last bundle of {} do not hash to its checkpoint's root (size {size})",
            source.location()
        ))
        .into());
    }
    // 2. The target's committed tree must be the source's first entries.
    let edge = Edge::load(storage, personality, None).await?;
    let at = edge.tree.size();
    if edge.frozen {
        return Err(CopyError::Refused(format!(
            "the target is frozen at size {at}"
        )));
    }
    if at > size {
        return Err(CopyError::Refused(format!(
            "the target holds {at} entries, more than the source's checkpoint ({size}): another log, or one appended to since"
        )));
    }
    let full_at = (at / TILE_WIDTH) as usize;
    let tail_at = leaves_of(source, personality, kind, at, size).await?;
    if root_from_tile_roots(&tile_roots[..full_at], &tail_at) != edge.tree.root() {
        return Err(CopyError::Refused(format!(
            "the target's first {at} entries are not the source's: it holds another log"
        )));
    }
    let stored = storage.read_checkpoint().await?;
    if let Some(stored) = &stored
        && crate::checkpoint::signed_size(stored).is_some_and(|s| s > at)
    {
        return Err(CopyError::Refused(
            "the target's checkpoint is ahead of its committed tree".into(),
        ));
    }
    if at == size && stored.as_deref() == Some(signed) {
        return Ok(CopyReport {
            resumed_from: at,
            size,
            bundles: 0,
            blobs: 0,
            already_complete: true,
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    progress.start(at, size);
    // 3. Copy, in order, checking each full bundle against its proven root.
    let mut writer = Writer {
        edge,
        leaves: Vec::new(),
        bundles: Vec::new(),
    };
    // Nothing to fetch when the tree is all there (only the checkpoint is missing).
    let first = if at == size {
        size.div_ceil(TILE_WIDTH)
    } else {
        at / TILE_WIDTH
    };
    let end = size.div_ceil(TILE_WIDTH);
    let mut fetched = futures_util::stream::iter(first..end)
        .map(|n| {
            let width = (size - n * TILE_WIDTH).min(TILE_WIDTH) as u16;
            let id = TileId {
                kind,
                index: n,
                width,
            };
            async move { exact_tile(source, id).await.map(|b| (id, b)) }
        })
        .buffered(jobs);
    let mut bundles = 0u64;
    let mut blobs = Blobs::default();
    while let Some(next) = fetched.next().await {
        let (id, bytes) = next?;
        let leaves = bundle_leaves(personality, id, &bytes)?;
        // A full bundle against its proven root; the last, partial one against the
        // leaves proven in step 1 (a source may answer differently the second time).
        let proven = match id.is_full() {
            true => subtree_root(&leaves) == tile_roots[id.index as usize],
            false => leaves == tail,
        };
        // The first bundle may be partly in the target already: those entries must be
        // the ones proven to be the target's in step 2.
        let skip =
            (writer.edge.tree.size() + writer.leaves.len() as u64 - id.index * TILE_WIDTH) as usize;
        if !proven || leaves[..skip] != tail_at[..skip] {
            return Err(VerifyError::Invalid(format!(
                "{} is not the bundle the checkpoint proves",
                id.path()
            ))
            .into());
        }
        if let Some(check) = &options.entry_check {
            blobs.name(&**check, personality, id, &bytes, skip)?;
        }
        writer.leaves.extend_from_slice(&leaves[skip..]);
        writer.bundles.push((id, bytes.to_vec()));
        bundles += 1;
        if writer.bundles.len() >= options.bundles_per_commit.max(1) {
            blobs.store(source, storage, options, jobs).await?;
            blobs.check_entries(options, personality, &writer)?;
            writer.commit(storage, checkpoint).await?;
            progress.committed(writer.edge.tree.size());
        }
    }
    blobs.store(source, storage, options, jobs).await?;
    blobs.check_entries(options, personality, &writer)?;
    writer.commit(storage, checkpoint).await?;
    progress.committed(writer.edge.tree.size());
    if writer.edge.tree.root() != checkpoint.root {
        // Cannot happen: every leaf was proven, and the last commit checked the root.
        return Err(StorageError::Corrupt(format!(
            "the copied tree of size {} does not hash to the checkpoint's root",
            writer.edge.tree.size()
        ))
        .into());
    }
    // 4. Now, and only now, the checkpoint.
    storage.publish_checkpoint(signed).await?;
    Ok(CopyReport {
        resumed_from: at,
        size,
        bundles,
        blobs: blobs.written,
        already_complete: false,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The hashes the level-1 tiles of a tree of `size` hold: the root of each full
/// level-0 tile.
async fn level1_hashes<F: Fetch>(
    source: &F,
    size: u64,
    jobs: usize,
) -> Result<Vec<Hash>, VerifyError> {
    let full = size / TILE_WIDTH;
    let tiles = full.div_ceil(TILE_WIDTH);
    let mut reads = futures_util::stream::iter(0..tiles)
        .map(|n| {
            let width = (full - n * TILE_WIDTH).min(TILE_WIDTH) as u16;
            let id = TileId::hash(1, n, width);
            async move {
                let bytes = exact_tile(source, id).await?;
                tile::parse_hash_tile(&bytes, width)
                    .map_err(|e| VerifyError::Invalid(format!("{}: {e}", id.path())))
            }
        })
        .buffered(jobs);
    let mut hashes = Vec::with_capacity(full as usize);
    while let Some(h) = reads.next().await {
        hashes.extend(h?);
    }
    Ok(hashes)
}

/// The leaf hashes of the entries of a tree of `upto` after its last full tile, read
/// from the bundle at the width the source's checkpoint (of `size`) names: a partial
/// bundle of an earlier size may be gone.
async fn leaves_of<F: Fetch>(
    source: &F,
    personality: &dyn Personality,
    kind: TileKind,
    upto: u64,
    size: u64,
) -> Result<Vec<Hash>, VerifyError> {
    let Some(want) = tile::edge_bundle(upto) else {
        return Ok(Vec::new());
    };
    let n = want.index;
    let id = TileId {
        kind,
        index: n,
        width: (size - n * TILE_WIDTH).min(TILE_WIDTH) as u16,
    };
    let bytes = exact_tile(source, id).await?;
    let mut leaves = bundle_leaves(personality, id, &bytes)?;
    leaves.truncate(want.width as usize);
    Ok(leaves)
}

/// The leaf hashes of the bundle `id`, which must hold exactly its width of entries
/// (tlog-tiles "Log entries").
fn bundle_leaves(
    personality: &dyn Personality,
    id: TileId,
    bytes: &[u8],
) -> Result<Vec<Hash>, VerifyError> {
    let entries = personality
        .split_bundle(bytes)
        .map_err(|e| VerifyError::Invalid(format!("{}: {e}", id.path())))?;
    if entries.len() != id.width as usize {
        return Err(VerifyError::Invalid(format!(
            "{}: {} entries, not {}",
            id.path(),
            entries.len(),
            id.width
        )));
    }
    Ok(entries.iter().map(|e| personality.stored_leaf(e)).collect())
}

/// The bytes of `id` at exactly its width: a partial that is gone is cut from its full
/// tile (tlog-tiles "Partial Tiles").
async fn exact_tile<F: Fetch>(source: &F, id: TileId) -> Result<bytes::Bytes, VerifyError> {
    let (got, bytes) = get_tile(source, id).await?;
    if got == id {
        return Ok(bytes);
    }
    let prefix = tile::tile_prefix(id.kind, &bytes, TILE_WIDTH as u16, id.width)
        .ok_or_else(|| VerifyError::Invalid(format!("{}: too short", got.path())))?;
    Ok(bytes.slice_ref(prefix))
}

/// The blobs the copied entries name (a CT log's issuers): each stored once per run,
/// before the commit of the first entries that name it.
#[derive(Default)]
struct Blobs {
    /// Named by the entries not committed yet, not stored by this run.
    pending: Vec<String>,
    /// Stored by this run, or pending.
    known: HashSet<String>,
    /// The bytes of those stored, for the checks that need an entry and its blobs.
    stored: HashMap<String, bytes::Bytes>,
    /// How many this run stored.
    written: u64,
}

impl Blobs {
    /// Check the entries of bundle `id` from its `skip`th with `check`; remember the
    /// blobs they name.
    fn name(
        &mut self,
        check: &dyn EntryCheck,
        personality: &dyn Personality,
        id: TileId,
        bytes: &[u8],
        skip: usize,
    ) -> Result<(), VerifyError> {
        let entries = personality
            .split_bundle(bytes)
            .map_err(|e| VerifyError::Invalid(format!("{}: {e}", id.path())))?;
        for (i, e) in entries.iter().enumerate().skip(skip) {
            let index = id.index * TILE_WIDTH + i as u64;
            let keys = check
                .check_entry(index, e)
                .map_err(|why| VerifyError::Invalid(format!("entry {index}: {why}")))?;
            for key in keys {
                if self.known.insert(key.clone()) {
                    if self.known.len() > MAX_BLOBS {
                        return Err(VerifyError::Invalid(format!(
                            "the entries name more than {MAX_BLOBS} blobs (a CT log has hundreds of issuers)"
                        )));
                    }
                    self.pending.push(key);
                }
            }
        }
        Ok(())
    }

    /// Fetch, check and store every pending blob (`jobs` fetches at once).
    async fn store<F: Fetch, S: LogStorage>(
        &mut self,
        source: &F,
        storage: &S,
        options: &CopyOptions,
        jobs: usize,
    ) -> Result<(), CopyError> {
        let Some(check) = &options.entry_check else {
            return Ok(());
        };
        let pending = std::mem::take(&mut self.pending);
        let mut fetched = futures_util::stream::iter(pending)
            .map(|key| async move {
                let got = source.get(&key).await;
                (key, got)
            })
            .buffered(jobs);
        while let Some((key, got)) = fetched.next().await {
            let bytes = got?.ok_or_else(|| {
                VerifyError::Invalid(format!(
                    "{key}, named by an entry, is not served by {}",
                    source.location()
                ))
            })?;
            check
                .check_blob(&key, &bytes)
                .map_err(|why| VerifyError::Invalid(format!("{key}: {why}")))?;
            storage
                .put_blob(&key, &bytes, check.blob_content_type())
                .await?;
            self.stored.insert(key, bytes);
            self.written += 1;
        }
        Ok(())
    }

    /// Check each entry `writer` holds beyond its committed tree with the blobs it names
    /// (all stored by [`store`](Self::store) first).
    fn check_entries(
        &self,
        options: &CopyOptions,
        personality: &dyn Personality,
        writer: &Writer,
    ) -> Result<(), VerifyError> {
        let Some(check) = &options.entry_check else {
            return Ok(());
        };
        let committed = writer.edge.tree.size();
        for (id, bytes) in &writer.bundles {
            let entries = personality
                .split_bundle(bytes)
                .map_err(|e| VerifyError::Invalid(format!("{}: {e}", id.path())))?;
            for (i, e) in entries.iter().enumerate() {
                let index = id.index * TILE_WIDTH + i as u64;
                if index < committed {
                    continue;
                }
                let invalid = |why: String| VerifyError::Invalid(format!("entry {index}: {why}"));
                let keys = check.check_entry(index, e).map_err(invalid)?;
                let named =
                    keys.iter()
                        .map(|k| {
                            self.stored.get(k).map(|b| &b[..]).ok_or_else(|| {
                                invalid(format!("{k} was not fetched before its entry"))
                            })
                        })
                        .collect::<Result<Vec<&[u8]>, _>>()?;
                check
                    .check_entry_with_blobs(index, e, &named)
                    .map_err(invalid)?;
            }
        }
        Ok(())
    }
}

/// Distinct blobs one copy fetches at most (a CT log names a few hundred issuers; a
/// source naming more is refused rather than held in memory).
const MAX_BLOBS: usize = 1 << 16;

/// The target's tree and what is copied into it but not committed yet.
struct Writer {
    edge: Edge,
    /// Leaf hashes appended since the last commit.
    leaves: Vec<Hash>,
    /// Their bundles, verbatim, in order (the last may be partial).
    bundles: Vec<(TileId, Vec<u8>)>,
}

impl Writer {
    /// One compare-and-swap from the committed tree to the tree with everything
    /// appended since; at the checkpoint's size, only with the checkpoint's root.
    async fn commit<S: LogStorage>(
        &mut self,
        storage: &S,
        checkpoint: &Checkpoint,
    ) -> Result<(), StorageError> {
        if self.leaves.is_empty() {
            return Ok(());
        }
        let prev = self.edge.state();
        let mut tree = self.edge.tree.clone();
        let mut tiles = Vec::new();
        tree.append(&self.leaves, &mut tiles);
        if tree.size() == checkpoint.size && tree.root() != checkpoint.root {
            return Err(StorageError::Corrupt(format!(
                "the copy of size {} does not hash to the checkpoint's root: not committed",
                tree.size()
            )));
        }
        tiles.append(&mut self.bundles);
        let next = TreeState {
            size: tree.size(),
            root: tree.root(),
            frozen: false,
        };
        storage.commit(CommitBatch { prev, next, tiles }).await?;
        self.edge.tree = tree;
        self.leaves.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::*;
    use crate::conformance::ORIGIN;
    use crate::engine::Log;
    use crate::engine::checker::{StoredLog, check_log};
    use crate::engine::memory::{Fault, MemoryStorage};
    use crate::note::NoteVerifier;
    use crate::personality::TlogTiles;

    /// A log of `n` entries (`tag` tells logs apart), its final checkpoint published.
    async fn source(n: u32, tag: &str) -> (Arc<MemoryStorage>, NoteVerifier) {
        let cfg = crate::conformance::config(4096);
        let verifier = cfg.verifier();
        let storage = Arc::new(MemoryStorage::new());
        let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
        let adds: Vec<_> = (0..n)
            .map(|i| log.add(Bytes::from(format!("{tag} entry {i}"))))
            .collect();
        for a in futures_util::future::join_all(adds).await {
            a.unwrap();
        }
        log.shutdown();
        tasks.join().await;
        (storage, verifier)
    }

    async fn signed_checkpoint(s: &MemoryStorage, v: &NoteVerifier) -> (Checkpoint, Vec<u8>) {
        let signed = s.read_checkpoint().await.unwrap().unwrap();
        (Checkpoint::open(&signed, ORIGIN, v).unwrap().0, signed)
    }

    /// Every hash tile and bundle of a tree of `size`, at the width it names.
    fn every_tile(size: u64) -> Vec<TileId> {
        let mut ids = Vec::new();
        let mut level_size = size;
        let mut level = 0u8;
        while level_size > 0 {
            for n in 0..level_size.div_ceil(TILE_WIDTH) {
                let width = (level_size - n * TILE_WIDTH).min(TILE_WIDTH) as u16;
                ids.push(TileId::hash(level, n, width));
                if level == 0 {
                    ids.push(TileId::entries(n, width));
                }
            }
            level_size /= TILE_WIDTH;
            level += 1;
        }
        ids
    }

    async fn copy(
        from: &MemoryStorage,
        to: &MemoryStorage,
        v: &NoteVerifier,
        per_commit: usize,
    ) -> Result<CopyReport, CopyError> {
        let (cp, signed) = signed_checkpoint(from, v).await;
        let options = CopyOptions {
            jobs: 4,
            bundles_per_commit: per_commit,
            entry_check: None,
        };
        copy_log(
            &StoredLog(from),
            to,
            &TlogTiles,
            &cp,
            &signed,
            &options,
            &mut (),
        )
        .await
    }

    /// Interrupted twice (a commit that fails, one that fails after persisting), the
    /// copy resumes where the target stands, holds no checkpoint until it is complete,
    /// and ends byte for byte the source; a second run writes nothing.
    #[tokio::test]
    async fn an_interrupted_copy_resumes_and_ends_identical() {
        let (src, v) = source(1000, "a").await;
        let dst = MemoryStorage::new();
        for fault in [Fault::FailAndDontPersist, Fault::FailButPersist] {
            dst.fail_next_commit(fault);
            let e = copy(&src, &dst, &v, 1).await.unwrap_err();
            assert!(matches!(e, CopyError::Target(_)), "{e}");
            assert_eq!(dst.read_checkpoint().await.unwrap(), None);
        }
        let at = dst.load_state().await.unwrap().map_or(0, |s| s.size);
        assert_eq!(at, 256, "the second interruption's commit persisted");
        let report = copy(&src, &dst, &v, 1).await.unwrap();
        assert_eq!((report.resumed_from, report.size), (256, 1000));
        assert_eq!(report.bundles, 3);
        assert_eq!(
            dst.read_checkpoint().await.unwrap(),
            src.read_checkpoint().await.unwrap()
        );
        for id in every_tile(1000) {
            assert_eq!(
                dst.read_tile(&id).await.unwrap(),
                src.read_tile(&id).await.unwrap(),
                "{}",
                id.path()
            );
        }
        check_log(&dst, ORIGIN, &v, None).await.unwrap();
        let again = copy(&src, &dst, &v, 1).await.unwrap();
        assert!(again.already_complete);
    }

    /// A mirror copied at one checkpoint catches up with a later one; its partial
    /// bundle is completed from the source's.
    #[tokio::test]
    async fn a_copy_catches_up_with_a_later_checkpoint() {
        let (src, v) = source(300, "b").await;
        let dst = MemoryStorage::new();
        copy(&src, &dst, &v, 64).await.unwrap();
        // The same log, grown: the first 300 entries are the same.
        let (src2, ()) = {
            let cfg = crate::conformance::config(4096);
            let (log, tasks) = Log::open(src.clone(), None, cfg).await.unwrap();
            for i in 300..700u32 {
                log.add(Bytes::from(format!("b entry {i}"))).await.unwrap();
            }
            log.shutdown();
            tasks.join().await;
            (src.clone(), ())
        };
        let report = copy(&src2, &dst, &v, 64).await.unwrap();
        assert_eq!((report.resumed_from, report.size), (300, 700));
        for id in every_tile(700) {
            assert_eq!(
                dst.read_tile(&id).await.unwrap(),
                src2.read_tile(&id).await.unwrap(),
                "{}",
                id.path()
            );
        }
    }

    /// A source that answers the last, partial bundle differently the second time
    /// (a lying mirror, a directory still being written): refused before anything of
    /// it is committed, and no checkpoint.
    #[tokio::test]
    async fn a_source_answering_differently_the_second_time_writes_nothing_unproven() {
        struct Fickle<'a> {
            log: StoredLog<'a, MemoryStorage>,
            reads: std::sync::atomic::AtomicUsize,
        }
        impl Fetch for Fickle<'_> {
            async fn get(&self, path: &str) -> Result<Option<bytes::Bytes>, VerifyError> {
                let got = self.log.get(path).await?;
                if path != "tile/entries/001.p/44" {
                    return Ok(got);
                }
                let n = self.reads.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                Ok(got.map(|b| {
                    let mut b = b.to_vec();
                    if n > 0 {
                        let last = b.len() - 1;
                        b[last] ^= 1;
                    }
                    bytes::Bytes::from(b)
                }))
            }
            fn location(&self) -> String {
                "fickle".into()
            }
        }
        let (src, v) = source(300, "f").await;
        let (cp, signed) = signed_checkpoint(&src, &v).await;
        let fickle = Fickle {
            log: StoredLog(&*src),
            reads: 0.into(),
        };
        let dst = MemoryStorage::new();
        let e = copy_log(
            &fickle,
            &dst,
            &TlogTiles,
            &cp,
            &signed,
            &CopyOptions::default(),
            &mut (),
        )
        .await
        .unwrap_err()
        .to_string();
        assert!(e.contains("tile/entries/001.p/44"), "{e}");
        assert_eq!(dst.load_state().await.unwrap().map_or(0, |s| s.size), 0);
        assert_eq!(dst.read_checkpoint().await.unwrap(), None);
    }

    /// A target holding another tree, or more than the source, is refused and left as
    /// it was; so is a source whose bundle does not match its tiles.
    #[tokio::test]
    async fn another_tree_a_longer_target_and_a_lying_source_are_refused() {
        let (src, v) = source(600, "c").await;
        let (other, _) = source(300, "d").await;
        let e = copy(&src, &other, &v, 64).await.unwrap_err().to_string();
        assert!(e.contains("not the source's"), "{e}");
        let (longer, _) = source(700, "e").await;
        let e = copy(&src, &longer, &v, 64).await.unwrap_err().to_string();
        assert!(e.contains("more than the source"), "{e}");
        assert_eq!(longer.load_state().await.unwrap().unwrap().size, 700);

        let id = TileId::entries(1, TILE_WIDTH as u16);
        let mut bad = src.read_tile(&id).await.unwrap().unwrap();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        src.tamper(&id, bad);
        let dst = MemoryStorage::new();
        let e = copy(&src, &dst, &v, 1).await.unwrap_err().to_string();
        assert!(e.contains("tile/entries/001"), "{e}");
        assert_eq!(dst.read_checkpoint().await.unwrap(), None);
        assert_eq!(dst.load_state().await.unwrap().map_or(0, |s| s.size), 256);
    }
}
