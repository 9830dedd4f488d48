//! Integration: appending leaf hashes to the tiled tree in O(batch + log n) hashes.
//!
//! [`TileTree`] keeps the right edge in memory: the compact range (one perfect subtree
//! root per set bit of the size, largest first) and the hashes of the partial last tile
//! of every level. Appending a leaf merges it with the compact range; every node formed
//! at a height that is a multiple of 8 is exactly the next hash of the tile one level
//! up (tlog-tiles "Merkle Tree": a level-L tile holds the hashes at height 8L).

use crate::hash::{Hash, empty_root, node_hash};
use crate::tile::{TILE_HEIGHT, TILE_WIDTH, TileId};

/// Edge tiles that do not describe a tree of the claimed size.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MerkleError {
    /// A level's edge tile has the wrong number of hashes.
    #[error("edge tile at level {level} has {got} hashes, expected {want}")]
    EdgeWidth {
        /// Tile level.
        level: usize,
        /// Hashes given.
        got: usize,
        /// Hashes expected: `(size >> 8L) % 256`.
        want: usize,
    },
}

/// The in-memory right edge of a tiled Merkle tree.
#[derive(Clone, Debug)]
pub struct TileTree {
    size: u64,
    /// Perfect subtree roots, leftmost (tallest) first.
    frontier: Vec<Hash>,
    /// `edges[L]`: hashes of the partial level-L tile (`(size >> 8L) % 256` of them).
    edges: Vec<Vec<Hash>>,
}

impl TileTree {
    /// The empty tree.
    pub fn empty() -> Self {
        TileTree {
            size: 0,
            frontier: Vec::new(),
            edges: Vec::new(),
        }
    }

    /// Rebuild from the edge tiles of a tree of `size` (`edge[L]` holds the partial
    /// level-L tile's hashes; empty where the width is 0; missing top levels allowed).
    pub fn from_edge(size: u64, mut edge: Vec<Vec<Hash>>) -> Result<Self, MerkleError> {
        let levels = levels_for(size);
        for (level, hashes) in edge.iter().enumerate() {
            let want = if level < levels {
                width_at(size, level)
            } else {
                0
            };
            if hashes.len() != want {
                return Err(MerkleError::EdgeWidth {
                    level,
                    got: hashes.len(),
                    want,
                });
            }
        }
        for level in edge.len()..levels {
            let want = width_at(size, level);
            if want != 0 {
                return Err(MerkleError::EdgeWidth {
                    level,
                    got: 0,
                    want,
                });
            }
        }
        edge.resize(levels, Vec::new());
        let mut frontier = Vec::new();
        for level in (0..levels).rev() {
            let hashes = &edge[level];
            let mut pos = 0usize;
            for bit in (0..TILE_HEIGHT).rev() {
                let n = 1usize << bit;
                if hashes.len() & n != 0 {
                    frontier.push(subtree_root(&hashes[pos..pos + n]));
                    pos += n;
                }
            }
        }
        for e in &mut edge {
            e.reserve(TILE_WIDTH as usize);
        }
        Ok(TileTree {
            size,
            frontier,
            edges: edge,
        })
    }

    /// Number of leaves.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// RFC 6962 root hash; [`empty_root`] for the empty tree.
    pub fn root(&self) -> Hash {
        let mut it = self.frontier.iter().rev();
        let Some(mut r) = it.next().copied() else {
            return empty_root();
        };
        for left in it {
            r = node_hash(left, &r);
        }
        r
    }

    /// The partial tile of every level at the current size (those of width > 0),
    /// lowest level first, with their bytes: exactly the hash tiles a checkpoint of this
    /// size names (tlog-tiles "Partial Tiles").
    pub fn edge_tiles(&self) -> Vec<(TileId, Vec<u8>)> {
        let mut out = Vec::new();
        for level in 0..levels_for(self.size) {
            let count = self.size >> (TILE_HEIGHT * level as u32);
            let width = (count % TILE_WIDTH) as u16;
            if let (true, Some(hashes)) = (width > 0, self.edges.get(level)) {
                out.push((
                    TileId::hash(level as u8, count / TILE_WIDTH, width),
                    hashes.as_flattened().to_vec(),
                ));
            }
        }
        out
    }

    fn push_level(
        &mut self,
        level: usize,
        h: Hash,
        new_size: u64,
        out: &mut Vec<(TileId, Vec<u8>)>,
    ) {
        if self.edges.len() <= level {
            self.edges
                .resize_with(level + 1, || Vec::with_capacity(TILE_WIDTH as usize));
        }
        let e = &mut self.edges[level];
        e.push(h);
        if e.len() as u64 == TILE_WIDTH {
            let count = new_size >> (TILE_HEIGHT * level as u32);
            let index = (count - 1) / TILE_WIDTH;
            out.push((
                TileId::hash(level as u8, index, TILE_WIDTH as u16),
                e.as_flattened().to_vec(),
            ));
            e.clear();
        }
    }

