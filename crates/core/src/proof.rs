//! RFC 6962 / RFC 9162 inclusion and consistency proofs, built from tiles.
//!
//! Building is two-phase so async callers can fetch tiles in between:
//! [`inclusion_proof_tiles`] names the tiles (as they exist at the tree size), then
//! [`inclusion_proof`] computes the proof from them. Every proof element is the hash of
//! a range of leaves; a perfect, aligned range of height `h = 8L + r` is the subtree
//! root of `2^r` consecutive hashes of one level-L tile (tlog-tiles "Merkle Tree").

use std::collections::HashMap;

use crate::hash::{Hash, node_hash};
use crate::merkle::{largest_power_of_two_below, subtree_root};
use crate::tile::{TILE_HEIGHT, TILE_WIDTH, TileId};

/// A proof that cannot be built or does not verify.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ProofError {
    /// The index or sizes are out of range.
    #[error("invalid proof request: {0}")]
    Range(&'static str),
    /// A needed tile was not supplied (or is too short).
    #[error("missing tile {0}")]
    MissingTile(String),
    /// The proof has the wrong length or does not lead to the root.
    #[error("proof does not verify")]
    Invalid,
}

/// Where proof building finds tile hashes.
pub trait TileSource {
    /// The hashes of tile `id`. A source may return a longer (e.g. full) version of the
    /// tile; only the prefix is used.
    fn tile_hashes(&self, id: &TileId) -> Option<&[Hash]>;
}

impl TileSource for HashMap<TileId, Vec<Hash>> {
    fn tile_hashes(&self, id: &TileId) -> Option<&[Hash]> {
        self.get(id)
            .or_else(|| self.get(&id.full()))
            .map(|v| v.as_slice())
    }
}

/// The tile holding the hashes of the perfect subtree (height `h`, index `i`) at `size`.
fn node_tile(h: u32, i: u64, size: u64) -> (TileId, usize, usize) {
    let level = h / TILE_HEIGHT;
    let r = h % TILE_HEIGHT;
    let first = i << r;
    let tile = first / TILE_WIDTH;
    let count = size >> (TILE_HEIGHT * level);
    let width = (count - tile * TILE_WIDTH).min(TILE_WIDTH) as u16;
    let start = (first % TILE_WIDTH) as usize;
    (TileId::hash(level as u8, tile, width), start, 1usize << r)
}

/// Hash of the range `[a, b)` of leaves (RFC 6962 MTH), where every perfect subtree
/// met is fetched with `node(height, index)`.
fn range_hash<E>(
    a: u64,
    b: u64,
    node: &mut impl FnMut(u32, u64) -> Result<Hash, E>,
) -> Result<Hash, E> {
    let n = b - a;
    if n.is_power_of_two() && a.is_multiple_of(n) {
        let h = n.trailing_zeros();
        return node(h, a >> h);
    }
    let k = largest_power_of_two_below(n);
    let left = range_hash(a, a + k, node)?;
    let right = range_hash(a + k, b, node)?;
    Ok(node_hash(&left, &right))
}

/// RFC 6962 PATH(m, D[a:b]).
fn path<E>(
    m: u64,
    a: u64,
    b: u64,
    node: &mut impl FnMut(u32, u64) -> Result<Hash, E>,
    out: &mut Vec<Hash>,
) -> Result<(), E> {
    if b - a == 1 {
        return Ok(());
    }
    let k = largest_power_of_two_below(b - a);
    if m < a + k {
        path(m, a, a + k, node, out)?;
        out.push(range_hash(a + k, b, node)?);
    } else {
        path(m, a + k, b, node, out)?;
        out.push(range_hash(a, a + k, node)?);
    }
    Ok(())
}

/// RFC 6962 SUBPROOF(m, D[a:b], flag).
fn subproof<E>(
    m: u64,
    a: u64,
    b: u64,
    complete: bool,
    node: &mut impl FnMut(u32, u64) -> Result<Hash, E>,
    out: &mut Vec<Hash>,
) -> Result<(), E> {
    let n = b - a;
    if m == n {
        if !complete {
            out.push(range_hash(a, b, node)?);
        }
        return Ok(());
    }
    let k = largest_power_of_two_below(n);
    if m <= k {
        subproof(m, a, a + k, complete, node, out)?;
        out.push(range_hash(a + k, b, node)?);
    } else {
        subproof(m - k, a + k, b, false, node, out)?;
        out.push(range_hash(a, a + k, node)?);
    }
    Ok(())
}

