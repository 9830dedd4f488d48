//! The right edge of the tree in memory (the integrator's, step 2 of the protocol):
//! the tree's frontier and the partial entry bundle, loaded from storage, appended to
//! in memory, and undone when a commit fails.

use super::*;

/// The in-memory right edge: hash tiles (inside [`TileTree`]) and the partial bundle.
#[derive(Clone)]
pub(super) struct Edge {
    pub(super) tree: TileTree,
    pub(super) bundle: Vec<u8>,
    /// The timestamp of the newest entry (read from the partial bundle at a reload; 0
    /// when there is none or a personality's entries carry none). The next batch is sequenced at a
    /// timestamp no smaller, so entry timestamps never decrease along the tree and the
    /// newest entry's is the largest: a checkpoint signed at or after it is later than
    /// every entry it covers (docs/seams.md, "Timestamps").
    pub(super) last_timestamp: u64,
    /// The stored state is frozen ([`TreeState::frozen`]): nothing is appended.
    pub(super) frozen: bool,
}

/// What [`Edge::undo`] needs to take an [`Edge`] back to before an
/// [`Edge::append`]: all but the partial bundle, which only grew unless it filled up.
pub(super) struct EdgeUndo {
    pub(super) tree: TileTree,
    pub(super) bundle_len: usize,
    pub(super) last_timestamp: u64,
}

impl Edge {
    /// See [`EdgeUndo`].
    pub(super) fn undo_point(&self) -> EdgeUndo {
        EdgeUndo {
            tree: self.tree.clone(),
            bundle_len: self.bundle.len(),
            last_timestamp: self.last_timestamp,
        }
    }

    /// This edge as it was at `undo`, after appends that were not committed; `None`
    /// when an append filled the bundle (its bytes went to the batch), so the edge
    /// must be loaded again.
    pub(super) fn undo(mut self, undo: EdgeUndo) -> Option<Edge> {
        let same_bundle = self.tree.size() / TILE_WIDTH == undo.tree.size() / TILE_WIDTH;
        if !same_bundle || self.bundle.len() < undo.bundle_len {
            return None;
        }
        self.bundle.truncate(undo.bundle_len);
        self.tree = undo.tree;
        self.last_timestamp = undo.last_timestamp;
        Some(self)
    }

    pub(super) fn state(&self) -> TreeState {
        TreeState {
            size: self.tree.size(),
            root: self.tree.root(),
            frozen: self.frozen,
        }
    }

