//! Recomputing a log's hash tiles and root from its entry bundles, and comparing them
//! with what the log serves. Used by the whole-log check ([`crate::fsck`]) and by the
//! load generator's full readers.

use tlogd_core::hash::{Hash, leaf_hash};
use tlogd_core::merkle::TileTree;
use tlogd_core::tile::{TILE_WIDTH, TileId};

use crate::VerifyError;

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
