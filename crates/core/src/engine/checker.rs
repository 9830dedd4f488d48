//! A whole-log checker: what every storage test runs at its end.
//!
//! Reads every entry bundle up to the committed size, recomputes every hash tile and
//! the root from them, and compares with what the store holds; then checks that the
//! published checkpoint verifies and names a prefix of the same tree. With
//! [`check_log_observed`], every checkpoint a test saw while the log grew is checked
//! the same way, together with the partial tiles it names: tlog-tiles "Partial Tiles"
//! requires a log to serve the partial tiles and bundle of every size a checkpoint
//! named, or (once it has deleted one) its full tile, whose prefix it is.

use std::collections::BTreeMap;

use super::storage::{LogStorage, StorageError, TreeState};
use crate::bundle;
use crate::checkpoint::Checkpoint;
use crate::hash::{Hash, leaf_hash};
use crate::merkle::TileTree;
use crate::note::NoteVerifier;
use crate::tile::{TILE_WIDTH, TileId, TileKind, edge_bundle, tile_prefix};

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

/// Check a whole log. `entries`, when given, is called with every entry in order.
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
/// The published checkpoint is checked the same way.
pub async fn check_log_observed<S: LogStorage>(
    storage: &S,
    origin: &str,
    verifier: &NoteVerifier,
    observed: &[Checkpoint],
    mut entries: Option<EntryVisitor<'_>>,
) -> Result<LogReport, StorageError> {
    let corrupt = |m: String| StorageError::Corrupt(m);
    let state = storage.load_state().await?.unwrap_or_else(TreeState::empty);
    let checkpoint = match storage.read_checkpoint().await? {
        Some(b) => Some(
            Checkpoint::open(&b, origin, verifier)
                .map_err(|e| corrupt(format!("checkpoint: {e}")))?
                .0,
        ),
        None => None,
    };
    // Every checkpoint to check, by size; two of one size must agree.
    let mut named: BTreeMap<u64, &Checkpoint> = BTreeMap::new();
    for cp in observed.iter().chain(checkpoint.as_ref()) {
        if cp.origin != origin {
            return Err(corrupt(format!(
                "a checkpoint of size {} is for the log {:?}",
                cp.size, cp.origin
            )));
        }
        if cp.size > state.size {
            return Err(corrupt(format!(
                "checkpoint size {} is ahead of the committed size {}",
                cp.size, state.size
            )));
        }
        if let Some(other) = named.insert(cp.size, cp)
            && other.root != cp.root
        {
            return Err(corrupt(format!(
                "two checkpoints of size {} with different roots: the log forked",
                cp.size
            )));
        }
    }
    let mut tree = TileTree::empty();
    let mut latest: BTreeMap<(TileKind, u64), (u16, Vec<u8>)> = BTreeMap::new();
    let mut out = Vec::new();
    let mut leaves: Vec<Hash> = Vec::with_capacity(TILE_WIDTH as usize);
    let mut n = 0u64;
    while n * TILE_WIDTH < state.size {
        let width = (state.size - n * TILE_WIDTH).min(TILE_WIDTH) as u16;
        let id = TileId::entries(n, width);
        let bytes = storage
            .read_tile(&id)
            .await?
            .ok_or_else(|| corrupt(format!("missing {}", id.path())))?;
        let parsed =
            bundle::parse_bundle(&bytes).map_err(|e| corrupt(format!("{}: {e}", id.path())))?;
        if parsed.len() != width as usize {
            return Err(corrupt(format!(
                "{} holds {} entries",
                id.path(),
                parsed.len()
            )));
        }
        leaves.clear();
        for (i, e) in parsed.iter().enumerate() {
            if let Some(f) = entries.as_mut() {
                f(n * TILE_WIDTH + i as u64, e);
            }
            leaves.push(leaf_hash(e));
        }
        // Split at every checkpoint size inside this bundle, so that the root and the
        // partial tiles of each can be compared too.
        let start = tree.size();
        let mut at = 0usize;
        for (&size, cp) in named.range(start + 1..=start + leaves.len() as u64) {
            let k = (size - start) as usize;
            tree.append(&leaves[at..k], &mut out);
            at = k;
            check_cp_root(cp, &tree)?;
            check_partials(storage, &tree, &bytes, &parsed[..k]).await?;
        }
        tree.append(&leaves[at..], &mut out);
        for (id, bytes) in out.drain(..) {
            latest.insert((id.kind, id.index), (id.width, bytes));
        }
        n += 1;
    }
    if let Some(cp) = named.get(&0) {
        check_cp_root(cp, &TileTree::empty())?;
    }
    if tree.root() != state.root {
        return Err(corrupt(format!(
            "entries hash to a root other than the committed one at size {}",
            state.size
        )));
    }
    for ((kind, index), (width, want)) in latest {
        let id = TileId { kind, index, width };
        if matches!(kind, TileKind::Entries) {
            continue;
        }
        let got = storage
            .read_tile(&id)
            .await?
            .ok_or_else(|| corrupt(format!("missing {}", id.path())))?;
        if got != want {
            return Err(corrupt(format!(
                "{} differs from the tile recomputed from the entries",
                id.path()
            )));
        }
    }
    Ok(LogReport {
        state,
        checkpoint_size: checkpoint.map(|c| c.size).unwrap_or(0),
    })
}

