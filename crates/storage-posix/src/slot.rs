//! The state slots, `.tlogd/state.0` and `.tlogd/state.1`: the commit point (commit
//! protocol step 3; crate invariants 2, 3 and 8).
//!
//! A commit encodes its record ([`encode_slot`]: its own fields in one small buffer, the
//! tiles borrowed where they are), and writes it over the older slot with one vectored
//! write ([`write_in_place`]); the open reads both slots back and takes the newest valid
//! one ([`load_committed`]). Records of earlier releases (v4, v3, v2) are read, never
//! written.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sha2::{Digest, Sha256};
use tlogd_core::engine::TreeState;
use tlogd_core::tile::{TileId, TileKind};

use crate::edge::{bundle_kind, edge_ids, tile_end};

/// The state file of the first release (state only; the edge was in partial files).
const STATE_MAGIC_V1: &str = "tlogd-posix-state v1";
/// The first bytes of a state slot in this release's format, v5: the fields of a v4
/// record with a CRC-32C instead of a SHA-256 as its checksum. A record is followed by
/// its length and may have stale bytes after it, and carries the full tiles not yet
/// durable at their public paths (commit protocol). The new magic is what makes an
/// earlier release refuse the record ("bad magic") instead of misreading it.
const SLOT_MAGIC: &[u8] = b"tlogd-posix-state v5\n";
/// The checksum ending a v5 record: its CRC-32C (Castagnoli), big-endian.
///
/// The checksum only has to catch a torn or partly stale record (a write the crash
/// interrupted over the record of two commits ago), not an adversary: whoever can
/// write the slot can rewrite any checksum. That is what ext4's journal (`jbd2`
/// checksum v3), PostgreSQL's WAL and RocksDB's WAL records use CRC-32C for.
/// A SHA-256 of the record, as v4 had, was the largest single CPU cost of a commit
/// (profiled with 1.2 KB CT entries: a fifth of the engine thread): the record carries
/// the partial entry bundle (up to 255 entries, ~300 KB for a CT log) and every tile
/// not flushed yet, hashed at ~1.8 GB/s, where the CRC runs at tens of GB/s
/// (PCLMULQDQ, `crc-fast`; measured 52 GB/s over a record's pieces, CRC-32 by
/// `crc32fast` 43 GB/s).
const SLOT_CRC_LEN: usize = 4;
/// The flags byte ending a v4 or v5 record of a frozen tree ([`TreeState::frozen`]).
const SLOT_FROZEN: u8 = 1;
/// A slot record's level byte for an entry bundle (hash tiles use their level,
/// 0..=63).
const SLOT_ENTRIES: u8 = u8::MAX;
/// A slot record's level byte for a static-ct-api data tile.
const SLOT_DATA: u8 = u8::MAX - 1;
/// The previous release's slot: a v5 record with a SHA-256 (32 bytes) as its
/// checksum. Read, never written: the slots are rewritten as v5 at open.
const SLOT_MAGIC_V4: &[u8] = b"tlogd-posix-state v4\n";
/// An earlier release's slot: a v4 record without carried tiles. Read, never
/// written; its full tiles were synced before its state was written.
const SLOT_MAGIC_V3: &[u8] = b"tlogd-posix-state v3\n";
/// The first bytes of a state slot of an earlier release: the record is the whole
/// file. Read, never written.
const SLOT_MAGIC_V2: &[u8] = b"tlogd-posix-state v2\n";
/// A slot file grows to a multiple of this (zeros after the record), so that the edge
/// growing from one commit to the next rarely changes the file's size.
const SLOT_GROWTH: usize = 64 << 10;
pub(crate) const SLOTS: [&str; 2] = ["state.0", "state.1"];

/// Full tiles a state slot carries: committed, public file not yet known durable.
/// `None` for a slot of an earlier format, which carries none.
type Carried = Option<Vec<(TileId, Vec<u8>)>>;

/// The committed state, its right edge and where the next commit goes.
pub(crate) struct Committed {
    /// `None` for a log never written.
    pub(crate) tree: Option<TreeState>,
    /// The partial tiles of the committed tree: at most one per level, and the bundle.
    pub(crate) edge: Arc<Vec<(TileId, Vec<u8>)>>,
    /// Sequence number of the newest valid slot (0: none written yet).
    pub(crate) seq: u64,
}

