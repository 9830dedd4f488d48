//! An in-memory [`LogStorage`] with fault injection, for tests and embedding.

use std::collections::HashMap;
use std::sync::Mutex;

use super::storage::{CommitBatch, LogStorage, StorageError, TreeState, check_blob_key};
use crate::tile::{TileId, TileKind};

/// What the next faulty call does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Return an error without persisting anything.
    FailAndDontPersist,
    /// Persist everything, then return an error anyway.
    FailButPersist,
    /// Persist the tiles but not the state, then return an error.
    FailAfterTiles,
    /// Persist everything, then return an error and make the store unreadable (a
    /// partition right after the commit arrived) until
    /// [`MemoryStorage::set_unreadable`]`(false)`.
    PersistThenPartition,
    /// Return [`StorageError::Unsettled`] without persisting, and persist the whole
    /// batch just before the next commit is attempted: a `COMMIT` still on its way to
    /// the database (or a conditional write still in flight) when the engine read the
    /// state back, which the backend could not fence off.
    PersistLate,
}

#[derive(Default)]
struct State {
    tree: Option<TreeState>,
    tiles: HashMap<(TileKind, u64, u16), Vec<u8>>,
    checkpoint: Option<Vec<u8>>,
    /// Blobs by key ([`LogStorage::put_blob`]).
    blobs: HashMap<String, Vec<u8>>,
    next_commit_fault: Option<Fault>,
    /// A batch failed with [`Fault::PersistLate`], landing at the next commit.
    late: Option<CommitBatch>,
    /// See [`MemoryStorage::set_commit_delay`].
    commit_delay: std::time::Duration,
    unwritable: bool,
    unreadable: bool,
}

/// Everything in a `HashMap`, behind a mutex.
#[derive(Default)]
pub struct MemoryStorage {
    state: Mutex<State>,
}

impl MemoryStorage {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Make the next [`LogStorage::commit`] fail in the given way.
    pub fn fail_next_commit(&self, fault: Fault) {
        self.lock().next_commit_fault = Some(fault);
    }

    /// Make every write fail (true) or succeed again (false).
    pub fn set_unwritable(&self, unwritable: bool) {
        self.lock().unwritable = unwritable;
    }

    /// Make every read of the state and of tiles fail (true) or succeed again (false):
    /// the engine cannot learn a commit's outcome meanwhile.
    pub fn set_unreadable(&self, unreadable: bool) {
        self.lock().unreadable = unreadable;
    }

    /// Overwrite a stored tile, as an attacker or a bit flip would.
    pub fn tamper(&self, id: &TileId, bytes: Vec<u8>) {
        self.lock()
            .tiles
            .insert((id.kind, id.index, id.width), bytes);
    }

    /// Make every commit first block a thread of the blocking pool this long, as a
    /// disk's sync blocks the POSIX backend's (benches: batches grow as on a disk).
    pub fn set_commit_delay(&self, delay: std::time::Duration) {
        self.lock().commit_delay = delay;
    }

    /// Lose the batch a [`Fault::PersistLate`] left on its way: it never lands (a
    /// request that died in the network).
    pub fn drop_late(&self) {
        self.lock().late = None;
    }

