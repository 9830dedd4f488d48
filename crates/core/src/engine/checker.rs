//! A whole-log checker: what every storage test runs at its end.
//!
//! Reads every entry bundle up to the committed size, recomputes every hash tile and
//! the root from them, and compares with what the store holds; then checks that the
//! published checkpoint verifies and names a prefix of the same tree.

use std::collections::BTreeMap;

use super::storage::{LogStorage, StorageError, TreeState};
use crate::bundle;
use crate::checkpoint::Checkpoint;
use crate::hash::{Hash, leaf_hash};
use crate::merkle::TileTree;
use crate::note::NoteVerifier;
use crate::tile::{TILE_WIDTH, TileId, TileKind};

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
    if let Some(cp) = &checkpoint
        && cp.size > state.size
    {
        return Err(corrupt(format!(
            "checkpoint size {} is ahead of the committed size {}",
            cp.size, state.size
        )));
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
        // Split at the checkpoint size so its root can be compared too.
        let start = tree.size();
        if let Some(cp) = &checkpoint
            && cp.size > start
            && cp.size < start + leaves.len() as u64
        {
            let k = (cp.size - start) as usize;
            tree.append(&leaves[..k], &mut out);
            check_cp_root(cp, &tree)?;
            tree.append(&leaves[k..], &mut out);
        } else {
            tree.append(&leaves, &mut out);
        }
        if let Some(cp) = &checkpoint
            && cp.size == tree.size()
        {
            check_cp_root(cp, &tree)?;
        }
        for (id, bytes) in out.drain(..) {
            latest.insert((id.kind, id.index), (id.width, bytes));
        }
        n += 1;
    }
    if let Some(cp) = &checkpoint
        && cp.size == 0
    {
        check_cp_root(cp, &tree)?;
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

fn check_cp_root(cp: &Checkpoint, tree: &TileTree) -> Result<(), StorageError> {
    if cp.root != tree.root() {
        return Err(StorageError::Corrupt(format!(
            "checkpoint root at size {} does not match the entries",
            cp.size
        )));
    }
    Ok(())
}
