//! Tile and entry-bundle identifiers and paths (tlog-tiles "Merkle Tree",
//! "Partial Tiles", "Log entries"; static-ct-api "Log entries" for data tiles).

use crate::hash::{HASH_SIZE, Hash};

/// Hashes per tile and entries per bundle.
pub const TILE_WIDTH: u64 = 256;
/// Tree levels one tile spans.
pub const TILE_HEIGHT: u32 = 8;
/// Highest tile level a path may name (tlog-tiles: levels 0 to 63).
pub const MAX_LEVEL: u8 = 63;

/// What a tile holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TileKind {
    /// A hash tile: 32-byte hashes at tree height `8 * level`.
    Hash {
        /// Tile level, 0..=63.
        level: u8,
    },
    /// An entry bundle (tlog-tiles, `tile/entries/<N>`).
    Entries,
    /// A data tile: the entry bundle of a static-ct-api log (`tile/data/<N>`), a
    /// sequence of `TileLeaf` structures with no length prefixes.
    Data,
}

impl TileKind {
    /// Whether tiles of this kind hold entries (a bundle), not hashes.
    pub fn is_bundle(self) -> bool {
        matches!(self, TileKind::Entries | TileKind::Data)
    }
}

/// One tile or entry bundle, full (`width == 256`) or partial.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TileId {
    /// Hash tile level or entry bundle.
    pub kind: TileKind,
    /// `N`: the tile's index within its level.
    pub index: u64,
    /// Number of hashes or entries, 1..=256; 256 is a full tile.
    pub width: u16,
}

/// A malformed tile path.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PathError {
    /// Not `tile/<L>/<N>[.p/<W>]`, `tile/entries/<N>[.p/<W>]` or `tile/data/<N>[.p/<W>]`.
    #[error("not a tile path: {0}")]
    Syntax(&'static str),
}

impl TileId {
    /// A hash tile.
    pub fn hash(level: u8, index: u64, width: u16) -> Self {
        TileId {
            kind: TileKind::Hash { level },
            index,
            width,
        }
    }

    /// An entry bundle.
    pub fn entries(index: u64, width: u16) -> Self {
        TileId {
            kind: TileKind::Entries,
            index,
            width,
        }
    }

    /// A static-ct-api data tile.
    pub fn data(index: u64, width: u16) -> Self {
        TileId {
            kind: TileKind::Data,
            index,
            width,
        }
    }

    /// The same position as a bundle of `kind` (the edge bundle of a log whose
    /// personality bundles entries that way).
    pub fn with_kind(self, kind: TileKind) -> Self {
        TileId { kind, ..self }
    }

    /// Whether this is a full tile (256 hashes or entries).
    pub fn is_full(&self) -> bool {
        self.width as u64 == TILE_WIDTH
    }

    /// The smallest tree size that has this tile at this width: a level-`L` hash tile
    /// holds the roots of 256^`L`-entry subtrees (tlog-tiles "Tiles"). Saturates at
    /// `u64::MAX` for tiles no tree can reach.
    pub fn min_tree_size(&self) -> u64 {
        let shift = match self.kind {
            TileKind::Hash { level } => 8 * level as u32,
            TileKind::Entries | TileKind::Data => 0,
        };
        let n = self
            .index
            .saturating_mul(TILE_WIDTH)
            .saturating_add(self.width as u64);
        if shift >= 64 || n > u64::MAX >> shift {
            return u64::MAX;
        }
        n << shift
    }

    /// The same tile at full width.
    pub fn full(self) -> Self {
        TileId {
            width: TILE_WIDTH as u16,
            ..self
        }
    }

    /// The tlog-tiles path, e.g. `tile/0/x001/234.p/5` or `tile/entries/000`.
    pub fn path(&self) -> String {
        let mut s = String::with_capacity(32);
        s.push_str("tile/");
        match self.kind {
            TileKind::Hash { level } => {
                s.push_str(&level.to_string());
            }
            TileKind::Entries => s.push_str("entries"),
            TileKind::Data => s.push_str("data"),
        }
        s.push('/');
        write_index_path(&mut s, self.index);
        if !self.is_full() {
            s.push_str(".p/");
            s.push_str(&self.width.to_string());
        }
        s
    }