    /// Advance the stored state behind the engine's back (another frontend).
    pub fn force_state(&self, state: TreeState) {
        self.lock().tree = Some(state);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

fn err(what: &str) -> StorageError {
    StorageError::Backend(format!("injected fault: {what}"))
}

impl LogStorage for MemoryStorage {
    fn backend_name(&self) -> &'static str {
        "memory"
    }

    async fn load_state(&self) -> Result<Option<TreeState>, StorageError> {
        let s = self.lock();
        if s.unreadable {
            return Err(err("unreadable"));
        }
        Ok(s.tree)
    }

    async fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
        let delay = self.lock().commit_delay;
        if !delay.is_zero() {
            tokio::task::spawn_blocking(move || std::thread::sleep(delay))
                .await
                .map_err(|e| StorageError::Backend(e.to_string()))?;
        }
        let mut s = self.lock();
        if let Some(late) = s.late.take()
            && s.tree.unwrap_or_else(TreeState::empty) == late.prev
        {
            for (id, bytes) in late.tiles {
                s.tiles.insert((id.kind, id.index, id.width), bytes);
            }
            s.tree = Some(late.next);
        }
        if s.unwritable {
            return Err(err("unwritable"));
        }
        let found = s.tree.unwrap_or_else(TreeState::empty);
        if found != batch.prev {
            return Err(StorageError::Conflict {
                expected: batch.prev.size,
                found: found.size,
            });
        }
        let fault = s.next_commit_fault.take();
        if fault == Some(Fault::FailAndDontPersist) {
            return Err(err("commit not persisted"));
        }
        if fault == Some(Fault::PersistLate) {
            s.late = Some(batch);
            return Err(StorageError::Unsettled(
                "injected fault: commit still in flight".into(),
            ));
        }
        // Tiles written before the state advanced may be rewritten (see the trait's
        // contract): only tiles under a committed state are immutable.
        for (id, bytes) in batch.tiles {
            s.tiles.insert((id.kind, id.index, id.width), bytes);
        }
        if fault == Some(Fault::FailAfterTiles) {
            return Err(err("tiles persisted, state not"));
        }
        s.tree = Some(batch.next);
        if fault == Some(Fault::FailButPersist) {
            return Err(err("commit persisted"));
        }
        if fault == Some(Fault::PersistThenPartition) {
            s.unreadable = true;
            return Err(err("commit persisted, then a partition"));
        }
        Ok(())
    }

    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        let s = self.lock();
        if s.unreadable {
            return Err(err("unreadable"));
        }
        Ok(s.tiles.get(&(id.kind, id.index, id.width)).cloned())
    }

    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        let mut s = self.lock();
        if s.unwritable {
            return Err(err("unwritable"));
        }
        s.checkpoint = Some(signed.to_vec());
        Ok(())
    }

    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.lock().checkpoint.clone())
    }

    async fn put_blob(
        &self,
        key: &str,
        bytes: &[u8],
        _content_type: &'static str,
    ) -> Result<(), StorageError> {
        check_blob_key(key)?;
        let mut s = self.lock();
        if s.unwritable {
            return Err(err("unwritable"));
        }
        match s.blobs.get(key) {
            Some(stored) if stored == bytes => Ok(()),
            Some(_) => Err(StorageError::Corrupt(format!(
                "blob {key} already holds other bytes"
            ))),
            None => {
                s.blobs.insert(key.to_string(), bytes.to_vec());
                Ok(())
            }
        }
    }

    async fn read_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        check_blob_key(key)?;
        let s = self.lock();
        if s.unreadable {
            return Err(err("unreadable"));
        }
        Ok(s.blobs.get(key).cloned())
    }

    async fn check_writable(&self) -> Result<(), StorageError> {
        if self.lock().unwritable {
            return Err(err("unwritable"));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn blobs_are_put_if_absent_with_a_byte_compare() {
        let s = MemoryStorage::new();
        let ct = "application/pkix-cert";
        assert_eq!(s.read_blob("issuer/a").await.unwrap(), None);
        s.put_blob("issuer/a", b"one", ct).await.unwrap();
        s.put_blob("issuer/a", b"one", ct).await.unwrap();
        assert!(matches!(
            s.put_blob("issuer/a", b"two", ct).await,
            Err(StorageError::Corrupt(_))
        ));
        assert_eq!(
            s.read_blob("issuer/a").await.unwrap(),
            Some(b"one".to_vec())
        );
        assert!(s.put_blob("tile/0/000", b"x", ct).await.is_err());
        s.set_unwritable(true);
        assert!(s.put_blob("issuer/b", b"x", ct).await.is_err());
        s.set_unwritable(false);
        assert_eq!(s.read_blob("issuer/b").await.unwrap(), None);
    }
}