    /// Append leaf hashes, pushing every hash tile that changed to `out`: each tile
    /// completed on the way (full), then the partial edge tile of every level whose
    /// content changed.
    pub fn append(&mut self, leaves: &[Hash], out: &mut Vec<(TileId, Vec<u8>)>) {
        let old = self.size;
        for leaf in leaves {
            let new_size = self.size + 1;
            self.push_level(0, *leaf, new_size, out);
            let mut node = *leaf;
            let mut height = 0u32;
            let mut s = self.size;
            while s & 1 == 1 {
                let Some(left) = self.frontier.pop() else {
                    unreachable!("a set bit of the size has a frontier node");
                };
                node = node_hash(&left, &node);
                height += 1;
                s >>= 1;
                if height.is_multiple_of(TILE_HEIGHT) {
                    self.push_level((height / TILE_HEIGHT) as usize, node, new_size, out);
                }
            }
            self.frontier.push(node);
            self.size = new_size;
        }
        let new = self.size;
        for level in 0..levels_for(new) {
            let shift = TILE_HEIGHT * level as u32;
            let (o, n) = (old.checked_shr(shift).unwrap_or(0), new >> shift);
            if o == n {
                continue;
            }
            let width = (n % TILE_WIDTH) as u16;
            if width > 0 {
                out.push((
                    TileId::hash(level as u8, n / TILE_WIDTH, width),
                    self.edges[level].as_flattened().to_vec(),
                ));
            }
        }
    }
}

/// Number of tile levels with at least one hash at `size`.
fn levels_for(size: u64) -> usize {
    let mut l = 0;
    while l * (TILE_HEIGHT as usize) < 64 && size >> (TILE_HEIGHT as usize * l) > 0 {
        l += 1;
    }
    l
}

fn width_at(size: u64, level: usize) -> usize {
    ((size >> (TILE_HEIGHT as usize * level)) % TILE_WIDTH) as usize
}

/// RFC 6962 MTH over consecutive nodes of one height (the leaves of a subtree):
/// split at the largest power of two below the length. [`empty_root`] when empty.
pub fn subtree_root(hashes: &[Hash]) -> Hash {
    match hashes.len() {
        0 => empty_root(),
        1 => hashes[0],
        n => {
            let k = largest_power_of_two_below(n as u64) as usize;
            node_hash(&subtree_root(&hashes[..k]), &subtree_root(&hashes[k..]))
        }
    }
}

/// RFC 6962 MTH of a tree whose first leaves come as the roots of full 256-leaf tiles
/// (`tiles`: the hashes a level-1 tile holds, tlog-tiles "Merkle Tree") and whose last
/// ones (`tail`, fewer than 256) as leaf hashes. Each split point of such a tree falls
/// on a tile boundary until the tail is reached, so the level-1 hashes stand in for
/// every leaf they cover.
///
/// # Panics
///
/// If `tail` holds 256 leaves or more (they would be a tile of their own).
pub fn root_from_tile_roots(tiles: &[Hash], tail: &[Hash]) -> Hash {
    assert!(
        (tail.len() as u64) < TILE_WIDTH,
        "a tail of {} leaves is not a partial tile",
        tail.len()
    );
    if tiles.is_empty() {
        return subtree_root(tail);
    }
    if tail.is_empty() {
        return subtree_root(tiles);
    }
    // More than 256 leaves and not a whole number of tiles: the split, a power of two
    // of at least 256 below the size, is a whole number of tiles, at most all of them.
    let n = tiles.len() as u64 * TILE_WIDTH + tail.len() as u64;
    let k = (largest_power_of_two_below(n) / TILE_WIDTH) as usize;
    node_hash(
        &subtree_root(&tiles[..k]),
        &root_from_tile_roots(&tiles[k..], tail),
    )
}