/// A state slot's record as written: its own fields in one small buffer, the tiles'
/// bytes borrowed where they are, so that a commit neither copies the edge and the
/// carried tiles into one buffer nor reads them more than once for the checksum.
pub(crate) struct SlotRecord<'a> {
    /// Every byte of the record but the tiles' own: magic, length, fields, each
    /// tile's header, the checksum.
    meta: Vec<u8>,
    /// Each tile's bytes and where in `meta` they go (after its header).
    tiles: Vec<(usize, &'a [u8])>,
}

impl SlotRecord<'_> {
    /// The record's bytes in order: `meta` up to the first tile, its bytes, `meta` up
    /// to the next, and so on.
    pub(crate) fn pieces(&self) -> Vec<&[u8]> {
        let mut out = Vec::with_capacity(2 * self.tiles.len() + 1);
        let mut at = 0;
        for &(to, bytes) in &self.tiles {
            out.push(&self.meta[at..to]);
            out.push(bytes);
            at = to;
        }
        out.push(&self.meta[at..]);
        out
    }

    /// The whole record in one buffer (tests and tools; a commit writes the pieces).
    #[cfg(test)]
    fn to_vec(&self) -> Vec<u8> {
        self.pieces().concat()
    }
}

/// The CRC-32C of `pieces` one after the other (see [`SLOT_CRC_LEN`] for why this
/// checksum).
fn crc32c<'a>(pieces: impl IntoIterator<Item = &'a [u8]>) -> u32 {
    let mut crc = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    for p in pieces {
        crc.update(p);
    }
    // A 32-bit CRC, in the low half.
    crc.finalize() as u32
}

fn tile_level(id: &TileId) -> u8 {
    match id.kind {
        TileKind::Hash { level } => level,
        TileKind::Entries => SLOT_ENTRIES,
        TileKind::Data => SLOT_DATA,
    }
}

/// A state slot's record (v5): magic, the record's length, origin, sequence number,
/// size, root, the edge tiles, the carried full tiles (committed, public file not yet
/// known durable), and the CRC-32C of all that. Integers are big-endian.
pub(crate) fn encode_slot<'a>(
    origin: &str,
    seq: u64,
    tree: &TreeState,
    edge: &'a [(TileId, Vec<u8>)],
    carried: &[(&TileId, &'a [u8])],
) -> SlotRecord<'a> {
    let n_tiles = edge.len() + carried.len();
    let mut meta = Vec::with_capacity(SLOT_MAGIC.len() + origin.len() + 64 + 15 * n_tiles);
    let mut tiles = Vec::with_capacity(n_tiles);
    meta.extend_from_slice(SLOT_MAGIC);
    // The length, filled in below.
    meta.extend_from_slice(&[0; 4]);
    meta.extend_from_slice(&(origin.len() as u16).to_be_bytes());
    meta.extend_from_slice(origin.as_bytes());
    meta.extend_from_slice(&seq.to_be_bytes());
    meta.extend_from_slice(&tree.to_bytes());
    meta.push(edge.len() as u8);
    for (id, bytes) in edge {
        encode_tile_header(&mut meta, id, bytes);
        tiles.push((meta.len(), &bytes[..]));
    }
    meta.extend_from_slice(&(carried.len() as u32).to_be_bytes());
    for &(id, bytes) in carried {
        encode_tile_header(&mut meta, id, bytes);
        tiles.push((meta.len(), bytes));
    }
    // A frozen tree ends with one flags byte; a writable one has none, as earlier
    // releases wrote it, and they refuse a frozen record ("trailing bytes") rather
    // than commit on it.
    if tree.frozen {
        meta.push(SLOT_FROZEN);
    }
    let len = meta.len() + tiles.iter().map(|(_, b)| b.len()).sum::<usize>() + SLOT_CRC_LEN;
    meta[SLOT_MAGIC.len()..SLOT_MAGIC.len() + 4].copy_from_slice(&(len as u32).to_be_bytes());
    let mut record = SlotRecord { meta, tiles };
    let sum = crc32c(record.pieces());
    record.meta.extend_from_slice(&sum.to_be_bytes());
    record
}

