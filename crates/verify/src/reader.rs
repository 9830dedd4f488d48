//! Verified reads of a tlog-tiles log: checkpoints, tiles, bundles and proofs.

use std::collections::HashMap;
use std::sync::Arc;

use tlogd_core::bundle::parse_bundle;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::hash::{Hash, leaf_hash};
use tlogd_core::note::NoteVerifier;
use tlogd_core::personality::{Personality, StoredEntry};
use tlogd_core::proof;
use tlogd_core::tile::{TILE_WIDTH, TileId, parse_hash_tile};

use crate::VerifyError;
use crate::fetch::Fetch;

/// Most full tiles kept in memory (full tiles are immutable).
const TILE_CACHE: usize = 4096;
/// Most partial tiles kept in memory: a partial tile of a given width is immutable too
/// (tiles are prefix-stable), and the right edge's partials are on every proof path of
/// the entries a checkpoint adds.
const PARTIAL_CACHE: usize = 256;

pub use tlogd_core::engine::checker::{
    check_width, open_checkpoint, open_checkpoint_with, width_at,
};

/// Parse bundle `got` and check it holds exactly `got.width` entries (tlog-tiles "Log
/// entries"); returns the first `want` of them.
pub fn bundle_entries(got: &TileId, bytes: &[u8], want: u16) -> Result<Vec<Vec<u8>>, VerifyError> {
    let entries =
        parse_bundle(bytes).map_err(|e| VerifyError::Invalid(format!("{}: {e}", got.path())))?;
    check_width(got, entries.len())?;
    Ok(entries
        .into_iter()
        .take(want as usize)
        .map(<[u8]>::to_vec)
        .collect())
}

/// Split bundle `got` with `personality` and check it holds exactly `got.width`
/// entries (as [`bundle_entries`] does for tlog-tiles); returns the first `want` of
/// them as stored (a CT log's: whole `TileLeaf`s).
pub fn personality_entries(
    personality: &dyn Personality,
    got: &TileId,
    bytes: &[u8],
    want: u16,
) -> Result<Vec<Vec<u8>>, VerifyError> {
    let entries = personality
        .split_bundle(bytes)
        .map_err(|e| VerifyError::Invalid(format!("{}: {e}", got.path())))?;
    check_width(got, entries.len())?;
    Ok(entries
        .into_iter()
        .take(want as usize)
        .map(|e| e.bytes.to_vec())
        .collect())
}

/// A reader bound to one log and key.
pub struct LogReader<F: Fetch> {
    fetch: F,
    origin: String,
    verifier: NoteVerifier,
    /// What the log's entries are; `None` is tlog-tiles, read on its own path (entry
    /// bundles parsed and hashed directly, no dynamic call per entry).
    personality: Option<Arc<dyn Personality>>,
    cache: HashMap<TileId, Vec<Hash>>,
    /// Most full tiles in `cache`.
    cache_limit: usize,
    partials: HashMap<TileId, Vec<Hash>>,
    /// Level-0 tiles whose subtree was proven included in the tree of this size.
    proven: (u64, std::collections::HashSet<u64>),
}

impl<F: Fetch> LogReader<F> {
    /// A reader of the log `origin` (signed by `verifier`) through `fetch`.
    pub fn new(fetch: F, origin: String, verifier: NoteVerifier) -> Self {
        LogReader {
            fetch,
            origin,
            verifier,
            personality: None,
            cache: HashMap::new(),
            cache_limit: TILE_CACHE,
            partials: HashMap::new(),
            proven: (0, Default::default()),
        }
    }

    /// Keep at most `tiles` full tiles (default 4,096, 32 MiB of hashes). A reader that
    /// proves entries as the log grows needs only the few on the right edge's paths.
    pub fn with_tile_cache(mut self, tiles: usize) -> Self {
        self.cache_limit = tiles.max(1);
        self
    }

    /// Read a log of another personality (a CT log: `tlogd_ct::StaticCt`): its bundles
    /// are that personality's tiles (`tile/data/` for static-ct-api), split and hashed
    /// as it says. The default is tlog-tiles.
    pub fn with_personality(mut self, personality: Arc<dyn Personality>) -> Self {
        self.personality = Some(personality);
        self
    }

    /// The personality given by [`LogReader::with_personality`] (`None`: tlog-tiles).
    pub fn personality(&self) -> Option<&Arc<dyn Personality>> {
        self.personality.as_ref()
    }

    /// The id of bundle `n` of `width` entries: an entry bundle, or the personality's
    /// kind of tile.
    pub fn bundle_id(&self, n: u64, width: u16) -> TileId {
        match &self.personality {
            None => TileId::entries(n, width),
            Some(p) => TileId {
                kind: p.bundle_kind(),
                index: n,
                width,
            },
        }
    }