/// The partial tiles and bundle a checkpoint of `tree.size()` names must be stored
/// with the bytes recomputed from the entries, or be gone with their full tile stored
/// and holding them as its prefix (tlog-tiles "Partial Tiles"). `entries` are the first
/// entries of the bundle being read, up to that size, and `bundle` its bytes.
async fn check_partials<S: LogStorage>(
    storage: &S,
    tree: &TileTree,
    bundle: &[u8],
    entries: &[&[u8]],
) -> Result<(), StorageError> {
    let size = tree.size();
    let mut want = tree.edge_tiles();
    if let Some(id) = edge_bundle(size) {
        let mut prefix = Vec::with_capacity(bundle.len());
        for e in entries {
            bundle::append_entry(&mut prefix, e)
                .map_err(|e| StorageError::Corrupt(format!("{}: {e}", id.path())))?;
        }
        want.push((id, prefix));
    }
    for (id, want) in want {
        let found = match storage.read_tile(&id).await? {
            Some(got) => got == want,
            None => match storage.read_tile(&id.full()).await? {
                Some(full) => {
                    tile_prefix(id.kind, &full, TILE_WIDTH as u16, id.width)
                        == Some(want.as_slice())
                }
                None => {
                    return Err(StorageError::Corrupt(format!(
                        "the checkpoint of size {size} names {}, which is missing, and so is its full tile",
                        id.path()
                    )));
                }
            },
        };
        if !found {
            return Err(StorageError::Corrupt(format!(
                "{} (named by the checkpoint of size {size}) differs from the tile recomputed from the entries",
                id.path()
            )));
        }
    }
    Ok(())
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

fn check_cp_root(cp: &Checkpoint, tree: &TileTree) -> Result<(), StorageError> {
    if cp.root != tree.root() {
        return Err(StorageError::Corrupt(format!(
            "checkpoint root at size {} does not match the entries",
            cp.size
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::engine::memory::MemoryStorage;
    use crate::engine::{Log, LogConfig};
    use crate::note::NoteSigner;

    const SKEY: &str = "PRIVATE+KEY+example.com/log/testdata+33d7b496+AeymY/SZAX0jZcJ8enZ5FY1Dz+wTML2yWSkK+9DSF3eg";
    const ORIGIN: &str = "example.com/log/testdata";

    /// A log of 300 entries and the checkpoint it published at size 100.
    async fn grown_log() -> (Arc<MemoryStorage>, NoteVerifier, Checkpoint) {
        let signer = Arc::new(NoteSigner::from_skey(SKEY).unwrap());
        let verifier = signer.verifier();
        let mut cfg = LogConfig::new(ORIGIN, signer);
        cfg.checkpoint_interval = Duration::from_millis(1);
        let storage = Arc::new(MemoryStorage::new());
        let (log, tasks) = Log::open(storage.clone(), None, cfg).await.unwrap();
        for i in 0..100u32 {
            log.add(Bytes::from(format!("c{i}"))).await.unwrap();
        }
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while log.published_size() != Some(100) {
            assert!(std::time::Instant::now() < deadline, "no checkpoint at 100");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let signed = storage.read_checkpoint().await.unwrap().unwrap();
        let cp = Checkpoint::open(&signed, ORIGIN, &verifier).unwrap().0;
        assert_eq!(cp.size, 100);
        for i in 100..300u32 {
            log.add(Bytes::from(format!("c{i}"))).await.unwrap();
        }
        log.shutdown();
        tasks.join().await;
        (storage, verifier, cp)
    }

    #[tokio::test]
    async fn the_partials_of_every_observed_checkpoint_are_checked() {
        let (storage, verifier, cp100) = grown_log().await;
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