    /// Load the committed edge and check it against the committed root.
    /// `state` is the committed state when the caller has just read it. One batched
    /// read of the edge's tiles.
    pub(super) async fn load<S: LogStorage>(
        storage: &S,
        personality: &dyn Personality,
        state: Option<TreeState>,
    ) -> Result<Edge, StorageError> {
        let state = match state {
            Some(s) => s,
            None => storage.load_state().await?.unwrap_or_else(TreeState::empty),
        };
        let edge_bundle = tile::edge_bundle(state.size).map(|id| TileId {
            kind: personality.bundle_kind(),
            ..id
        });
        let ids: Vec<TileId> = tile::edge_tiles(state.size)
            .into_iter()
            .chain(edge_bundle)
            .collect();
        let mut found = storage.read_tiles(&ids).await?;
        // Another frontend may have completed a tile of this edge since the state was
        // read, and collected its partials: the full tile starts with the same hashes
        // or entries (tlog-tiles "Partial Tiles"), as in `root_at`.
        let gone: Vec<usize> = (0..ids.len())
            .filter(|&i| found[i].is_none() && !ids[i].is_full())
            .collect();
        if !gone.is_empty() {
            let fulls: Vec<TileId> = gone.iter().map(|&i| ids[i].full()).collect();
            for (&i, full) in gone.iter().zip(storage.read_tiles(&fulls).await?) {
                let id = ids[i];
                found[i] = full.and_then(|b| {
                    tile::tile_prefix(id.kind, &b, TILE_WIDTH as u16, id.width).map(<[u8]>::to_vec)
                });
            }
        }
        let mut found = found.into_iter();
        let mut levels: Vec<Vec<Hash>> = Vec::new();
        let mut bundle = Vec::new();
        for id in &ids {
            let bytes = found
                .next()
                .flatten()
                .ok_or_else(|| StorageError::Corrupt(format!("missing edge tile {}", id.path())))?;
            let TileKind::Hash { level } = id.kind else {
                bundle = bytes;
                continue;
            };
            let hashes = tile::parse_hash_tile(&bytes, id.width)
                .map_err(|e| StorageError::Corrupt(format!("{}: {e}", id.path())))?;
            let level = level as usize;
            if levels.len() <= level {
                levels.resize(level + 1, Vec::new());
            }
            levels[level] = hashes;
        }
        let level0 = levels.first().cloned().unwrap_or_default();
        let tree = TileTree::from_edge(state.size, levels).map_err(|e| {
            StorageError::Corrupt(format!("edge tiles at size {}: {e}", state.size))
        })?;
        if tree.root() != state.root {
            return Err(StorageError::Corrupt(format!(
                "edge tiles at size {} do not hash to the committed root",
                state.size
            )));
        }
        let mut last_timestamp = 0;
        if let Some(id) = edge_bundle {
            let entries = personality
                .split_bundle(&bundle)
                .map_err(|e| StorageError::Corrupt(format!("{}: {e}", id.path())))?;
            let matches = entries.len() == level0.len()
                && entries
                    .iter()
                    .zip(&level0)
                    .all(|(e, h)| personality.stored_leaf(e) == *h);
            if !matches {
                return Err(StorageError::Corrupt(format!(
                    "{} does not match the level-0 edge tile",
                    id.path()
                )));
            }
            last_timestamp = entries.iter().map(|e| e.timestamp).max().unwrap_or(0);
        }
        Ok(Edge {
            tree,
            bundle,
            last_timestamp,
            frozen: state.frozen,
        })
    }

    /// Append a batch (entries with the leaf hashes [`Personality::accept`] gave);
    /// returns every changed hash tile, then every changed entry bundle.
    pub(super) fn append(
        &mut self,
        personality: &dyn Personality,
        entries: &[Bytes],
        accepted: &[Hash],
    ) -> Result<Vec<(TileId, Vec<u8>)>, EntryError> {
        let start = self.tree.size();
        let kind = personality.bundle_kind();
        // One timestamp per batch, never below the newest entry's (another frontend's
        // clock may run ahead of ours).
        let timestamp = unix_millis().max(self.last_timestamp);
        let mut leaves = Vec::with_capacity(entries.len());
        let mut bundles = Vec::with_capacity(1 + entries.len() / TILE_WIDTH as usize);
        let mut n = start / TILE_WIDTH;
        let mut count = start % TILE_WIDTH;
        for (i, (e, a)) in entries.iter().zip(accepted).enumerate() {
            let index = start + i as u64;
            leaves.push(personality.encode(e, a, index, timestamp, &mut self.bundle)?);
            count += 1;
            if count == TILE_WIDTH {
                let cap = self.bundle.capacity();
                let full = std::mem::replace(&mut self.bundle, Vec::with_capacity(cap));
                bundles.push((
                    TileId {
                        kind,
                        index: n,
                        width: TILE_WIDTH as u16,
                    },
                    full,
                ));
                n += 1;
                count = 0;
            }
        }
        if count > 0 {
            bundles.push((
                TileId {
                    kind,
                    index: n,
                    width: count as u16,
                },
                self.bundle.clone(),
            ));
        }
        if !entries.is_empty() {
            self.last_timestamp = timestamp;
        }
        let mut tiles = Vec::with_capacity(8 + 2 * entries.len() / TILE_WIDTH as usize);
        self.tree.append(&leaves, &mut tiles);
        tiles.append(&mut bundles);
        Ok(tiles)
    }
}