/// Largest power of two strictly below `n` (n >= 2).
pub(crate) fn largest_power_of_two_below(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::leaf_hash;
    use std::collections::HashMap;

    /// The root from level-1 hashes and a tail is the root of all the leaves.
    #[test]
    fn root_from_tile_roots_is_the_root_of_the_leaves() {
        for n in [
            0u64,
            1,
            255,
            256,
            257,
            511,
            512,
            513,
            768,
            1000,
            1024,
            65536 + 300,
        ] {
            let all = leaves(n);
            let full = (n / TILE_WIDTH) as usize;
            let tiles: Vec<Hash> = all
                .chunks(TILE_WIDTH as usize)
                .take(full)
                .map(subtree_root)
                .collect();
            let tail = &all[full * TILE_WIDTH as usize..];
            assert_eq!(
                root_from_tile_roots(&tiles, tail),
                subtree_root(&all),
                "size {n}"
            );
        }
    }

    fn leaves(n: u64) -> Vec<Hash> {
        (0..n)
            .map(|i| leaf_hash(format!("leaf {i}").as_bytes()))
            .collect()
    }

    #[test]
    fn root_matches_naive_mth() {
        let all = leaves(1100);
        let mut t = TileTree::empty();
        let mut out = Vec::new();
        assert_eq!(t.root(), empty_root());
        for n in 1..=1100usize {
            t.append(&all[n - 1..n], &mut out);
            assert_eq!(t.root(), subtree_root(&all[..n]), "size {n}");
        }
    }

    #[test]
    fn tiles_are_the_same_whatever_the_batching() {
        let all = leaves(70_000);
        let reference = {
            let mut t = TileTree::empty();
            let mut out = Vec::new();
            t.append(&all, &mut out);
            out.into_iter().collect::<HashMap<_, _>>()
        };
        for batch in [1usize, 7, 255, 256, 1000] {
            let mut t = TileTree::empty();
            let mut latest = HashMap::new();
            let mut out = Vec::new();
            for chunk in all.chunks(batch) {
                t.append(chunk, &mut out);
                for (id, b) in out.drain(..) {
                    latest.insert(id, b);
                }
            }
            for (id, b) in &reference {
                assert_eq!(latest.get(id), Some(b), "batch {batch}: {}", id.path());
            }
        }
    }

    #[test]
    fn from_edge_continues_exactly() {
        let all = leaves(70_000);
        for split in [0usize, 1, 255, 256, 257, 65535, 65536, 65537, 69_999] {
            let mut a = TileTree::empty();
            let mut tiles = HashMap::new();
            let mut out = Vec::new();
            a.append(&all[..split], &mut out);
            for (id, b) in out.drain(..) {
                tiles.insert(id, b);
            }
            let edge: Vec<Vec<Hash>> = crate::tile::edge_tiles(split as u64)
                .into_iter()
                .map(|id| crate::tile::parse_hash_tile(&tiles[&id], id.width).unwrap())
                .collect::<Vec<_>>();
            // edge_tiles skips zero-width levels; rebuild per level.
            let mut per_level = vec![Vec::new(); 4];
            let mut it = edge.into_iter();
            for id in crate::tile::edge_tiles(split as u64) {
                if let crate::tile::TileKind::Hash { level } = id.kind {
                    per_level[level as usize] = it.next().unwrap();
                }
            }
            while per_level.last().is_some_and(|v| v.is_empty()) {
                per_level.pop();
            }
            let mut b = TileTree::from_edge(split as u64, per_level).unwrap();
            assert_eq!(b.root(), a.root(), "split {split}");
            a.append(&all[split..], &mut out);
            let mut out2 = Vec::new();
            b.append(&all[split..], &mut out2);
            assert_eq!(a.root(), b.root());
            assert_eq!(out, out2, "split {split}");
        }
    }

    #[test]
    fn edge_tiles_are_the_partials_a_checkpoint_names() {
        let all = leaves(70_000);
        let mut t = TileTree::empty();
        let mut latest = HashMap::new();
        let mut out = Vec::new();
        for chunk in all.chunks(999) {
            t.append(chunk, &mut out);
            latest.extend(out.drain(..));
            let edge = t.edge_tiles();
            let ids: Vec<TileId> = edge.iter().map(|(id, _)| *id).collect();
            assert_eq!(ids, crate::tile::edge_tiles(t.size()), "size {}", t.size());
            for (id, bytes) in edge {
                assert_eq!(latest.get(&id), Some(&bytes), "{}", id.path());
            }
        }
        assert!(TileTree::empty().edge_tiles().is_empty());
    }

    #[test]
    fn from_edge_rejects_wrong_widths() {
        assert!(TileTree::from_edge(5, vec![vec![[0u8; 32]; 4]]).is_err());
        assert!(TileTree::from_edge(5, vec![]).is_err());
        assert!(TileTree::from_edge(0, vec![vec![[0u8; 32]]]).is_err());
        assert!(TileTree::from_edge(256, vec![vec![], vec![[0u8; 32]]]).is_ok());
    }
}