    /// The leaf hash of an entry as [`LogReader::bundle`] returns it (for tlog-tiles,
    /// the RFC 6962 leaf hash of its bytes; for a CT log, of its `MerkleTreeLeaf`).
    pub fn leaf_hash(&self, entry: &[u8]) -> Hash {
        match &self.personality {
            None => leaf_hash(entry),
            Some(p) => p.stored_leaf(&StoredEntry {
                bytes: entry,
                timestamp: 0,
            }),
        }
    }

    /// Fetch and verify the checkpoint.
    pub async fn checkpoint(&mut self) -> Result<Checkpoint, VerifyError> {
        let bytes = self
            .fetch
            .get("checkpoint")
            .await?
            .ok_or_else(|| VerifyError::NotFound("checkpoint".into()))?;
        open_checkpoint(&bytes, &self.origin, &self.verifier)
    }

    /// Raw bytes of a tile or bundle; a missing partial falls back to the full one
    /// (tlog-tiles "Partial Tiles": partials may be deleted once full). Returns the id
    /// actually read.
    pub async fn raw(&mut self, id: &TileId) -> Result<(TileId, Vec<u8>), VerifyError> {
        if let Some(b) = self.fetch.get(&id.path()).await? {
            return Ok((*id, b.to_vec()));
        }
        if !id.is_full() {
            let full = id.full();
            if let Some(b) = self.fetch.get(&full.path()).await? {
                return Ok((full, b.to_vec()));
            }
        }
        Err(VerifyError::NotFound(id.path()))
    }

    /// The hashes of tile `id` (at least `id.width` of them).
    pub async fn tile(&mut self, id: &TileId) -> Result<Vec<Hash>, VerifyError> {
        if let Some(h) = self.cached(id) {
            return Ok(h.clone());
        }
        let (got, hashes) = self.tile_uncached(id).await?;
        let (cache, limit) = if got.is_full() {
            (&mut self.cache, self.cache_limit)
        } else {
            (&mut self.partials, PARTIAL_CACHE)
        };
        if cache.len() >= limit {
            cache.clear();
        }
        cache.insert(got, hashes.clone());
        Ok(hashes)
    }

    /// The hashes of tile `id` if a cache holds them (its full tile's will do).
    fn cached(&self, id: &TileId) -> Option<&Vec<Hash>> {
        self.cache.get(&id.full()).or_else(|| self.partials.get(id))
    }

    /// The hashes of tile `id` as read (or of the full tile, if the partial is gone),
    /// and the id actually read; not cached.
    async fn tile_uncached(&mut self, id: &TileId) -> Result<(TileId, Vec<Hash>), VerifyError> {
        let (got, bytes) = self.raw(id).await?;
        let hashes = parse_hash_tile(&bytes, got.width)
            .map_err(|e| VerifyError::Invalid(format!("{}: {e}", got.path())))?;
        Ok((got, hashes))
    }

    /// The entries of bundle `n` in a tree of `size` (exactly the width at that size),
    /// as stored: for a CT log, each whole `TileLeaf` of its data tile.
    pub async fn bundle(&mut self, n: u64, size: u64) -> Result<Vec<Vec<u8>>, VerifyError> {
        let width = width_at(n, size);
        let (got, bytes) = self.raw(&self.bundle_id(n, width)).await?;
        match &self.personality {
            None => bundle_entries(&got, &bytes, width),
            Some(p) => personality_entries(p.as_ref(), &got, &bytes, width),
        }
    }

    async fn tiles(&mut self, ids: Vec<TileId>) -> Result<HashMap<TileId, Vec<Hash>>, VerifyError> {
        let mut out = HashMap::with_capacity(ids.len());
        for id in ids {
            let h = self.tile(&id).await?;
            out.insert(id, h);
        }
        Ok(out)
    }

    /// Verify that `leaf` is at `index` in the tree of `cp`, with a proof from tiles.
    pub async fn verify_inclusion(
        &mut self,
        cp: &Checkpoint,
        index: u64,
        leaf: &Hash,
    ) -> Result<(), VerifyError> {
        let tiles = self
            .tiles(proof::inclusion_proof_tiles(index, cp.size).map_err(proof_err)?)
            .await?;
        let p = proof::inclusion_proof(index, cp.size, &tiles).map_err(proof_err)?;
        proof::verify_inclusion(leaf, index, cp.size, &p, &cp.root).map_err(|e| {
            VerifyError::Invalid(format!(
                "inclusion proof of entry {index} in tree {}: {e}",
                cp.size
            ))
        })
    }

