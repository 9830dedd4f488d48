//! The right edge of a tree: which partial tiles a tree of a given size has, and a
//! narrower partial read out of a wider one. The state slots record the edge (`slot`),
//! each commit replaces it (`staging`), and the publisher writes a checkpoint's partial
//! tiles from it (`publish`).

use tlogd_core::tile::{self, TileId, TileKind};

/// The tree size at which a full tile is complete.
pub(crate) fn tile_end(id: &TileId) -> u64 {
    id.full().min_tree_size()
}

/// The partial tiles of a tree of `size`, hash tiles by level, then the bundle (of
/// `kind`: tlog-tiles entry bundles, or a CT log's data tiles).
pub(crate) fn edge_ids(size: u64, kind: TileKind) -> impl Iterator<Item = TileId> {
    tile::edge_tiles(size)
        .into_iter()
        .chain(tile::edge_bundle(size).map(move |id| id.with_kind(kind)))
}

/// The kind of bundle among `tiles` (a batch's, an edge's): the log's personality
/// decides it, and a log never mixes two. Entry bundles when none is there.
pub(crate) fn bundle_kind<'a>(mut tiles: impl Iterator<Item = &'a TileId>) -> TileKind {
    tiles
        .find(|id| id.kind.is_bundle())
        .map_or(TileKind::Entries, |id| id.kind)
}

/// The prefix of the committed edge tile at `id`'s position, if the edge holds it.
pub(crate) fn edge_prefix(edge: &[(TileId, Vec<u8>)], id: &TileId) -> Option<Vec<u8>> {
    let (have, bytes) = edge
        .iter()
        .find(|(e, _)| e.kind == id.kind && e.index == id.index)?;
    tile::tile_prefix(id.kind, bytes, have.width, id.width).map(<[u8]>::to_vec)
}
