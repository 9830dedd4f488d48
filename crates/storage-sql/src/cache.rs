//! A bounded in-memory cache of full tiles (immutable once committed).
//!
//! Two generations approximate LRU at O(1) per operation: inserts go to the young
//! generation; when it reaches half the byte budget it becomes the old one (the
//! previous old generation is dropped). A hit in the old generation moves the tile
//! back to the young one, so tiles in use survive and the total stays within budget.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// `(tile_level, tile_index)`, as in the `tlogd_tiles` primary key.
pub(crate) type Key = (u8, u64);

#[derive(Default)]
struct Generation {
    map: HashMap<Key, Arc<[u8]>>,
    bytes: usize,
}

impl Generation {
    fn insert(&mut self, key: Key, value: Arc<[u8]>) {
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

/// Full tiles by position, within a byte budget.
pub(crate) struct TileCache {
    half_budget: usize,
    inner: Mutex<Generations>,
}

impl TileCache {
    /// A cache holding at most about `budget` bytes of tile data (0 disables it).
    pub(crate) fn new(budget: usize) -> Self {
        TileCache {
            half_budget: budget / 2,
            inner: Mutex::new(Generations::default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Generations> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn get(&self, key: &Key) -> Option<Arc<[u8]>> {
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

    pub(crate) fn insert(&self, key: Key, value: Arc<[u8]>) {
        if value.len() > self.half_budget {
            return;
        }
        let mut g = self.lock();
        self.insert_locked(&mut g, key, value);
    }

    fn insert_locked(&self, g: &mut Generations, key: Key, value: Arc<[u8]>) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn tile(n: usize) -> Arc<[u8]> {
        vec![7u8; n].into()
    }

    #[test]
    fn stays_within_budget_and_keeps_what_is_used() {
        let c = TileCache::new(1000);
        for i in 0..100u64 {
            c.insert((0, i), tile(100));
            // Tile 0 is read all the time: it must survive.
            assert!(c.get(&(0, 0)).is_some(), "hot tile evicted at {i}");
            assert!(c.bytes() <= 1000);
        }
        assert!(c.get(&(0, 1)).is_none(), "cold tile kept beyond the budget");
        assert!(c.get(&(0, 99)).is_some());
    }

    #[test]
    fn zero_budget_and_oversized_tiles_are_not_cached() {
        let c = TileCache::new(0);
        c.insert((0, 0), tile(1));
        assert!(c.get(&(0, 0)).is_none());
        let c = TileCache::new(100);
        c.insert((0, 0), tile(51));
        assert!(c.get(&(0, 0)).is_none());
    }
}