    /// Verify that `leaf` is at `index` in the tree of `cp`, sharing work per tile: the
    /// leaf must equal its hash in the level-0 tile, and the tile itself is proven
    /// included once per checkpoint (an inclusion proof of one of its leaves built from
    /// those very hashes fixes the whole tile's subtree root under `cp.root`). This is
    /// as strong as one proof per entry at 1/256 of the hashing.
    pub async fn verify_via_tile(
        &mut self,
        cp: &Checkpoint,
        index: u64,
        leaf: &Hash,
    ) -> Result<(), VerifyError> {
        if index >= cp.size {
            return Err(VerifyError::Invalid(format!(
                "entry {index} is beyond checkpoint {}",
                cp.size
            )));
        }
        let t = index / TILE_WIDTH;
        let id = TileId::hash(0, t, width_at(t, cp.size));
        let hashes = self.tile(&id).await?;
        let j = (index % TILE_WIDTH) as usize;
        if hashes.get(j) != Some(leaf) {
            return Err(VerifyError::Invalid(format!(
                "{}: hash {j} is not the leaf hash of entry {index}",
                id.path()
            )));
        }
        if self.proven.0 != cp.size {
            self.proven = (cp.size, Default::default());
        }
        if self.proven.1.contains(&t) {
            return Ok(());
        }
        let mut tiles = self
            .tiles(proof::inclusion_proof_tiles(index, cp.size).map_err(proof_err)?)
            .await?;
        // Prove with exactly the hashes checked above, not a second fetch of them.
        tiles.insert(id, hashes);
        let p = proof::inclusion_proof(index, cp.size, &tiles).map_err(proof_err)?;
        proof::verify_inclusion(leaf, index, cp.size, &p, &cp.root).map_err(|e| {
            VerifyError::Invalid(format!(
                "{} is not included in tree {}: {e}",
                id.path(),
                cp.size
            ))
        })?;
        self.proven.1.insert(t);
        Ok(())
    }

    /// The leaf hashes of level-0 tile `t` in the tree of `cp` (exactly its width
    /// there), proven to be that tree's: an inclusion proof of the tile's first leaf is
    /// built from these very hashes and checked against `cp.root`. That fixes every
    /// hash of the tile, since the proof's part inside the tile is computed from all
    /// the others. A caller then checks any number of its entries with one comparison
    /// each.
    pub async fn proven_leaf_hashes(
        &mut self,
        cp: &Checkpoint,
        t: u64,
    ) -> Result<Vec<Hash>, VerifyError> {
        let first = t.saturating_mul(TILE_WIDTH);
        if first >= cp.size {
            return Err(VerifyError::Invalid(format!(
                "tile {t} is beyond checkpoint {}",
                cp.size
            )));
        }
        let id = TileId::hash(0, t, width_at(t, cp.size));
        // Not cached: a caller reads each level-0 tile once (the cache would fill
        // with them, 8 KiB each, and evict the upper tiles every proof shares). The
        // right edge's partial may be there already, read for an earlier proof.
        let mut hashes = match self.cached(&id) {
            Some(h) => h.clone(),
            None => self.tile_uncached(&id).await?.1,
        };
        hashes.truncate(id.width as usize);
        let mut ids = proof::inclusion_proof_tiles(first, cp.size).map_err(proof_err)?;
        ids.retain(|i| !(i.kind == id.kind && i.index == id.index));
        let mut tiles = self.tiles(ids).await?;
        tiles.insert(id, hashes.clone());
        let p = proof::inclusion_proof(first, cp.size, &tiles).map_err(proof_err)?;
        let leaf = hashes
            .first()
            .ok_or_else(|| VerifyError::Invalid(format!("{}: empty", id.path())))?;
        proof::verify_inclusion(leaf, first, cp.size, &p, &cp.root).map_err(|e| {
            VerifyError::Invalid(format!(
                "{} is not included in tree {}: {e}",
                id.path(),
                cp.size
            ))
        })?;
        Ok(hashes)
    }

