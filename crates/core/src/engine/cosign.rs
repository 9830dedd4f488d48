//! The publisher's hook for cosigning (C2SP tlog-witness): after the log signs a
//! checkpoint and before it is published, a [`CheckpointCosigner`] may collect
//! cosignatures, using consistency proofs built from the log's own tiles.

use std::future::Future;
use std::pin::Pin;

use super::storage::{LogStorage, StorageError};
use crate::checkpoint::Checkpoint;
use crate::hash::Hash;
use crate::proof;
use crate::tile::{self, TileId};

/// A boxed future, so the hooks below can be trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Builds RFC 6962 consistency proofs between two sizes of the committed tree from the
/// log's stored tiles.
pub trait ConsistencyProver: Send + Sync {
    /// The consistency proof from the tree of `old` entries to the tree of `new`
    /// (tlog-witness "add-checkpoint": at most 63 hashes; empty when `old` is 0 or
    /// equals `new`).
    fn consistency_proof(
        &self,
        old: u64,
        new: u64,
    ) -> BoxFuture<'_, Result<Vec<Hash>, StorageError>>;
}

/// Collects cosignatures on a checkpoint before it is published.
pub trait CheckpointCosigner: Send + Sync + 'static {
    /// `signed` is the log-signed note of `checkpoint`. Returns the note to publish
    /// (normally `signed` with cosignature lines appended), or `Err(reason)` to withhold
    /// this checkpoint; the publisher then tries again after the checkpoint interval.
    fn cosign<'a>(
        &'a self,
        checkpoint: &'a Checkpoint,
        signed: &'a [u8],
        prover: &'a dyn ConsistencyProver,
    ) -> BoxFuture<'a, Result<Vec<u8>, String>>;
}

/// A [`ConsistencyProver`] over any [`LogStorage`].
pub struct StorageProver<'a, S>(pub &'a S);

impl<S: LogStorage> ConsistencyProver for StorageProver<'_, S> {
    fn consistency_proof(
        &self,
        old: u64,
        new: u64,
    ) -> BoxFuture<'_, Result<Vec<Hash>, StorageError>> {
        Box::pin(async move {
            if old == 0 || old == new {
                return Ok(Vec::new());
            }
            let ids = proof::consistency_proof_tiles(old, new)
                .map_err(|e| StorageError::Corrupt(format!("consistency {old} -> {new}: {e}")))?;
            let mut tiles = std::collections::HashMap::with_capacity(ids.len());
            for id in ids {
                let hashes = read_hashes(self.0, &id).await?;
                tiles.insert(id, hashes);
            }
            proof::consistency_proof(old, new, &tiles)
                .map_err(|e| StorageError::Corrupt(format!("consistency {old} -> {new}: {e}")))
        })
    }
}

/// The hashes of hash tile `id` (exactly `id.width` of them). A partial that storage
/// no longer holds is read as the prefix of its full tile (tlog-tiles "Partial Tiles":
/// a partial may be deleted once the full tile exists, and tiles are prefix-stable).
pub async fn read_hashes<S: LogStorage>(
    storage: &S,
    id: &TileId,
) -> Result<Vec<Hash>, StorageError> {
    let (got, bytes) = match storage.read_tile(id).await? {
        Some(b) => (*id, b),
        None if !id.is_full() => match storage.read_tile(&id.full()).await? {
            Some(b) => (id.full(), b),
            None => return Err(StorageError::Corrupt(format!("missing {}", id.path()))),
        },
        None => return Err(StorageError::Corrupt(format!("missing {}", id.path()))),
    };
    let mut hashes = tile::parse_hash_tile(&bytes, got.width)
        .map_err(|e| StorageError::Corrupt(format!("{}: {e}", got.path())))?;
    hashes.truncate(id.width as usize);
    Ok(hashes)
}
