//! Verified reads of a tlog-tiles log: checkpoints, tiles, bundles and proofs.

use std::collections::HashMap;

use anyhow::{Context, anyhow, bail};
use tlogd_core::bundle::parse_bundle;
use tlogd_core::checkpoint::Checkpoint;
use tlogd_core::hash::Hash;
use tlogd_core::note::NoteVerifier;
use tlogd_core::proof;
use tlogd_core::tile::{TILE_WIDTH, TileId, parse_hash_tile};

use crate::client::Client;

/// Most full tiles kept in memory (full tiles are immutable).
const TILE_CACHE: usize = 4096;

/// A reader bound to one log and key.
pub struct LogReader {
    client: Client,
    origin: String,
    verifier: NoteVerifier,
    cache: HashMap<TileId, Vec<Hash>>,
    /// Level-0 tiles whose subtree was proven included in the tree of this size.
    proven: (u64, std::collections::HashSet<u64>),
}

impl LogReader {
    /// A reader over `client`.
    pub fn new(client: Client, origin: String, verifier: NoteVerifier) -> Self {
        LogReader {
            client,
            origin,
            verifier,
            cache: HashMap::new(),
            proven: (0, Default::default()),
        }
    }

    /// Fetch and verify the checkpoint.
    pub async fn checkpoint(&mut self) -> anyhow::Result<Checkpoint> {
        let bytes = self
            .client
            .get("checkpoint")
            .await?
            .ok_or_else(|| anyhow!("checkpoint: 404"))?;
        let (cp, _) = Checkpoint::open(&bytes, &self.origin, &self.verifier)
            .context("checkpoint does not verify")?;
        Ok(cp)
    }

    /// Raw bytes of a tile or bundle; a missing partial falls back to the full one
    /// (tlog-tiles "Partial Tiles": partials may be deleted once full).
    pub async fn raw(&mut self, id: &TileId) -> anyhow::Result<(TileId, Vec<u8>)> {
        if let Some(b) = self.client.get(&id.path()).await? {
            return Ok((*id, b.to_vec()));
        }
        if !id.is_full() {
            let full = id.full();
            if let Some(b) = self.client.get(&full.path()).await? {
                return Ok((full, b.to_vec()));
            }
        }
        bail!("{}: not found", id.path())
    }

    /// The hashes of tile `id` (at least `id.width` of them).
    pub async fn tile(&mut self, id: &TileId) -> anyhow::Result<Vec<Hash>> {
        if let Some(h) = self.cache.get(&id.full()) {
            return Ok(h.clone());
        }
        let (got, bytes) = self.raw(id).await?;
        let hashes = parse_hash_tile(&bytes, got.width).with_context(|| got.path())?;
        if got.is_full() {
            if self.cache.len() >= TILE_CACHE {
                self.cache.clear();
            }
            self.cache.insert(got, hashes.clone());
        }
        Ok(hashes)
    }

    /// The entries of bundle `n` in a tree of `size` (exactly the width at that size).
    pub async fn bundle(&mut self, n: u64, size: u64) -> anyhow::Result<Vec<Vec<u8>>> {
        let width = (size - n * TILE_WIDTH).min(TILE_WIDTH) as u16;
        let id = TileId::entries(n, width);
        let (got, bytes) = self.raw(&id).await?;
        let entries = parse_bundle(&bytes).with_context(|| got.path())?;
        if entries.len() != got.width as usize {
            bail!(
                "{}: holds {} entries, expected {}",
                got.path(),
                entries.len(),
                got.width
            );
        }
        Ok(entries
            .into_iter()
            .take(width as usize)
            .map(|e| e.to_vec())
            .collect())
    }

    async fn tiles(&mut self, ids: Vec<TileId>) -> anyhow::Result<HashMap<TileId, Vec<Hash>>> {
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
    ) -> anyhow::Result<()> {
        let tiles = self
            .tiles(proof::inclusion_proof_tiles(index, cp.size)?)
            .await?;
        let p = proof::inclusion_proof(index, cp.size, &tiles)?;
        proof::verify_inclusion(leaf, index, cp.size, &p, &cp.root)
            .map_err(|e| anyhow!("inclusion proof of entry {index} in tree {}: {e}", cp.size))
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
    ) -> anyhow::Result<()> {
        if index >= cp.size {
            bail!("entry {index} is beyond checkpoint {}", cp.size);
        }
        let t = index / TILE_WIDTH;
        let width = (cp.size - t * TILE_WIDTH).min(TILE_WIDTH) as u16;
        let id = TileId::hash(0, t, width);
        let hashes = self.tile(&id).await?;
        let j = (index % TILE_WIDTH) as usize;
        if hashes.get(j) != Some(leaf) {
            bail!(
                "{}: hash {j} is not the leaf hash of entry {index}",
                id.path()
            );
        }
        if self.proven.0 != cp.size {
            self.proven = (cp.size, Default::default());
        }
        if self.proven.1.contains(&t) {
            return Ok(());
        }
        let mut tiles = self
            .tiles(proof::inclusion_proof_tiles(index, cp.size)?)
            .await?;
        // Prove with exactly the hashes checked above, not a second fetch of them.
        tiles.insert(id, hashes);
        let p = proof::inclusion_proof(index, cp.size, &tiles)?;
        proof::verify_inclusion(leaf, index, cp.size, &p, &cp.root)
            .map_err(|e| anyhow!("{} is not included in tree {}: {e}", id.path(), cp.size))?;
        self.proven.1.insert(t);
        Ok(())
    }

    /// Verify that `new` extends `old`.
    pub async fn verify_consistency(
        &mut self,
        old: &Checkpoint,
        new: &Checkpoint,
    ) -> anyhow::Result<()> {
        if new.size < old.size {
            bail!("checkpoint went back from {} to {}", old.size, new.size);
        }
        if old.size == new.size {
            if old.root != new.root {
                bail!("two different roots at size {}: the log forked", old.size);
            }
            return Ok(());
        }
        let tiles = self
            .tiles(proof::consistency_proof_tiles(old.size, new.size)?)
            .await?;
        let p = proof::consistency_proof(old.size, new.size, &tiles)?;
        proof::verify_consistency(old.size, new.size, &old.root, &new.root, &p).map_err(|e| {
            anyhow!(
                "checkpoints {} and {} are not consistent: {e}",
                old.size,
                new.size
            )
        })
    }
}
