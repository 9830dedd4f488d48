//! [`CachedTiles`]: any [`LogStorage`] with a bounded memory cache of full tiles.
//!
//! A full tile's bytes never change once committed, so a cached copy is always right;
//! from an object store it saves a request per read (the daemon serves tiles from the
//! bucket, and the dedup index catching up reads whole bundles). Partial tiles,
//! checkpoints and misses are never cached.
//!
//! Two generations approximate LRU at O(1) per operation (as the SQL backends' cache):
//! inserts go to the young generation; when it reaches half the byte budget it becomes
//! the old one (the previous old generation is dropped). A hit in the old generation
//! moves the tile back to the young one, so tiles in use survive and the total stays
//! within budget.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tlogd_core::engine::{CommitBatch, LogStorage, StorageError, TreeState};
use tlogd_core::tile::TileId;

#[derive(Default)]
struct Generation {
    map: HashMap<TileId, Arc<[u8]>>,
    bytes: usize,
}

impl Generation {
    fn insert(&mut self, key: TileId, value: Arc<[u8]>) {
        self.bytes += value.len();
        if let Some(old) = self.map.insert(key, value) {
            self.bytes -= old.len();
        }
    }
}

#[derive(Default)]
struct Generations {
    young: Generation,
    old: Generation,
}

/// Full tiles by id, within a byte budget.
struct TileCache {
    half_budget: usize,
    inner: Mutex<Generations>,
}

impl TileCache {
    fn new(budget: usize) -> Self {
        TileCache {
            half_budget: budget / 2,
            inner: Mutex::new(Generations::default()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Generations> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get(&self, key: &TileId) -> Option<Arc<[u8]>> {
        if self.half_budget == 0 {
            return None;
        }
        let mut g = self.lock();
        if let Some(v) = g.young.map.get(key) {
            return Some(v.clone());
        }
        let v = g.old.map.remove(key)?;
        g.old.bytes -= v.len();
        self.insert_locked(&mut g, *key, v.clone());
        Some(v)
    }

    fn insert(&self, key: TileId, value: Arc<[u8]>) {
        if value.len() > self.half_budget {
            return;
        }
        let mut g = self.lock();
        self.insert_locked(&mut g, key, value);
    }

    fn insert_locked(&self, g: &mut Generations, key: TileId, value: Arc<[u8]>) {
        if g.young.bytes + value.len() > self.half_budget {
            g.old = std::mem::take(&mut g.young);
        }
        g.young.insert(key, value);
    }

    #[cfg(test)]
    fn bytes(&self) -> usize {
        let g = self.lock();
        g.young.bytes + g.old.bytes
    }
}

/// `S` with reads of full tiles served from memory when they were read before.
pub struct CachedTiles<S> {
    inner: Arc<S>,
    cache: TileCache,
}

impl<S: LogStorage> CachedTiles<S> {
    /// `inner` with a cache of at most about `budget` bytes of full tiles (0: none).
    pub fn new(inner: Arc<S>, budget: usize) -> Self {
        CachedTiles {
            inner,
            cache: TileCache::new(budget),
        }
    }

    /// The wrapped storage.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    fn remember(&self, id: &TileId, bytes: &Option<Vec<u8>>) {
        if let Some(b) = bytes
            && id.is_full()
        {
            self.cache.insert(*id, Arc::from(b.as_slice()));
        }
    }
}

impl<S: LogStorage> LogStorage for CachedTiles<S> {
    fn backend_name(&self) -> &'static str {
        self.inner.backend_name()
    }

    async fn load_state(&self) -> Result<Option<TreeState>, StorageError> {
        self.inner.load_state().await
    }

    async fn commit(&self, batch: CommitBatch) -> Result<(), StorageError> {
        self.inner.commit(batch).await
    }

    async fn read_tile(&self, id: &TileId) -> Result<Option<Vec<u8>>, StorageError> {
        if id.is_full()
            && let Some(hit) = self.cache.get(id)
        {
            return Ok(Some(hit.to_vec()));
        }
        let got = self.inner.read_tile(id).await?;
        self.remember(id, &got);
        Ok(got)
    }

    async fn read_tiles(&self, ids: &[TileId]) -> Result<Vec<Option<Vec<u8>>>, StorageError> {
        let mut out: Vec<Option<Vec<u8>>> = Vec::with_capacity(ids.len());
        let mut missing = Vec::new();
        let mut slots = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            match id.is_full().then(|| self.cache.get(id)).flatten() {
                Some(hit) => out.push(Some(hit.to_vec())),
                None => {
                    out.push(None);
                    missing.push(*id);
                    slots.push(i);
                }
            }
        }
        if missing.is_empty() {
            return Ok(out);
        }
        let got = self.inner.read_tiles(&missing).await?;
        if got.len() != missing.len() {
            return Err(StorageError::Backend(format!(
                "read_tiles answered {} tiles for {}",
                got.len(),
                missing.len()
            )));
        }
        for ((slot, id), bytes) in slots.into_iter().zip(&missing).zip(got) {
            self.remember(id, &bytes);
            out[slot] = bytes;
        }
        Ok(out)
    }

    async fn publish_checkpoint(&self, signed: &[u8]) -> Result<(), StorageError> {
        self.inner.publish_checkpoint(signed).await
    }

    async fn read_checkpoint(&self) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.read_checkpoint().await
    }

    async fn put_blob(
        &self,
        key: &str,
        bytes: &[u8],
        content_type: &'static str,
    ) -> Result<(), StorageError> {
        self.inner.put_blob(key, bytes, content_type).await
    }

    async fn read_blob(&self, key: &str) -> Result<Option<Vec<u8>>, StorageError> {
        self.inner.read_blob(key).await
    }

    async fn check_writable(&self) -> Result<(), StorageError> {
        self.inner.check_writable().await
    }

    async fn acquire_sequencer(&self) -> Result<(), StorageError> {
        self.inner.acquire_sequencer().await
    }

    async fn release_sequencer(&self, idle: bool) {
        self.inner.release_sequencer(idle).await
    }

    fn check_state_before_commit(&self) -> bool {
        self.inner.check_state_before_commit()
    }

    fn reads_are_committed(&self) -> bool {
        self.inner.reads_are_committed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(n: usize) -> Arc<[u8]> {
        vec![7u8; n].into()
    }

    fn id(i: u64) -> TileId {
        TileId::hash(0, i, 256)
    }

    #[test]
    fn stays_within_budget_and_keeps_what_is_used() {
        let c = TileCache::new(1000);
        for i in 0..100u64 {
            c.insert(id(i), tile(100));
            // Tile 0 is read all the time: it must survive.
            assert!(c.get(&id(0)).is_some(), "hot tile evicted at {i}");
            assert!(c.bytes() <= 1000);
        }
        assert!(c.get(&id(1)).is_none(), "cold tile kept beyond the budget");
        assert!(c.get(&id(99)).is_some());
    }

    #[test]
    fn zero_budget_and_oversized_tiles_are_not_cached() {
        let c = TileCache::new(0);
        c.insert(id(0), tile(1));
        assert!(c.get(&id(0)).is_none());
        let c = TileCache::new(100);
        c.insert(id(0), tile(51));
        assert!(c.get(&id(0)).is_none());
    }
}