fn collect_tiles(
    size: u64,
    run: impl FnOnce(&mut dyn FnMut(u32, u64) -> Result<Hash, ()>),
) -> Vec<TileId> {
    let mut tiles: Vec<TileId> = Vec::new();
    let mut record = |h: u32, i: u64| -> Result<Hash, ()> {
        let (id, _, _) = node_tile(h, i, size);
        if !tiles.contains(&id) {
            tiles.push(id);
        }
        Ok([0u8; 32])
    };
    run(&mut record);
    tiles
}

fn reader<'a, S: TileSource>(
    size: u64,
    tiles: &'a S,
) -> impl FnMut(u32, u64) -> Result<Hash, ProofError> + 'a {
    move |h, i| {
        let (id, start, n) = node_tile(h, i, size);
        let hashes = tiles
            .tile_hashes(&id)
            .and_then(|t| t.get(start..start + n))
            .ok_or_else(|| ProofError::MissingTile(id.path()))?;
        Ok(subtree_root(hashes))
    }
}

/// Tiles needed for the inclusion proof of `index` in the tree of `size`.
pub fn inclusion_proof_tiles(index: u64, size: u64) -> Result<Vec<TileId>, ProofError> {
    if index >= size {
        return Err(ProofError::Range("index not below tree size"));
    }
    Ok(collect_tiles(size, |node| {
        let mut node = |h, i| node(h, i);
        let _ = path(index, 0, size, &mut node, &mut Vec::new());
    }))
}

/// The RFC 6962 inclusion proof of `index` in the tree of `size`.
pub fn inclusion_proof(
    index: u64,
    size: u64,
    tiles: &impl TileSource,
) -> Result<Vec<Hash>, ProofError> {
    if index >= size {
        return Err(ProofError::Range("index not below tree size"));
    }
    let mut out = Vec::new();
    path(index, 0, size, &mut reader(size, tiles), &mut out)?;
    Ok(out)
}

/// Tiles needed for the consistency proof from `old` to `new`.
pub fn consistency_proof_tiles(old: u64, new: u64) -> Result<Vec<TileId>, ProofError> {
    if old > new {
        return Err(ProofError::Range("old size above new size"));
    }
    if old == 0 || old == new {
        return Ok(Vec::new());
    }
    Ok(collect_tiles(new, |node| {
        let mut node = |h, i| node(h, i);
        let _ = subproof(old, 0, new, true, &mut node, &mut Vec::new());
    }))
}

/// The RFC 6962 consistency proof from `old` to `new` (empty when `old` is 0 or `new`).
pub fn consistency_proof(
    old: u64,
    new: u64,
    tiles: &impl TileSource,
) -> Result<Vec<Hash>, ProofError> {
    if old > new {
        return Err(ProofError::Range("old size above new size"));
    }
    let mut out = Vec::new();
    if old == 0 || old == new {
        return Ok(out);
    }
    subproof(old, 0, new, true, &mut reader(new, tiles), &mut out)?;
    Ok(out)
}

/// Tiles needed to compute the root of the tree of `size`.
pub fn tree_root_tiles(size: u64) -> Vec<TileId> {
    if size == 0 {
        return Vec::new();
    }
    collect_tiles(size, |node| {
        let mut node = |h, i| node(h, i);
        let _ = range_hash(0, size, &mut node);
    })
}

/// The root of the tree of `size`, from its tiles.
pub fn tree_root(size: u64, tiles: &impl TileSource) -> Result<Hash, ProofError> {
    if size == 0 {
        return Ok(crate::hash::empty_root());
    }
    range_hash(0, size, &mut reader(size, tiles))
}