    /// Parse a path produced by [`TileId::path`]; anything else is an error
    /// (non-canonical numbers, missing or extra `x` prefixes, widths 0 or 256, ...).
    pub fn parse(path: &str) -> Result<TileId, PathError> {
        let rest = path
            .strip_prefix("tile/")
            .ok_or(PathError::Syntax("missing tile/ prefix"))?;
        let (kind_s, rest) = rest
            .split_once('/')
            .ok_or(PathError::Syntax("missing index"))?;
        let kind = if kind_s == "entries" {
            TileKind::Entries
        } else if kind_s == "data" {
            TileKind::Data
        } else {
            let level = parse_decimal(kind_s).ok_or(PathError::Syntax("bad level"))?;
            if level > MAX_LEVEL as u64 {
                return Err(PathError::Syntax("level above 63"));
            }
            TileKind::Hash { level: level as u8 }
        };
        let (index_s, width) = match rest.split_once(".p/") {
            Some((i, w)) => {
                let w = parse_decimal(w).ok_or(PathError::Syntax("bad partial width"))?;
                if !(1..TILE_WIDTH).contains(&w) {
                    return Err(PathError::Syntax("partial width outside 1..=255"));
                }
                (i, w as u16)
            }
            None => (rest, TILE_WIDTH as u16),
        };
        let index = parse_index_path(index_s).ok_or(PathError::Syntax("bad index"))?;
        Ok(TileId { kind, index, width })
    }
}

/// Canonical decimal: digits only, no leading zeros (except "0"), fits u64.
fn parse_decimal(s: &str) -> Option<u64> {
    if s.is_empty() || s.len() > 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if s.len() > 1 && s.starts_with('0') {
        return None;
    }
    s.parse().ok()
}

/// `N` in 3-digit groups, all but the last prefixed `x` (tlog-tiles "Merkle Tree"):
/// 1234067 becomes `x001/x234/067`.
pub fn write_index_path(out: &mut String, n: u64) {
    let mut groups = [0u16; 7];
    let mut k = 0;
    let mut v = n;
    loop {
        groups[k] = (v % 1000) as u16;
        k += 1;
        v /= 1000;
        if v == 0 {
            break;
        }
    }
    for i in (0..k).rev() {
        if i != 0 {
            out.push('x');
        }
        let g = groups[i];
        out.push((b'0' + (g / 100) as u8) as char);
        out.push((b'0' + (g / 10 % 10) as u8) as char);
        out.push((b'0' + (g % 10) as u8) as char);
        if i != 0 {
            out.push('/');
        }
    }
}

fn parse_index_path(s: &str) -> Option<u64> {
    let parts: Vec<&str> = s.split('/').collect();
    let (last, init) = parts.split_last()?;
    let mut n: u64 = 0;
    for (i, p) in init.iter().enumerate() {
        let g = p.strip_prefix('x')?;
        let g = three_digits(g)?;
        // The leading group carries no redundant zeros: x000/... is not canonical.
        if i == 0 && g == 0 {
            return None;
        }
        n = n.checked_mul(1000)?.checked_add(g)?;
    }
    let g = three_digits(last)?;
    n.checked_mul(1000)?.checked_add(g)
}