    /// Verify that `new` extends `old` with a consistency proof built from tiles.
    pub async fn verify_consistency(
        &mut self,
        old: &Checkpoint,
        new: &Checkpoint,
    ) -> Result<(), VerifyError> {
        if new.size < old.size {
            return Err(VerifyError::Invalid(format!(
                "checkpoint went back from {} to {}",
                old.size, new.size
            )));
        }
        if old.size == new.size {
            if old.root != new.root {
                return Err(VerifyError::Invalid(format!(
                    "two different roots at size {}: the log forked",
                    old.size
                )));
            }
            return Ok(());
        }
        let tiles = self
            .tiles(proof::consistency_proof_tiles(old.size, new.size).map_err(proof_err)?)
            .await?;
        let p = proof::consistency_proof(old.size, new.size, &tiles).map_err(proof_err)?;
        proof::verify_consistency(old.size, new.size, &old.root, &new.root, &p).map_err(|e| {
            VerifyError::Invalid(format!(
                "checkpoints {} and {} are not consistent: {e}",
                old.size, new.size
            ))
        })
    }
}

fn proof_err(e: proof::ProofError) -> VerifyError {
    VerifyError::Invalid(format!("proof: {e}"))
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use tlogd_core::hash::leaf_hash;
    use tlogd_core::merkle::TileTree;
    use tlogd_core::note::generate_key;
    use tlogd_core::tile::TileKind;

    use super::*;

    /// A log's tiles in memory; every path asked for is recorded.
    #[derive(Clone, Default)]
    struct MapFetch {
        files: Arc<HashMap<String, Bytes>>,
        asked: Arc<Mutex<Vec<String>>>,
    }

    impl Fetch for MapFetch {
        async fn get(&self, path: &str) -> Result<Option<Bytes>, VerifyError> {
            self.asked.lock().unwrap().push(path.to_string());
            Ok(self.files.get(path).cloned())
        }

        fn location(&self) -> String {
            "memory".into()
        }
    }

    /// Each level-0 tile a caller proves is read once and not kept: the cache holds
    /// only the upper tiles that every proof shares.
    #[tokio::test]
    async fn proven_level_0_tiles_are_read_once_and_not_cached() {
        // A full level-1 tile, then a partial one, then a partial level-0 tile.
        let size = TILE_WIDTH * TILE_WIDTH + 40 * TILE_WIDTH + 17;
        let leaves: Vec<Hash> = (0..size).map(|i| leaf_hash(&i.to_le_bytes())).collect();
        let mut tree = TileTree::empty();
        let mut tiles = Vec::new();
        tree.append(&leaves, &mut tiles);
        let files = tiles
            .into_iter()
            .map(|(id, bytes)| (id.path(), Bytes::from(bytes)))
            .collect();
        let fetch = MapFetch {
            files: Arc::new(files),
            ..MapFetch::default()
        };
        let (_, vkey) = generate_key("example.com/log").unwrap();
        let verifier = NoteVerifier::from_vkey(&vkey).unwrap();
        let mut reader = LogReader::new(fetch.clone(), "example.com/log".into(), verifier);
        let cp = Checkpoint {
            origin: "example.com/log".into(),
            size,
            root: tree.root(),
            extensions: Vec::new(),
        };
        // Tile t's leaf hashes, as the tree holds them.
        let expected = |t: u64| {
            let first = (t * TILE_WIDTH) as usize;
            &leaves[first..(first + TILE_WIDTH as usize).min(leaves.len())]
        };
        for t in 0..=size / TILE_WIDTH {
            let got = reader.proven_leaf_hashes(&cp, t).await.unwrap();
            assert_eq!(got, expected(t));
        }
        let level_0 = |p: &String| p.starts_with("tile/0/");
        let asked = fetch.asked.lock().unwrap().clone();
        let tiles_0 = (size / TILE_WIDTH + 1) as usize;
        assert_eq!(asked.iter().filter(|p| level_0(p)).count(), tiles_0);
        // Kept: tiles on the proofs' paths (the level-1 tiles, the right edge's partial
        // level-0 tile); no full level-0 tile.
        let cached: Vec<_> = reader.cache.keys().chain(reader.partials.keys()).collect();
        assert!(
            reader
                .cache
                .keys()
                .all(|id| id.kind != TileKind::Hash { level: 0 }),
            "{cached:?}"
        );
        assert!(cached.len() <= 4, "{cached:?}");
        // A cache of one full tile, emptied at nearly every proof: the same hashes.
        let mut small = LogReader::new(
            fetch.clone(),
            "example.com/log".into(),
            reader.verifier.clone(),
        )
        .with_tile_cache(1);
        for t in (0..=size / TILE_WIDTH).rev() {
            let got = small.proven_leaf_hashes(&cp, t).await.unwrap();
            assert_eq!(got, expected(t));
            assert!(small.cache.len() <= 1);
        }
        // A wrong root is still caught with the tile read this way.
        let forged = Checkpoint {
            root: [7; 32],
            ..cp.clone()
        };
        assert!(reader.proven_leaf_hashes(&forged, 3).await.is_err());
    }
}