/// RFC 9162 section 2.1.3.2: verify an inclusion proof.
pub fn verify_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::Range("index not below tree size"));
    }
    let (mut f, mut s) = (index, size - 1);
    let mut r = *leaf;
    for p in proof {
        if s == 0 {
            return Err(ProofError::Invalid);
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 || r != *root {
        return Err(ProofError::Invalid);
    }
    Ok(())
}

/// RFC 9162 section 2.1.4.2: verify a consistency proof.
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old > new {
        return Err(ProofError::Range("old size above new size"));
    }
    if old == new {
        return if proof.is_empty() && old_root == new_root {
            Ok(())
        } else {
            Err(ProofError::Invalid)
        };
    }
    if old == 0 {
        return if proof.is_empty() {
            Ok(())
        } else {
            Err(ProofError::Invalid)
        };
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else {
        return Err(ProofError::Invalid);
    };
    let (mut f, mut s) = (old - 1, new - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (*first, *first);
    for c in rest {
        if s == 0 {
            return Err(ProofError::Invalid);
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if f & 1 == 0 {
                while f & 1 == 0 && f != 0 {
                    f >>= 1;
                    s >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if fr != *old_root || sr != *new_root || s != 0 {
        return Err(ProofError::Invalid);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::leaf_hash;
    use crate::merkle::TileTree;
    use crate::tile::parse_hash_tile;

    /// Tiles of a tree of `size` as they exist at that size, plus the roots at each size.
    fn build(size: u64) -> (Vec<Hash>, HashMap<TileId, Vec<Hash>>, Vec<Hash>) {
        let leaves: Vec<Hash> = (0..size).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        let mut t = TileTree::empty();
        let mut roots = vec![t.root()];
        let mut tiles = HashMap::new();
        let mut out = Vec::new();
        for l in &leaves {
            t.append(std::slice::from_ref(l), &mut out);
            roots.push(t.root());
            for (id, b) in out.drain(..) {
                tiles.insert(id, parse_hash_tile(&b, id.width).unwrap());
            }
        }
        (leaves, tiles, roots)
    }

    #[test]
    fn inclusion_and_consistency_at_many_sizes() {
        let (leaves, tiles, roots) = build(1300);
        for size in (1..=1300u64)
            .step_by(37)
            .chain([1, 2, 255, 256, 257, 512, 1024, 1300])
        {
            // Tiles as they exist at `size`: partials of that width (kept, never GC'd here).
            for index in (0..size).step_by(11).chain([0, size - 1]) {
                let needed = inclusion_proof_tiles(index, size).unwrap();
                for id in &needed {
                    assert!(
                        tiles.tile_hashes(id).is_some(),
                        "{} not produced",
                        id.path()
                    );
                }
                let p = inclusion_proof(index, size, &tiles).unwrap();
                let root = roots[size as usize];
                verify_inclusion(&leaves[index as usize], index, size, &p, &root).unwrap();
                if let Some(first) = p.first() {
                    let mut bad = p.clone();
                    bad[0] = node_hash(first, first);
                    assert!(
                        verify_inclusion(&leaves[index as usize], index, size, &bad, &root)
                            .is_err()
                    );
                }
                let other = leaf_hash(b"not in the tree");
                assert!(verify_inclusion(&other, index, size, &p, &root).is_err());
            }
            assert_eq!(tree_root(size, &tiles).unwrap(), roots[size as usize]);
            for old in (0..=size).step_by(29).chain([1, size]) {
                let p = consistency_proof(old, size, &tiles).unwrap();
                let (or, nr) = (roots[old as usize], roots[size as usize]);
                verify_consistency(old, size, &or, &nr, &p).unwrap();
                if old > 0 && old < size {
                    assert!(verify_consistency(old, size, &nr, &nr, &p).is_err() || or == nr);
                    let mut bad = p.clone();
                    bad[0][0] ^= 1;
                    assert!(verify_consistency(old, size, &or, &nr, &bad).is_err());
                }
            }
        }
    }

    #[test]
    fn big_tree_proofs() {
        let (leaves, tiles, roots) = build(65536 + 3);
        let size = 65536 + 3;
        for index in [0u64, 255, 256, 65535, 65536, 65538] {
            let p = inclusion_proof(index, size, &tiles).unwrap();
            verify_inclusion(
                &leaves[index as usize],
                index,
                size,
                &p,
                &roots[size as usize],
            )
            .unwrap();
        }
        for old in [1u64, 256, 300, 65536, 65537] {
            let p = consistency_proof(old, size, &tiles).unwrap();
            verify_consistency(old, size, &roots[old as usize], &roots[size as usize], &p).unwrap();
        }
    }

    #[test]
    fn missing_tiles_are_named() {
        let empty: HashMap<TileId, Vec<Hash>> = HashMap::new();
        assert_eq!(
            inclusion_proof(0, 2, &empty),
            Err(ProofError::MissingTile("tile/0/000.p/2".into()))
        );
    }
}