fn three_digits(s: &str) -> Option<u64> {
    if s.len() != 3 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The partial hash tiles on the right edge of a tree of `size`: for every level L
/// with a non-zero width `(size >> 8L) % 256`, the tile `(size >> 8L) >> 8` of that
/// width (tlog-tiles "Partial Tiles").
pub fn edge_tiles(size: u64) -> Vec<TileId> {
    let mut out = Vec::new();
    let mut level = 0u8;
    loop {
        let shift = TILE_HEIGHT * level as u32;
        if shift >= 64 {
            break;
        }
        let count = size >> shift;
        if count == 0 {
            break;
        }
        let width = (count % TILE_WIDTH) as u16;
        if width > 0 {
            out.push(TileId::hash(level, count / TILE_WIDTH, width));
        }
        level += 1;
    }
    out
}

/// The partial entry bundle on the right edge of a tree of `size`, if any.
pub fn edge_bundle(size: u64) -> Option<TileId> {
    let width = (size % TILE_WIDTH) as u16;
    (width > 0).then(|| TileId::entries(size / TILE_WIDTH, width))
}

/// The first `width` hashes or entries of a tile stored at width `stored`: tiles and
/// bundles are prefix-stable (tlog-tiles "Partial Tiles": a partial tile of width W
/// holds the first W hashes, or entries, of every wider version of the same tile), so a
/// narrower partial is served from a wider one. `None` when `stored < width` or the
/// bytes are not a tile of width `stored`.
pub fn tile_prefix(kind: TileKind, data: &[u8], stored: u16, width: u16) -> Option<&[u8]> {
    if stored < width {
        return None;
    }
    match kind {
        TileKind::Hash { .. } => {
            (data.len() == stored as usize * 32).then(|| &data[..width as usize * 32])
        }
        TileKind::Entries => {
            let mut pos = 0usize;
            for _ in 0..width {
                let len = data.get(pos..pos + 2)?;
                pos += 2 + u16::from_be_bytes([len[0], len[1]]) as usize;
            }
            (pos <= data.len()).then(|| &data[..pos])
        }
        TileKind::Data => {
            let mut pos = 0usize;
            for _ in 0..width {
                pos = tile_leaf_end(data, pos)?;
            }
            Some(&data[..pos])
        }
    }
}

/// Where the static-ct-api `TileLeaf` starting at `pos` ends: its fields are walked
/// by their lengths only (RFC 6962 §3.4 `TimestampedEntry`, then the precertificate
/// for a `precert_entry`, then the fingerprints). `None` if it runs past `data`.
pub(crate) fn tile_leaf_end(data: &[u8], pos: usize) -> Option<usize> {
    let uint = |at: usize, n: usize| -> Option<usize> {
        let b = data.get(at..at.checked_add(n)?)?;
        Some(b.iter().fold(0usize, |v, &x| (v << 8) | x as usize))
    };
    // timestamp (8), entry type (2)
    let entry_type = uint(pos + 8, 2)?;
    let mut at = pos + 10;
    let precert = match entry_type {
        0 => false,
        1 => {
            at += 32; // issuer_key_hash
            true
        }
        _ => return None,
    };
    at += 3 + uint(at, 3)?; // the certificate or TBSCertificate
    at += 2 + uint(at, 2)?; // extensions
    if precert {
        at += 3 + uint(at, 3)?; // pre_certificate
    }
    at += 2 + uint(at, 2)?; // certificate_chain
    (at <= data.len()).then_some(at)
}

/// A hash tile that is not a whole number of hashes or not the expected width.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TileError {
    /// Wrong length.
    #[error("hash tile of {got} bytes, expected {want}")]
    Length {
        /// Bytes found.
        got: usize,
        /// Bytes expected.
        want: usize,
    },
}