/// A tile's header in a slot record: level (255 for a bundle, 254 for a data tile),
/// index, width, length; its bytes follow.
fn encode_tile_header(out: &mut Vec<u8>, id: &TileId, bytes: &[u8]) {
    out.push(tile_level(id));
    out.extend_from_slice(&id.index.to_be_bytes());
    out.extend_from_slice(&id.width.to_be_bytes());
    out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
}

/// Write `record` (its pieces, one after the other) at the start of the slot file at
/// `path` (which exists), leaving any bytes after it, for the caller to `fdatasync`:
/// no new inode, no directory update. The file's size changes only when the record
/// outgrows it, by [`SLOT_GROWTH`].
pub(crate) fn write_in_place(path: &Path, record: &[&[u8]]) -> io::Result<File> {
    use std::os::unix::fs::FileExt;
    let f = OpenOptions::new().write(true).open(path)?;
    let len = f.metadata()?.len();
    let record_len: u64 = record.iter().map(|p| p.len() as u64).sum();
    if record_len > len {
        // Grow first (invariant 8), with zeros after the old bytes, and only then write
        // the record: if the disk is full the growth fails with the old record
        // untouched. Written the other way round, a record could land whole while its
        // padding failed, and a commit reported as failed would be read back as
        // committed at the next start. Zeros written, not a hole or `fallocate`d
        // space: overwriting those would still change the inode (extent allocation or
        // conversion) at each commit.
        let grown = record_len.next_multiple_of(SLOT_GROWTH as u64);
        let zeros = vec![0u8; (grown - len) as usize];
        f.write_all_at(&zeros, len)?;
    }
    let mut slices: Vec<io::IoSlice<'_>> = record.iter().map(|p| io::IoSlice::new(p)).collect();
    write_all_vectored_at(&f, &mut slices, 0)?;
    Ok(f)
}