/// Decode a hash tile of `expected_width` hashes.
pub fn parse_hash_tile(bytes: &[u8], expected_width: u16) -> Result<Vec<Hash>, TileError> {
    let want = expected_width as usize * HASH_SIZE;
    if bytes.len() != want {
        return Err(TileError::Length {
            got: bytes.len(),
            want,
        });
    }
    Ok(bytes
        .chunks_exact(HASH_SIZE)
        .map(|c| {
            let mut h = [0u8; HASH_SIZE];
            h.copy_from_slice(c);
            h
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_of_tiles_and_bundles() {
        let hashes: Vec<u8> = (0..5 * 32).map(|i| i as u8).collect();
        let k = TileKind::Hash { level: 0 };
        assert_eq!(tile_prefix(k, &hashes, 5, 2), Some(&hashes[..64]));
        assert_eq!(tile_prefix(k, &hashes, 5, 5), Some(&hashes[..]));
        assert_eq!(tile_prefix(k, &hashes, 5, 6), None);
        assert_eq!(
            tile_prefix(k, &hashes[..100], 5, 2),
            None,
            "not a tile of width 5"
        );
        let mut bundle = Vec::new();
        for e in [&b"a"[..], b"bcd", b"ef"] {
            crate::bundle::append_entry(&mut bundle, e).unwrap();
        }
        let e = TileKind::Entries;
        assert_eq!(tile_prefix(e, &bundle, 3, 1), Some(&bundle[..3]));
        assert_eq!(tile_prefix(e, &bundle, 3, 2), Some(&bundle[..8]));
        assert_eq!(tile_prefix(e, &bundle, 3, 3), Some(&bundle[..]));
        assert_eq!(tile_prefix(e, &bundle[..7], 3, 2), None, "truncated bundle");
    }

    /// A data tile's prefixes end at `TileLeaf` boundaries: an X.509 entry and a
    /// precertificate entry (with its issuer key hash and precertificate), each with an
    /// 8-byte extension and fingerprints.
    #[test]
    fn prefixes_of_data_tiles() {
        let x509: &[u8] = &[
            &[0u8; 8][..],                   // timestamp
            &[0, 0],                         // x509_entry
            &[0, 0, 3, 1, 2, 3],             // certificate
            &[0, 8, 0, 0, 5, 0, 0, 0, 0, 0], // extensions: leaf_index 0
            &[0, 32],                        // one fingerprint
            &[9u8; 32],
        ]
        .concat();
        let precert: &[u8] = &[
            &[0u8; 8][..],
            &[0, 1],          // precert_entry
            &[7u8; 32],       // issuer_key_hash
            &[0, 0, 2, 4, 5], // TBSCertificate
            &[0, 0],          // no extensions
            &[0, 0, 1, 6],    // pre_certificate
            &[0, 0],          // no fingerprints
        ]
        .concat();
        let tile = [x509, precert, x509].concat();
        let d = TileKind::Data;
        assert_eq!(tile_prefix(d, &tile, 3, 1), Some(x509));
        assert_eq!(
            tile_prefix(d, &tile, 3, 2),
            Some(&tile[..x509.len() + precert.len()])
        );
        assert_eq!(tile_prefix(d, &tile, 3, 3), Some(&tile[..]));
        assert_eq!(
            tile_prefix(d, &tile[..tile.len() - 1], 3, 3),
            None,
            "truncated"
        );
        let mut bad = tile.clone();
        bad[9] = 2;
        assert_eq!(tile_prefix(d, &bad, 3, 1), None, "entry type 2");
        assert_eq!(TileId::data(0, 256).path(), "tile/data/000");
        assert_eq!(TileId::data(1000, 5).path(), "tile/data/x001/000.p/5");
        assert!(d.is_bundle() && TileKind::Entries.is_bundle());
        assert!(!TileKind::Hash { level: 0 }.is_bundle());
    }

    #[test]
    fn paths_match_the_spec_examples() {
        assert_eq!(
            TileId::hash(0, 1_234_067, 256).path(),
            "tile/0/x001/x234/067"
        );
        assert_eq!(TileId::entries(0, 256).path(), "tile/entries/000");
        assert_eq!(TileId::hash(1, 0, 17).path(), "tile/1/000.p/17");
        assert_eq!(TileId::hash(0, 273, 112).path(), "tile/0/273.p/112");
        assert_eq!(TileId::entries(1000, 5).path(), "tile/entries/x001/000.p/5");
    }

    #[test]
    fn parse_is_the_exact_inverse_of_path() {
        let mut ns: Vec<u64> = (0..2100).collect();
        ns.extend([
            999_999,
            1_000_000,
            1_234_067,
            u64::MAX / 256,
            u64::MAX - 1,
            u64::MAX,
        ]);
        for n in ns {
            for w in [1u16, 17, 255, 256] {
                for id in [
                    TileId::hash(0, n, w),
                    TileId::hash(63, n, w),
                    TileId::entries(n, w),
                    TileId::data(n, w),
                ] {
                    assert_eq!(TileId::parse(&id.path()), Ok(id), "{}", id.path());
                }
            }
        }
    }

    #[test]
    fn non_canonical_paths_are_rejected() {
        for p in [
            "tile/0/0",
            "tile/0/00",
            "tile/0/0000",
            "tile/0/1000",
            "tile/0/x000/001",
            "tile/0/001/000",
            "tile/0/x1/000",
            "tile/0/xx01/000",
            "tile/0/000.p/0",
            "tile/0/000.p/256",
            "tile/0/000.p/01",
            "tile/0/000.p/",
            "tile/0/000/",
            "tile/00/000",
            "tile/64/000",
            "tile/-1/000",
            "tile/entries/",
            "tile/entry/000",
            "tile/data/",
            "tile/Data/000",
            "tile//000",
            "tile/0/x018/x446/x744/x073/x709/x551/616",
            "tile/0/+01",
            "/tile/0/000",
            "tile/0/000.p/1/",
        ] {
            assert!(TileId::parse(p).is_err(), "{p} accepted");
        }
    }

    #[test]
    fn edge_of_seventy_thousand() {
        // The tlog-tiles "Partial Tiles" example.
        assert_eq!(
            edge_tiles(70_000),
            vec![
                TileId::hash(0, 273, 112),
                TileId::hash(1, 1, 17),
                TileId::hash(2, 0, 1)
            ]
        );
        assert_eq!(edge_tiles(256), vec![TileId::hash(1, 0, 1)]);
        assert_eq!(edge_tiles(0), vec![]);
        assert_eq!(edge_bundle(70_000), Some(TileId::entries(273, 112)));
        assert_eq!(edge_bundle(512), None);
    }
}