/// `pwritev(2)` all of `bufs` at `offset`, as [`FileExt::write_all_at`] does for one
/// buffer: again after a short write or `EINTR`, at most `UIO_MAXIOV` buffers a call.
/// (std's `write_vectored_at` is not stable.)
///
/// [`FileExt::write_all_at`]: std::os::unix::fs::FileExt::write_all_at
fn write_all_vectored_at(
    f: &File,
    mut bufs: &mut [io::IoSlice<'_>],
    mut offset: u64,
) -> io::Result<()> {
    // Drops leading empty buffers.
    io::IoSlice::advance_slices(&mut bufs, 0);
    while !bufs.is_empty() {
        let n = bufs.len().min(libc::UIO_MAXIOV as usize);
        let at = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset too large"))?;
        // SAFETY: `IoSlice` is ABI-compatible with `iovec` on Unix (std guarantees
        // it); the first `n` of them are valid buffers that outlive the call, and the
        // descriptor is open.
        let written = unsafe {
            libc::pwritev(
                f.as_raw_fd(),
                bufs.as_ptr().cast::<libc::iovec>(),
                n as libc::c_int,
                at,
            )
        };
        match written {
            -1 => {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
            0 => return Err(io::ErrorKind::WriteZero.into()),
            w => {
                offset += w as u64;
                io::IoSlice::advance_slices(&mut bufs, w as usize);
            }
        }
    }
    Ok(())
}

/// The format of a slot record read (the magic names it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SlotFormat {
    /// The whole file, SHA-256, no carried tiles.
    V2,
    /// Length-prefixed, SHA-256, no carried tiles.
    V3,
    /// Length-prefixed, SHA-256, carried tiles.
    V4,
    /// Length-prefixed, CRC-32C, carried tiles: what this release writes.
    V5,
}

/// A decoded slot: its origin, the committed state and edge, the full tiles it
/// carries (`None` for a record of a format before v4, which carries none), and its
/// format.
struct Slot {
    origin: String,
    committed: Committed,
    carried: Carried,
    format: SlotFormat,
}

/// Inverse of [`encode_slot`] for a slot file's bytes (a v5, v4 or v3 record and what
/// follows it, or a v2 record alone); checks the checksum, that the edge is exactly the
/// set of partial tiles of the tree's size, and that carried tiles are full and inside
/// the tree.
fn decode_slot(b: &[u8]) -> Result<Slot, String> {
    let format = [
        (SLOT_MAGIC, SlotFormat::V5),
        (SLOT_MAGIC_V4, SlotFormat::V4),
        (SLOT_MAGIC_V3, SlotFormat::V3),
        (SLOT_MAGIC_V2, SlotFormat::V2),
    ]
    .into_iter()
    .find(|(magic, _)| b.starts_with(magic))
    .map(|(_, format)| format)
    .ok_or("bad magic")?;
    // Every magic has the same length.
    let (record, fields) = if format == SlotFormat::V2 {
        (b, SLOT_MAGIC_V2.len())
    } else {
        let len: [u8; 4] = b
            .get(SLOT_MAGIC.len()..SLOT_MAGIC.len() + 4)
            .ok_or("truncated")?
            .try_into()
            .map_err(|_| "length")?;
        let record = b
            .get(..u32::from_be_bytes(len) as usize)
            .ok_or("truncated")?;
        (record, SLOT_MAGIC.len() + 4)
    };
    let sum_len = match format {
        SlotFormat::V5 => SLOT_CRC_LEN,
        _ => 32,
    };
    let body = record
        .len()
        .checked_sub(sum_len)
        .map(|n| &record[..n])
        .filter(|body| body.len() >= fields)
        .ok_or("too short")?;
    let sum = &record[body.len()..];
    let sum_ok = match format {
        SlotFormat::V5 => crc32c([body]).to_be_bytes()[..] == *sum,
        _ => Sha256::digest(body)[..] == *sum,
    };
    if !sum_ok {
        return Err("checksum mismatch".into());
    }
    // v4 and v5 records carry tiles, and may end with the frozen flag.
    let carries = matches!(format, SlotFormat::V4 | SlotFormat::V5);
    let mut r = Reader(&body[fields..]);
    let origin_len = u16::from_be_bytes(r.take()?) as usize;
    let origin = String::from_utf8(r.bytes(origin_len)?.to_vec()).map_err(|_| "origin")?;
    let seq = u64::from_be_bytes(r.take()?);
    let mut tree = TreeState::from_bytes(r.bytes(40)?).ok_or("state")?;
    let n: [u8; 1] = r.take()?;
    let mut edge = Vec::with_capacity(n[0] as usize);
    for _ in 0..n[0] {
        edge.push(decode_tile(&mut r)?);
    }
    let carried = if carries {
        let n = u32::from_be_bytes(r.take()?);
        let mut carried = Vec::new();
        for _ in 0..n {
            let (id, bytes) = decode_tile(&mut r)?;
            if !id.is_full() || tile_end(&id) > tree.size {
                return Err(format!(
                    "carried tile {} is not a full tile of size {}",
                    id.path(),
                    tree.size
                ));
            }
            if matches!(id.kind, TileKind::Hash { .. }) && bytes.len() != 32 * id.width as usize {
                return Err(format!(
                    "carried tile {} has {} bytes",
                    id.path(),
                    bytes.len()
                ));
            }
            if carried.iter().any(|(c, _)| *c == id) {
                return Err(format!("tile {} carried twice", id.path()));
            }
            carried.push((id, bytes));
        }
        Some(carried)
    } else {
        None
    };
    if carries && r.0 == [SLOT_FROZEN] {
        tree.frozen = true;
        r.0 = &[];
    }
    if !r.0.is_empty() {
        return Err("trailing bytes".into());
    }
    let want: Vec<TileId> =
        edge_ids(tree.size, bundle_kind(edge.iter().map(|(id, _)| id))).collect();
    if edge.iter().map(|(id, _)| *id).ne(want.iter().copied()) {
        return Err(format!("edge tiles do not match size {}", tree.size));
    }
    Ok(Slot {
        origin,
        committed: Committed {
            tree: Some(tree),
            edge: Arc::new(edge),
            seq,
        },
        carried,
        format,
    })
}

fn decode_tile(r: &mut Reader<'_>) -> Result<(TileId, Vec<u8>), String> {
    let [level]: [u8; 1] = r.take()?;
    let index = u64::from_be_bytes(r.take()?);
    let width = u16::from_be_bytes(r.take()?);
    let len = u32::from_be_bytes(r.take()?) as usize;
    let id = match level {
        SLOT_ENTRIES => TileId::entries(index, width),
        SLOT_DATA => TileId::data(index, width),
        l => TileId::hash(l, index, width),
    };
    Ok((id, r.bytes(len)?.to_vec()))
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.0.len() < n {
            return Err("truncated".into());
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let b = self.bytes(N)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }
}

/// Why the committed state could not be loaded.
pub(crate) enum LoadError {
    Io(PathBuf, io::Error),
    Corrupt(PathBuf, String),
    Origin(String),
}

/// The newest valid state slot, the full tiles it carries and its format, or an empty
/// log (and no format) when none was ever written.
pub(crate) fn load_committed(
    private: &Path,
    origin: &str,
) -> Result<(Committed, Carried, Option<SlotFormat>), LoadError> {
    let mut best: Option<(PathBuf, Slot)> = None;
    let mut unreadable = Vec::new();
    for name in SLOTS {
        let path = private.join(name);
        let bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(LoadError::Io(path, e)),
        };
        // An empty or torn slot is the one a crash interrupted: the other holds the
        // last commit.
        let slot = match decode_slot(&bytes) {
            Ok(slot) => slot,
            Err(why) => {
                if !bytes.is_empty() {
                    unreadable.push((path, why));
                }
                continue;
            }
        };
        if best
            .as_ref()
            .is_none_or(|(_, b)| slot.committed.seq > b.committed.seq)
        {
            best = Some((path, slot));
        }
    }
    let v1 = private.join("state");
    match best {
        Some((_, slot)) if slot.origin != origin => Err(LoadError::Origin(slot.origin)),
        Some((_, slot)) => Ok((slot.committed, slot.carried, Some(slot.format))),
        None => {
            // Only the first commit (sequence 1, slot 1) can leave no valid slot
            // behind: anything else unreadable is damage, and starting a new tree over
            // the old one's files would fork the log.
            let first = std::ffi::OsStr::new(SLOTS[1]);
            if let Some(i) = unreadable
                .iter()
                .position(|(p, _)| p.file_name() != Some(first))
            {
                let (path, why) = unreadable.swap_remove(i);
                return Err(LoadError::Corrupt(path, why));
            }
            if v1.exists() {
                return Err(LoadError::Corrupt(
                    v1,
                    format!(
                        "{STATE_MAGIC_V1:?} is a development format this release does not read"
                    ),
                ));
            }
            Ok((
                Committed {
                    tree: None,
                    edge: Arc::new(Vec::new()),
                    seq: 0,
                },
                None,
                None,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(seq: u64) -> (TreeState, Vec<u8>) {
        let tree = TreeState::new(3, [seq as u8; 32]);
        let edge: Vec<(TileId, Vec<u8>)> = edge_ids(3, TileKind::Entries)
            .map(|id| (id, vec![seq as u8; id.width as usize * 32]))
            .collect();
        let record = encode_slot("example.com/log", seq, &tree, &edge, &[]).to_vec();
        (tree, record)
    }

    /// The v4 encoder of the previous release, as it was (SHA-256 checksum, one
    /// buffer): its records must still open.
    fn encode_slot_v4(
        origin: &str,
        seq: u64,
        tree: &TreeState,
        edge: &[(TileId, Vec<u8>)],
        carried: &[(&TileId, &[u8])],
    ) -> Vec<u8> {
        fn encode_tile(out: &mut Vec<u8>, id: &TileId, bytes: &[u8]) {
            out.push(tile_level(id));
            out.extend_from_slice(&id.index.to_be_bytes());
            out.extend_from_slice(&id.width.to_be_bytes());
            out.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
            out.extend_from_slice(bytes);
        }
        let mut out = Vec::new();
        out.extend_from_slice(SLOT_MAGIC_V4);
        out.extend_from_slice(&[0; 4]);
        out.extend_from_slice(&(origin.len() as u16).to_be_bytes());
        out.extend_from_slice(origin.as_bytes());
        out.extend_from_slice(&seq.to_be_bytes());
        out.extend_from_slice(&tree.to_bytes());
        out.push(edge.len() as u8);
        for (id, bytes) in edge {
            encode_tile(&mut out, id, bytes);
        }
        out.extend_from_slice(&(carried.len() as u32).to_be_bytes());
        for (id, bytes) in carried {
            encode_tile(&mut out, id, bytes);
        }
        if tree.frozen {
            out.push(SLOT_FROZEN);
        }
        let len = (out.len() + 32) as u32;
        out[SLOT_MAGIC_V4.len()..SLOT_MAGIC_V4.len() + 4].copy_from_slice(&len.to_be_bytes());
        let sum = Sha256::digest(&out);
        out.extend_from_slice(&sum);
        out
    }

    type Tile = (TileId, Vec<u8>);

    /// A tree of 600 entries, its edge, and two full tiles it may carry.
    fn tree_600() -> (TreeState, Vec<Tile>, [Tile; 2]) {
        let tree = TreeState::new(600, [1; 32]);
        let edge = edge_ids(600, TileKind::Entries)
            .map(|id| (id, vec![2; id.width as usize * 32]))
            .collect();
        let carried = [
            (TileId::hash(0, 1, 256), vec![3u8; 256 * 32]),
            (TileId::entries(0, 256), vec![4u8; 999]),
        ];
        (tree, edge, carried)
    }

    #[test]
    fn the_slot_checksum_is_crc32c() {
        // The standard check value of CRC-32C (iSCSI, RFC 3720), and the same CRC over
        // any split into pieces.
        assert_eq!(crc32c([&b"123456789"[..]]), 0xe306_9283);
        let data: Vec<u8> = (0..70_000u32).map(|i| (i * 7 + i / 13) as u8).collect();
        let whole = crc32c([&data[..]]);
        for cuts in [
            &[0, 1, 15][..],
            &[3, 4096, 4111, 69_999],
            &[64, 128, 50_000],
        ] {
            let mut pieces = Vec::new();
            let mut at = 0;
            for &c in cuts {
                pieces.push(&data[at..c]);
                at = c;
            }
            pieces.push(&data[at..]);
            assert_eq!(crc32c(pieces), whole, "{cuts:?}");
        }
    }

    #[test]
    fn a_slot_record_is_read_past_stale_bytes_and_a_torn_one_is_refused() {
        let (tree, record) = sample(7);
        assert!(record.starts_with(b"tlogd-posix-state v5\n"));
        let slot = decode_slot(&record).unwrap();
        assert_eq!(
            (
                slot.origin.as_str(),
                slot.committed.seq,
                slot.committed.tree,
                slot.carried,
                slot.format
            ),
            (
                "example.com/log",
                7,
                Some(tree),
                Some(Vec::new()),
                SlotFormat::V5
            )
        );
        // What a slot file holds after a shorter record overwrote a longer one.
        let mut file = record.clone();
        file.extend_from_slice(&[0xa5; 5000]);
        assert_eq!(decode_slot(&file).unwrap().committed.seq, 7);
        // Torn: the record's end never reached the disk, or one of its bytes differs.
        assert!(decode_slot(&record[..record.len() - 1]).is_err());
        for at in [SLOT_MAGIC.len() + 2, record.len() / 2, record.len() - 1] {
            let mut torn = file.clone();
            torn[at] ^= 1;
            assert!(decode_slot(&torn).is_err(), "byte {at}");
        }
        // The length itself damaged: past the end, or short of the checksum.
        for len in [u32::MAX, 10] {
            let mut bad = record.clone();
            bad[SLOT_MAGIC.len()..SLOT_MAGIC.len() + 4].copy_from_slice(&len.to_be_bytes());
            assert!(decode_slot(&bad).is_err());
        }
    }

    #[test]
    fn a_v5_record_round_trips_with_carried_tiles_and_the_frozen_flag() {
        let (mut tree, edge, [(t1, b1), (t2, b2)]) = tree_600();
        for frozen in [false, true] {
            tree.frozen = frozen;
            let record = encode_slot("o", 5, &tree, &edge, &[(&t1, &b1), (&t2, &b2)]);
            // The pieces are the tiles' own bytes, not copies.
            let pieces = record.pieces();
            assert!(pieces.iter().any(|p| std::ptr::eq(*p, &b1[..])));
            assert!(pieces.iter().any(|p| std::ptr::eq(*p, &edge[0].1[..])));
            let bytes = record.to_vec();
            let len = u32::from_be_bytes(bytes[21..25].try_into().unwrap());
            assert_eq!(len as usize, bytes.len());
            let slot = decode_slot(&bytes).unwrap();
            assert_eq!(slot.committed.tree, Some(tree));
            assert_eq!(*slot.committed.edge, edge);
            assert_eq!(slot.carried, Some(vec![(t1, b1.clone()), (t2, b2.clone())]));
            assert_eq!(slot.format, SlotFormat::V5);
        }
    }

    #[test]
    fn slots_of_the_previous_formats_are_read() {
        // v4: what the previous release's encoder wrote, with carried tiles and frozen.
        let (mut tree, edge, [(t1, b1), (t2, b2)]) = tree_600();
        for frozen in [false, true] {
            tree.frozen = frozen;
            let mut v4 = encode_slot_v4("o", 5, &tree, &edge, &[(&t1, &b1), (&t2, &b2)]);
            v4.extend_from_slice(&[7; 100]);
            let slot = decode_slot(&v4).unwrap();
            assert_eq!(
                (slot.committed.seq, slot.committed.tree, slot.format),
                (5, Some(tree), SlotFormat::V4)
            );
            assert_eq!(*slot.committed.edge, edge);
            assert_eq!(slot.carried, Some(vec![(t1, b1.clone()), (t2, b2.clone())]));
            // Its checksum is checked as before.
            let at = v4.len() - 100 - 40;
            v4[at] ^= 1;
            assert!(decode_slot(&v4).is_err());
        }
        // v3: a v4 record without the carried tiles (not even their count); v2: the
        // same fields without the length either, nothing after the checksum.
        let (tree, _) = sample(9);
        let edge: Vec<(TileId, Vec<u8>)> = edge_ids(3, TileKind::Entries)
            .map(|id| (id, vec![9; id.width as usize * 32]))
            .collect();
        let record = encode_slot_v4("example.com/log", 9, &tree, &edge, &[]);
        let fields = &record[SLOT_MAGIC_V4.len() + 4..record.len() - 32 - 4];
        let mut v3 = SLOT_MAGIC_V3.to_vec();
        v3.extend_from_slice(&((SLOT_MAGIC_V3.len() + 4 + fields.len() + 32) as u32).to_be_bytes());
        v3.extend_from_slice(fields);
        let sum = Sha256::digest(&v3);
        v3.extend_from_slice(&sum);
        v3.extend_from_slice(&[7; 100]);
        let mut v2 = SLOT_MAGIC_V2.to_vec();
        v2.extend_from_slice(fields);
        let sum = Sha256::digest(&v2);
        v2.extend_from_slice(&sum);
        for (old, format) in [(&v3, SlotFormat::V3), (&v2, SlotFormat::V2)] {
            let slot = decode_slot(old).unwrap();
            assert_eq!(
                (
                    slot.committed.seq,
                    slot.committed.tree,
                    slot.carried,
                    slot.format
                ),
                (9, Some(tree), None, format)
            );
        }
        let mut trailing = v2.clone();
        trailing.push(0);
        assert!(decode_slot(&trailing).is_err());
    }

    #[test]
    fn a_slot_carries_full_tiles_of_its_tree_only() {
        let (tree, edge, [(t1, b1), (t2, b2)]) = tree_600();
        let record = encode_slot("o", 5, &tree, &edge, &[(&t1, &b1), (&t2, &b2)]).to_vec();
        let slot = decode_slot(&record).unwrap();
        assert_eq!(slot.committed.tree, Some(tree));
        assert_eq!(slot.carried, Some(vec![(t1, b1.clone()), (t2, b2)]));
        // A partial tile, or a full one beyond the tree, is not a committed tile.
        for bad in [TileId::hash(0, 2, 88), TileId::entries(2, 256)] {
            let record = encode_slot("o", 5, &tree, &edge, &[(&bad, &b1)]).to_vec();
            assert!(decode_slot(&record).is_err(), "{}", bad.path());
        }
    }

    #[test]
    fn a_torn_v5_slot_is_refused_and_the_other_slot_wins() {
        let (tree, edge, [(t1, b1), (t2, b2)]) = tree_600();
        let carried = [(&t1, &b1[..]), (&t2, &b2[..])];
        let dir = tempfile::tempdir().unwrap();
        let private = dir.path();
        for name in SLOTS {
            File::create(private.join(name)).unwrap();
        }
        // Sequence 6 in state.0, then 7 in state.1 over a longer record 5 (what a
        // slot holds after commits whose records shrank), written as a commit does.
        let write = |seq: u64, carried: &[(&TileId, &[u8])]| {
            let record = encode_slot("o", seq, &tree, &edge, carried);
            let path = private.join(SLOTS[(seq % 2) as usize]);
            write_in_place(&path, &record.pieces()).unwrap();
            (path, record.to_vec())
        };
        write(5, &carried);
        write(6, &carried[..1]);
        let (newest, record) = write(7, &[]);
        let load = || load_committed(private, "o").map_err(|_| "load failed");
        let (c, carried7, format) = load().unwrap();
        assert_eq!(
            (c.seq, carried7, format),
            (7, Some(Vec::new()), Some(SlotFormat::V5))
        );
        let file = fs::read(&newest).unwrap();
        assert_eq!(&file[..record.len()], &record[..]);
        // One byte flipped anywhere in the record (a header, a tile, the checksum), or
        // its end never written (the rest of the file still holds record 5 and zeros):
        // the older slot, with the tile it carries, is the committed state.
        let flips = [SLOT_MAGIC.len() + 5, record.len() / 3, record.len() - 1];
        let tears = [record.len() / 2, record.len() - 1];
        let mut torn_files = Vec::new();
        for at in flips {
            let mut torn = file.clone();
            torn[at] ^= 0x40;
            torn_files.push(torn);
        }
        let record5 = encode_slot("o", 5, &tree, &edge, &carried).to_vec();
        for at in tears {
            let mut torn = file.clone();
            torn[at..record5.len()].copy_from_slice(&record5[at..]);
            torn_files.push(torn);
        }
        for torn in torn_files {
            fs::write(&newest, &torn).unwrap();
            let (c, carried6, _) = load().unwrap();
            assert_eq!(c.seq, 6);
            assert_eq!(carried6, Some(vec![(t1, b1.clone())]));
        }
    }

    #[test]
    fn a_slot_file_grows_in_steps_and_never_shrinks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.0");
        File::create(&path).unwrap();
        let len = || std::fs::metadata(&path).unwrap().len();
        write_in_place(&path, &[&[1; 60], &[], &[1; 40]]).unwrap();
        assert_eq!(len(), SLOT_GROWTH as u64);
        write_in_place(&path, &[&[2; 10]]).unwrap();
        assert_eq!(len(), SLOT_GROWTH as u64);
        let b = std::fs::read(&path).unwrap();
        assert_eq!((&b[..10], &b[10..100]), (&[2; 10][..], &[1; 90][..]));
        assert!(b[100..].iter().all(|&z| z == 0));
        write_in_place(&path, &[&vec![3; SLOT_GROWTH], &[3]]).unwrap();
        assert_eq!(len(), 2 * SLOT_GROWTH as u64);
        let b = std::fs::read(&path).unwrap();
        assert!(b[..SLOT_GROWTH + 1].iter().all(|&x| x == 3));
        assert!(b[SLOT_GROWTH + 1..].iter().all(|&z| z == 0));
    }

    #[test]
    fn more_pieces_than_one_pwritev_takes_are_all_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.0");
        File::create(&path).unwrap();
        let owned: Vec<Vec<u8>> = (0..3000u32)
            .map(|i| vec![i as u8; (i % 7) as usize])
            .collect();
        let pieces: Vec<&[u8]> = owned.iter().map(|p| &p[..]).collect();
        write_in_place(&path, &pieces).unwrap();
        let want = pieces.concat();
        let b = std::fs::read(&path).unwrap();
        assert_eq!(&b[..want.len()], &want[..]);
    }
}
